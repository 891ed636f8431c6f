//! The `wordcount` example on the real broker, as its docs run it: lines produced while one
//! instance runs, then two more join and the first is drained, input flowing all along. Every
//! word's last count equals its occurrences in the input, and the longest stall of each
//! output partition is reported. The broker comes from `scripts/install-broker.sh`.

// The example's word split, with its unit tests, is checked here too: examples are built
// by `cargo test` but not run.
#[path = "../examples/wordcount/split.rs"]
mod split;

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use baton_kafka::records::{KeyValue, Record};
use bytes::Bytes;
use common::{now_ms, Instance, Setup};

const PARTITIONS: i32 = 4;
const APP: &str = "wc-e2e";
const INPUT: &str = "lines";
const OUTPUT: &str = "word-counts";

fn spawn(
    broker: &str,
    dir: &std::path::Path,
    name: &str,
    app: &str,
    output: &str,
    extra: &[&str],
) -> Instance {
    let mut args = vec!["--input", INPUT, "--output", output];
    args.extend_from_slice(extra);
    Instance::spawn("wordcount", broker, dir, name, app, &args)
}

/// Line `i` of the input: a few words from a small vocabulary, some repeated, mixed case and
/// punctuation, as a reader of `WordCountDemo`'s input would type.
fn line(i: u64) -> String {
    const WORDS: [&str; 12] = [
        "Kafka", "streams", "baton", "relay", "warm", "up", "hand", "over", "state", "store", "no",
        "stall",
    ];
    let n = 1 + i % 5;
    (0..n)
        .map(|j| WORDS[((i * 7 + j * 3) % 12) as usize])
        .collect::<Vec<_>>()
        .join(if i.is_multiple_of(3) { ", " } else { " " })
}

/// What `WordCountDemo` counts for `text`: lower-case words split at non-word runs.
fn words(text: &str) -> Vec<String> {
    text.to_lowercase()
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| !w.is_empty())
        .map(str::to_owned)
        .collect()
}

/// What the word-count tests do with the broker.
trait Lines {
    fn produce(&self, lines: &[String], from: u64);
    fn produce_raw(&self, p: i32, value: &[u8]);
    fn counts_in(&self, output: &str) -> BTreeMap<String, i64>;
    fn await_counts_in(&self, output: &str, want: &BTreeMap<String, i64>, what: &str);
    fn await_counts(&self, want: &BTreeMap<String, i64>, what: &str) {
        self.await_counts_in(OUTPUT, want, what)
    }
}

impl Lines for Setup {
    fn produce(&self, lines: &[String], from: u64) {
        self.rt.block_on(async {
            let mut by_partition: BTreeMap<i32, Vec<KeyValue>> = BTreeMap::new();
            for (i, l) in lines.iter().enumerate() {
                // No key, as WordCountDemo's input: spread over the partitions by line.
                let p = ((from + i as u64) % PARTITIONS as u64) as i32;
                by_partition
                    .entry(p)
                    .or_default()
                    .push((None, Some(Bytes::from(l.clone()))));
            }
            for (p, records) in by_partition {
                let leader = self.client.leader(INPUT, p).await.unwrap();
                self.client
                    .produce(&leader, INPUT, p, &records)
                    .await
                    .unwrap();
            }
        });
    }

    /// Writes `value` (any bytes) as the next record of input partition `p`.
    fn produce_raw(&self, p: i32, value: &[u8]) {
        self.rt.block_on(async {
            let leader = self.client.leader(INPUT, p).await.unwrap();
            let record: KeyValue = (None, Some(Bytes::copy_from_slice(value)));
            self.client
                .produce(&leader, INPUT, p, &[record])
                .await
                .unwrap();
        });
    }

    /// Each word's latest count in `output` (a word lives in one partition).
    fn counts_in(&self, output: &str) -> BTreeMap<String, i64> {
        let mut out = BTreeMap::new();
        for r in self.read(output).into_values().flatten() {
            let word = String::from_utf8(r.key.unwrap().to_vec()).unwrap();
            let v: [u8; 8] = r.value.unwrap().as_ref().try_into().expect("a Long");
            out.insert(word, i64::from_be_bytes(v));
        }
        out
    }

    fn await_counts_in(&self, output: &str, want: &BTreeMap<String, i64>, what: &str) {
        self.await_equal(want, what, |s| s.counts_in(output))
    }
}

/// A broker with the input and output topics, and a directory for the instances.
fn start(name: &str) -> (baton_kafka::testing::Broker, std::path::PathBuf, Setup) {
    common::start(name, &[INPUT], OUTPUT, PARTITIONS)
}

