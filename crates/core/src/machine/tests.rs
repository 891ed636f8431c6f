use std::collections::BTreeMap;

use baton_protocol::bridge::Subtopology;

use super::*;

const S: Duration = Duration::from_secs(1);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn topology() -> WireTopology {
    WireTopology {
        subtopologies: BTreeMap::from([(
            0,
            Subtopology {
                source_topics: vec!["in".into()],
                changelog_topics: vec!["app-counts-changelog".into()],
                partitions: 4,
            },
        )]),
    }
}

fn tp(topic: &str, p: i32) -> TopicPartition {
    TopicPartition {
        topic: topic.into(),
        partition: p,
    }
}

fn task(p: u32) -> TaskId {
    TaskId::new(0, p)
}

fn machine() -> ThreadMachine {
    machine_with(baton_assignor::RejoinMode::Eager)
}

fn machine_with(rejoin_mode: baton_assignor::RejoinMode) -> ThreadMachine {
    ThreadMachine::new(
        MachineConfig {
            session_timeout: 10 * S,
            write_timeout: S,
            commit_interval: S,
            acceptable_recovery_lag: 100,
            restore_fetch_bytes: 1 << 20,
            restore_fetch_bytes_beside_actives: 1 << 20,
            input_fetch_bytes: 1 << 20,
            static_membership: false,
            retry_backoff: crate::Backoff {
                first: ms(200),
                max: 10 * S,
                attempts: u32::MAX,
            },
            rejoin_mode,
            auto_offset_reset: crate::config::OffsetReset::Earliest,
            failed_task_retry: None,
            on_oversized_record: Default::default(),
            fetch_beside_batches: true,
            wall_clock: BTreeMap::new(),
        },
        topology(),
        Duration::ZERO,
    )
}

/// An assignment whose SyncGroup was sent at `at`.
fn assigned(
    generation: i32,
    active: &[u32],
    standby: &[u32],
    warmup: &[u32],
    at: Duration,
) -> Event {
    Event::Assigned(Assigned {
        generation,
        member_id: "m".into(),
        active: active.iter().map(|&p| task(p)).collect(),
        standby: standby.iter().map(|&p| task(p)).collect(),
        warmup: warmup.iter().map(|&p| task(p)).collect(),
        probe_at: None,
        version_probing: false,
        confirmed_at: at,
    })
}

fn fetch_of(cmds: &[Command]) -> Option<(RequestId, Vec<FetchWant>)> {
    cmds.iter().find_map(|c| match c {
        Command::Fetch { fetch, wants } => Some((*fetch, wants.clone())),
        _ => None,
    })
}

fn processes(cmds: &[Command]) -> Vec<(TaskId, RequestId, Vec<Input>)> {
    cmds.iter()
        .filter_map(|c| match c {
            Command::Process {
                task,
                batch,
                inputs,
            } => Some((*task, *batch, inputs.clone())),
            _ => None,
        })
        .collect()
}

fn joins(cmds: &[Command]) -> Vec<String> {
    cmds.iter()
        .filter_map(|c| match c {
            Command::Join { reason, .. } => Some(reason.name().to_owned()),
            _ => None,
        })
        .collect()
}

/// Answers every open at checkpoint 0 and restores each active to an empty changelog with
/// nothing committed, so the actives run from offset 0. Returns the pending fetch.
fn bring_up(m: &mut ThreadMachine, mut cmds: Vec<Command>, now: Duration) -> RequestId {
    for _ in 0..10 {
        let mut next = Vec::new();
        let mut fetch = None;
        for c in &cmds {
            match c {
                Command::Open { task, .. } => next.extend(m.handle(
                    Event::Opened {
                        task: *task,
                        checkpoints: vec![0],
                    },
                    now,
                )),
                Command::ReadCommitted { task } => next.extend(m.handle(
                    Event::CommittedRead {
                        task: *task,
                        offsets: vec![None],
                    },
                    now,
                )),
                Command::Absorb {
                    task, changelog, ..
                } => next.extend(m.handle(
                    Event::Absorbed {
                        task: *task,
                        changelog: *changelog,
                        stored: 0,
                        loading: false,
                    },
                    now,
                )),
                Command::Fetch { fetch: f, wants } => fetch = Some((*f, wants.clone())),
                _ => {}
            }
        }
        let all_running = m.tasks().values().all(|t| t.phase != Phase::Opening)
            && m.tasks()
                .values()
                .filter(|t| t.role == Role::Active)
                .all(|t| t.phase == Phase::Running);
        if let Some((f, wants)) = fetch {
            if all_running && next.is_empty() {
                return f;
            }
            // Answer changelog wants with an empty changelog (end 0).
            let results = wants
                .iter()
                .map(|w| FetchResult {
                    tp: w.tp.clone(),
                    from: w.offset,
                    next: w.offset,
                    high_watermark: Some(0),
                })
                .collect();
            next.extend(m.handle(Event::Fetched { fetch: f, results }, now));
        }
        cmds = next;
    }
    panic!("tasks did not come up: {:?}", m.tasks());
}

/// A machine running task 0 as an active, and the commands after its input `0..next` was
/// fetched at `at`.
fn running_with_input(next: i64, at: Duration) -> (ThreadMachine, Vec<Command>) {
    let mut m = machine();
    let cmds = m.handle(assigned(1, &[0], &[], &[], Duration::ZERO), Duration::ZERO);
    let fetch = bring_up(&mut m, cmds, Duration::ZERO);
    let cmds = m.handle(input_answer(fetch, 0, next), at);
    (m, cmds)
}

/// A fetch's answer for input partition in-0: offsets `from..next`, its end at `next`.
fn input_answer(fetch: RequestId, from: i64, next: i64) -> Event {
    Event::Fetched {
        fetch,
        results: vec![FetchResult {
            tp: tp("in", 0),
            from,
            next,
            high_watermark: Some(next),
        }],
    }
}

#[test]
fn starts_by_joining_and_opens_what_it_is_given() {
    let mut m = machine();
    assert_eq!(joins(&m.start()), ["startup"]);
    let cmds = m.handle(assigned(1, &[0], &[1], &[], S), S);
    assert!(cmds.contains(&Command::Open {
        task: task(0),
        role: Role::Active
    }));
    assert!(cmds.contains(&Command::Open {
        task: task(1),
        role: Role::Standby
    }));
    assert!(
        fetch_of(&cmds).is_none(),
        "nothing to read before the stores open"
    );
}

#[test]
fn an_active_restores_then_reads_its_committed_offset_then_processes() {
    let mut m = machine();
    m.start();
    m.handle(assigned(1, &[0], &[], &[], S), S);
    let cmds = m.handle(
        Event::Opened {
            task: task(0),
            checkpoints: vec![40],
        },
        S,
    );
    let (f, wants) = fetch_of(&cmds).unwrap();
    assert_eq!(wants[0].tp, tp("app-counts-changelog", 0));
    assert_eq!(wants[0].offset, 40, "only what the store lacks");
    let cmds = m.handle(
        Event::Fetched {
            fetch: f,
            results: vec![FetchResult {
                tp: tp("app-counts-changelog", 0),
                from: 40,
                next: 100,
                high_watermark: Some(100),
            }],
        },
        S,
    );
    assert!(cmds.contains(&Command::Absorb {
        task: task(0),
        changelog: 0,
        end: 100
    }));
    let (prefetch, wants) =
        fetch_of(&cmds).expect("the next chunk is fetched while the store applies");
    assert_eq!(wants[0].offset, 100);
    let cmds = m.handle(
        Event::Absorbed {
            task: task(0),
            changelog: 0,
            stored: 100,
            loading: false,
        },
        S,
    );
    assert!(cmds.contains(&Command::Persist { task: task(0) }));
    assert!(cmds.contains(&Command::ReadCommitted { task: task(0) }));
    let cmds = m.handle(
        Event::CommittedRead {
            task: task(0),
            offsets: vec![Some(7)],
        },
        S,
    );
    assert_eq!(m.tasks()[&task(0)].phase, Phase::Running);
    assert!(fetch_of(&cmds).is_none(), "one fetch at a time");
    let cmds = m.handle(
        Event::Fetched {
            fetch: prefetch,
            results: vec![],
        },
        S,
    );
    let (_, wants) = fetch_of(&cmds).unwrap();
    assert_eq!((wants[0].tp.clone(), wants[0].offset), (tp("in", 0), 7));
    assert_eq!(
        m.report().offset_sums[&task(0)],
        baton_protocol::subscription::RUNNING
    );
}

/// The case: a join round that takes 10 s (the coordinator waits for a dead member's
/// session). Kept tasks go on being processed throughout; the moving task stops only when the
/// assignment that ends the round takes it away.
#[test]
fn processing_goes_on_during_a_ten_second_join_round() {
    let mut m = machine();
    let cmds = m.handle(
        assigned(1, &[0, 1], &[], &[], Duration::ZERO),
        Duration::ZERO,
    );
    let mut fetch = bring_up(&mut m, cmds, Duration::ZERO);
    let mut now = S;
    let cmds = m.handle(
        Event::Heartbeat {
            answer: Heartbeat::Rebalancing,
            at: now,
        },
        now,
    );
    assert_eq!(joins(&cmds), ["the group is rebalancing"]);
    let mut position = [0i64; 2];
    let mut batches = [0u32; 2];
    while now < 11 * S {
        now += ms(100);
        // The membership task heartbeats through the round; the coordinator answers
        // "rebalancing" and counts it.
        if now.as_millis().is_multiple_of(500) {
            let cmds = m.handle(
                Event::Heartbeat {
                    answer: Heartbeat::Rebalancing,
                    at: now,
                },
                now,
            );
            assert!(joins(&cmds).is_empty(), "already joining");
        }
        let results = (0..2)
            .map(|p| FetchResult {
                tp: tp("in", p as i32),
                from: position[p],
                next: position[p] + 10,
                high_watermark: Some(1_000_000),
            })
            .collect();
        let cmds = m.handle(Event::Fetched { fetch, results }, now);
        let ps = processes(&cmds);
        assert_eq!(ps.len(), 2, "both tasks go on at {now:?}");
        let mut next_fetch = fetch_of(&cmds).map(|f| f.0);
        for (t, batch, inputs) in ps {
            position[t.partition as usize] = inputs[0].to;
            batches[t.partition as usize] += 1;
            let cmds = m.handle(
                Event::BatchDone {
                    task: t,
                    batch,
                    changelogs: vec![(0, inputs[0].from, inputs[0].to)],
                },
                now,
            );
            next_fetch = next_fetch.or(fetch_of(&cmds).map(|f| f.0));
        }
        fetch = next_fetch.expect("the next fetch");
        assert!(m.is_joining());
    }
    assert_eq!(batches, [100, 100]);
    // The round ends: task 1 moves away.
    let cmds = m.handle(assigned(2, &[0], &[], &[], now), now);
    let (commit, generation, offsets) = commit_of(&cmds).expect("a commit");
    assert_eq!(
        (generation, offsets),
        (2, vec![(tp("in", 1), position[1])]),
        "the revoked task's progress is committed with the new generation"
    );
    assert!(cmds.contains(&Command::Close { task: task(1) }));
    assert!(
        joins(&cmds).is_empty(),
        "released only once its commit lands"
    );
    assert_eq!(
        m.report().owned,
        vec![tp("in", 0), tp("in", 1)],
        "still claimed meanwhile"
    );
    let cmds = m.handle(Event::CommitDone { commit, ok: true }, now);
    assert_eq!(joins(&cmds), ["released revoked actives"]);
    let report = match cmds.iter().find(|c| matches!(c, Command::Join { .. })) {
        Some(Command::Join { report, .. }) => report.clone(),
        _ => unreachable!(),
    };
    assert_eq!(report.owned, vec![tp("in", 0)], "no longer claims task 1");
    let results = (0..2)
        .map(|p| FetchResult {
            tp: tp("in", p as i32),
            from: position[p],
            next: position[p] + 10,
            high_watermark: Some(1_000_000),
        })
        .collect();
    let cmds = m.handle(Event::Fetched { fetch, results }, now);
    let ps = processes(&cmds);
    assert_eq!(ps.len(), 1);
    assert_eq!(ps[0].0, task(0), "task 1 is no longer processed");
}

