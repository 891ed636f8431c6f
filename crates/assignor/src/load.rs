//! Tasks per thread, compared exactly.
//!
//! Kafka compares `count / capacity` as doubles; cross-multiplying integers gives the same order
//! without rounding, so ties are ties and the assignors stay deterministic.

use std::cmp::Ordering;

/// `count / capacity`, ordered by value.
#[derive(Debug, Clone, Copy)]
pub struct Load {
    pub count: u32,
    pub capacity: u32,
}

impl Load {
    pub fn new(count: u32, capacity: u32) -> Self {
        debug_assert!(capacity > 0);
        Self { count, capacity }
    }
}

impl PartialEq for Load {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Load {}

impl PartialOrd for Load {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Load {
    fn cmp(&self, other: &Self) -> Ordering {
        let a = self.count as u64 * other.capacity as u64;
        let b = other.count as u64 * self.capacity as u64;
        a.cmp(&b)
    }
}

/// Per-client quotas that split `total` items in proportion to capacity.
///
/// Every client gets `floor(total * cap / sum_cap)`; the remainder (fewer than the number of
/// clients) is a shared pool of one-item extras. Loads then all lie in `[floor(x), floor(x) + 1]`
/// per thread, where `x = total / sum_cap`, so any two clients differ by at most one task per thread.
#[derive(Debug, Clone)]
pub struct Quotas {
    pub base: Vec<u32>,
    pub extras: u32,
}

impl Quotas {
    /// `capacities[i] == 0` marks a client that takes nothing (e.g. leaving).
    pub fn split(total: u64, capacities: &[u32]) -> Quotas {
        let sum: u64 = capacities.iter().map(|&c| c as u64).sum();
        if sum == 0 {
            return Quotas {
                base: vec![0; capacities.len()],
                extras: 0,
            };
        }
        let base: Vec<u32> = capacities
            .iter()
            .map(|&c| (total * c as u64 / sum) as u32)
            .collect();
        let given: u64 = base.iter().map(|&b| b as u64).sum();
        Quotas {
            base,
            extras: (total - given) as u32,
        }
    }
}

impl Quotas {
    /// As [`Quotas::split`], but no client is given more than `max_each` (a client can hold at
    /// most one copy of each task); what a full client cannot take is split among the others.
    pub fn split_capped(total: u64, capacities: &[u32], max_each: u32) -> Quotas {
        let mut open: Vec<u32> = capacities.to_vec();
        let mut fixed = vec![false; capacities.len()];
        let mut remaining = total;
        loop {
            let q = Quotas::split(remaining, &open);
            let full: Vec<usize> = (0..open.len())
                .filter(|&c| open[c] > 0 && q.base[c] >= max_each)
                .collect();
            if full.is_empty() {
                let base = (0..open.len())
                    .map(|c| if fixed[c] { max_each } else { q.base[c] })
                    .collect();
                return Quotas {
                    base,
                    extras: q.extras,
                };
            }
            for c in full {
                fixed[c] = true;
                open[c] = 0;
                remaining = remaining.saturating_sub(max_each as u64);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loads_compare_as_fractions() {
        assert_eq!(Load::new(1, 3), Load::new(2, 6));
        assert!(Load::new(1, 2) < Load::new(2, 3));
        assert!(Load::new(0, 5) < Load::new(1, 100));
    }

    #[test]
    fn quotas_cover_total_and_stay_within_one_per_thread() {
        let q = Quotas::split(6, &[1, 2, 3]);
        assert_eq!(q.base, vec![1, 2, 3]);
        assert_eq!(q.extras, 0);
        let q = Quotas::split(10, &[1, 1, 1, 0]);
        assert_eq!(q.base, vec![3, 3, 3, 0]);
        assert_eq!(q.extras, 1);
    }

    #[test]
    fn capped_quotas_spill_to_other_clients() {
        // 15 tasks x 3 copies on threads 2,1,1,1: the big client can hold only 15.
        let q = Quotas::split_capped(45, &[2, 1, 1, 1], 15);
        assert_eq!(q.base, vec![15, 10, 10, 10]);
        assert_eq!(q.extras, 0);
    }
}
