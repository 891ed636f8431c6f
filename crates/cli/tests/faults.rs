//! Fault injection on the real broker: what production does to an instance, with every event
//! counted. Each scenario produces events over keys, applies a fault, and checks each key's
//! latest count against the events produced for it: nothing lost, and no duplicates where
//! nothing crashed. The scenarios run one after another (one broker each) so their timings do
//! not disturb each other on two cores.

mod harness;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use baton_runtime::partitioner::partition_for;
use harness::{now_ms, Cluster, Producer, PARTITIONS};

/// Without the record cache (on by default), for the scenarios that count every output
/// record: with it, a key's updates between two commits are one output.
const NO_CACHE: &[&str] = &["--cache-max-bytes", "0"];

/// The fast-settling timings of the harness: heartbeat 300 ms, session 6 s.
const SESSION: Duration = Duration::from_secs(6);

#[test]
fn faults() {
    let started = Instant::now();
    let mut times = Vec::new();
    // `BATON_FAULTS=name,name` runs only those scenarios (while working on one); a name
    // with a comma in it is given alone.
    let only = std::env::var("BATON_FAULTS").ok();
    let mut timed = |name: &str, f: fn()| {
        if only
            .as_deref()
            .is_some_and(|o| o != name && !o.split(',').any(|n| n == name))
        {
            return;
        }
        let t = Instant::now();
        f();
        times.push(format!("{name} {:.0} s", t.elapsed().as_secs_f64()));
    };
    timed("backlog", backlog_larger_than_a_message);
    timed("damaged state", damaged_state_is_rebuilt);
    timed("lost broker", checkpoint_past_a_recreated_changelog);
    timed(
        "changelog deleted",
        changelog_deleted_under_running_instances,
    );
    timed(
        "changelog deleted while stopped",
        changelog_deleted_while_stopped,
    );
    timed(
        "changelog deleted while idle",
        changelog_deleted_under_an_idle_instance,
    );
    timed(
        "stale store in a changelog made again",
        a_stale_store_inside_a_changelog_made_again,
    );
    timed("input recreated", input_recreated_under_a_running_instance);
    timed(
        "input recreated and grown",
        input_recreated_past_the_old_position,
    );
    timed(
        "input recreated while stopped",
        input_recreated_while_stopped,
    );
    timed("paused", paused_past_the_session_timeout);
    timed("disk full", disk_full_then_freed);
    timed("oversized record", a_record_no_batch_can_carry);
    timed("runtime panic", a_panic_in_the_runtime_stops_one_task);
    timed("unreadable batch", a_batch_no_reader_can_parse);
    timed("task retry", a_failed_task_is_retried_when_asked);
    timed("cache flush fails", a_record_cache_that_fails_to_flush);
    timed("output deleted", output_deleted_then_recreated);
    timed("output made again", output_deleted_and_made_again_by_baton);
    timed(
        "oversized changelog record",
        a_store_value_no_batch_can_carry,
    );
    timed("odd keys", keys_the_store_cannot_hold_as_they_are);
    timed("invalid member", a_member_with_invalid_metadata);
    timed("broker restart", broker_restart_with_persistent_storage);
    timed("repeated kill -9", repeated_kills_of_one_instance);
    timed("repeated kill -9 static", repeated_kills_static);
    timed("drain, one down", drain_while_another_instance_is_down);
    timed("racing drains", racing_drains);
    timed("drain at start", a_drain_sent_at_once_after_start);
    timed("topics", topics_fit_the_input);
    eprintln!(
        "fault suite: {} ({:.0} s in all)",
        times.join(", "),
        started.elapsed().as_secs_f64()
    );
}

fn topic_names(cluster: &Cluster) -> Vec<(String, usize)> {
    let mut names: Vec<(String, usize)> = cluster
        .rt
        .block_on(cluster.client.metadata(None))
        .unwrap()
        .topics
        .iter()
        .filter_map(|t| Some((t.name.as_ref()?.0.to_string(), t.partitions.len())))
        .collect();
    names.sort();
    names
}

/// `baton run` against topics that do not fit: a missing input, and a changelog left with
/// another partition count, are refused (exit 2) before anything is created; otherwise the
/// output and the changelog are created with the input's partition count.
fn topics_fit_the_input() {
    let cluster = Cluster::new("topics");
    let run = |app: &str, input: &str, output: &str| {
        let state = cluster.dir.join(app);
        vec![
            "run".to_owned(),
            "--app-id".into(),
            app.into(),
            "--input".into(),
            input.into(),
            "--output".into(),
            output.into(),
            "--state-dir".into(),
            state.display().to_string(),
            "--instance-id".into(),
            "a".into(),
        ]
    };
    let refused = |args: Vec<String>, says: &str| {
        let before = topic_names(&cluster);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = cluster.baton(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains(says), "{err}");
        assert_eq!(
            topic_names(&cluster),
            before,
            "a refused start creates no topic"
        );
    };
    refused(
        run("topics-a", "no-such-input", "out-a"),
        "topic \"no-such-input\" does not exist",
    );

    let topic = |name: &str, partitions: i32, compacted: bool| baton_kafka::client::NewTopic {
        name: name.into(),
        partitions,
        compacted,
    };
    cluster
        .rt
        .block_on(cluster.client.create_topics(&[
            topic("five", 5, false),
            topic("topics-c-counts-changelog", 3, true),
        ]))
        .unwrap();
    refused(
        run("topics-c", "five", "out-c"),
        "\"topics-c-counts-changelog\" has 3 partitions where this application needs 5",
    );

    let args = run("topics-b", "five", "out-b");
    let mut child = std::process::Command::new(&cluster.bin)
        .args(&args)
        .args(["--bootstrap", &cluster.broker.addr])
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let wanted = [
        ("out-b".to_owned(), 5),
        ("topics-b-counts-changelog".to_owned(), 5),
    ];
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut names = topic_names(&cluster);
    while !wanted.iter().all(|w| names.iter().any(|n| n.0 == w.0)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
        names = topic_names(&cluster);
    }
    let _ = child.kill();
    let _ = child.wait();
    for w in &wanted {
        assert!(
            names.contains(w),
            "{w:?} created with the input's 5 partitions: {names:?}"
        );
    }
}

/// Counts every key exactly: the latest output of each key equals the events produced for it.
fn assert_exact(cluster: &Cluster, produced: &BTreeMap<String, i64>, what: &str) {
    let counts = cluster.await_counts(produced, Duration::from_secs(180));
    for (k, n) in produced {
        let c = counts.get(k).copied().unwrap_or(0);
        assert_eq!(c, *n, "{what}: key {k} counted {c} of {n} events");
    }
    let total: i64 = produced.values().sum();
    eprintln!(
        "{what}: {total} events over {} keys, each counted exactly once",
        produced.len()
    );
}

