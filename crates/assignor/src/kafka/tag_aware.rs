//! Kafka's `ClientTagAwareStandbyTaskAssignor` (KIP-708), for the `kafka` parity mode when
//! `rack.aware.assignment.tags` is set.
//!
//! For each stateful task in order, starting from its active's client: poll the least-loaded
//! client that holds no copy and is on no "used" tag value; after each placement, the placed
//! client's value of every configured key becomes used, unless the key has no more values
//! than clients used so far, in which case all its values are released (partial awareness).
//! Standbys that find no such client are placed afterwards on the least-loaded clients, in the
//! iteration order of the Java `HashMap` that holds them ([`java_hash_map_order`]).

use std::collections::{BTreeMap, BTreeSet};

use crate::client_state::{ClientState, PrioritySet};
use crate::cluster::{ClientIx, Cluster, TaskIx};
use crate::index::indices;
use crate::model::TaskId;

/// Places the standbys; returns how many could not be placed at all.
pub fn assign_standbys(cluster: &Cluster, states: &mut [ClientState], stateful: &[TaskIx]) -> u32 {
    let wanted = cluster.config.num_standby_replicas;
    let keys: BTreeSet<&str> = cluster
        .config
        .rack_aware_assignment_tags
        .iter()
        .map(String::as_str)
        .collect();
    let mut values: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for c in &cluster.clients {
        for (k, v) in &c.tags {
            values.entry(k.as_str()).or_default().insert(v.as_str());
        }
    }
    let tag = |c: ClientIx, k: &str| cluster.clients[c].tags.get(k).map(String::as_str);
    let n = states.len();
    let offer_all = |set: &mut PrioritySet, states: &[ClientState]| {
        for c in indices::<ClientIx>(n) {
            set.offer(c, states[c].assigned_load());
        }
    };

    let mut active_of = vec![ClientIx::MAX; cluster.task_count()];
    for (c, state) in states.iter().enumerate() {
        for &t in &state.active {
            active_of[t] = ClientIx::new(c);
        }
    }
    let mut set = PrioritySet::new();
    let mut pending: Vec<(TaskIx, u32)> = Vec::new();
    for &t in stateful {
        let active = active_of[t];
        if active == ClientIx::MAX {
            pending.push((t, wanted));
            continue;
        }
        offer_all(&mut set, states);
        let mut used: BTreeSet<(&str, &str)> = BTreeSet::new();
        let mut used_clients = 1usize;
        let mut left = wanted;
        let mut last = active;
        while left > 0 {
            for (k, v) in &cluster.clients[last].tags {
                let k = k.as_str();
                if !keys.contains(k) {
                    continue;
                }
                if values[k].len() <= used_clients {
                    used.retain(|&(uk, _)| uk != k);
                } else {
                    used.insert((k, v.as_str()));
                }
            }
            let on_used = |c: ClientIx| used.iter().any(|&(k, v)| tag(c, k) == Some(v));
            let Some(c) = set.poll(|c| !states[c].has_assigned(t) && !on_used(c)) else {
                break;
            };
            states[c].standby.insert(t);
            used_clients += 1;
            left -= 1;
            last = c;
        }
        if left > 0 {
            pending.push((t, left));
        }
    }

    let mut short = 0;
    if !pending.is_empty() {
        offer_all(&mut set, states);
        let order = java_hash_map_order(stateful.len(), pending, |t| cluster.tasks[t].id);
        for (t, left) in order {
            let mut placed = 0;
            while placed < left {
                let Some(c) = set.poll(|c| !states[c].has_assigned(t)) else {
                    break;
                };
                states[c].standby.insert(t);
                set.offer(c, states[c].assigned_load());
                placed += 1;
            }
            short += left - placed;
        }
    }
    short
}

/// Kafka's `isAllowedTaskMovement` for tags: every tag of `src` has the same value on `dst`.
pub fn same_tags(cluster: &Cluster, src: ClientIx, dst: ClientIx) -> bool {
    let dst_tags = &cluster.clients[dst].tags;
    cluster.clients[src]
        .tags
        .iter()
        .all(|(k, v)| dst_tags.get(k) == Some(v))
}

/// The order a Java `HashMap<TaskId, _>` once filled with `filled` entries (in sorted order, by
/// `Collectors.toMap`; removals never shrink it) iterates the entries of `items`: by bucket,
/// then by insertion. `TaskId` hashes as `Objects.hash(subtopology, partition, null)`; the table
/// starts at 16 buckets and doubles whenever it is more than three quarters full.
fn java_hash_map_order<T: Copy>(
    filled: usize,
    items: Vec<(T, u32)>,
    id: impl Fn(T) -> TaskId,
) -> Vec<(T, u32)> {
    let mut buckets: usize = 16;
    while filled * 4 > buckets * 3 {
        buckets *= 2;
    }
    let bucket = |t: TaskId| {
        let h =
            31i32.wrapping_mul(31i32.wrapping_mul(31 + t.subtopology as i32) + t.partition as i32);
        let spread = h ^ ((h as u32) >> 16) as i32;
        (spread as u32 as usize) & (buckets - 1)
    };
    let mut keyed: Vec<((usize, TaskId), (T, u32))> = items
        .into_iter()
        .map(|item| ((bucket(id(item.0)), id(item.0)), item))
        .collect();
    keyed.sort_by_key(|&(k, _)| k);
    keyed.into_iter().map(|(_, item)| item).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Java: `new HashMap<>()` with TaskIds 0_0..0_19 put in order iterates as printed by
    /// `map.keySet()`. h(0_p) = 29791 + 31p; with 32 buckets the order is by (h ^ h>>>16) & 31.
    #[test]
    fn pending_tasks_come_in_java_hash_map_order() {
        let all: Vec<TaskId> = (0..20).map(|p| TaskId::new(0, p)).collect();
        let items: Vec<(TaskId, u32)> = all.iter().map(|&t| (t, 1)).collect();
        let order: Vec<u32> = java_hash_map_order(all.len(), items, |t| t)
            .iter()
            .map(|(t, _)| t.partition)
            .collect();
        // 29791 = 0x745F; 29791 >> 16 = 0, so the bucket is (29791 + 31p) & 31 = (31 + 31p) & 31
        // = (31 * (p + 1)) mod 32 = 32 - (p + 1) mod 32: partition 19 first, 0 last.
        assert_eq!(order, (0..20).rev().collect::<Vec<_>>());
    }
}
