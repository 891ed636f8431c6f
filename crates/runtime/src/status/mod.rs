//! What an instance holds, shared by its stream threads: each task's role, phase, lag and
//! counters, and the changelog offsets its stores have absorbed. The subscription's offset
//! sums and the `/metrics` page are both read from here.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Instant;

use baton_assignor::TaskId;
use baton_protocol::TaskOffsetSum;

use crate::query::staleness::Staleness;

pub use baton_core::status::{Phase, Role};

mod render;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskStatus {
    pub role: Role,
    pub phase: Phase,
    /// Changelog records behind the end, summed over the task's stores.
    pub lag: u64,
    pub processed: u64,
    pub restored: u64,
}

/// Upper bounds (seconds) of the rebalance-duration histogram's buckets; `+Inf` follows.
const REBALANCE_BUCKETS: [f64; 8] = [0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0];

/// How fast a copy that is catching up closes its lag, net of the changelog's growth.
#[derive(Debug, Clone, Copy)]
struct Progress {
    lag: u64,
    at: std::time::Instant,
    /// Records per second, smoothed; negative when the lag grows.
    rate: Option<f64>,
}

/// Lag samples closer than this are merged: a rate over a few milliseconds is noise.
const RATE_WINDOW: std::time::Duration = std::time::Duration::from_millis(500);

#[derive(Debug, Default)]
struct Inner {
    held: BTreeMap<TaskId, TaskStatus>,
    /// What each thread's machine reports for the tasks it holds (`Report::offset_sums`):
    /// the one rule for a held task's offset sum.
    reported: BTreeMap<TaskId, i64>,
    /// Catch-up progress of held tasks that are behind.
    progress: BTreeMap<TaskId, Progress>,
    /// By reason: join rounds per histogram bucket (the last is `+Inf`).
    rebalance_buckets: BTreeMap<String, [u64; REBALANCE_BUCKETS.len() + 1]>,
    /// Next changelog offset absorbed, summed over stores, for every task with state on disk.
    checkpoints: BTreeMap<TaskId, i64>,
    rebalances: u64,
    /// Batches whose records ran beside another task's batch (`--batch-cores`).
    side_by_side: u64,
    /// By reason: how many, and their total seconds.
    rebalance_seconds: BTreeMap<String, (u64, f64)>,
    /// By thread: when the last heartbeat was sent, and the longest time between two, in
    /// seconds.
    heartbeats: BTreeMap<String, (std::time::Duration, f64)>,
    processed_total: BTreeMap<TaskId, u64>,
    /// Output records dropped as larger than any batch the broker takes, per task.
    skipped_total: BTreeMap<TaskId, u64>,
    /// Records dropped for windows already closed (stream time past their end plus grace).
    late_total: BTreeMap<TaskId, u64>,
    /// How far behind in time each held copy is (queries' `lag_ms`).
    staleness: BTreeMap<TaskId, Staleness>,
}

#[derive(Debug, Default)]
pub struct Status(Mutex<Inner>);