/// 60,000 events waiting on one key and 600,000 over 100 keys: a batch's output is larger
/// than one record batch may be. Before the split, the produce failed with MessageTooLarge
/// and the same batch was retried forever.
fn backlog_larger_than_a_message() {
    let cluster = Cluster::new("backlog");
    let mut produced = cluster.produce_backlog("hot", 1, 60_000);
    produced.extend(cluster.produce_backlog("key", 100, 6_000));
    let t = Instant::now();
    // Without the record cache, which would keep one output per key per commit.
    let mut a = cluster.spawn("a", NO_CACHE);
    assert_exact(&cluster, &produced, "backlog");
    eprintln!(
        "backlog: 660,000 events processed in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    let outputs: usize = cluster.read_output().values().map(Vec::len).sum();
    assert_eq!(outputs, 660_000, "one output per event: none repeated");
    a.stop();
}

/// Table files of one task's store overwritten, and two task directories swapped: every
/// store that cannot be trusted is moved aside and rebuilt from its changelog.
fn damaged_state_is_rebuilt() {
    let cluster = Cluster::new("damage");
    let mut a = cluster.spawn("a", &[]);
    let mut produced = cluster.produce_backlog("k", 30, 100);
    assert_exact(&cluster, &produced, "damage, before");
    a.stop();

    let state = cluster.dir.join("a");
    let files = files_under(&state.join("0_0").join("counts"));
    assert!(!files.is_empty(), "task 0_0 has table files");
    for f in &files {
        std::fs::write(f, b"not a table file any more").unwrap();
    }
    std::fs::rename(state.join("0_1"), state.join("swap")).unwrap();
    std::fs::rename(state.join("0_2"), state.join("0_1")).unwrap();
    std::fs::rename(state.join("swap"), state.join("0_2")).unwrap();

    // The same state directory as before.
    let mut a = cluster.spawn_on("a2", "a", &[]);
    for (k, n) in cluster.produce_backlog("k", 30, 50) {
        *produced.get_mut(&k).unwrap() += n;
    }
    assert_exact(&cluster, &produced, "damage, after");
    let log = a.log_text();
    let moved = log
        .lines()
        .filter(|l| l.contains("state moved aside"))
        .count();
    assert!(
        moved >= 3,
        "0_0 damaged, 0_1 and 0_2 swapped: {moved} moved aside\n{log}"
    );
    assert!(state.join("quarantine").is_dir(), "kept for inspection");
    a.stop();
}

/// The broker lost everything (in-memory storage, restarted) while the state directory kept
/// its stores: their checkpoints are past the new changelogs' ends. Trusting them would count
/// every key twice; the stores are rebuilt instead.
fn checkpoint_past_a_recreated_changelog() {
    let mut cluster = Cluster::new("lost");
    let mut a = cluster.spawn("a", &[]);
    let before = cluster.produce_backlog("k", 30, 100);
    assert_exact(&cluster, &before, "lost broker, before");
    a.stop();

    cluster.broker.restart_empty();
    cluster.create_topics();
    let after = cluster.produce_backlog("k", 30, 40);
    let mut a = cluster.spawn_on("a2", "a", &[]);
    assert_exact(&cluster, &after, "lost broker, after");
    let log = a.log_text();
    assert!(
        log.contains("past its changelog's end"),
        "the stale checkpoints were noticed\n{log}"
    );
    a.stop();
}

/// The changelog deleted under two running instances: the first write that finds it gone
/// makes it again, and each task writes its store into it before taking more input (a
/// re-seed). A third instance with no state then takes every task over from the changelog
/// alone, and one more event for each of 30 keys written only before the deletion shows
/// whether the changelog still holds them: every key exact. Before, the changelog held only
/// what came after the deletion, and a restore from it lost the rest.
fn changelog_deleted_under_running_instances() {
    let cluster = Cluster::new("changelog-gone");
    let changelog = format!("{}-counts-changelog", cluster.app);
    let mut a = cluster.spawn("a", &[]);
    let mut b = cluster.spawn("b", &[]);
    let mut produced = cluster.produce_backlog("old", 30, 20);
    cluster.await_counts(&produced, Duration::from_secs(60));
    let mut producer = Producer::start(&cluster.broker.addr, "k", 300, 60);
    cluster.await_all_processing(now_ms(), "changelog deleted: a and b");
    cluster.delete_topic(&changelog);
    std::thread::sleep(Duration::from_secs(10));
    cluster.await_all_processing(now_ms(), "changelog deleted: after");
    a.stop();
    b.stop();
    let logs = a.log_text() + &b.log_text();
    let made = logs
        .matches("the changelog topic was gone; made it again")
        .count();
    let reseeded = logs
        .matches("the changelog holds the store's contents again")
        .count();
    let mut c = cluster.spawn("c", &[]);
    add(&mut produced, cluster.produce_backlog("old", 30, 1));
    produced.extend(producer.stop());
    let duplicates = cluster.check_against(&produced, "changelog deleted");
    assert_eq!(duplicates, 0, "no process crashed\n{}", c.log_text());
    c.stop();
    assert!(made >= 1, "the changelog was made again\n{logs}");
    assert_eq!(
        reseeded,
        harness::PARTITIONS as usize,
        "each task wrote its store into it once\n{logs}"
    );
    eprintln!("changelog deleted: made again {made} time(s), {reseeded} tasks re-seeded, a fresh instance exact");
}

/// The changelog deleted while the instance is stopped, then the instance restarted on its
/// state. Starting, it makes the changelog again (empty); each active finds its store's
/// checkpoint past the changelog's end while the group still holds its input positions, and
/// writes the store into it rather than rebuilding from it (which counted 14,967 events too
/// few, two instances). A fresh instance then restores everything from it.
fn changelog_deleted_while_stopped() {
    let cluster = Cluster::new("changelog-gone-stopped");
    let changelog = format!("{}-counts-changelog", cluster.app);
    let mut a = cluster.spawn("a", &[]);
    let mut producer = Producer::start(&cluster.broker.addr, "k", 300, 60);
    cluster.await_all_processing(now_ms(), "changelog deleted while stopped: a");
    std::thread::sleep(Duration::from_secs(5));
    a.stop();
    cluster.delete_topic(&changelog);
    std::thread::sleep(Duration::from_secs(2));
    let mut a = cluster.spawn_on("a2", "a", &[]);
    cluster.await_all_processing(now_ms(), "changelog deleted while stopped: restarted");
    a.stop();
    let log = a.log_text();
    let reseeded = log
        .matches("the changelog holds the store's contents again")
        .count();
    let mut c = cluster.spawn("c", &[]);
    let duplicates = cluster.check_counts(&mut producer, "changelog deleted while stopped");
    assert_eq!(duplicates, 0, "no process crashed\n{}", c.log_text());
    c.stop();
    assert_eq!(
        reseeded,
        harness::PARTITIONS as usize,
        "every task's store written into the new changelog\n{log}"
    );
    assert!(
        !log.contains("rebuilding them from the changelog"),
        "no store rebuilt from the younger changelog\n{log}"
    );
    eprintln!("changelog deleted while stopped: {reseeded} re-seeds, a fresh instance exact");
}

/// The changelog deleted under an instance that has no input to process: no batch finds it
/// gone. The thread's periodic check does (every 5 s): the changelog is made again and each
/// task writes its store into it. The instance then stops and a fresh one takes every task
/// over from the changelog alone: every key exact. Before, the changelog was found only by
/// the next batch, and the fresh instance restored from an empty one (each key 1 of 21).
fn changelog_deleted_under_an_idle_instance() {
    let cluster = Cluster::new("changelog-gone-idle");
    let changelog = format!("{}-counts-changelog", cluster.app);
    let mut a = cluster.spawn("a", &[]);
    let mut produced = cluster.produce_backlog("old", 30, 20);
    cluster.await_counts(&produced, Duration::from_secs(60));
    cluster.delete_topic(&changelog);
    let deadline = Instant::now() + Duration::from_secs(60);
    let reseeded = |a: &harness::Instance| {
        a.log_text()
            .matches("the changelog holds the store's contents again")
            .count()
    };
    while reseeded(&a) < PARTITIONS as usize {
        assert!(
            Instant::now() < deadline,
            "the idle instance did not write its stores into the changelog made again\n{}",
            a.log_text()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    a.stop();
    let log = a.log_text();
    let mut c = cluster.spawn("c", &[]);
    add(&mut produced, cluster.produce_backlog("old", 30, 1));
    let duplicates = cluster.check_against(&produced, "changelog deleted while idle");
    assert_eq!(duplicates, 0, "no process crashed\n{}", c.log_text());
    c.stop();
    assert!(
        log.contains("the changelog topic was gone; made it again"),
        "made again by the idle instance\n{log}"
    );
    eprintln!(
        "changelog deleted while idle: {} re-seeds, a fresh instance exact",
        reseeded(&a)
    );
}

/// Each changelog partition's end (records from offset 0; the suite's topics are small).
fn changelog_ends(cluster: &Cluster, changelog: &str) -> Vec<i64> {
    cluster
        .read_topic(changelog)
        .into_values()
        .map(|rows| rows.last().map_or(0, |r| r.offset + 1))
        .collect()
}

/// A store's checkpoint is an offset of the changelog topic it was written from. Instance a
/// counts 30 `old` keys and a stream, then stops; b takes every task over from the changelog
/// and counts one more event of each `old` key; the changelog is deleted under b, which makes
/// it again and writes its stores into it, and the stream goes on until every partition of
/// the new changelog is longer than the old one was when a stopped. Then b stops and a starts
/// again on its old stores, and one more event of each `old` key comes. Read from their
/// checkpoints, a's stores would take only the new changelog's tail and miss the `old` keys'
/// event counted by b (each would come out one short). Each store recorded its changelog's
/// id, so a finds its checkpoints belong to the deleted topic, takes the new one in whole and
/// writes its stores back: every key exact.
fn a_stale_store_inside_a_changelog_made_again() {
    let cluster = Cluster::new("stale-store");
    let changelog = format!("{}-counts-changelog", cluster.app);
    let mut a = cluster.spawn("a", &[]);
    let mut produced = cluster.produce_backlog("old", 30, 20);
    cluster.await_counts(&produced, Duration::from_secs(60));
    let mut producer = Producer::start(&cluster.broker.addr, "k", 300, 60);
    cluster.await_all_processing(now_ms(), "stale store: a");
    std::thread::sleep(Duration::from_secs(8));
    a.stop();
    let old_ends = changelog_ends(&cluster, &changelog);
    let mut b = cluster.spawn("b", &[]);
    add(&mut produced, cluster.produce_backlog("old", 30, 1));
    cluster.await_counts(&produced, Duration::from_secs(60));
    cluster.delete_topic(&changelog);
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        std::thread::sleep(Duration::from_secs(2));
        let ends = changelog_ends(&cluster, &changelog);
        if ends.len() == old_ends.len() && ends.iter().zip(&old_ends).all(|(n, o)| n > o) {
            eprintln!(
                "stale store: the new changelog ends at {ends:?}, the old one at {old_ends:?}"
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the new changelog did not outgrow the old one: {ends:?} against {old_ends:?}\n{}",
            b.log_text()
        );
    }
    b.stop();
    let reseeded_by_b = b
        .log_text()
        .matches("the changelog holds the store's contents again")
        .count();
    let mut a = cluster.spawn_on("a2", "a", &[]);
    cluster.await_all_processing(now_ms(), "stale store: a again");
    add(&mut produced, cluster.produce_backlog("old", 30, 1));
    produced.extend(producer.stop());
    let duplicates = cluster.check_against(&produced, "stale store, changelog made again");
    assert_eq!(duplicates, 0, "no process crashed\n{}", a.log_text());
    a.stop();
    let log = a.log_text();
    let found = log
        .matches("the store's checkpoint counts in an earlier topic of this name")
        .count();
    assert_eq!(
        reseeded_by_b,
        harness::PARTITIONS as usize,
        "b wrote each store into the new changelog"
    );
    assert_eq!(
        found,
        harness::PARTITIONS as usize,
        "each of a's stores found its checkpoint belongs to the deleted topic\n{log}"
    );
    eprintln!("stale store, changelog made again: {found} stores told apart, every key exact");
}

/// Deletes the input topic, makes it again (same partitions) and writes `per_key` events to
/// each of the 30 keys `k0`.. into it; the events written.
fn make_input_again(cluster: &Cluster, per_key: u64) -> BTreeMap<String, i64> {
    cluster.delete_topic(harness::INPUT);
    std::thread::sleep(Duration::from_secs(2));
    cluster.create_topics();
    cluster.produce_backlog("k", 30, per_key)
}

/// Adds `more` events per key to `produced`.
fn add(produced: &mut BTreeMap<String, i64>, more: BTreeMap<String, i64>) {
    for (k, n) in more {
        *produced.entry(k).or_default() += n;
    }
}

/// The input topic deleted and made again (same partitions) under a running instance: the
/// tasks' positions are past the new topic's end. Each task notices once, reads the new
/// topic from its start (auto.offset.reset=earliest), and counts every new event once on
/// top of the old counts, which the stores keep.
fn input_recreated_under_a_running_instance() {
    let cluster = Cluster::new("recreated");
    let mut a = cluster.spawn("a", &[]);
    let mut produced = cluster.produce_backlog("k", 30, 100);
    assert_exact(&cluster, &produced, "input recreated, before");
    // 40 per key: every partition of the new topic ends well before the old positions.
    add(&mut produced, make_input_again(&cluster, 40));
    assert_exact(&cluster, &produced, "input recreated, after");
    let log = a.log_text();
    let resets = log
        .matches("reading it from offset 0 (auto.offset.reset=earliest)")
        .count();
    assert_eq!(
        resets,
        harness::PARTITIONS as usize,
        "one reset per partition, said once each\n{log}"
    );
    a.stop();
}

/// The input topic deleted and made again while the instance is frozen (SIGSTOP, within its
/// 30 s session), and filled past the old positions before it looks again: by offsets alone
/// nothing shows (the old positions are inside the new topic, whose first records would be
/// skipped). Fetches by topic id tell: each task reads the new topic from its start
/// (auto.offset.reset=earliest), once, and every event is counted.
fn input_recreated_past_the_old_position() {
    let cluster = Cluster::new("recreated-grown");
    let mut a = cluster.spawn_timed("a", "a", (1000, 30_000), &[]);
    let mut produced = cluster.produce_backlog("k", 30, 20);
    assert_exact(&cluster, &produced, "input recreated and grown, before");
    a.pause();
    // 40 per key: every partition of the new topic ends well past the old positions.
    add(&mut produced, make_input_again(&cluster, 40));
    a.resume();
    assert_exact(&cluster, &produced, "input recreated and grown, after");
    let log = a.log_text();
    let resets = log.matches("its id changed): position").count();
    assert_eq!(
        resets,
        harness::PARTITIONS as usize,
        "one reset per partition, said once each\n{log}"
    );
    a.stop();
}

/// The input topic deleted, made again and filled past the old positions while the only
/// instance was stopped. The broker drops a deleted topic's committed offsets with it (Kafka
/// and nisshi both), so the restarted instance finds none and reads the new topic from its
/// start, not from the old positions: every event counted.
fn input_recreated_while_stopped() {
    let cluster = Cluster::new("recreated-stopped");
    let mut a = cluster.spawn("a", &[]);
    let mut produced = cluster.produce_backlog("k", 30, 20);
    assert_exact(&cluster, &produced, "input recreated while stopped, before");
    // Positions committed: a graceful stop commits them.
    a.stop();
    add(&mut produced, make_input_again(&cluster, 40));
    let mut a = cluster.spawn_on("a2", "a", &[]);
    assert_exact(&cluster, &produced, "input recreated while stopped, after");
    a.stop();
}

/// An instance frozen (SIGSTOP) past the session timeout, then resumed: it must not write a
/// stale result after its tasks moved. A key's count never goes backwards in the output.
fn paused_past_the_session_timeout() {
    let cluster = Cluster::new("paused");
    let mut a = cluster.spawn("a", &[]);
    let mut b = cluster.spawn("b", &[]);
    let mut producer = Producer::start(&cluster.broker.addr, "k", 300, 60);
    cluster.await_all_processing(now_ms(), "paused: a and b");
    a.pause();
    std::thread::sleep(SESSION + Duration::from_secs(3));
    a.resume();
    std::thread::sleep(Duration::from_secs(10));
    cluster.await_all_processing(now_ms(), "paused: after the pause");
    let duplicates = cluster.check_counts(&mut producer, "paused");
    eprintln!("paused: {duplicates} events counted twice (a's uncommitted batches, replayed)");
    for (p, rows) in cluster.read_output() {
        let mut last: BTreeMap<&str, i64> = BTreeMap::new();
        for (_, key, count) in &rows {
            let before = last.insert(key, *count).unwrap_or(0);
            assert!(
                *count >= before,
                "partition {p}: key {key} went back from {before} to {count}: a stale write"
            );
        }
    }
    a.stop();
    b.stop();
}

/// Waits for `line` (a task's failure), then checks what one record must stop: one task, said
/// once, the instance still up a few seconds later and its other tasks running. Returns the
/// failed and the running partitions.
fn one_task_stopped(
    instance: &mut harness::Instance,
    line: &str,
) -> (BTreeSet<i32>, BTreeSet<i32>) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while instance.count_log(line) == 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
    }
    // It stays stopped, and stopped once: nothing retried, nothing moved.
    let status = instance.await_status(Duration::from_secs(5));
    let log = instance.log_text();
    assert!(status.is_none(), "the instance goes on: {status:?}\n{log}");
    assert_eq!(instance.count_log(line), 1, "one error line\n{log}");
    let failed = instance.holds("active", "failed");
    let running = instance.running();
    assert_eq!(failed.len(), 1, "one task failed: {failed:?}\n{log}");
    assert!(
        !running.is_empty() && running.is_disjoint(&failed),
        "the other tasks run: {running:?}\n{log}"
    );
    (failed, running)
}

/// The output topic takes batches of at most 60 bytes: no output record fits. With
/// `--on-oversized-record skip` each is dropped, logged and counted once, and the task goes
/// on; with `fail` (the default) the task that wrote it stops, with one error naming the
/// record's task, partition and input offset, and holds its partitions (reported as running,
/// so the group does not move the failure to another instance); the instance and its other
/// tasks go on.
fn a_record_no_batch_can_carry() {
    let cluster = Cluster::new_with_output_limit("oversized", 60);
    cluster.produce_backlog("k", 10, 5);
    // Without the record cache, which would keep one output per key: 50 outputs to skip.
    let mut a = cluster.spawn(
        "a",
        &["--on-oversized-record", "skip", "--cache-max-bytes", "0"],
    );
    let skipped = "skipping an output record larger than any record batch";
    let deadline = Instant::now() + Duration::from_secs(60);
    while a.count_log(skipped) < 50 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
    }
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        a.count_log(skipped),
        50,
        "each of the 50 outputs skipped once\n{}",
        a.log_text()
    );
    a.stop();

    // With the cache (the default): the record stops its task as its cache is flushed.
    cluster.produce_backlog("k", 1, 1);
    let mut b = cluster.spawn_on("b", "a", &[]);
    let (failed, running) =
        one_task_stopped(&mut b, "stopping this task only (on-oversized-record=fail)");
    let log = b.log_text();
    assert!(
        log.contains("larger than any record batch the broker takes")
            && log.contains("task 0_")
            && log.contains("from input events-")
            && log.contains(" offset "),
        "the error names the task, the partition and the input offset\n{log}"
    );
    b.stop();
    eprintln!(
        "oversized record: 50 skipped once each under skip; fail stopped task {failed:?} only, \
         {} others running",
        running.len()
    );
}