/// A machine holding task 2 as a warm-up, its store opened at checkpoint 0: the pending
/// fetch of its changelog.
fn warming_up() -> (ThreadMachine, RequestId) {
    let mut m = machine();
    m.handle(assigned(1, &[], &[], &[2], S), S);
    let cmds = m.handle(
        Event::Opened {
            task: task(2),
            checkpoints: vec![0],
        },
        S,
    );
    let (f, _) = fetch_of(&cmds).unwrap();
    (m, f)
}

#[test]
fn a_warm_up_within_the_acceptable_lag_asks_for_one_follow_up() {
    let (mut m, f) = warming_up();
    let result = |from, next| FetchResult {
        tp: tp("app-counts-changelog", 2),
        from,
        next,
        high_watermark: Some(1000),
    };
    let cmds = m.handle(
        Event::Fetched {
            fetch: f,
            results: vec![result(0, 500)],
        },
        S,
    );
    let (f, _) = fetch_of(&cmds).unwrap();
    let cmds = m.handle(
        Event::Absorbed {
            task: task(2),
            changelog: 0,
            stored: 500,
            loading: false,
        },
        S,
    );
    assert!(joins(&cmds).is_empty(), "500 behind is not caught up");
    assert_eq!(m.report().warmups, vec![task(2)]);
    m.handle(
        Event::Fetched {
            fetch: f,
            results: vec![result(500, 950)],
        },
        S,
    );
    let cmds = m.handle(
        Event::Absorbed {
            task: task(2),
            changelog: 0,
            stored: 950,
            loading: false,
        },
        S,
    );
    assert_eq!(joins(&cmds), ["a warm-up caught up"]);
    let cmds = m.handle(
        Event::Absorbed {
            task: task(2),
            changelog: 0,
            stored: 960,
            loading: false,
        },
        S,
    );
    assert!(joins(&cmds).is_empty(), "asked once");
}

#[test]
fn a_member_without_heartbeat_answers_stops_writing_and_rejoins() {
    let mut m = machine();
    let cmds = m.handle(assigned(1, &[0], &[1], &[], Duration::ZERO), Duration::ZERO);
    let fetch = bring_up(&mut m, cmds, Duration::ZERO);
    m.handle(
        Event::Heartbeat {
            answer: Heartbeat::Alive,
            at: 2 * S,
        },
        2 * S,
    );
    assert!(
        m.may_write(11 * S),
        "a write sent now lands within the session"
    );
    assert!(!m.may_write(11 * S + ms(1)));
    // Paused for 30 s: the first thing it does on waking is give its actives up.
    let woke = 32 * S;
    assert!(!m.may_write(woke));
    let cmds = m.handle(
        Event::Fetched {
            fetch,
            results: vec![FetchResult {
                tp: tp("in", 0),
                from: 0,
                next: 10,
                high_watermark: Some(10),
            }],
        },
        woke,
    );
    assert!(processes(&cmds).is_empty(), "no write after the lapse");
    assert!(cmds.contains(&Command::Close { task: task(0) }));
    assert!(!cmds.iter().any(|c| matches!(c, Command::Commit { .. })));
    assert_eq!(
        joins(&cmds),
        ["no heartbeat answer within the session timeout"]
    );
    assert!(
        m.tasks().contains_key(&task(1)),
        "a standby writes nothing: kept"
    );
}

#[test]
fn late_and_repeated_answers_change_nothing() {
    let mut m = machine();
    let cmds = m.handle(assigned(1, &[0], &[], &[], Duration::ZERO), Duration::ZERO);
    let fetch = bring_up(&mut m, cmds, Duration::ZERO);
    let result = FetchResult {
        tp: tp("in", 0),
        from: 0,
        next: 10,
        high_watermark: Some(10),
    };
    let stale = m.handle(
        Event::Fetched {
            fetch: RequestId(fetch.0 + 100),
            results: vec![result.clone()],
        },
        S,
    );
    assert!(processes(&stale).is_empty(), "an answer nobody asked for");
    let cmds = m.handle(
        Event::Fetched {
            fetch,
            results: vec![result.clone()],
        },
        S,
    );
    let (_, batch, _) = processes(&cmds)[0].clone();
    let again = m.handle(
        Event::Fetched {
            fetch,
            results: vec![result],
        },
        S,
    );
    assert!(processes(&again).is_empty(), "a repeated answer");
    let done = Event::BatchDone {
        task: task(0),
        batch,
        changelogs: vec![(0, 0, 10)],
    };
    m.handle(done.clone(), S);
    m.handle(done, S);
    let t = &m.tasks()[&task(0)];
    assert_eq!(t.sources[0].position, Some(10));
    assert_eq!(t.changelogs[0].stored, 10);
}

#[test]
fn a_store_that_fails_after_the_output_was_acknowledged_is_rebuilt_not_rerun() {
    let (mut m, cmds) = running_with_input(10, S);
    let (_, batch, _) = processes(&cmds)[0].clone();
    let cmds = m.handle(
        Event::BatchFailed {
            task: task(0),
            batch,
            output_acknowledged: true,
        },
        S,
    );
    assert!(cmds.contains(&Command::Close { task: task(0) }));
    assert!(processes(&cmds).is_empty());
    assert!(
        cmds.iter().any(
            |c| matches!(c, Command::Commit { offsets, .. } if offsets == &vec![(tp("in", 0), 10)])
        ),
        "the input is done: {cmds:?}"
    );
    assert_eq!(m.tasks()[&task(0)].phase, Phase::Opening, "restores again");
    let later = m.handle(Event::Tick, S + ms(300));
    assert!(later.contains(&Command::Open {
        task: task(0),
        role: Role::Active
    }));
}

/// A record the application fails on (`on-processing-error=fail`) stops its task where it
/// was: no more input fetched, no batch, nothing committed past it, and the task stays here.
#[test]
fn a_record_that_fails_stops_its_task_only() {
    let (mut m, cmds) = running_with_input(10, S);
    let (_, batch, _) = processes(&cmds)[0].clone();
    let cmds = m.handle(
        Event::RecordFailed {
            task: task(0),
            batch,
        },
        S,
    );
    assert!(processes(&cmds).is_empty());
    assert_eq!(m.tasks()[&task(0)].phase, Phase::Failed);
    assert_eq!(m.tasks()[&task(0)].sources[0].position, Some(0));
    // Within the session timeout: no heartbeat answers come in this test.
    for i in 1..=20 {
        let cmds = m.handle(Event::Tick, S + ms(100 * i));
        assert!(processes(&cmds).is_empty());
        assert!(commit_of(&cmds).is_none(), "nothing processed: {cmds:?}");
        if let Some((_, wants)) = fetch_of(&cmds) {
            assert!(
                wants.iter().all(|w| w.tp != tp("in", 0)),
                "a failed task reads no input: {wants:?}"
            );
        }
    }
    assert_eq!(
        m.report().offset_sums.get(&task(0)),
        Some(&baton_protocol::subscription::RUNNING),
        "it keeps the task, as a running active does"
    );
}

/// With `failed_task_retry`, a failed task is closed and opened again when its retry is due,
/// not before, and restarts from the input it stopped at; the wait doubles per failure.
#[test]
fn a_failed_task_is_tried_again_when_a_retry_is_configured() {
    let (mut m, cmds) = running_with_input(10, S);
    m.cfg.failed_task_retry = Some(2 * S);
    let (_, batch, _) = processes(&cmds)[0].clone();
    m.handle(
        Event::RecordFailed {
            task: task(0),
            batch,
        },
        S,
    );
    assert_eq!(m.tasks()[&task(0)].phase, Phase::Failed);
    let early = m.handle(Event::Tick, S + ms(1900));
    assert!(
        !early.contains(&Command::Close { task: task(0) }),
        "not before its retry: {early:?}"
    );
    let due = m.handle(Event::Tick, 3 * S);
    assert!(
        due.contains(&Command::Close { task: task(0) }),
        "closed to be opened again: {due:?}"
    );
    let t = &m.tasks()[&task(0)];
    assert_eq!(t.phase, Phase::Opening);
    assert_eq!(t.sources[0].position, Some(0), "from where it stopped");
    assert_eq!(failed_task_delay(2 * S, 1), 2 * S);
    assert_eq!(failed_task_delay(2 * S, 3), 8 * S);
    assert_eq!(failed_task_delay(S, 40), FAILED_TASK_RETRY_MAX);
}

/// Without it (the default) a failed task stays failed.
#[test]
fn a_failed_task_stays_failed_without_a_retry() {
    let (mut m, cmds) = running_with_input(10, S);
    let (_, batch, _) = processes(&cmds)[0].clone();
    m.handle(
        Event::RecordFailed {
            task: task(0),
            batch,
        },
        S,
    );
    for i in 1..=8 {
        let cmds = m.handle(Event::Tick, S + i * S);
        assert!(
            !cmds.contains(&Command::Close { task: task(0) }),
            "{cmds:?}"
        );
    }
    assert_eq!(m.tasks()[&task(0)].phase, Phase::Failed);
}

