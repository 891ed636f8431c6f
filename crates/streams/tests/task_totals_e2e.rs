//! The `task-totals` example on the real broker: the Processor API's store and wall-clock
//! punctuation through the runtime's own thread. Each task's total comes out on wall-clock
//! time whether records arrive or not, equals the records of its partition exactly, and goes
//! on from its store's changelog on an instance that takes the task over.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use baton_kafka::records::KeyValue;
use bytes::Bytes;
use common::{Instance, Setup};

const PARTITIONS: i32 = 2;
const APP: &str = "totals-e2e";
const INPUT: &str = "events";
const OUTPUT: &str = "task-totals";

fn produce(setup: &Setup, p: i32, n: usize) {
    let records: Vec<KeyValue> = (0..n)
        .map(|i| (None, Some(Bytes::from(format!("event {i}")))))
        .collect();
    setup.produce_to(INPUT, p, &records);
}

/// The last total of each task, and how many totals were written in all.
fn totals(setup: &Setup) -> (BTreeMap<String, i64>, usize) {
    let mut last = BTreeMap::new();
    let mut written = 0;
    for records in setup.read(OUTPUT).into_values() {
        for r in records {
            let (Some(k), Some(v)) = (r.key, r.value) else {
                continue;
            };
            let v: [u8; 8] = v.as_ref().try_into().expect("a Long");
            last.insert(
                String::from_utf8(k.to_vec()).unwrap(),
                i64::from_be_bytes(v),
            );
            written += 1;
        }
    }
    (last, written)
}

fn want(a: i64, b: i64) -> BTreeMap<String, i64> {
    BTreeMap::from([("total-0_0".to_owned(), a), ("total-0_1".to_owned(), b)])
}

#[test]
fn each_task_writes_its_total_on_wall_clock_time_and_keeps_it_through_a_move() {
    let (broker, dir, setup) = common::start("task-totals-e2e", &[INPUT], OUTPUT, PARTITIONS);
    let every = ["--input", INPUT, "--output", OUTPUT, "--every-ms", "300"];
    let mut a = Instance::spawn("task-totals", &broker.addr, &dir, "a", APP, &every);
    produce(&setup, 0, 50);
    produce(&setup, 1, 30);
    setup.await_equal(&want(50, 30), "one instance", |s| totals(s).0);
    // No input now: the totals keep coming, on wall-clock time.
    let (_, before) = totals(&setup);
    std::thread::sleep(Duration::from_millis(1_500));
    let (last, after) = totals(&setup);
    assert_eq!(last, want(50, 30));
    assert!(
        after >= before + 4,
        "2 tasks every 300 ms for 1.5 s: {before} then {after} totals written\n{}",
        a.log_text()
    );
    // The tasks move to b, whose stores start from the changelog.
    a.stop();
    let mut b = Instance::spawn("task-totals", &broker.addr, &dir, "b", APP, &every);
    produce(&setup, 0, 7);
    produce(&setup, 1, 5);
    setup.await_equal(&want(57, 35), "after the move to b", |s| totals(s).0);
    eprintln!("task-totals: {} totals written in all", totals(&setup).1);
    b.stop();
}