/// An input partition holding a batch no reader can parse, between good events. Brokers
/// refuse such a batch on produce (they parse every record), so the fail point
/// `baton-unreadable` makes one record read as a corrupt batch where the decoder hands it
/// over (the decoder's own handling of damaged bytes is proptest-checked in baton-kafka).
/// Under the default `fail` only the task reading it stops, once, named with partition and
/// offset, after counting everything before it; the other tasks count everything. Restarted
/// with `--on-deserialization-error skip`, the task goes on past it: one event skipped, every
/// other exact.
fn a_batch_no_reader_can_parse() {
    let cluster = Cluster::new("unreadable");
    let keys: Vec<String> = (0..12).map(|k| format!("k{k}")).collect();
    let mut produced = cluster.produce_keys(&keys, 20);
    let bad = partition_for(b"k0", PARTITIONS) as i32;
    let in_bad = keys
        .iter()
        .filter(|k| partition_for(k.as_bytes(), PARTITIONS) as i32 == bad)
        .count() as i64;
    // The first event of the second round in the bad partition: k0's 21st.
    let at = 20 * in_bad;
    add(&mut produced, cluster.produce_keys(&keys, 10));
    let point = format!("baton-unreadable=return({}-{bad}@{at})", harness::INPUT);
    let env = [("FAILPOINTS", point.as_str())];
    let mut a = cluster.spawn_env("a", &env, &[]);
    let (failed, running) = one_task_stopped(&mut a, "a record batch cannot be read");
    let log = a.log_text();
    assert_eq!(failed, BTreeSet::from([bad]), "{log}");
    assert!(
        log.contains(&format!("partition={}-{bad} offset={at}", harness::INPUT)),
        "the error names the partition and the offset {at}\n{log}"
    );
    let before: BTreeMap<String, i64> = produced
        .iter()
        .map(|(k, n)| {
            let p = partition_for(k.as_bytes(), PARTITIONS) as i32;
            (k.clone(), if p == bad { n - 10 } else { *n })
        })
        .collect();
    let counts = cluster.await_counts(&before, Duration::from_secs(30));
    assert_eq!(
        counts, before,
        "everything before it, and every other task's all\n{log}"
    );
    let shown = failed_in_inspect(&cluster);
    assert_eq!(
        shown,
        [(format!("0_{bad}"), "a".to_owned())],
        "inspect shows it"
    );
    a.stop();
    let mut b = cluster.spawn_full_env("b", "a", &env, &["--on-deserialization-error", "skip"]);
    let mut want = produced.clone();
    *want.get_mut("k0").unwrap() -= 1;
    let counts = cluster.await_counts(&want, Duration::from_secs(60));
    let log = b.log_text();
    assert_eq!(counts, want, "every event but the unreadable one\n{log}");
    assert_eq!(
        b.count_log("skipped a record batch that cannot be read"),
        1,
        "{log}"
    );
    b.stop();
    eprintln!(
        "unreadable batch: fail stopped task {failed:?} only ({} others running, exact); skip went past it, {} keys exact, k0 one short",
        running.len(),
        produced.len()
    );
}