#[test]
fn a_drained_member_leaves_once_it_holds_nothing() {
    let mut m = machine();
    let cmds = m.handle(assigned(1, &[0], &[], &[], Duration::ZERO), Duration::ZERO);
    bring_up(&mut m, cmds, Duration::ZERO);
    let cmds = m.handle(Event::DrainRequested, S);
    assert_eq!(joins(&cmds), ["drain requested"]);
    assert!(m.report().leaving);
    let cmds = m.handle(assigned(2, &[0], &[], &[], 2 * S), 2 * S);
    assert!(!cmds.contains(&Command::Leave), "still holds task 0");
    let cmds = m.handle(assigned(3, &[], &[], &[], 3 * S), 3 * S);
    let tail: Vec<&Command> = cmds.iter().rev().take(2).collect();
    assert_eq!(tail, [&Command::Exit(Exit::Drained), &Command::Leave]);
    assert!(m.handle(Event::Tick, 4 * S).is_empty(), "stopped");
}

#[test]
fn the_probing_timer_rejoins_once() {
    let mut m = machine();
    m.handle(
        Event::Assigned(Assigned {
            generation: 1,
            member_id: "m".into(),
            probe_at: Some(60 * S),
            ..Assigned::default()
        }),
        S,
    );
    let alive = |m: &mut ThreadMachine, at| {
        m.handle(
            Event::Heartbeat {
                answer: Heartbeat::Alive,
                at,
            },
            at,
        )
    };
    alive(&mut m, 55 * S);
    assert!(joins(&m.handle(Event::Tick, 59 * S)).is_empty());
    assert_eq!(joins(&m.handle(Event::Tick, 60 * S)), ["probing rebalance"]);
    m.handle(assigned(2, &[], &[], &[], 60 * S), 60 * S);
    assert!(joins(&m.handle(Event::Tick, 61 * S)).is_empty(), "once");
}

#[test]
fn commits_every_interval_and_on_shutdown_then_leaves() {
    let (mut m, cmds) = running_with_input(5, ms(10));
    let (_, batch, _) = processes(&cmds)[0].clone();
    m.handle(
        Event::BatchDone {
            task: task(0),
            batch,
            changelogs: vec![(0, 0, 5)],
        },
        ms(20),
    );
    let cmds = m.handle(Event::Tick, 2 * S);
    let commit = cmds
        .iter()
        .find_map(|c| match c {
            Command::Commit {
                commit, offsets, ..
            } => Some((*commit, offsets.clone())),
            _ => None,
        })
        .expect("a commit after the interval");
    assert_eq!(commit.1, vec![(tp("in", 0), 5)]);
    m.handle(
        Event::CommitDone {
            commit: commit.0,
            ok: true,
        },
        2 * S,
    );
    assert!(m.tasks()[&task(0)].uncommitted().is_empty());
    let cmds = m.handle(Event::Shutdown, 3 * S);
    assert_eq!(
        cmds,
        vec![
            Command::Close { task: task(0) },
            Command::Leave,
            Command::Exit(Exit::Shutdown)
        ],
        "nothing left to commit"
    );
}

/// A machine whose active `0_0` has processed input up to 10, not committed yet.
fn processed_to_ten() -> ThreadMachine {
    let (mut m, cmds) = running_with_input(10, S);
    let (_, batch, _) = processes(&cmds)[0].clone();
    m.handle(
        Event::BatchDone {
            task: task(0),
            batch,
            changelogs: vec![(0, 0, 10)],
        },
        S,
    );
    m
}

/// A commit command's offsets.
type Offsets = Vec<(TopicPartition, i64)>;

/// The commit among `cmds`: `(id, generation, offsets)`.
fn commit_of(cmds: &[Command]) -> Option<(RequestId, i32, Offsets)> {
    cmds.iter().find_map(|c| match c {
        Command::Commit {
            commit,
            generation,
            offsets,
            ..
        } => Some((*commit, *generation, offsets.clone())),
        _ => None,
    })
}

/// An old owner's last commit refused (a newer generation started): the task stays claimed,
/// so no one else gets it, and the commit is retried with the next generation before release.
#[test]
fn a_refused_revocation_commit_is_retried_before_the_task_is_released() {
    let mut m = processed_to_ten();
    let cmds = m.handle(assigned(2, &[], &[], &[], 2 * S), 2 * S);
    let (commit, generation, _) = commit_of(&cmds).expect("the revocation commit");
    assert_eq!(generation, 2);
    let cmds = m.handle(Event::CommitDone { commit, ok: false }, 2 * S);
    assert_eq!(joins(&cmds), ["released revoked actives"]);
    assert_eq!(m.report().owned, vec![tp("in", 0)], "still claimed");
    let cmds = m.handle(assigned(3, &[], &[], &[], 3 * S), 3 * S);
    let (commit, generation, offsets) = commit_of(&cmds).expect("retried");
    assert_eq!((generation, offsets), (3, vec![(tp("in", 0), 10)]));
    let cmds = m.handle(Event::CommitDone { commit, ok: true }, 3 * S);
    assert_eq!(joins(&cmds), ["released revoked actives"]);
    assert!(m.report().owned.is_empty(), "released");
}

/// A member still committing a revoked active joins only once it is released, as a Kafka
/// consumer finishes revoking before it sends JoinGroup: joining on a "rebalancing" answer or
/// a due probe would claim the task again, and the leader would hold it back from its new
/// owner for one more round (seen on the broker as a 3 s gap, one heartbeat interval).
#[test]
fn a_member_releasing_a_revoked_active_joins_only_once_it_is_released() {
    let mut m = processed_to_ten();
    let Event::Assigned(mut revoke) = assigned(2, &[], &[], &[], 2 * S) else {
        unreachable!()
    };
    revoke.probe_at = Some(2 * S + ms(500));
    let cmds = m.handle(Event::Assigned(revoke), 2 * S);
    let (commit, _, _) = commit_of(&cmds).expect("the revocation commit");
    assert!(joins(&cmds).is_empty(), "{cmds:?}");
    let cmds = m.handle(
        Event::Heartbeat {
            answer: Heartbeat::Rebalancing,
            at: 2 * S + ms(100),
        },
        2 * S + ms(100),
    );
    assert!(joins(&cmds).is_empty(), "not while unreleased: {cmds:?}");
    let cmds = m.handle(Event::Tick, 3 * S);
    assert!(joins(&cmds).is_empty(), "the probe waits too: {cmds:?}");
    assert_eq!(m.report().owned, vec![tp("in", 0)], "still claimed");
    let cmds = m.handle(Event::CommitDone { commit, ok: true }, 3 * S);
    assert_eq!(joins(&cmds), ["released revoked actives"]);
    let report = cmds
        .iter()
        .find_map(|c| match c {
            Command::Join { report, .. } => Some(report.clone()),
            _ => None,
        })
        .expect("a join");
    assert!(
        report.owned.is_empty(),
        "the join claims nothing: {report:?}"
    );
    assert!(
        joins(&m.handle(Event::Tick, 4 * S)).is_empty(),
        "one join serves the probe, the round and the release"
    );
}

/// Found by the schedule fuzzer (seed 500473): an old owner whose revocation commit was
/// refused is forgotten by the coordinator and joins again under a new member id. Generations
/// passed without its claim, so the task may have run elsewhere since: its old position is not
/// committed under the new membership (that moved the new owner's committed offset back, and
/// the records between were never read again).
#[test]
fn positions_held_under_a_forgotten_member_id_are_never_committed() {
    let mut m = processed_to_ten();
    let cmds = m.handle(assigned(2, &[], &[], &[], 2 * S), 2 * S);
    let (commit, _, _) = commit_of(&cmds).expect("the revocation commit");
    m.handle(Event::CommitDone { commit, ok: false }, 2 * S);
    assert_eq!(m.report().owned, vec![tp("in", 0)], "still claimed");
    let Event::Assigned(mut again) = assigned(4, &[], &[], &[], 3 * S) else {
        unreachable!()
    };
    again.member_id = "m-new".into();
    let cmds = m.handle(Event::Assigned(again), 3 * S);
    assert_eq!(commit_of(&cmds), None, "{cmds:?}");
    assert!(m.report().owned.is_empty(), "nothing claimed any more");
}

/// Found by the schedule fuzzer (seed 446824): an active revoked into a standby of the same
/// member, its revocation commit refused, then given back: it resumes where it had got to, not
/// at the committed offset, which would repeat output already acknowledged.
#[test]
fn a_task_given_back_after_a_refused_commit_resumes_where_it_was() {
    let mut m = processed_to_ten();
    // Revoked, kept as a standby; the commit of its position 10 is refused.
    let cmds = m.handle(assigned(2, &[], &[0], &[], 2 * S), 2 * S);
    let (commit, _, _) = commit_of(&cmds).expect("the revocation commit");
    m.handle(Event::CommitDone { commit, ok: false }, 2 * S);
    // Given back.
    m.handle(assigned(3, &[0], &[], &[], 3 * S), 3 * S);
    let t = &m.tasks()[&task(0)];
    assert_eq!(t.role, Role::Active);
    assert_eq!(
        t.sources[0].position,
        Some(10),
        "resumes at its own position, past the committed 0"
    );
}

/// An active opened at checkpoint 500 whose changelog turns out to end at 20 (made again,
/// or its broker lost its data): the commands after that fetch.
fn active_behind_its_changelog(m: &mut ThreadMachine) -> Vec<Command> {
    opened_behind(m, assigned(1, &[0], &[], &[], S), "app-counts-changelog")
}

/// Starts `m`, gives it `assignment`, and opens task 0's stores at `checkpoints`: the
/// commands after the open.
fn open_task0(m: &mut ThreadMachine, assignment: Event, checkpoints: Vec<i64>) -> Vec<Command> {
    m.start();
    m.handle(assignment, S);
    m.handle(
        Event::Opened {
            task: task(0),
            checkpoints,
        },
        S,
    )
}

/// Task 0, given by `assignment`, opened at checkpoint 500, and its changelog `changelog`
/// found to end at 20: the commands after that fetch.
fn opened_behind(m: &mut ThreadMachine, assignment: Event, changelog: &str) -> Vec<Command> {
    let cmds = open_task0(m, assignment, vec![500]);
    let (f, _) = fetch_of(&cmds).unwrap();
    m.handle(
        Event::Fetched {
            fetch: f,
            results: vec![FetchResult {
                tp: tp(changelog, 0),
                from: 500,
                next: 500,
                high_watermark: Some(20),
            }],
        },
        S,
    )
}