#[test]
fn wordcount_counts_every_word_exactly_through_a_scale_out_and_a_drain() {
    let (broker, dir, setup) = start("wordcount-e2e");
    let mut expected: BTreeMap<String, i64> = BTreeMap::new();
    let mut sent = 0u64;
    let mut send = |setup: &Setup, n: u64| {
        let lines: Vec<String> = (sent..sent + n).map(line).collect();
        for l in &lines {
            for w in words(l) {
                *expected.entry(w).or_insert(0) += 1;
            }
        }
        setup.produce(&lines, sent);
        sent += n;
        expected.clone()
    };

    // Every instance serves queries; b also reads "kafka"'s count in-process every 2 s.
    let servers: Vec<String> = (0..3)
        .map(|_| format!("127.0.0.1:{}", common::free_port()))
        .collect();
    let serve = |i: usize| ["--application-server", servers[i].as_str()];
    let mut a = spawn(&broker.addr, &dir, "a", APP, OUTPUT, &serve(0));
    let want = send(&setup, 3_000);
    setup.await_counts(&want, "one instance");
    eprintln!(
        "wordcount: one instance counted {} words of 3,000 lines",
        want.values().sum::<i64>()
    );

    // Scale out to three and drain the first, with lines flowing all along.
    let from = now_ms();
    let b_args = [serve(1).as_slice(), &["--watch", "kafka"]].concat();
    let mut b = spawn(&broker.addr, &dir, "b", APP, OUTPUT, &b_args);
    let mut c = spawn(&broker.addr, &dir, "c", APP, OUTPUT, &serve(2));
    for _ in 0..20 {
        send(&setup, 100);
        std::thread::sleep(Duration::from_millis(250));
    }
    setup.drain(APP, "a");
    for _ in 0..20 {
        send(&setup, 100);
        std::thread::sleep(Duration::from_millis(250));
    }
    let want = send(&setup, 1);
    let status = a.exited_within(Duration::from_secs(60));
    assert!(
        status.is_some_and(|s| s.success()),
        "a exits once drained: {status:?}\n{}",
        std::fs::read_to_string(&a.log).unwrap_or_default()
    );
    setup.await_counts(&want, "after the scale-out and the drain");
    let to = now_ms();
    // The longest stretch each output partition went without a record, join to end.
    let gaps = setup.longest_gaps(OUTPUT, from, to);
    let repartition = setup.read(&format!("{APP}-words-repartition"));
    let words_sent: i64 = want.values().sum();
    let repartitioned: usize = repartition.values().map(Vec::len).sum();
    eprintln!(
        "wordcount: {sent} lines, {words_sent} words, {} distinct, all counted exactly; \
         {repartitioned} records through the repartition topic; longest gap per output \
         partition {gaps:?}",
        want.len()
    );
    assert!(
        repartitioned as i64 >= words_sent,
        "every word went through the repartition topic"
    );
    let worst = gaps.values().copied().fold(0.0, f64::max);
    assert!(worst < 10.0, "an output partition stalled {worst:.2} s");
    // The example's in-process query reads the final count, wherever "kafka" is held.
    let seen = format!("watch: kafka = {} (", want["kafka"]);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !b.log_text().contains(&seen) {
        assert!(
            std::time::Instant::now() < deadline,
            "b's in-process query never read {seen:?}\n{}",
            b.log_text()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    for i in [&mut b, &mut c] {
        assert!(
            i.exited_within(Duration::ZERO).is_none(),
            "{} runs on",
            i.name
        );
        i.stop();
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A line that is not UTF-8, first in partition 0, among good lines: under `skip` and
/// `dead-letter` every good line is counted and the bad one is logged (and written to the
/// dead-letter topic as it came); under `fail` only the task of partition 0 stops, at that
/// line, naming it, and every other partition's lines are counted while the instance runs on.
#[test]
fn a_line_that_is_not_text_follows_the_deserialization_policy() {
    let (broker, dir, setup) = start("wordcount-bad-input");
    let bad: &[u8] = &[0xff, 0xfe, b'x'];
    setup.produce_raw(0, bad);
    let lines: Vec<String> = (0..400).map(line).collect();
    setup.produce(&lines, 0);
    let count = |keep: &dyn Fn(u64) -> bool| {
        let mut want: BTreeMap<String, i64> = BTreeMap::new();
        for (i, l) in lines.iter().enumerate() {
            if keep(i as u64) {
                for w in words(l) {
                    *want.entry(w).or_insert(0) += 1;
                }
            }
        }
        want
    };
    let all = count(&|_| true);
    let runs: [(&str, &str, &[&str]); 3] = [
        ("skip", "wc-skip", &["--on-deserialization-error", "skip"]),
        (
            "dlq",
            "wc-dlq",
            &["--on-deserialization-error", "dead-letter=wc-bad-lines"],
        ),
        ("fail", "wc-fail", &[]),
    ];
    for (name, app, extra) in runs {
        let output = format!("{app}-counts");
        let mut i = spawn(&broker.addr, &dir, name, app, &output, extra);
        if name == "fail" {
            // Partition 0's task stops at its first record; its lines are not counted.
            let want = count(&|n| n % PARTITIONS as u64 != 0);
            setup.await_counts_in(&output, &want, "fail: the other partitions");
            std::thread::sleep(Duration::from_secs(2));
            assert_eq!(
                setup.counts_in(&output),
                want,
                "fail: partition 0 stays stopped"
            );
            let log = i.log_text();
            assert!(
                log.contains("cannot be deserialized; stopping this task only")
                    && log.contains(&format!("{INPUT}-0 offset 0")),
                "fail names the task's topic, partition and offset\n{log}"
            );
            assert!(
                i.exited_within(Duration::ZERO).is_none(),
                "the instance runs on"
            );
        } else {
            setup.await_counts_in(&output, &all, name);
            let log = i.log_text();
            assert_eq!(
                log.matches("cannot be deserialized; skipping it").count(),
                1,
                "{name}: the bad line is logged once\n{log}"
            );
        }
        if name == "dlq" {
            let letters: Vec<Record> = setup.read_all("wc-bad-lines");
            assert_eq!(letters.len(), 1, "one dead letter");
            assert_eq!(letters[0].value.as_deref(), Some(bad), "as it came");
        }
        eprintln!("bad input under {name}: counted exactly what the policy promises");
        i.stop();
    }
    let _ = std::fs::remove_dir_all(&dir);
}