/// The failed tasks `baton inspect --json` shows, as (task, instance), once it shows any
/// (instances publish them every 500 ms).
fn failed_in_inspect(cluster: &Cluster) -> Vec<(String, String)> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let view = cluster.inspect_json();
        let failed: Vec<(String, String)> = view["failed"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| {
                let task = f["task"]
                    .as_str()
                    .map_or(f["task"].to_string(), str::to_owned);
                (task, f["instance"].as_str().unwrap().to_owned())
            })
            .collect();
        if !failed.is_empty() || Instant::now() > deadline {
            return failed;
        }
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// The changelog takes batches of at most 60 bytes: no store value fits. The task that wrote
/// it stops with one error naming its changelog and input; its store is not written past what
/// the changelog holds; the instance and its other tasks go on.
fn a_store_value_no_batch_can_carry() {
    let cluster = Cluster::new_with_changelog_limit("oversized-changelog", 60);
    cluster.produce_backlog("k", 1, 3);
    let mut a = cluster.spawn("a", &[]);
    let (failed, running) = one_task_stopped(
        &mut a,
        "a changelog record is larger than any record batch the broker takes",
    );
    let log = a.log_text();
    assert!(
        log.contains("counts-changelog") && log.contains("offsets 0..3"),
        "the error names the changelog and the input\n{log}"
    );
    a.stop();
    eprintln!(
        "oversized changelog record: task {failed:?} stopped once, {} others running",
        running.len()
    );
}