fn reseed_of(cmds: &[Command]) -> Option<(RequestId, Vec<usize>)> {
    cmds.iter().find_map(|c| match c {
        Command::Reseed {
            request,
            changelogs,
            ..
        } => Some((*request, changelogs.clone())),
        _ => None,
    })
}

/// The group lost the task's committed positions too (a broker that lost everything): the
/// input is read again from its start, so the store is rebuilt rather than counted twice.
#[test]
fn a_checkpoint_past_the_changelogs_end_with_nothing_committed_gets_the_store_rebuilt() {
    let mut m = machine();
    let cmds = active_behind_its_changelog(&mut m);
    assert!(
        cmds.contains(&Command::ReadCommitted { task: task(0) }),
        "the committed positions decide: {cmds:?}"
    );
    assert!(
        !cmds.iter().any(|c| matches!(c, Command::Absorb { .. })),
        "nothing of the changelog is absorbed"
    );
    assert!(fetch_of(&cmds).is_none(), "no fetch while deciding");
    let cmds = m.handle(
        Event::CommittedRead {
            task: task(0),
            offsets: vec![None],
        },
        S,
    );
    assert!(
        cmds.iter()
            .any(|c| matches!(c, Command::Discard { task: t, .. } if *t == task(0))),
        "{cmds:?}"
    );
    assert!(cmds.contains(&Command::Close { task: task(0) }));
    assert!(reseed_of(&cmds).is_none());
    // After the backoff the task opens again (empty) and restores from 0.
    let cmds = m.handle(Event::Tick, S + ms(300));
    assert!(cmds.contains(&Command::Open {
        task: task(0),
        role: Role::Active
    }));
    let cmds = m.handle(
        Event::Opened {
            task: task(0),
            checkpoints: vec![0],
        },
        S + ms(300),
    );
    assert_eq!(fetch_of(&cmds).unwrap().1[0].offset, 0);
}

/// The changelog was deleted and made again while the store and the group's positions are
/// intact: the store, the newer of the two, is written into the changelog, and the task goes
/// on from there; it never rebuilds from the younger changelog.
#[test]
fn a_checkpoint_past_the_changelogs_end_with_positions_committed_reseeds_it() {
    let mut m = machine();
    active_behind_its_changelog(&mut m);
    let cmds = m.handle(
        Event::CommittedRead {
            task: task(0),
            offsets: vec![Some(300)],
        },
        S,
    );
    assert!(!cmds.iter().any(|c| matches!(c, Command::Discard { .. })));
    let (request, changelogs) = reseed_of(&cmds).expect("the store is written into it");
    assert_eq!(changelogs, [0]);
    assert!(fetch_of(&cmds).is_none(), "no fetch while writing");
    assert_eq!(m.tasks()[&task(0)].phase, Phase::Restoring);
    // Failed: tried again, whole, after the backoff; not before.
    let cmds = m.handle(
        Event::ReseedFailed {
            task: task(0),
            request,
        },
        S,
    );
    assert!(reseed_of(&cmds).is_none());
    let cmds = m.handle(Event::Tick, S + ms(100));
    assert!(reseed_of(&cmds).is_none(), "waits out the backoff");
    let cmds = m.handle(Event::Tick, S + ms(300));
    let (request, changelogs) = reseed_of(&cmds).expect("tried again");
    assert_eq!(changelogs, [0]);
    // A late answer to the first attempt changes nothing.
    let cmds = m.handle(
        Event::Reseeded {
            task: task(0),
            request: RequestId(request.0 - 1),
            ends: vec![(0, 999)],
        },
        S + ms(300),
    );
    assert!(!cmds.contains(&Command::ReadCommitted { task: task(0) }));
    // Written: the changelog ends at 20 + 480 records, which the store holds.
    let cmds = m.handle(
        Event::Reseeded {
            task: task(0),
            request,
            ends: vec![(0, 500)],
        },
        S + ms(400),
    );
    let t = &m.tasks()[&task(0)];
    assert_eq!(t.changelogs[0].stored, 500);
    assert_eq!(t.offset_sum(), 500);
    assert!(
        cmds.contains(&Command::ReadCommitted { task: task(0) }),
        "restored: it starts running: {cmds:?}"
    );
    let cmds = m.handle(
        Event::CommittedRead {
            task: task(0),
            offsets: vec![Some(300)],
        },
        S + ms(400),
    );
    assert_eq!(m.tasks()[&task(0)].phase, Phase::Running);
    let (_, wants) = fetch_of(&cmds).expect("its input");
    assert_eq!(wants[0].tp, tp("in", 0));
    assert_eq!(wants[0].offset, 300, "from the committed position");
}

/// A broker that answers a fetch past the end with OFFSET_OUT_OF_RANGE: the same decision.
#[test]
fn an_out_of_range_changelog_is_decided_the_same_way() {
    let mut m = machine();
    open_task0(&mut m, assigned(1, &[0], &[], &[], S), vec![500]);
    let stale = m.handle(
        Event::ChangelogOutOfRange {
            task: task(0),
            changelog: 0,
            offset: 400,
        },
        S,
    );
    assert!(stale.is_empty(), "about another position: {stale:?}");
    let cmds = m.handle(
        Event::ChangelogOutOfRange {
            task: task(0),
            changelog: 0,
            offset: 500,
        },
        S,
    );
    assert!(cmds.contains(&Command::ReadCommitted { task: task(0) }));
}

/// A standby is a copy: its changelog found behind gets it rebuilt, from what the active
/// writes into it.
#[test]
fn a_standby_behind_its_changelog_is_rebuilt() {
    let mut m = machine();
    let cmds = opened_behind(
        &mut m,
        assigned(1, &[], &[0], &[], S),
        "app-counts-changelog",
    );
    assert!(
        cmds.iter().any(|c| matches!(c, Command::Discard { .. })),
        "{cmds:?}"
    );
    assert!(!cmds.contains(&Command::ReadCommitted { task: task(0) }));
}

/// The changelog made again under a running active: the batch's writes land before the
/// store's checkpoint. The store is written into the new changelog before any more input.
#[test]
fn a_changelog_made_again_under_a_running_task_is_reseeded() {
    let (mut m, cmds) = running_with_input(10, S);
    let (_, batch, _) = processes(&cmds)[0].clone();
    let (f, wants) = fetch_of(&cmds).expect("the next input, asked as the batch starts");
    assert_eq!(wants[0].offset, 10, "from the batch's end");
    let cmds = m.handle(
        Event::BatchDone {
            task: task(0),
            batch,
            changelogs: vec![(0, 0, 10)],
        },
        S,
    );
    assert!(
        reseed_of(&cmds).is_none(),
        "a changelog that grew: {cmds:?}"
    );
    let cmds = m.handle(input_answer(f, 10, 15), S);
    let (_, batch, _) = processes(&cmds)[0].clone();
    let (in_flight, wants) = fetch_of(&cmds).expect("the next input, asked as the batch starts");
    assert_eq!(wants[0].offset, 15);
    // Its writes landed at 0..3 of a new changelog, where the store holds 10.
    let cmds = m.handle(
        Event::BatchDone {
            task: task(0),
            batch,
            changelogs: vec![(0, 0, 3)],
        },
        S,
    );
    let (request, changelogs) = reseed_of(&cmds).expect("written again: {cmds:?}");
    assert_eq!(changelogs, [0]);
    assert!(fetch_of(&cmds).is_none(), "no input until written");
    // The answer to the fetch sent before is not used while the store is written.
    let answered = m.handle(input_answer(in_flight, 15, 20), S);
    assert!(processes(&answered).is_empty(), "{answered:?}");
    assert!(fetch_of(&answered).is_none(), "no input until written");
    assert!(processes(&m.handle(Event::Tick, S + ms(100))).is_empty());
    // Its positions are not committed while the changelog lacks their state.
    assert!(commit_of(&m.handle(Event::Tick, 5 * S)).is_none());
    let cmds = m.handle(
        Event::Reseeded {
            task: task(0),
            request,
            ends: vec![(0, 9)],
        },
        5 * S,
    );
    assert_eq!(m.tasks()[&task(0)].changelogs[0].stored, 9);
    let (_, wants) = fetch_of(&cmds).expect("input again");
    assert_eq!(wants[0].offset, 15, "where it stopped");
}

/// The next fetch goes as a batch starts, asking from the batch's end. Its answer is used
/// only once the batch is done: not while it runs, not after it failed (the retry reads the
/// batch's input again, from its start, after the pause).
#[test]
fn the_next_fetch_goes_beside_a_batch_and_serves_only_after_it() {
    let (mut m, cmds) = running_with_input(10, S);
    let (_, batch, _) = processes(&cmds)[0].clone();
    let (f, wants) = fetch_of(&cmds).expect("asked as the batch starts");
    assert_eq!(wants[0].offset, 10, "from the batch's end");
    let early = m.handle(input_answer(f, 10, 15), S);
    assert!(
        processes(&early).is_empty(),
        "the batch still runs: {early:?}"
    );
    let (f, wants) = fetch_of(&early).expect("asked again");
    assert_eq!(wants[0].offset, 10);
    m.handle(
        Event::BatchFailed {
            task: task(0),
            batch,
            output_acknowledged: false,
        },
        S,
    );
    let after_failure = m.handle(input_answer(f, 10, 15), S);
    assert!(processes(&after_failure).is_empty(), "{after_failure:?}");
    assert!(fetch_of(&after_failure).is_none(), "not before the pause");
    let retry = m.handle(Event::Tick, S + ms(300));
    let (f, wants) = fetch_of(&retry).expect("after the pause");
    assert_eq!(wants[0].offset, 0, "the failed batch's input again");
    let again = m.handle(input_answer(f, 0, 15), S + ms(300));
    let (_, _, inputs) = processes(&again).first().cloned().expect("a batch");
    assert_eq!((inputs[0].from, inputs[0].to), (0, 15));
}

