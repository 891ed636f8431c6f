//! Stores made by a Baton from before its changelogs took Kafka Streams' record layout (a
//! timestamped store's value logged with its timestamp in front, the record stamped with the
//! time it was written). This version would read those changelogs wrongly, so an instance
//! whose state directory holds such a store of a timestamped kind refuses to start, naming
//! the stores and the way out, rather than restore them into wrong values.

use crate::error::{Result, RuntimeError};
use crate::layout::Layout;
use crate::state_dir::{has_kafka_layout, StateDir};
use crate::topology::Topology;

/// Refuses a state directory holding a timestamped store made by an earlier Baton.
pub fn refuse_earlier_layouts(state_dir: &StateDir, topology: &Topology) -> Result<()> {
    let mut found = Vec::new();
    for task in state_dir.tasks() {
        for store in topology.stores_of(task.subtopology) {
            if topology.store_layout(store) != Layout::Timestamped {
                continue;
            }
            let dir = state_dir.store_dir(task, store);
            if !has_kafka_layout(&dir) {
                found.push(format!("{store} (task {task}, {})", dir.display()));
            }
        }
    }
    if found.is_empty() {
        return Ok(());
    }
    let changelogs: Vec<String> = {
        let mut names: Vec<&str> = topology
            .store_names()
            .into_iter()
            .filter(|s| topology.store_layout(s) == Layout::Timestamped)
            .collect();
        names.dedup();
        names
            .into_iter()
            .map(|s| topology.changelog_topic(s))
            .collect()
    };
    Err(RuntimeError::EarlierLayout(format!(
        "{} was made by a Baton from before 2026-12-06, whose changelogs hold a timestamped \
         store's timestamp inside each value; this version writes and reads Kafka Streams' \
         layout and would restore those changelogs into wrong values. Either keep running the \
         earlier Baton, or reset the application: stop every instance, delete its changelog \
         topics ({}) and every instance's state directory, then start this version (the \
         stores are rebuilt from the input as far as it is retained)",
        found.join(", "),
        changelogs.join(", ")
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::TaskStore;
    use crate::topology::{Stream, Topology};
    use baton_assignor::TaskId;

    fn topology() -> Topology {
        Topology::new(
            "app",
            vec![Stream::from(&["in"])
                .aggregate_as("counts", Layout::Timestamped, |_, _, _| Vec::new())],
        )
        .unwrap()
    }

    #[test]
    fn a_timestamped_store_without_the_mark_is_refused_and_a_new_one_is_not() {
        let dir = std::env::temp_dir().join(format!("baton-legacy-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let state = StateDir::new(&dir);
        let t = topology();
        // A store this version made carries the mark.
        drop(TaskStore::open(&dir, TaskId::new(0, 0), "counts").unwrap());
        assert!(refuse_earlier_layouts(&state, &t).is_ok());
        // One an earlier Baton made has none.
        std::fs::create_dir_all(state.store_dir(TaskId::new(0, 1), "counts")).unwrap();
        let e = refuse_earlier_layouts(&state, &t).unwrap_err().to_string();
        assert!(e.contains("counts (task 0_1"), "{e}");
        assert!(e.contains("app-counts-changelog"), "{e}");
        assert!(!e.contains("task 0_0"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