/// Arms the runtime's batch-path fail point to panic once (`fail` crate syntax).
const PANIC_ONCE: (&str, &str) = (
    "FAILPOINTS",
    "baton-batch=1*panic(injected by the fault suite)",
);

/// A panic in the runtime's own code (a fail point in the batch path, armed to fire once):
/// the task whose batch it was stops, with one error; the instance and its other tasks go on
/// and count every event of their keys exactly; the failed task's keys get no count at all.
fn a_panic_in_the_runtime_stops_one_task() {
    let cluster = Cluster::new("runtime-panic");
    let produced = cluster.produce_backlog("k", 12, 5);
    let mut a = cluster.spawn_env("a", &[PANIC_ONCE], &[]);
    let (failed, _) = one_task_stopped(&mut a, "a panic in the runtime while processing a batch");
    let failed_p = *failed.iter().next().unwrap();
    let (theirs, others): (BTreeMap<String, i64>, BTreeMap<String, i64>) = produced
        .into_iter()
        .partition(|(k, _)| partition_for(k.as_bytes(), PARTITIONS) as i32 == failed_p);
    let counts = cluster.await_counts(&others, Duration::from_secs(60));
    assert_eq!(counts, others, "every other task counts exactly");
    let all = cluster.final_counts();
    let counted: Vec<&String> = theirs.keys().filter(|k| all.contains_key(*k)).collect();
    assert!(
        counted.is_empty(),
        "the failed task processed nothing: {counted:?}"
    );
    // Asked for (the fail point fired its once): the task opens again and counts its keys.
    let out = cluster.baton(&["retry", "--group", &cluster.app, "--instance", "a"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let all: BTreeMap<String, i64> = theirs.clone().into_iter().chain(others.clone()).collect();
    let counts = cluster.await_counts(&all, Duration::from_secs(60));
    let log = a.log_text();
    assert_eq!(counts, all, "every key exact after `baton retry`\n{log}");
    assert_eq!(a.count_log("retry requested"), 1, "{log}");
    assert!(a.holds("active", "failed").is_empty(), "{log}");
    a.stop();
    eprintln!(
        "runtime panic: task of partition {failed_p} stopped once; {} keys of the other tasks \
         exact, {} keys of the failed one untouched until `baton retry`, then exact",
        others.len(),
        theirs.len()
    );
}

/// The record cache until the commit (`--cache-max-bytes`), whose flush fails twice (a fail
/// point, as a broker refusing the writes): each time the task's cache is dropped and its
/// input read again from where the cache started; every key is counted exactly, and the
/// output holds fewer records than the input (the cache kept one update per key per commit).
fn a_record_cache_that_fails_to_flush() {
    let cluster = Cluster::new("cache-flush");
    let produced = cluster.produce_backlog("k", 40, 50);
    let env = [("FAILPOINTS", "baton-flush=2*return")];
    let mut a = cluster.spawn_env("a", &env, &["--cache-max-bytes", "1048576"]);
    let counts = cluster.await_counts(&produced, Duration::from_secs(60));
    let log = a.log_text();
    assert_eq!(counts, produced, "every key exact\n{log}");
    assert_eq!(
        a.count_log("the record cache could not be written"),
        2,
        "{log}"
    );
    let events: i64 = produced.values().sum();
    let outputs: usize = cluster.read_output().values().map(Vec::len).sum();
    assert!(
        (outputs as i64) < events,
        "{outputs} output records for {events} events"
    );
    a.stop();
    eprintln!("cache flush fails: dropped twice, {} keys exact, {outputs} output records for {events} events", produced.len());
}

/// As above, with `--task-retry-ms 500`: the failed task is tried again half a second later,
/// goes on from where it stopped, and every key of every task is counted exactly.
fn a_failed_task_is_retried_when_asked() {
    let cluster = Cluster::new("task-retry");
    let produced = cluster.produce_backlog("k", 12, 5);
    let mut a = cluster.spawn_env("a", &[PANIC_ONCE], &["--task-retry-ms", "500"]);
    let counts = cluster.await_counts(&produced, Duration::from_secs(60));
    assert_eq!(counts, produced, "every key exact once the task is retried");
    let log = a.log_text();
    assert_eq!(
        a.count_log("a panic in the runtime while processing a batch"),
        1,
        "{log}"
    );
    assert!(log.contains("is tried again after 500 ms"), "{log}");
    assert!(a.holds("active", "failed").is_empty(), "{log}");
    a.stop();
    eprintln!("task retry: the task failed once, was retried, all keys exact");
}

/// The output topic deleted under two running instances, one of which then leaves, and made
/// again later: a batch whose output fails leaves no trace in the state (outputs are written
/// before the changelog), so the instance that takes the leaver's tasks over restores nothing
/// it would replay, and every event is counted once (+12,105 when the changelog went first).
/// Then the same with the record cache (the default): every event counted, none lost. Its
/// duplicates are only reported, a known fault: with the cache, 11-78 events were counted
/// twice in 7 of 17 runs on a loaded machine (3 of 6 at 7034f3a, before the session that
/// found it) and in one run of the whole suite; without it, none in 6 loaded runs.
fn output_deleted_then_recreated() {
    let duplicates = output_deleted_with("output-gone", NO_CACHE, "output deleted");
    assert_eq!(
        duplicates, 0,
        "no process crashed: nothing may be counted twice"
    );
    let cached = output_deleted_with("output-gone-cached", &[], "output deleted, cached");
    eprintln!("output deleted, cached: {cached} counted twice (a known fault of the cache)");
}

/// One run of [`output_deleted_then_recreated`], the instances started with `args`: how many
/// events were counted twice (a lost one fails the run).
fn output_deleted_with(name: &str, args: &[&str], what: &str) -> i64 {
    let cluster = Cluster::new(name);
    let mut a = cluster.spawn("a", args);
    let mut b = cluster.spawn("b", args);
    let mut producer = Producer::start(&cluster.broker.addr, "k", 300, 60);
    cluster.await_all_processing(now_ms(), &format!("{what}: a and b"));
    cluster.delete_topic(harness::OUTPUT);
    std::thread::sleep(Duration::from_secs(5));
    b.stop();
    std::thread::sleep(Duration::from_secs(10));
    // Made again (the input and changelog exist already).
    cluster.create_topics();
    cluster.await_all_processing(now_ms(), &format!("{what}: after"));
    let duplicates = cluster.check_counts(&mut producer, what);
    if duplicates > 0 {
        eprintln!(
            "{what}: {duplicates} counted twice; a's log:\n{}",
            a.log_text()
        );
    }
    a.stop();
    duplicates
}

/// The output topic deleted under an instance run with `--create-missing-outputs`: it makes
/// the topic again by itself, and every event is counted once.
fn output_deleted_and_made_again_by_baton() {
    let cluster = Cluster::new("output-made-again");
    let mut a = cluster.spawn("a", &["--create-missing-outputs"]);
    let mut producer = Producer::start(&cluster.broker.addr, "k", 300, 60);
    cluster.await_all_processing(now_ms(), "output made again: a");
    cluster.delete_topic(harness::OUTPUT);
    std::thread::sleep(Duration::from_secs(3));
    cluster.await_all_processing(now_ms(), "output made again: after");
    let duplicates = cluster.check_counts(&mut producer, "output made again");
    let log = a.log_text();
    assert_eq!(duplicates, 0, "nothing counted twice\n{log}");
    let made = a.count_log("the output topic was gone; made it again");
    assert!(made >= 1, "the instance made the topic\n{log}");
    a.stop();
    eprintln!("output made again: made by the instance ({made} line(s)), 0 counted twice");
}

/// Events with an empty key and with a 70 KiB key (past the store's 65,535-byte keys) beside
/// ordinary ones: counted exactly by the instance that runs them, by a second instance that
/// warms up their stores from the changelog, and by that one alone once the first has left
/// (a restore). Before, either key panicked the task, and every instance that took it over.
fn keys_the_store_cannot_hold_as_they_are() {
    let cluster = Cluster::new("oddkeys");
    let mut keys: Vec<String> = (0..10).map(|k| format!("k{k}")).collect();
    keys.push(String::new());
    keys.push("x".repeat(70 * 1024));
    let mut produced = cluster.produce_keys(&keys, 30);
    // Without the record cache: every output is counted below.
    let mut a = cluster.spawn("a", NO_CACHE);
    assert_exact(&cluster, &produced, "odd keys, one instance");
    let mut b = cluster.spawn("b", NO_CACHE);
    for (k, n) in cluster.produce_keys(&keys, 20) {
        *produced.entry(k).or_insert(0) += n;
    }
    assert_exact(&cluster, &produced, "odd keys, two instances");
    a.stop();
    for (k, n) in cluster.produce_keys(&keys, 10) {
        *produced.entry(k).or_insert(0) += n;
    }
    assert_exact(&cluster, &produced, "odd keys, restored by the other");
    let exited = b.await_status(Duration::from_millis(300));
    assert!(exited.is_none(), "b runs on: {exited:?}\n{}", b.log_text());
    let outputs: usize = cluster.read_output().values().map(Vec::len).sum();
    let events: i64 = produced.values().sum();
    assert_eq!(
        outputs as i64, events,
        "one output per event: none repeated, none lost"
    );
    eprintln!("odd keys: {events} events, {outputs} outputs: 0 lost, 0 counted twice");
    b.stop();
}

/// A member whose subscription carries an invalid offset sum (-35) joins a running group:
/// the leader gives it nothing and names it; everyone else keeps a full assignment.
fn a_member_with_invalid_metadata() {
    use baton_assignor::{AssignmentConfig, AssignorKind, TaskId};
    use baton_kafka::{GroupMember, MemberConfig};
    use baton_protocol::bridge::{Subtopology, Topology};
    use baton_protocol::TaskOffsetSum;

    let cluster = Cluster::new("invalid");
    // A missing input topic is an error, and asking about it creates nothing.
    let typo_state = cluster.dir.join("typo");
    let out = cluster.baton(&[
        "run",
        "--app-id",
        "typo",
        "--input",
        "no-such-input",
        "--output",
        "typo-out",
        "--instance-id",
        "t",
        "--state-dir",
        typo_state.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("no-such-input"), "{err}");
    let topics = cluster
        .rt
        .block_on(cluster.client.metadata(None))
        .unwrap()
        .topics;
    let names: Vec<String> = topics
        .iter()
        .filter_map(|t| t.name.as_ref().map(|n| n.0.to_string()))
        .collect();
    assert!(
        !names
            .iter()
            .any(|n| n == "no-such-input" || n == "typo-out"),
        "nothing auto-created: {names:?}"
    );
    let mut a = cluster.spawn("a", &[]);
    let mut producer = Producer::start(&cluster.broker.addr, "k", 200, 30);
    cluster.await_all_processing(now_ms(), "invalid member: a");
    let topology = Topology {
        subtopologies: BTreeMap::from([(
            0,
            Subtopology {
                source_topics: vec![harness::INPUT.into()],
                changelog_topics: vec![format!("{}-counts-changelog", cluster.app)],
                partitions: harness::PARTITIONS,
            },
        )]),
    };
    let mut bad = GroupMember::new(
        baton_kafka::Client::new(&[&cluster.broker.addr], "bad"),
        MemberConfig {
            group_id: cluster.app.clone(),
            client_id: "bad".into(),
            group_instance_id: None,
            session_timeout_ms: SESSION.as_millis() as i32,
            rebalance_timeout_ms: 30_000,
            process_id: uuid::Uuid::new_v4(),
            user_endpoint: String::new(),
            topology,
            assignor: AssignorKind::HighAvailability,
            assignment_config: AssignmentConfig::default(),
            metadata_limit: 1 << 20,
            rack: None,
            client_tags: Vec::new(),
        },
    );
    bad.set_offset_sums(vec![TaskOffsetSum {
        task: TaskId::new(0, 1),
        offset_sum: -35,
    }]);
    let joined_at = now_ms();
    let partitions = cluster.rt.block_on(async {
        let m = bad.join().await.unwrap();
        assert!(!m.leader, "a leads");
        m.partitions.clone()
    });
    assert!(
        partitions.is_empty(),
        "the invalid member got {partitions:?}"
    );
    // It stays in the group (heartbeating) while a goes on with every partition.
    let beats = std::thread::scope(|s| {
        let h = s.spawn(|| {
            cluster.rt.block_on(async {
                for _ in 0..30 {
                    let _ = bad.heartbeat().await;
                    tokio::time::sleep(Duration::from_millis(300)).await;
                }
                let _ = bad.leave().await;
            })
        });
        cluster.await_all_processing(joined_at + 1_000, "invalid member: a, after it joined");
        h.join()
    });
    beats.unwrap();
    cluster.check_counts(&mut producer, "invalid member");
    assert!(
        a.await_log(
            &["its subscription is invalid", "0_1"],
            Duration::from_secs(5)
        ),
        "the leader says which member and field were refused\n{}",
        a.log_text()
    );
    a.stop();
}

/// The broker is killed and restarted on its data (sqlite) while events flow through
/// `baton produce`: both ride it out; every event is counted.
fn broker_restart_with_persistent_storage() {
    let mut cluster = Cluster::new_persistent("restart");
    let mut a = cluster.spawn("a", &[]);
    let mut b = cluster.spawn("b", &[]);
    let mut produce = cluster.produce_cli(6_000, 300, 30);
    cluster.await_all_processing(now_ms(), "broker restart: a and b");
    std::thread::sleep(Duration::from_secs(3));
    cluster.broker.restart(Duration::from_secs(2));
    let status = produce.wait().unwrap();
    assert!(
        status.success(),
        "baton produce rode out the restart: {}",
        std::fs::read_to_string(cluster.dir.join("produce.log")).unwrap_or_default()
    );
    let duplicates = cluster.check_against(&cluster.input_counts(), "broker restart");
    // At most a commit interval's worth (300 events a second) per instance.
    assert!(duplicates <= 600, "{duplicates} counted twice");
    a.stop();
    b.stop();
    // Each failure is logged when it starts, summed up every 10 s, and when it ends: the
    // broker's 2 s away is a few lines per failing request, not one per retry.
    for (name, log) in [("a", a.log_text()), ("b", b.log_text())] {
        let repeats = warnings_by_kind(&log);
        let most = repeats.iter().max_by_key(|(_, n)| **n);
        eprintln!("broker restart: {name}'s most repeated warning: {most:?}");
        if let Some((line, n)) = most {
            assert!(*n <= 3, "{name} logged {n} times: {line}");
        }
    }
}

/// Warning and error lines of a log, counted by what they say with the time and the error
/// text left out: how often one failure was logged.
fn warnings_by_kind(log: &str) -> BTreeMap<String, usize> {
    let mut kinds = BTreeMap::new();
    for line in log.lines() {
        if !(line.contains(" WARN ") || line.contains(" ERROR ")) {
            continue;
        }
        // Past the timestamp, up to the first field that varies between tries.
        let rest = line.split_once(' ').map_or(line, |(_, r)| r);
        let kind = ["error=", "last_error=", "failures=", "since_s="]
            .iter()
            .filter_map(|f| rest.find(f))
            .min()
            .map_or(rest, |at| &rest[..at]);
        *kinds.entry(kind.trim().to_owned()).or_insert(0) += 1;
    }
    kinds
}

/// One instance is killed (SIGKILL) and restarted a second later, five times, 10 s apart.
/// Duplicates only from the kills: at most a commit interval's worth each.
fn repeated_kills_of_one_instance() {
    repeated_kills("kills", &[]);
}

/// The same with static membership (`--static-membership`, Kafka's `group.instance.id`): the
/// restarted instance takes its own tasks back without a rebalance, within the session.
fn repeated_kills_static() {
    repeated_kills("kills-static", &["--static-membership"]);
}

/// Five `kill -9`s of one of two instances, each restarted a second later, 300 events/s: no
/// event lost, at most a commit interval of input counted twice per kill. Prints the
/// duplicates and each partition's longest output gap.
fn repeated_kills(app: &str, args: &[&str]) {
    let cluster = Cluster::new(app);
    let mut a = cluster.spawn("a", args);
    let mut b = cluster.spawn("b", args);
    let mut producer = Producer::start(&cluster.broker.addr, "k", 300, 60);
    cluster.await_all_processing(now_ms(), &format!("{app}: a and b"));
    let from = now_ms();
    for _ in 0..5 {
        std::thread::sleep(Duration::from_secs(10));
        b.kill9();
        std::thread::sleep(Duration::from_secs(1));
        b = cluster.spawn_on("b", "b", args);
    }
    cluster.await_all_processing(now_ms(), &format!("{app}: after the last restart"));
    let gaps = cluster.longest_gaps(from, now_ms());
    let duplicates = cluster.check_counts(&mut producer, app);
    eprintln!("{app}: {duplicates} counted twice; longest output gap per partition (s): {gaps:?}");
    assert!(
        duplicates <= 5 * 300,
        "{duplicates} counted twice over 5 kills"
    );
    a.stop();
    b.stop();
}

/// Two `baton drain` calls at the same moment, one for each of the two instances: each alone
/// is allowed, together they would drain every instance. Exactly one stands; the other is
/// refused (exit 2) naming the instance already leaving, and takes its request back. The
/// drained one exits, the other runs on, and every event is counted once.
fn racing_drains() {
    let cluster = Cluster::new("racing-drains");
    let a = cluster.spawn("a", &[]);
    let b = cluster.spawn("b", &[]);
    let mut producer = Producer::start(&cluster.broker.addr, "k", 300, 60);
    cluster.await_all_processing(now_ms(), "racing drains: a and b");
    // Both drains must see both instances (an instance's name reaches the group's view with
    // its reports), or the race is not the one under test.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let out = cluster.baton(&["drain", "--group", &cluster.app, "--status"]);
        if String::from_utf8_lossy(&out.stdout).contains(": 2 instance(s)") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the group's view never showed a and b"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    let drain = |name: &str| cluster.baton(&["drain", "--group", &cluster.app, "--instance", name]);
    let (for_a, for_b) = std::thread::scope(|s| {
        let a = s.spawn(|| drain("a"));
        let b = s.spawn(|| drain("b"));
        (a.join().unwrap(), b.join().unwrap())
    });
    let outcome = |o: &std::process::Output| {
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    let ((code_a, err_a), (code_b, err_b)) = (outcome(&for_a), outcome(&for_b));
    eprintln!("racing drains: a -> {code_a:?} {err_a:?}; b -> {code_b:?} {err_b:?}");
    let (mut drained, mut stays, refusal, leaving) = match (code_a, code_b) {
        (Some(0), Some(2)) => (a, b, err_b, "a"),
        (Some(2), Some(0)) => (b, a, err_a, "b"),
        other => panic!("exactly one drain stands, the other exits 2: {other:?}\n{err_a}\n{err_b}"),
    };
    assert!(
        refusal.contains(&format!("already leaving: {leaving}")),
        "the refusal names the instance already leaving: {refusal}"
    );
    assert!(
        drained.await_exit(Duration::from_secs(60)),
        "the drained instance exits\n{}",
        drained.log_text()
    );
    cluster.await_all_processing(now_ms(), "racing drains: one left");
    let exited = stays.await_status(Duration::from_millis(300));
    assert!(exited.is_none(), "the other runs on: {exited:?}");
    let duplicates = cluster.check_counts(&mut producer, "racing drains");
    assert_eq!(duplicates, 0, "nothing crashed: nothing counted twice");
    eprintln!("racing drains: one drain stood, the other was refused; 0 lost, 0 counted twice");
    stays.stop();
}

/// A drain written the moment an instance starts, while the control topic it just created may
/// still be unknown to the broker: the instance reads where to follow the topic from before it
/// joins, so the drain is seen; it hands over to b and exits.
fn a_drain_sent_at_once_after_start() {
    let cluster = Cluster::new("drain-at-start");
    let mut a = cluster.spawn("a", &[]);
    assert!(
        a.await_log(&["starting"], Duration::from_secs(30)),
        "a starts\n{}",
        a.log_text()
    );
    cluster
        .rt
        .block_on(baton_runtime::control::request_drain(
            &cluster.client,
            &cluster.app,
            "a",
        ))
        .unwrap();
    let produced = cluster.produce_backlog("k", 20, 50);
    let b = cluster.spawn("b", &[]);
    assert!(
        a.await_exit(Duration::from_secs(60)),
        "a saw the drain sent as it started, and left\n{}",
        a.log_text()
    );
    assert!(
        !a.log_text().contains("reading the control topic"),
        "no failed reads of the control topic at startup\n{}",
        a.log_text()
    );
    assert_exact(&cluster, &produced, "drain at start");
    let mut b = b;
    b.stop();
}

/// c dies (SIGKILL, not restarted) and b is drained at once: b exits after handing its tasks
/// over, a ends up with everything, c's tasks included, and nothing is lost.
fn drain_while_another_instance_is_down() {
    let cluster = Cluster::new("drain-down");
    let mut a = cluster.spawn("a", &[]);
    let mut b = cluster.spawn("b", &[]);
    let mut c = cluster.spawn("c", &[]);
    let mut producer = Producer::start(&cluster.broker.addr, "k", 300, 60);
    cluster.await_all_processing(now_ms(), "drain, one down: a, b and c");
    // `baton inspect` shows every member's tasks, even on a broker that hides member metadata.
    let inspect = || cluster.inspect_json();
    let shows_all = |view: &serde_json::Value| {
        let members = view["members"].as_array().cloned().unwrap_or_default();
        let actives: usize = members
            .iter()
            .map(|m| m["active"].as_array().map_or(0, Vec::len))
            .sum();
        members.len() == 3
            && actives == harness::PARTITIONS as usize
            && members.iter().all(|m| m["error"].is_null())
    };
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut view = inspect();
    while !shows_all(&view) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(500));
        view = inspect();
    }
    assert!(
        shows_all(&view),
        "inspect shows 3 members and every task once: {view:#}"
    );
    // A drain of an instance the group does not have is refused, and writes nothing.
    let before = topic_names(&cluster);
    let out = cluster.baton(&["drain", "--group", &cluster.app, "--instance", "zz"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("\"zz\" is not a member"), "{err}");
    assert_eq!(
        topic_names(&cluster),
        before,
        "a refused drain creates no topic"
    );
    // A drain that reaches nobody is refused, and writes nothing.
    let out = cluster.baton(&["drain", "--group", "no-such-group", "--instance", "b"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("has no members"), "{err}");
    let topics = cluster
        .rt
        .block_on(cluster.client.metadata(None))
        .unwrap()
        .topics;
    assert!(
        !topics.iter().any(|t| t
            .name
            .as_ref()
            .is_some_and(|n| n.0.contains("no-such-group"))),
        "no control topic for a group that does not exist"
    );
    c.kill9();
    cluster.drain("b");
    assert!(
        b.await_exit(SESSION + Duration::from_secs(60)),
        "b drained and exited while c was down\n{}",
        b.log_text()
    );
    cluster.await_all_processing(now_ms(), "drain, one down: a alone");
    let duplicates = cluster.check_counts(&mut producer, "drain, one down");
    assert!(duplicates <= 300, "{duplicates} counted twice (one kill)");
    a.stop();
}

/// A small tmpfs, unmounted on drop. `None` where this process may not mount (not root).
struct SmallDisk(PathBuf);

impl SmallDisk {
    fn mount(at: &Path, megabytes: u32) -> Option<SmallDisk> {
        std::fs::create_dir_all(at).unwrap();
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={megabytes}m"), "tmpfs"])
            .arg(at)
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        ok.then(|| SmallDisk(at.to_owned()))
    }

    /// Writes a file until the disk is full.
    fn fill(&self) -> PathBuf {
        use std::io::Write;
        let path = self.0.join("filler");
        let mut f = std::fs::File::create(&path).unwrap();
        let block = vec![0u8; 64 << 10];
        while f.write_all(&block).is_ok() {}
        let _ = f.sync_all();
        path
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}

/// The state directory's disk fills up while events flow, then space returns. Writes the
/// store cannot take are not run again (their output is acknowledged): the store catches up
/// from the changelog once space returns. Nothing lost, nothing repeated, no log flood.
fn disk_full_then_freed() {
    let cluster = Cluster::new("diskfull");
    let Some(disk) = SmallDisk::mount(&cluster.dir.join("a"), 48) else {
        eprintln!("disk full: SKIPPED, this process cannot mount a tmpfs (run the tests as root to include it)");
        return;
    };
    // Without the record cache: every output is counted below.
    let mut a = cluster.spawn("a", NO_CACHE);
    let mut producer = Producer::start(&cluster.broker.addr, "k", 300, 60);
    cluster.await_all_processing(now_ms(), "disk full: a");
    let filler = disk.fill();
    std::thread::sleep(Duration::from_secs(8));
    assert!(
        a.await_log(&["free_bytes="], Duration::from_secs(10)),
        "the full disk is reported, with the free space\n{}",
        a.log_text()
    );
    std::fs::remove_file(&filler).unwrap();
    cluster.await_all_processing(now_ms(), "disk full: space returned");
    let duplicates = cluster.check_counts(&mut producer, "disk full");
    assert_eq!(
        duplicates, 0,
        "nothing crashed: nothing may be counted twice"
    );
    let produced: i64 = cluster.final_counts().values().sum();
    let outputs: usize = cluster.read_output().values().map(Vec::len).sum();
    assert_eq!(
        outputs as i64, produced,
        "one output per event: acknowledged output never repeated"
    );
    let reports = a
        .log_text()
        .lines()
        .filter(|l| l.contains("free_bytes="))
        .count();
    eprintln!("disk full: reported in {reports} log lines");
    // Three tasks, each failing two kinds of work (taking a batch, closing the store).
    assert!(
        reports <= 6,
        "reported once per task and kind of failure, not per retry: {reports} lines"
    );
    a.stop();
    drop(disk);
}

fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(files_under(&p));
        } else {
            out.push(p);
        }
    }
    out
}