/// A task waiting to retry a failed batch uses no answer meanwhile, not even for a source the
/// failed batch did not read (the answer was asked for before it failed): its input runs again
/// after the pause, in order.
#[test]
fn a_task_waiting_to_retry_uses_no_answer_asked_for_before_its_batch_failed() {
    let (mut m, cmds) = running_with_input(10, S);
    let (_, batch, _) = processes(&cmds)[0].clone();
    let (f, _) = fetch_of(&cmds).expect("asked as the batch starts");
    m.tasks
        .get_mut(&task(0))
        .expect("held")
        .sources
        .push(SourceCursor {
            tp: tp("side", 0),
            position: Some(0),
            committed: None,
            resetting: false,
            made_again: false,
        });
    m.handle(
        Event::BatchFailed {
            task: task(0),
            batch,
            output_acknowledged: false,
        },
        S,
    );
    let result = |topic, from, next| FetchResult {
        tp: tp(topic, 0),
        from,
        next,
        high_watermark: Some(next),
    };
    let results = vec![result("in", 10, 15), result("side", 0, 5)];
    let answered = m.handle(Event::Fetched { fetch: f, results }, S);
    assert!(processes(&answered).is_empty(), "{answered:?}");
}

/// Without `fetch_beside_batches` (the simulator's model of a thread) no fetch goes while a
/// batch of input runs; the next goes once it is done.
#[test]
fn without_fetches_beside_batches_none_goes_while_a_batch_runs() {
    let mut m = machine();
    m.cfg.fetch_beside_batches = false;
    let cmds = m.handle(assigned(1, &[0], &[], &[], Duration::ZERO), Duration::ZERO);
    let fetch = bring_up(&mut m, cmds, Duration::ZERO);
    let cmds = m.handle(input_answer(fetch, 0, 10), S);
    let (_, batch, _) = processes(&cmds)[0].clone();
    assert!(fetch_of(&cmds).is_none(), "{cmds:?}");
    assert!(fetch_of(&m.handle(Event::Tick, S)).is_none());
    let done = m.handle(
        Event::BatchDone {
            task: task(0),
            batch,
            changelogs: vec![(0, 0, 10)],
        },
        S,
    );
    let (_, wants) = fetch_of(&done).expect("once the batch is done");
    assert_eq!(wants[0].offset, 10);
}

/// The driver's periodic check finds the changelog of a running active made again while no
/// input comes: the store is written into it now, before any more input, not when the next
/// batch finds it (perhaps after the task moved). An active that holds nothing yet has
/// nothing to write.
#[test]
fn an_idle_running_active_whose_changelog_was_made_again_writes_its_store_into_it() {
    let (mut m, cmds) = running_with_input(10, S);
    let recreated = Event::ChangelogRecreated {
        task: task(0),
        changelog: 0,
    };
    assert!(
        reseed_of(&m.handle(recreated.clone(), S)).is_none(),
        "holds nothing"
    );
    let (_, batch, _) = processes(&cmds)[0].clone();
    m.handle(
        Event::BatchDone {
            task: task(0),
            batch,
            changelogs: vec![(0, 0, 10)],
        },
        S,
    );
    let cmds = m.handle(recreated.clone(), 2 * S);
    let (request, changelogs) = reseed_of(&cmds).expect("written at once: {cmds:?}");
    assert_eq!(changelogs, [0]);
    assert!(reseed_of(&m.handle(recreated, 2 * S)).is_none(), "once");
    assert!(
        commit_of(&m.handle(Event::Tick, 5 * S)).is_none(),
        "no commit meanwhile"
    );
    m.handle(
        Event::Reseeded {
            task: task(0),
            request,
            ends: vec![(0, 4)],
        },
        5 * S,
    );
    assert_eq!(m.tasks()[&task(0)].changelogs[0].stored, 4);
}

/// A task of two stores opened on checkpoints of changelogs since deleted and made again
/// (the driver compares the ids the stores recorded): both are written into the new topics,
/// in one re-seed, after one read of the committed positions.
#[test]
fn stores_from_older_changelogs_are_written_into_the_new_ones() {
    let mut wire = topology();
    if let Some(s) = wire.subtopologies.get_mut(&0) {
        s.changelog_topics.push("app-totals-changelog".into());
    }
    let mut m = ThreadMachine::new(machine().cfg.clone(), wire, Duration::ZERO);
    open_task0(&mut m, assigned(1, &[0], &[], &[], S), vec![40, 7]);
    let recreated = |changelog| Event::ChangelogRecreated {
        task: task(0),
        changelog,
    };
    let cmds = m.handle(recreated(0), S);
    assert!(
        cmds.contains(&Command::ReadCommitted { task: task(0) }),
        "{cmds:?}"
    );
    let cmds = m.handle(recreated(1), S);
    assert!(
        !cmds.contains(&Command::ReadCommitted { task: task(0) }),
        "asked once"
    );
    let cmds = m.handle(
        Event::CommittedRead {
            task: task(0),
            offsets: vec![Some(12)],
        },
        S,
    );
    let (_, changelogs) = reseed_of(&cmds).expect("written again: {cmds:?}");
    assert_eq!(changelogs, [0, 1]);
}

/// A standby whose store took nothing yet from a changelog made again starts again on the
/// new one: nothing to keep, and nothing of the old one read before is applied.
#[test]
fn a_copy_that_took_nothing_from_a_recreated_changelog_starts_again() {
    let mut m = machine();
    open_task0(&mut m, assigned(1, &[], &[0], &[], S), vec![0]);
    let cmds = m.handle(
        Event::ChangelogRecreated {
            task: task(0),
            changelog: 0,
        },
        S,
    );
    assert!(
        cmds.iter().any(|c| matches!(c, Command::Discard { .. })),
        "{cmds:?}"
    );
    assert_eq!(m.tasks()[&task(0)].phase, Phase::Opening);
}

/// A table read from its own source topic: that topic is its changelog, and a user's topic
/// is never written. Found behind (the topic was made again), the store is rebuilt.
#[test]
fn a_source_table_behind_its_topic_is_rebuilt_not_written() {
    let mut m = ThreadMachine::new(
        machine().cfg.clone(),
        WireTopology {
            subtopologies: BTreeMap::from([(
                0,
                Subtopology {
                    source_topics: vec!["table".into()],
                    changelog_topics: vec!["table".into()],
                    partitions: 4,
                },
            )]),
        },
        Duration::ZERO,
    );
    let cmds = opened_behind(&mut m, assigned(1, &[0], &[], &[], S), "table");
    assert!(
        cmds.iter().any(|c| matches!(c, Command::Discard { .. })),
        "{cmds:?}"
    );
    assert!(reseed_of(&cmds).is_none());
}

/// A heartbeat sent during a join round carries the old generation; the coordinator may
/// answer it "fenced" (ILLEGAL_GENERATION). Arriving after the new assignment, that answer is
/// about a generation already left: ignored. A fenced answer to a later heartbeat is not.
#[test]
fn a_fenced_answer_to_a_heartbeat_from_before_the_assignment_is_stale() {
    let mut m = machine();
    let cmds = m.handle(assigned(1, &[0], &[], &[], Duration::ZERO), Duration::ZERO);
    bring_up(&mut m, cmds, Duration::ZERO);
    let cmds = m.handle(
        Event::Heartbeat {
            answer: Heartbeat::Rebalancing,
            at: S,
        },
        S,
    );
    assert_eq!(joins(&cmds), ["the group is rebalancing"]);
    // The round: a heartbeat at 2 s (old generation), the assignment taken in at 3 s, and
    // that heartbeat's answer after it.
    m.handle(assigned(2, &[0], &[], &[], 2 * S + ms(500)), 3 * S);
    let cmds = m.handle(
        Event::Heartbeat {
            answer: Heartbeat::Fenced,
            at: 2 * S,
        },
        3 * S + ms(10),
    );
    assert!(joins(&cmds).is_empty(), "stale: {cmds:?}");
    assert!(
        !cmds.contains(&Command::Close { task: task(0) }),
        "the active is kept"
    );
    // A heartbeat of the new generation answered "fenced": the membership is gone.
    let cmds = m.handle(
        Event::Heartbeat {
            answer: Heartbeat::Fenced,
            at: 4 * S,
        },
        4 * S,
    );
    assert_eq!(joins(&cmds), ["the coordinator fenced this member"]);
}

/// A heartbeat sent during a join round may be answered "rebalancing" about that very round,
/// the answer arriving after the assignment: rejoining on it would start a new round, and
/// the same again next round (seen live as a storm of rounds with nothing moving). Only a
/// heartbeat sent after the assignment may start a round.
#[test]
fn a_rebalancing_answer_to_a_heartbeat_from_before_the_assignment_is_stale() {
    let mut m = machine();
    let cmds = m.handle(assigned(1, &[0], &[], &[], Duration::ZERO), Duration::ZERO);
    bring_up(&mut m, cmds, Duration::ZERO);
    m.handle(
        Event::Heartbeat {
            answer: Heartbeat::Rebalancing,
            at: S,
        },
        S,
    );
    m.handle(assigned(2, &[0], &[], &[], 2 * S + ms(500)), 3 * S);
    let cmds = m.handle(
        Event::Heartbeat {
            answer: Heartbeat::Rebalancing,
            at: 2 * S,
        },
        3 * S + ms(10),
    );
    assert!(joins(&cmds).is_empty(), "stale: {cmds:?}");
    let cmds = m.handle(
        Event::Heartbeat {
            answer: Heartbeat::Rebalancing,
            at: 3 * S + ms(300),
        },
        3 * S + ms(300),
    );
    assert_eq!(joins(&cmds), ["the group is rebalancing"]);
}

/// A cancelled drain: the thread rejoins as staying and keeps what it holds; an assignment
/// that leaves it nothing later does not make it exit.
#[test]
fn a_cancelled_drain_rejoins_as_staying() {
    let mut m = machine();
    let cmds = m.handle(
        assigned(1, &[0, 1], &[], &[], Duration::ZERO),
        Duration::ZERO,
    );
    bring_up(&mut m, cmds, Duration::ZERO);
    m.handle(Event::DrainRequested, S);
    m.handle(assigned(2, &[0, 1], &[], &[], 2 * S), 2 * S);
    assert!(m.report().leaving);
    let cmds = m.handle(Event::DrainCancelled, 3 * S);
    assert_eq!(joins(&cmds), ["drain cancelled"]);
    assert!(!m.report().leaving, "the next subscription says it stays");
    let cmds = m.handle(assigned(3, &[], &[], &[], 4 * S), 4 * S);
    assert!(!cmds.contains(&Command::Exit(Exit::Drained)), "{cmds:?}");
    assert!(!cmds.contains(&Command::Leave));
    // A second cancel, with nothing to take back, does nothing.
    assert!(joins(&m.handle(Event::DrainCancelled, 5 * S)).is_empty());
}

