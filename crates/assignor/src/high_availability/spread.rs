//! Orders a client's tasks so that keeping a prefix keeps a mix of subtopologies.
//!
//! A client over its quota keeps the first tasks in this order and sheds the rest. Ranking each
//! task by how many tasks of its subtopology come before it on the same client interleaves the
//! subtopologies, so what is shed (and lands on other clients) is spread across subtopologies too.

use crate::cluster::{Cluster, TaskIx};

/// Sorts `tasks` (ascending task order on entry) into interleaved order in place.
pub fn interleave(cluster: &Cluster, tasks: &mut [TaskIx]) {
    debug_assert!(tasks.windows(2).all(|w| w[0] < w[1]));
    let mut keyed: Vec<(u32, TaskIx)> = Vec::with_capacity(tasks.len());
    let mut current = None;
    let mut rank = 0u32;
    for &t in tasks.iter() {
        let sub = cluster.tasks[t].id.subtopology;
        if current != Some(sub) {
            current = Some(sub);
            rank = 0;
        }
        keyed.push((rank, t));
        rank += 1;
    }
    keyed.sort_unstable();
    for (slot, (_, t)) in tasks.iter_mut().zip(keyed) {
        *slot = t;
    }
}
