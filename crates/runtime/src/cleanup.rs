//! State on disk: finding the tasks with state at startup, and deleting the ones unused for
//! `state.cleanup.delay`.

use std::sync::Arc;
use std::time::Duration;

use crate::context::Context;
use crate::state_dir::now_ms;
use crate::store::TaskStore;

/// Records the checkpoint of every task with state under the state directory, so the first
/// subscription reports it. Directories that are not tasks of this topology are left alone.
pub fn scan(ctx: &Context) {
    for task in ctx.state_dir.tasks() {
        let mut sum = 0i64;
        let mut found = false;
        for store in ctx.topology.stores_of(task.subtopology) {
            if !ctx.state_dir.store_dir(task, store).is_dir() {
                continue;
            }
            match TaskStore::open(ctx.state_dir.root(), task, store).and_then(|s| s.checkpoint()) {
                Ok(Some(offset)) => {
                    sum += offset;
                    found = true;
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(task = %task, store, error = %e, "ignoring unreadable state")
                }
            }
        }
        if found {
            tracing::info!(task = %task, offset_sum = sum, "state on disk");
            ctx.status.set_checkpoint(task, sum);
        }
    }
}

/// Deletes, now and then, task directories not held and unused for the cleanup delay.
pub async fn run(ctx: Arc<Context>) {
    let delay = ctx.cfg.state_cleanup_delay;
    let every = (delay / 2).clamp(Duration::from_secs(1), Duration::from_secs(60));
    loop {
        tokio::time::sleep(every).await;
        sweep(&ctx, delay);
    }
}

fn sweep(ctx: &Context, delay: Duration) {
    let now = now_ms();
    for task in ctx.state_dir.tasks() {
        if now.saturating_sub(ctx.state_dir.last_used_ms(task)) < delay.as_millis() {
            continue;
        }
        let dir = ctx.state_dir.task_dir(task);
        // Checked and deleted under the status lock, which a thread takes to hold a task
        // before opening its stores: no thread can open it in between.
        let removed = ctx
            .status
            .unless_held(task, || std::fs::remove_dir_all(&dir));
        match removed {
            Some(Ok(())) => {
                tracing::info!(task = %task, dir = %dir.display(), "removed state unused for the cleanup delay");
            }
            Some(Err(e)) => tracing::warn!(task = %task, error = %e, "removing unused state"),
            None => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use baton_assignor::TaskId;
    use baton_kafka::Client;
    use baton_protocol::bridge::Topology as WireTopology;

    use super::*;
    use crate::config::RuntimeConfig;
    use crate::status::{Phase, Role, TaskStatus};
    use crate::topology::count_per_key;

    #[test]
    fn sweeps_only_unheld_state_unused_for_the_delay() {
        let dir = std::env::temp_dir().join(format!("baton-cleanup-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let cfg = RuntimeConfig {
            state_dir: dir.clone(),
            instance_id: "test".into(),
            ..RuntimeConfig::default()
        };
        let ctx = Context::new(
            Client::new(&["127.0.0.1:1"], "test"),
            cfg,
            count_per_key("app", "in", "out").unwrap(),
            WireTopology::default(),
            BTreeMap::new(),
            uuid::Uuid::nil(),
        );
        let old = now_ms() - 3_600_000;
        for (task, last_used) in [("0_0", old), ("0_1", old), ("0_2", now_ms())] {
            std::fs::create_dir_all(dir.join(task)).unwrap();
            std::fs::write(dir.join(task).join("last-used"), last_used.to_string()).unwrap();
        }
        std::fs::create_dir_all(dir.join("not-a-task")).unwrap();
        ctx.status.hold(
            TaskId::new(0, 1),
            TaskStatus {
                role: Role::Standby,
                phase: Phase::Tailing,
                lag: 0,
                processed: 0,
                restored: 0,
            },
        );
        ctx.status.set_checkpoint(TaskId::new(0, 0), 10);
        sweep(&ctx, Duration::from_secs(600));
        assert!(!dir.join("0_0").exists(), "unheld and unused for an hour");
        assert!(dir.join("0_1").exists(), "held");
        assert!(dir.join("0_2").exists(), "used just now");
        assert!(dir.join("not-a-task").exists(), "not ours to delete");
        assert!(
            ctx.status.offset_sums().is_empty(),
            "its offset sum is no longer reported"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