/// `stable` rejoin: a thread with two warm-ups rejoins once both have caught up, not at the
/// first; `eager` at the first.
#[test]
fn a_stable_rejoin_waits_for_every_warm_up() {
    for (mode, after_first) in [
        (baton_assignor::RejoinMode::Stable, 0),
        (baton_assignor::RejoinMode::Eager, 1),
    ] {
        let mut m = machine_with(mode);
        m.handle(assigned(1, &[], &[], &[2, 3], S), S);
        let mut fetches = Vec::new();
        for p in [2, 3] {
            let cmds = m.handle(
                Event::Opened {
                    task: task(p),
                    checkpoints: vec![0],
                },
                S,
            );
            fetches.extend(fetch_of(&cmds));
        }
        // Both changelogs end at 1000: the machine learns it from fetch answers.
        let mut answered = 0;
        while answered < 2 {
            let (f, wants) = fetches.pop().expect("a fetch for the warm-ups");
            let results: Vec<FetchResult> = wants
                .iter()
                .map(|w| FetchResult {
                    tp: w.tp.clone(),
                    from: 0,
                    next: 1000,
                    high_watermark: Some(1000),
                })
                .collect();
            answered += results.len();
            let cmds = m.handle(Event::Fetched { fetch: f, results }, S);
            fetches.extend(fetch_of(&cmds));
        }
        let caught_up = |m: &mut ThreadMachine, p: u32| {
            m.handle(
                Event::Absorbed {
                    task: task(p),
                    changelog: 0,
                    stored: 1000,
                    loading: false,
                },
                S,
            )
        };
        let first = caught_up(&mut m, 2);
        assert_eq!(
            joins(&first).len(),
            after_first,
            "{mode:?} after one: {first:?}"
        );
        let second = caught_up(&mut m, 3);
        if after_first == 0 {
            assert_eq!(joins(&second), ["every warm-up caught up"]);
        }
    }
}

/// A warm-up that catches up while a join is under way: that join said it was behind, so the
/// leader cannot hand over yet. It asks once the round has ended, rather than never (then the
/// hand-over waited for the probing rebalance, ten minutes in the simulator's drains).
#[test]
fn a_warm_up_that_catches_up_during_a_join_asks_once_the_round_ends() {
    let (mut m, f) = warming_up();
    m.handle(
        Event::Fetched {
            fetch: f,
            results: vec![FetchResult {
                tp: tp("app-counts-changelog", 2),
                from: 0,
                next: 1000,
                high_watermark: Some(1000),
            }],
        },
        S,
    );
    let cmds = m.handle(
        Event::Heartbeat {
            answer: Heartbeat::Rebalancing,
            at: 2 * S,
        },
        2 * S,
    );
    assert_eq!(
        joins(&cmds),
        ["the group is rebalancing"],
        "behind at the join"
    );
    let cmds = m.handle(
        Event::Absorbed {
            task: task(2),
            changelog: 0,
            stored: 1000,
            loading: false,
        },
        2 * S,
    );
    assert!(joins(&cmds).is_empty(), "a join is under way: {cmds:?}");
    let cmds = m.handle(assigned(2, &[], &[], &[2], 3 * S), 3 * S);
    assert_eq!(joins(&cmds), ["a warm-up caught up"]);
    let cmds = m.handle(assigned(3, &[], &[], &[2], 4 * S), 4 * S);
    assert!(joins(&cmds).is_empty(), "asked once: {cmds:?}");
}

/// A machine restoring active task 0 from checkpoint 40, and the ListEnds it sent for it.
fn restoring_from_40() -> (ThreadMachine, RequestId, Vec<TopicPartition>) {
    let mut m = machine();
    m.start();
    m.handle(assigned(1, &[0], &[], &[], S), S);
    let mut cmds = m.handle(
        Event::Opened {
            task: task(0),
            checkpoints: vec![40],
        },
        S,
    );
    cmds.extend(m.handle(Event::Tick, S));
    let (request, changelogs) = cmds
        .iter()
        .find_map(|c| match c {
            Command::ListEnds {
                task: t,
                request,
                changelogs,
            } if *t == task(0) => Some((*request, changelogs.clone())),
            _ => None,
        })
        .expect("a restoring active asks where its changelogs end");
    (m, request, changelogs)
}

/// A promoted warm-up often holds its whole changelog: it learns so from the changelog's end
/// (one ListOffsets) and goes on to its committed offset, without waiting out a fetch that
/// finds nothing. An answer from before the task was reassigned is ignored.
#[test]
fn a_restoring_active_that_holds_everything_learns_it_from_the_changelog_end() {
    let (mut m, request, changelogs) = restoring_from_40();
    assert_eq!(changelogs, [tp("app-counts-changelog", 0)]);
    assert!(
        !m.handle(Event::Tick, S)
            .iter()
            .any(|c| matches!(c, Command::ListEnds { .. })),
        "asked once"
    );
    let cmds = m.handle(
        Event::EndsListed {
            task: task(0),
            request,
            ends: vec![40],
        },
        S,
    );
    assert!(
        cmds.contains(&Command::ReadCommitted { task: task(0) }),
        "restored: {cmds:?}"
    );

    // The same answer to a task given up and taken again is stale.
    let (mut m, stale, _) = restoring_from_40();
    m.handle(assigned(2, &[], &[], &[], S), S);
    m.handle(assigned(3, &[0], &[], &[], S), S);
    m.handle(
        Event::Opened {
            task: task(0),
            checkpoints: vec![40],
        },
        S,
    );
    assert_eq!(m.tasks()[&task(0)].phase, Phase::Restoring);
    let cmds = m.handle(
        Event::EndsListed {
            task: task(0),
            request: stale,
            ends: vec![40],
        },
        S,
    );
    assert!(
        !cmds.contains(&Command::ReadCommitted { task: task(0) }),
        "a stale end restores nothing: {cmds:?}"
    );
}

/// Restore yields to the actives beside it: a broker fills a fetch's answer in the order
/// asked, with at least one whole batch however large, so a changelog asked first can leave
/// the input out of every answer; and a smaller chunk gets the loop back to the input sooner.
#[test]
fn beside_a_running_active_a_restore_is_asked_after_the_input_and_in_smaller_chunks() {
    let changelog = tp("app-counts-changelog", 0);
    let mut m = machine();
    m.cfg.restore_fetch_bytes = 4 << 20;
    m.cfg.restore_fetch_bytes_beside_actives = 1 << 20;
    // The warm-up (task 0) sorts before the active (task 3).
    let cmds = m.handle(assigned(1, &[3], &[], &[0], Duration::ZERO), Duration::ZERO);
    let fetch = bring_up(&mut m, cmds, Duration::ZERO);
    // The warm-up's changelog turns out to be far longer than its store.
    let cmds = m.handle(
        Event::Fetched {
            fetch,
            results: vec![
                FetchResult {
                    tp: changelog.clone(),
                    from: 0,
                    next: 0,
                    high_watermark: Some(1_000_000),
                },
                FetchResult {
                    tp: tp("in", 3),
                    from: 0,
                    next: 0,
                    high_watermark: Some(0),
                },
            ],
        },
        S,
    );
    let (_, wants) = fetch_of(&cmds).expect("a next fetch");
    let order: Vec<&str> = wants.iter().map(|w| w.tp.topic.as_str()).collect();
    assert_eq!(order, ["in", "app-counts-changelog"], "input first");
    assert_eq!(wants[1].tp, changelog);
    assert_eq!(
        wants[1].max_bytes,
        1 << 20,
        "the smaller chunk beside an active"
    );

    // A warm-up alone on its thread takes whole chunks.
    let (mut m, f) = warming_up();
    m.cfg.restore_fetch_bytes = 4 << 20;
    let cmds = m.handle(
        Event::Fetched {
            fetch: f,
            results: vec![FetchResult {
                tp: tp("app-counts-changelog", 2),
                from: 0,
                next: 0,
                high_watermark: Some(1_000_000),
            }],
        },
        S,
    );
    let (_, wants) = fetch_of(&cmds).expect("a next fetch");
    assert_eq!(wants.len(), 1);
    assert_eq!(wants[0].max_bytes, 4 << 20);
}

/// Task 0's only source has no offset `offset`.
fn gone(offset: i64) -> Event {
    Event::SourceOutOfRange {
        task: task(0),
        source: 0,
        offset,
    }
}

/// Task 0's only source, asked about at `offset`, spans `earliest..=latest`.
fn listed(offset: i64, earliest: i64, latest: i64) -> Event {
    Event::SourceOffsetsListed {
        task: task(0),
        source: 0,
        offset,
        earliest,
        latest,
    }
}

fn source_resets(cmds: &[Command]) -> Vec<(i64, Option<i64>)> {
    cmds.iter()
        .filter_map(|c| match c {
            Command::SourceReset { from, to, .. } => Some((*from, *to)),
            _ => None,
        })
        .collect()
}

/// The input topic was deleted and made again under a running active at position 10: the
/// fetch finds no offset 10, the partition's start and end are listed once, and the task reads
/// the new topic from its start (`auto.offset.reset=earliest`), said once. Until then no
/// fetch asks for the gone position; a stale or racing answer changes nothing.
#[test]
fn an_input_position_that_is_gone_moves_to_the_partitions_start_once() {
    let mut m = processed_to_ten();
    let out_of_range = gone(10);
    let cmds = m.handle(out_of_range.clone(), S * 2);
    let lists: Vec<_> = cmds
        .iter()
        .filter(|c| matches!(c, Command::ListSourceOffsets { offset: 10, .. }))
        .collect();
    assert_eq!(lists.len(), 1, "{cmds:?}");
    assert!(
        fetch_of(&cmds).is_none_or(|(_, w)| w.iter().all(|w| w.tp != tp("in", 0))),
        "no fetch of the gone position while it is listed: {cmds:?}"
    );
    // A second out-of-range answer while listing asks nothing more.
    let again = m.handle(out_of_range, S * 2);
    assert!(!again
        .iter()
        .any(|c| matches!(c, Command::ListSourceOffsets { .. })));
    // A topic that grew past 10 meanwhile: the position stands.
    let grown = m.handle(listed(10, 0, 12), S * 2);
    assert!(source_resets(&grown).is_empty());
    assert_eq!(m.tasks()[&task(0)].sources[0].position, Some(10));
    // Gone for real: from the new topic's start.
    m.handle(gone(10), S * 3);
    let reset = m.handle(listed(10, 0, 3), S * 3);
    assert_eq!(source_resets(&reset), [(10, Some(0))]);
    assert_eq!(m.tasks()[&task(0)].sources[0].position, Some(0));
    // A late answer about the old position is stale now.
    let stale = m.handle(listed(10, 5, 6), S * 3);
    assert!(source_resets(&stale).is_empty());
    assert_eq!(m.tasks()[&task(0)].sources[0].position, Some(0));
}

