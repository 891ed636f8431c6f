//! `java.util.PriorityQueue`'s binary heap, step for step, so that elements its comparator
//! calls equal come out in the order Kafka's come out.
//!
//! Kafka queues its planned moves in a `PriorityQueue` ordered by (caught-up clients, task)
//! only. Two standbys of one task on two clients are two moves that compare equal, and which is
//! polled first depends on how `siftUp` and `siftDown` shuffled them, not on the order they were
//! offered in; a sort (stable or not) cannot reproduce that. This mirrors OpenJDK 17's
//! `offer` (`siftUpUsingComparator`) and `poll` (`siftDownUsingComparator`).

use std::cmp::Ordering;

pub struct JavaPriorityQueue<T, F> {
    queue: Vec<T>,
    compare: F,
}

impl<T, F: Fn(&T, &T) -> Ordering> JavaPriorityQueue<T, F> {
    pub fn new(compare: F) -> Self {
        Self {
            queue: Vec::new(),
            compare,
        }
    }

    /// `offer`: append, then sift up while strictly less than the parent.
    pub fn offer(&mut self, x: T) {
        self.queue.push(x);
        let mut k = self.queue.len() - 1;
        while k > 0 {
            let parent = (k - 1) / 2;
            if (self.compare)(&self.queue[k], &self.queue[parent]) != Ordering::Less {
                break;
            }
            self.queue.swap(k, parent);
            k = parent;
        }
    }

    /// `poll`: take the root, move the last element there and sift it down, preferring the left
    /// child unless the right one is strictly less, and stopping at the first child it does not
    /// exceed.
    pub fn poll(&mut self) -> Option<T> {
        if self.queue.is_empty() {
            return None;
        }
        let result = self.queue.swap_remove(0);
        let n = self.queue.len();
        let mut k = 0;
        while k < n / 2 {
            let mut child = 2 * k + 1;
            let right = child + 1;
            if right < n
                && (self.compare)(&self.queue[child], &self.queue[right]) == Ordering::Greater
            {
                child = right;
            }
            if (self.compare)(&self.queue[k], &self.queue[child]) != Ordering::Greater {
                break;
            }
            self.queue.swap(k, child);
            k = child;
        }
        Some(result)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(offered: &[(u32, char)]) -> String {
        let mut q = JavaPriorityQueue::new(|a: &(u32, char), b: &(u32, char)| a.0.cmp(&b.0));
        for &x in offered {
            q.offer(x);
        }
        std::iter::from_fn(|| q.poll()).map(|x| x.1).collect()
    }

    /// Keys come out in order, whatever order they went in.
    #[test]
    fn polls_in_key_order() {
        let offered: Vec<(u32, char)> = [5, 1, 4, 2, 3]
            .iter()
            .map(|&k| (k, char::from(b'a' + k as u8)))
            .collect();
        assert_eq!(drain(&offered), "bcdef");
    }

    /// Equal keys: the order OpenJDK gives. Offered a, b, c, d with keys 1, 0, 1, 1, the heap
    /// array is [b, a, c, d]; polling b moves d to the root, and d (not a, the first offered)
    /// stays there since its key does not exceed its children's; polling d moves c to the root.
    #[test]
    fn ties_come_out_as_javas_heap_gives_them() {
        assert_eq!(drain(&[(1, 'a'), (0, 'b'), (1, 'c'), (1, 'd')]), "bdca");
        assert_eq!(drain(&[(1, 'a'), (1, 'b'), (1, 'c')]), "acb");
    }
}