impl Status {
    fn inner(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A thread that panicked while holding the lock left counters, not invariants.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn hold(&self, task: TaskId, status: TaskStatus) {
        self.inner().held.insert(task, status);
    }

    pub fn update(&self, task: TaskId, f: impl FnOnce(&mut TaskStatus)) {
        let mut i = self.inner();
        let Some(s) = i.held.get_mut(&task) else {
            return;
        };
        f(s);
        let lag = s.lag;
        let catching = s.role != Role::Active || s.phase == Phase::Restoring;
        let now = std::time::Instant::now();
        if !catching || lag == 0 {
            i.progress.remove(&task);
            return;
        }
        match i.progress.get_mut(&task) {
            Some(p) if now.duration_since(p.at) >= RATE_WINDOW => {
                let dt = now.duration_since(p.at).as_secs_f64();
                let r = (p.lag as f64 - lag as f64) / dt;
                p.rate = Some(p.rate.map_or(r, |old| 0.5 * old + 0.5 * r));
                p.lag = lag;
                p.at = now;
            }
            Some(_) => {}
            None => {
                i.progress.insert(
                    task,
                    Progress {
                        lag,
                        at: now,
                        rate: None,
                    },
                );
            }
        }
    }

    pub fn release(&self, task: TaskId) {
        let mut i = self.inner();
        i.held.remove(&task);
        i.reported.remove(&task);
        i.progress.remove(&task);
        i.staleness.remove(&task);
    }

    /// The held copy holds every changelog record below `stored` (summed over its stores);
    /// the changelogs end at `end`, or an end is not known yet.
    pub fn observe_changelogs(&self, task: TaskId, stored: i64, end: Option<i64>, now: Instant) {
        let mut i = self.inner();
        if !i.held.contains_key(&task) {
            return;
        }
        let s = i.staleness.entry(task).or_default();
        match end {
            Some(end) => s.observe(stored, end, now),
            None => s.reset(),
        }
    }

    /// Milliseconds the held copy is behind its changelogs' end ([`Staleness::lag_ms`]); 0
    /// for a running active, which writes them.
    pub fn lag_ms(&self, task: TaskId, now: Instant) -> Option<u64> {
        let i = self.inner();
        let held = i.held.get(&task)?;
        if held.role == Role::Active && held.phase == Phase::Running {
            return Some(0);
        }
        i.staleness.get(&task)?.lag_ms(now)
    }

    pub fn get(&self, task: TaskId) -> Option<TaskStatus> {
        self.inner().held.get(&task).cloned()
    }

    /// Runs `f` (a deletion of the task's state) while holding the board's lock, unless the
    /// task is held; a thread marks a task held before opening its stores, so the two never
    /// overlap. A task whose state is gone no longer reports a checkpoint.
    pub fn unless_held<T>(&self, task: TaskId, f: impl FnOnce() -> T) -> Option<T> {
        let mut i = self.inner();
        if i.held.contains_key(&task) {
            return None;
        }
        let out = f();
        i.checkpoints.remove(&task);
        Some(out)
    }

    /// A thread sent a heartbeat at `at` (time since it started).
    pub fn heartbeat_sent(&self, thread: &str, at: std::time::Duration) {
        let mut i = self.inner();
        match i.heartbeats.get_mut(thread) {
            Some((last, gap)) => {
                *gap = gap.max(at.saturating_sub(*last).as_secs_f64());
                *last = at;
            }
            None => {
                i.heartbeats.insert(thread.to_owned(), (at, 0.0));
            }
        }
    }

    /// When `thread` last sent a heartbeat.
    pub fn last_heartbeat(&self, thread: &str) -> Option<std::time::Duration> {
        self.inner().heartbeats.get(thread).map(|h| h.0)
    }

    /// A rebalance this instance took part in, its reason and how long it took.
    pub fn observe_rebalance(&self, reason: &str, seconds: f64) {
        let mut i = self.inner();
        let e = i.rebalance_seconds.entry(reason.to_owned()).or_default();
        e.0 += 1;
        e.1 += seconds;
        let bucket = REBALANCE_BUCKETS
            .iter()
            .position(|&le| seconds <= le)
            .unwrap_or(REBALANCE_BUCKETS.len());
        i.rebalance_buckets.entry(reason.to_owned()).or_default()[bucket] += 1;
    }

    pub fn set_checkpoint(&self, task: TaskId, offset_sum: i64) {
        self.inner().checkpoints.insert(task, offset_sum);
    }

    pub fn add_processed(&self, task: TaskId, n: u64) {
        let mut i = self.inner();
        *i.processed_total.entry(task).or_default() += n;
        if let Some(s) = i.held.get_mut(&task) {
            s.processed += n;
        }
    }

    pub fn add_skipped(&self, task: TaskId) {
        self.add_skipped_n(task, 1);
    }

    pub fn add_skipped_n(&self, task: TaskId, n: u64) {
        *self.inner().skipped_total.entry(task).or_default() += n;
    }

    /// Counts `n` record-window pairs that came after their window closed.
    pub fn add_late(&self, task: TaskId, n: u64) {
        if n > 0 {
            *self.inner().late_total.entry(task).or_default() += n;
        }
    }

    pub fn late(&self, task: TaskId) -> u64 {
        self.inner().late_total.get(&task).copied().unwrap_or(0)
    }

    pub fn count_rebalance(&self) {
        self.inner().rebalances += 1;
    }

    /// Counts `n` batches that ran side by side ([`crate::config::RuntimeConfig::batch_cores`]).
    pub fn count_side_by_side(&self, n: u64) {
        self.inner().side_by_side += n;
    }

    /// A held task's offset sum as its thread's machine reports it (`None`: it reports none,
    /// e.g. while its stores open).
    pub fn set_reported(&self, task: TaskId, offset_sum: Option<i64>) {
        let mut i = self.inner();
        match offset_sum {
            Some(sum) => i.reported.insert(task, sum),
            None => i.reported.remove(&task),
        };
    }

    /// The offset sums a subscription reports: each held task's as its machine reports it
    /// (`ThreadMachine::report`: a running or failed active as `RUNNING`), every other task
    /// with state on disk by its checkpoint.
    pub fn offset_sums(&self) -> Vec<TaskOffsetSum> {
        let i = self.inner();
        let mut sums: BTreeMap<TaskId, i64> = i.checkpoints.clone();
        sums.extend(i.reported.iter().map(|(t, s)| (*t, *s)));
        sums.into_iter()
            .map(|(task, offset_sum)| TaskOffsetSum { task, offset_sum })
            .collect()
    }

    /// Every held task that is catching up: `(task, role, lag, net catch-up rate)`; the rate is
    /// `None` until two samples are far enough apart.
    pub fn progress(&self) -> Vec<(TaskId, Role, u64, Option<f64>)> {
        let i = self.inner();
        i.progress
            .iter()
            .filter_map(|(t, p)| Some((*t, i.held.get(t)?.role, p.lag, p.rate)))
            .collect()
    }

    /// The tasks held here that stopped (phase `failed`), with their roles.
    pub fn failed(&self) -> Vec<(TaskId, Role)> {
        self.inner()
            .held
            .iter()
            .filter(|(_, s)| s.phase == Phase::Failed)
            .map(|(t, s)| (*t, s.role))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The board says what the machines report for held tasks (a failed active as running:
    /// moving it would only fail it elsewhere) and checkpoints for the rest; it has no rule of
    /// its own.
    #[test]
    fn held_tasks_report_what_their_machine_says_and_others_their_checkpoint() {
        let s = Status::default();
        let (a, b, c, d) = (
            TaskId::new(0, 0),
            TaskId::new(0, 1),
            TaskId::new(0, 2),
            TaskId::new(0, 3),
        );
        for (t, sum) in [(a, 10), (b, 20), (c, 30), (d, 40)] {
            s.set_checkpoint(t, sum);
        }
        let held = |role, phase| TaskStatus {
            role,
            phase,
            lag: 0,
            processed: 0,
            restored: 0,
        };
        s.hold(a, held(Role::Active, Phase::Running));
        s.set_reported(a, Some(baton_protocol::subscription::RUNNING));
        s.hold(b, held(Role::Active, Phase::Failed));
        s.set_reported(b, Some(baton_protocol::subscription::RUNNING));
        s.hold(c, held(Role::Warmup, Phase::Tailing));
        s.set_reported(c, Some(31));
        let sums = |s: &Status| -> Vec<(TaskId, i64)> {
            s.offset_sums()
                .into_iter()
                .map(|t| (t.task, t.offset_sum))
                .collect()
        };
        assert_eq!(sums(&s), vec![(a, -2), (b, -2), (c, 31), (d, 40)]);
        s.release(b);
        assert_eq!(sums(&s)[1], (b, 20), "released: its checkpoint again");
    }

    #[test]
    fn metrics_are_prometheus_text() {
        let s = Status::default();
        let t = TaskId::new(1, 3);
        s.hold(
            t,
            TaskStatus {
                role: Role::Warmup,
                phase: Phase::Tailing,
                lag: 42,
                processed: 0,
                restored: 7,
            },
        );
        s.add_processed(t, 5);
        s.count_rebalance();
        let text = s.render("a\"b");
        assert!(text.contains(
            "baton_task_held{instance=\"a\\\"b\",task=\"1_3\",role=\"warmup\",phase=\"tailing\"} 1"
        ));
        assert!(text.contains(
            "baton_task_lag_records{instance=\"a\\\"b\",task=\"1_3\",role=\"warmup\"} 42"
        ));
        assert!(
            text.contains("baton_task_processed_records_total{instance=\"a\\\"b\",task=\"1_3\"} 5")
        );
        assert!(text.contains("baton_rebalances_total{instance=\"a\\\"b\"} 1"));
        assert!(text.contains("baton_pending_moves{instance=\"a\\\"b\"} 1"));
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let value = line.rsplit(' ').next().unwrap();
            assert!(value.parse::<f64>().is_ok(), "{line}");
        }
    }

    #[test]
    fn a_warm_up_reports_its_catch_up_rate_and_eta_and_rounds_their_histogram() {
        let s = Status::default();
        let t = TaskId::new(0, 1);
        let at = |lag| TaskStatus {
            role: Role::Warmup,
            phase: Phase::Tailing,
            lag,
            processed: 0,
            restored: 0,
        };
        s.hold(t, at(10_000));
        s.update(t, |x| x.lag = 10_000);
        std::thread::sleep(RATE_WINDOW + std::time::Duration::from_millis(100));
        s.update(t, |x| x.lag = 4_000);
        let text = s.render("a");
        let value = |name: &str| -> f64 {
            let line = text
                .lines()
                .find(|l| l.starts_with(name))
                .unwrap_or_else(|| panic!("{name} in {text}"));
            line.rsplit(' ').next().unwrap().parse().unwrap()
        };
        let rate = value("baton_task_catchup_rate_records_per_second{");
        assert!((3_000.0..=12_000.0).contains(&rate), "{rate}");
        let eta = value("baton_task_eta_seconds{");
        assert!((eta - 4_000.0 / rate).abs() < 0.2, "{eta} vs {rate}");
        // Falling behind: no finite ETA.
        std::thread::sleep(RATE_WINDOW + std::time::Duration::from_millis(100));
        s.update(t, |x| x.lag = 9_000);
        std::thread::sleep(RATE_WINDOW + std::time::Duration::from_millis(100));
        s.update(t, |x| x.lag = 14_000);
        assert!(s
            .render("a")
            .contains("baton_task_eta_seconds{instance=\"a\",task=\"0_1\",role=\"warmup\"} +Inf"));
        s.observe_rebalance("drain requested", 0.3);
        s.observe_rebalance("drain requested", 3.0);
        let text = s.render("a");
        for (le, n) in [("0.25", 0), ("0.5", 1), ("5", 2), ("+Inf", 2)] {
            let want = format!(
                "baton_rebalance_duration_seconds_bucket{{instance=\"a\",reason=\"drain requested\",le=\"{le}\"}} {n}"
            );
            assert!(text.contains(&want), "{want}\n{text}");
        }
    }
}