#[test]
fn with_no_offset_reset_a_gone_position_stops_its_task_only() {
    let mut m = processed_to_ten();
    m.cfg.auto_offset_reset = crate::config::OffsetReset::None;
    m.handle(gone(10), S * 2);
    let cmds = m.handle(listed(10, 0, 3), S * 2);
    assert_eq!(source_resets(&cmds), [(10, None)]);
    assert_eq!(m.tasks()[&task(0)].phase, Phase::Failed);
    assert_eq!(m.tasks()[&task(0)].sources[0].position, Some(10));
}

/// A task that starts running commits as soon as a batch reaches its input's end, not a
/// whole commit interval later; after that, only when it caught up with a backlog (a batch
/// that fell short of the end), and never twice within EARLY_COMMIT_GAP.
#[test]
fn a_task_commits_once_it_has_caught_up_after_taking_over_or_a_backlog() {
    let (mut m, cmds) = running_with_input(10, S);
    let (_, batch, _) = processes(&cmds)[0].clone();
    let done = m.handle(
        Event::BatchDone {
            task: task(0),
            batch,
            changelogs: vec![(0, 0, 10)],
        },
        S * 2,
    );
    let (commit, _, offsets) = commit_of(&done).expect("an early commit after taking over");
    assert_eq!(offsets, vec![(tp("in", 0), 10)]);
    // The next fetch went out as the batch started.
    let mut pending = cmds.clone();
    pending.extend(done.clone());
    pending.extend(m.handle(Event::CommitDone { commit, ok: true }, S * 2));
    // The next fetch (already asked, or asked now) brings `from..next` of an end at `hw`.
    let mut fetch_and_process = |m: &mut ThreadMachine, from: i64, next: i64, hw: i64, at| {
        let mut cmds = std::mem::take(&mut pending);
        cmds.extend(m.handle(Event::Tick, at));
        let (fetch, _) = fetch_of(&cmds).expect("a fetch");
        let cmds = m.handle(
            Event::Fetched {
                fetch,
                results: vec![FetchResult {
                    tp: tp("in", 0),
                    from,
                    next,
                    high_watermark: Some(hw),
                }],
            },
            at,
        );
        let (_, batch, _) = processes(&cmds).first().cloned().expect("a batch");
        let asked = cmds.clone();
        let out = m.handle(
            Event::BatchDone {
                task: task(0),
                batch,
                changelogs: vec![(0, from, next)],
            },
            at,
        );
        pending = asked;
        pending.extend(out.clone());
        out
    };
    let behind = fetch_and_process(&mut m, 10, 40, 100, S * 3);
    assert!(commit_of(&behind).is_none(), "behind: no early commit");
    let caught = fetch_and_process(&mut m, 40, 100, 100, S * 3 + ms(200));
    assert!(
        commit_of(&caught).is_none(),
        "within EARLY_COMMIT_GAP of the last commit: not yet"
    );
    let later = m.handle(Event::Tick, S * 4 + ms(100));
    let (_, _, offsets) = commit_of(&later).expect("the caught-up commit, once the gap passed");
    assert_eq!(offsets, vec![(tp("in", 0), 100)]);
}

/// A fetch that fails whole (the topic gone, no leader) is asked again after a growing pause,
/// not at once; one that succeeds resets the pause.
#[test]
fn failed_fetches_back_off_and_a_good_one_resets_the_backoff() {
    let mut m = machine();
    let cmds = m.handle(assigned(1, &[0], &[], &[], Duration::ZERO), Duration::ZERO);
    let fetch = bring_up(&mut m, cmds, Duration::ZERO);
    let after_fail = m.handle(Event::FetchFailed { fetch }, S);
    assert!(fetch_of(&after_fail).is_none(), "not at once");
    let soon = m.handle(Event::Tick, S + FETCH_BACKOFF.delay(1));
    let (second, _) = fetch_of(&soon).expect("after the first pause");
    m.handle(Event::FetchFailed { fetch: second }, S * 2);
    assert!(fetch_of(&m.handle(Event::Tick, S * 2 + FETCH_BACKOFF.delay(1))).is_none());
    let (third, wants) = fetch_of(&m.handle(Event::Tick, S * 2 + FETCH_BACKOFF.delay(2)))
        .expect("after the doubled pause");
    let results = wants
        .iter()
        .map(|w| FetchResult {
            tp: w.tp.clone(),
            from: w.offset,
            next: w.offset,
            high_watermark: Some(w.offset),
        })
        .collect();
    let ok = m.handle(
        Event::Fetched {
            fetch: third,
            results,
        },
        S * 3,
    );
    let next = if fetch_of(&ok).is_some() {
        ok
    } else {
        m.handle(Event::Tick, S * 3)
    };
    assert!(fetch_of(&next).is_some(), "a good fetch resets the pause");
}

/// A sub-topology with a wall-clock punctuation: each running active gets a punctuation
/// batch (no input) one interval after it started running, then every interval; it changes
/// no position.
#[test]
fn wall_clock_punctuations_run_as_batches_without_input() {
    let mut m = machine();
    m.cfg.wall_clock = BTreeMap::from([(0, S)]);
    let cmds = m.handle(assigned(1, &[0], &[], &[], Duration::ZERO), Duration::ZERO);
    let fetch = bring_up(&mut m, cmds, Duration::ZERO);
    let punctuations = |cmds: &[Command]| -> Vec<(TaskId, RequestId)> {
        cmds.iter()
            .filter_map(|c| match c {
                Command::Punctuate { task, batch } => Some((*task, *batch)),
                _ => None,
            })
            .collect()
    };
    // Heartbeats keep the membership confirmed so the thread may write.
    let alive = |m: &mut ThreadMachine, at| {
        m.handle(
            Event::Heartbeat {
                answer: Heartbeat::Alive,
                at,
            },
            at,
        )
    };
    let results = vec![FetchResult {
        tp: tp("in", 0),
        from: 0,
        next: 0,
        high_watermark: Some(0),
    }];
    let first = m.handle(Event::Fetched { fetch, results }, ms(100));
    assert!(punctuations(&first).is_empty(), "not before one interval");
    let early = alive(&mut m, ms(500));
    assert!(punctuations(&early).is_empty());
    let mut due = alive(&mut m, ms(1200));
    due.extend(m.handle(Event::Tick, ms(1200)));
    let p = punctuations(&due);
    assert_eq!(p.len(), 1, "{due:?}");
    let (task0, batch) = p[0];
    assert_eq!(task0, task(0));
    assert_eq!(m.tasks()[&task(0)].sources[0].position, Some(0));
    let done = m.handle(
        Event::BatchDone {
            task: task(0),
            batch,
            changelogs: vec![(0, 0, 3)],
        },
        ms(1300),
    );
    assert!(punctuations(&done).is_empty(), "once per interval");
    assert_eq!(m.tasks()[&task(0)].sources[0].position, Some(0));
    assert_eq!(m.tasks()[&task(0)].changelogs[0].stored, 3);
    let again = alive(&mut m, ms(2300));
    assert_eq!(punctuations(&again).len(), 1, "{again:?}");
}

/// A broker that answers a fetch past the end with nothing (nisshi) shows it by a high
/// watermark below the position: the same listing follows as after OFFSET_OUT_OF_RANGE.
#[test]
fn a_high_watermark_below_the_position_is_a_gone_position() {
    let (mut m, cmds) = running_with_input(10, S);
    let (_, batch, _) = processes(&cmds)[0].clone();
    let (fetch, _) = fetch_of(&cmds).expect("the next fetch, asked as the batch starts");
    m.handle(
        Event::BatchDone {
            task: task(0),
            batch,
            changelogs: vec![(0, 0, 10)],
        },
        S,
    );
    let cmds = m.handle(
        Event::Fetched {
            fetch,
            results: vec![FetchResult {
                tp: tp("in", 0),
                from: 10,
                next: 10,
                high_watermark: Some(3),
            }],
        },
        S * 2,
    );
    let lists: Vec<_> = cmds
        .iter()
        .filter(|c| matches!(c, Command::ListSourceOffsets { offset: 10, .. }))
        .collect();
    assert_eq!(lists.len(), 1, "{cmds:?}");
}

/// A batch of the input no one can read, at the task's position: skipped by the input's
/// policy, the task reads on after it; otherwise it stops, and its input is fetched no more.
#[test]
fn an_unreadable_input_batch_is_skipped_or_stops_the_task() {
    let (mut m, cmds) = running_with_input(10, S);
    let (_, batch, _) = processes(&cmds)[0].clone();
    let (f, _) = fetch_of(&cmds).expect("the next input, asked as the batch starts");
    m.handle(
        Event::BatchDone {
            task: task(0),
            batch,
            changelogs: vec![(0, 0, 10)],
        },
        S,
    );
    let stale = m.handle(
        Event::InputSkipped {
            task: task(0),
            source: 0,
            from: 7,
            to: 12,
        },
        S,
    );
    assert!(stale.is_empty(), "about another position");
    m.handle(
        Event::InputSkipped {
            task: task(0),
            source: 0,
            from: 10,
            to: 12,
        },
        S,
    );
    assert_eq!(m.tasks()[&task(0)].sources[0].position, Some(12));
    let cmds = m.handle(Event::FetchFailed { fetch: f }, S);
    assert!(fetch_of(&cmds).is_none());
    let (f, wants) = fetch_of(&m.handle(Event::Tick, S + ms(100))).expect("after the backoff");
    assert_eq!(wants[0].offset, 12, "on after the skipped batch");
    // Skipped offsets are committed as processed.
    let cmds = m.handle(Event::Tick, 3 * S);
    let (_, _, offsets) = commit_of(&cmds).expect("a commit");
    assert_eq!(offsets, vec![(tp("in", 0), 12)]);

    m.handle(Event::Unreadable { task: task(0) }, 3 * S);
    assert_eq!(m.tasks()[&task(0)].phase, Phase::Failed);
    assert_eq!(
        m.report().offset_sums[&task(0)],
        baton_protocol::subscription::RUNNING,
        "a failed active is not offered to the group"
    );
    let cmds = m.handle(Event::FetchFailed { fetch: f }, 3 * S);
    let later = m.handle(Event::Tick, 5 * S);
    assert!(
        fetch_of(&cmds).is_none() && fetch_of(&later).is_none(),
        "its input is fetched no more"
    );
}

/// The input topic was made again (its id changed) with more records than the old position:
/// the position, though inside the new topic, belongs to the old one, and is placed anew by
/// `auto.offset.reset` once the new topic's start and end are listed.
#[test]
fn a_source_made_again_is_read_from_its_start_whatever_its_size() {
    let (mut m, cmds) = running_with_input(10, S);
    let (_, batch, _) = processes(&cmds)[0].clone();
    // Told while the batch runs: the reset waits for it.
    let told = m.handle(
        Event::SourceRecreated {
            task: task(0),
            source: 0,
        },
        S,
    );
    assert!(!told
        .iter()
        .any(|c| matches!(c, Command::ListSourceOffsets { .. })));
    let cmds = m.handle(
        Event::BatchDone {
            task: task(0),
            batch,
            changelogs: vec![(0, 0, 10)],
        },
        S,
    );
    assert!(
        cmds.contains(&Command::ListSourceOffsets {
            task: task(0),
            source: 0,
            offset: 10
        }),
        "{cmds:?}"
    );
    assert!(
        fetch_of(&cmds).is_none_or(|(_, w)| w.is_empty()),
        "no input from the old position"
    );
    // The new topic holds offsets 0..50: 10 is inside it, and still not this task's place.
    let cmds = m.handle(
        Event::SourceOffsetsListed {
            task: task(0),
            source: 0,
            offset: 10,
            earliest: 0,
            latest: 50,
        },
        S,
    );
    assert!(cmds.contains(&Command::SourceReset {
        task: task(0),
        source: 0,
        from: 10,
        to: Some(0),
        made_again: true,
    }));
    assert_eq!(m.tasks()[&task(0)].sources[0].position, Some(0));
    assert!(!m.tasks()[&task(0)].sources[0].made_again, "once");
}

/// `baton retry`: a failed task is closed and opened again at the first backoff step, and
/// goes on from where it stopped; running tasks are left alone.
#[test]
fn a_retry_asked_for_reopens_failed_tasks_only() {
    let (mut m, cmds) = running_with_input(10, S);
    let (_, batch, _) = processes(&cmds)[0].clone();
    m.handle(
        Event::RecordFailed {
            task: task(0),
            batch,
        },
        S,
    );
    assert_eq!(m.tasks()[&task(0)].phase, Phase::Failed);
    let cmds = m.handle(Event::RetryFailed, 2 * S);
    assert!(cmds.contains(&Command::Close { task: task(0) }), "{cmds:?}");
    let cmds = m.handle(Event::Tick, 2 * S + ms(250));
    assert!(cmds.contains(&Command::Open {
        task: task(0),
        role: Role::Active
    }));
    assert_eq!(
        m.tasks()[&task(0)].sources[0].position,
        Some(0),
        "where it stopped"
    );
    let again = m.handle(Event::RetryFailed, 3 * S);
    assert!(
        !again.contains(&Command::Close { task: task(0) }),
        "not failed now"
    );
}

/// A store that fails is closed and opened again after a wait; one whose files are damaged is
/// discarded first (rebuilt from the changelog), one that failed otherwise (a full disk) is
/// kept: the machine decides, the driver only says which.
#[test]
fn a_corrupt_store_is_discarded_and_a_failed_one_kept_when_opened_again() {
    for (fault, discarded) in [
        (StoreFault::Corrupt("a block's checksum".into()), true),
        (StoreFault::Failed, false),
    ] {
        let (mut m, _) = running_with_input(0, S);
        let cmds = m.handle(
            Event::StoreFailed {
                task: task(0),
                fault,
            },
            S,
        );
        let discard = cmds.iter().position(|c| {
            matches!(c, Command::Discard { task: t, why } if *t == task(0) && why == "a block's checksum")
        });
        let close = cmds
            .iter()
            .position(|c| *c == Command::Close { task: task(0) });
        assert_eq!(discard.is_some(), discarded, "{cmds:?}");
        assert!(close.is_some(), "{cmds:?}");
        assert!(discard < close, "set aside before it closes: {cmds:?}");
        let cmds = m.handle(Event::Tick, S + ms(300));
        assert!(cmds.contains(&Command::Open {
            task: task(0),
            role: Role::Active
        }));
    }
}

#[test]
fn a_changelog_whose_store_is_loading_is_left_out_of_fetches_until_the_load_ends() {
    let mut m = machine();
    m.start();
    m.handle(assigned(1, &[], &[0, 1], &[], S), S);
    let mut pending = None;
    for p in [0, 1] {
        let cmds = m.handle(
            Event::Opened {
                task: task(p),
                checkpoints: vec![0],
            },
            S,
        );
        pending = fetch_of(&cmds).map(|(f, _)| f).or(pending);
    }
    // The first store's fetch went out alone; its (empty) answer lets both go.
    let cmds = m.handle(
        Event::Fetched {
            fetch: pending.expect("the first standby restores"),
            results: vec![],
        },
        S,
    );
    let (f, wants) = fetch_of(&cmds).expect("both standbys restore");
    assert_eq!(wants.len(), 2);
    let cmds = m.handle(
        Event::Fetched {
            fetch: f,
            results: [0, 1]
                .map(|p| FetchResult {
                    tp: tp("app-counts-changelog", p),
                    from: 0,
                    next: 1000,
                    high_watermark: Some(100_000),
                })
                .to_vec(),
        },
        S,
    );
    let (f, _) = fetch_of(&cmds).expect("the next chunks are fetched while the stores apply");
    // Task 0's store took its chunk into a bulk load that leaves no room for another.
    for (p, loading) in [(0, true), (1, false)] {
        m.handle(
            Event::Absorbed {
                task: task(p),
                changelog: 0,
                stored: 0,
                loading,
            },
            S,
        );
    }
    let cmds = m.handle(
        Event::Fetched {
            fetch: f,
            results: vec![],
        },
        S,
    );
    let (f, wants) = fetch_of(&cmds).expect("the other standby goes on");
    assert_eq!(
        wants.iter().map(|w| w.tp.clone()).collect::<Vec<_>>(),
        vec![tp("app-counts-changelog", 1)],
        "the loading store's changelog waits"
    );
    m.handle(
        Event::LoadEnded {
            task: task(0),
            changelog: 0,
        },
        S,
    );
    let cmds = m.handle(
        Event::Fetched {
            fetch: f,
            results: vec![],
        },
        S,
    );
    let (_, wants) = fetch_of(&cmds).expect("both again");
    assert_eq!(wants.len(), 2);
    assert_eq!(wants[0].offset, 1000, "from where the held chunk ended");
}

#[test]
fn an_oversized_output_follows_the_policy_and_a_dead_letter_is_only_logged() {
    let mut m = machine();
    assert_eq!(
        m.oversized(OversizedWrite::Output),
        OversizedAnswer::StopTask,
        "Kafka Streams' default: fail"
    );
    assert_eq!(
        m.oversized(OversizedWrite::DeadLetter),
        OversizedAnswer::Skip
    );
    m.cfg.on_oversized_record = crate::config::OversizedRecord::Skip;
    assert_eq!(m.oversized(OversizedWrite::Output), OversizedAnswer::Skip);
}

/// Input up to 10 processed into the record cache, which then failed to flush: the input is
/// read again from where the cache's first batch started, after the retry pause, and nothing
/// past it is committed.
#[test]
fn a_dropped_cache_reads_its_input_again_from_its_first_batch() {
    let (mut m, cmds) = running_with_input(10, S);
    let (_, batch, _) = processes(&cmds)[0].clone();
    let (f, _) = fetch_of(&cmds).expect("asked as the batch starts");
    m.handle(
        Event::BatchDone {
            task: task(0),
            batch,
            changelogs: Vec::new(),
        },
        S,
    );
    let cmds = m.handle(
        Event::CacheDropped {
            task: task(0),
            from: vec![(0, 0)],
            why: CacheLoss::FlushFailed,
        },
        S,
    );
    assert!(fetch_of(&cmds).is_none(), "not before the pause: {cmds:?}");
    let t = &m.tasks()[&task(0)];
    assert_eq!(t.sources[0].position, Some(0));
    assert_eq!(t.failures, 1);
    let late = m.handle(input_answer(f, 10, 15), S);
    assert!(
        processes(&late).is_empty(),
        "past the dropped input: {late:?}"
    );
    let retry = m.handle(Event::Tick, S + ms(300));
    let (_, wants) = fetch_of(&retry).expect("after the pause");
    assert_eq!(wants[0].offset, 0, "the cached input again");
    let cmds = m.handle(Event::Tick, 60 * S);
    assert_eq!(
        commit_of(&cmds),
        None,
        "the dropped position is never committed"
    );
}

/// A revoked active whose cache was dropped (its flush failed before the revocation commit)
/// commits, when the commit is retried, only the input its changelog and sinks hold.
#[test]
fn a_revoked_active_whose_cache_was_dropped_commits_only_what_was_written() {
    let mut m = processed_to_ten();
    let cmds = m.handle(assigned(2, &[], &[], &[], 2 * S), 2 * S);
    let (commit, _, _) = commit_of(&cmds).expect("the revocation commit");
    m.handle(
        Event::CacheDropped {
            task: task(0),
            from: vec![(0, 4)],
            why: CacheLoss::FlushFailed,
        },
        2 * S,
    );
    m.handle(Event::CommitDone { commit, ok: false }, 2 * S);
    let cmds = m.handle(assigned(3, &[], &[], &[], 3 * S), 3 * S);
    let (_, _, offsets) = commit_of(&cmds).expect("retried");
    assert_eq!(offsets, vec![(tp("in", 0), 4)]);
}

/// A cache flush that stops the task (a record no batch can carry): the task stops with its
/// input back where the cache started.
#[test]
fn a_cache_that_can_never_be_written_stops_its_task() {
    let mut m = processed_to_ten();
    m.handle(
        Event::CacheDropped {
            task: task(0),
            from: vec![(0, 0)],
            why: CacheLoss::FlushStopsTask,
        },
        S,
    );
    let t = &m.tasks()[&task(0)];
    assert_eq!((t.phase, t.sources[0].position), (Phase::Failed, Some(0)));
}

/// A flush's changelog writes move the store's checkpoint as a batch's do.
#[test]
fn a_cache_flush_moves_the_changelog_cursor() {
    let mut m = processed_to_ten();
    m.handle(
        Event::CacheFlushed {
            task: task(0),
            changelogs: vec![(0, 10, 25)],
        },
        S,
    );
    let c = &m.tasks()[&task(0)].changelogs[0];
    assert_eq!((c.stored, c.fetch_position, c.end), (25, 25, Some(25)));
}
