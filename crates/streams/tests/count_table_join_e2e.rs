//! An aggregation's table joined with a table read from its topic, on the real broker through
//! a scale-out and a drain: clicks counted per user, joined with the users' names (renamed and
//! deleted as it runs). Read as a table (the last record per user), the output holds
//! `name:count` for exactly the users with both a name and a click, with their latest name
//! and count.

mod common;

use std::collections::BTreeMap;

use baton_kafka::records::KeyValue;
use baton_runtime::partitioner::partition_for;
use baton_streams::serdes::{Serde, Str};
use baton_streams::{Consumed, Grouped, Materialized, Produced, StreamsBuilder};
use bytes::Bytes;
use common::Setup;

const PARTITIONS: i32 = 2;
const APP: &str = "named-clicks";
const CLICKS: &str = "ctj-clicks";
const NAMES: &str = "ctj-names";
const OUTPUT: &str = "ctj-named-counts";

fn topology() -> baton_runtime::Topology {
    let builder = StreamsBuilder::new(APP);
    let names = builder.table(
        NAMES,
        Consumed::with(Str, Str),
        Materialized::named("names"),
    );
    builder
        .stream(CLICKS, Consumed::with(Str, Str))
        .group_by_key(Grouped::with(Str, Str))
        .count(Materialized::named("clicks"))
        .join(names, |n: &i64, name: &String| format!("{name}:{n}"))
        .to_stream()
        .to(OUTPUT, Produced::with(Str, Str));
    builder.build().unwrap()
}

fn kv(k: &str, v: Option<&str>) -> KeyValue {
    (
        Some(Bytes::from(k.to_owned())),
        v.map(|v| Bytes::from(v.to_owned())),
    )
}

/// What the test has sent so far: each user's clicks and name.
#[derive(Default)]
struct Sent {
    clicks: BTreeMap<String, i64>,
    names: BTreeMap<String, String>,
}

impl Sent {
    fn click(&mut self, setup: &Setup, user: &str) {
        let p = partition_for(user.as_bytes(), PARTITIONS as u32) as i32;
        setup.produce_to(CLICKS, p, &[kv(user, Some("/"))]);
        *self.clicks.entry(user.to_owned()).or_default() += 1;
    }

    fn name(&mut self, setup: &Setup, user: &str, name: Option<&str>) {
        let p = partition_for(user.as_bytes(), PARTITIONS as u32) as i32;
        setup.produce_to(NAMES, p, &[kv(user, name)]);
        match name {
            Some(n) => self.names.insert(user.to_owned(), n.to_owned()),
            None => self.names.remove(user),
        };
    }

    fn expected(&self) -> BTreeMap<String, String> {
        self.clicks
            .iter()
            .filter_map(|(u, n)| Some((u.clone(), format!("{}:{n}", self.names.get(u)?))))
            .collect()
    }

    /// Phase `phase`: users 0..12 click (user u, u % 3 + 1 times), names given to the even
    /// users, renamed each phase; user 4 loses its name in phase 1.
    fn phase(&mut self, setup: &Setup, phase: usize) {
        for u in 0..12 {
            let user = format!("user{u}");
            if u % 2 == 0 {
                self.name(setup, &user, Some(&format!("name{u}-{phase}")));
            }
            for _ in 0..u % 3 + 1 {
                self.click(setup, &user);
            }
        }
        if phase == 1 {
            self.name(setup, "user4", None);
        }
    }
}

/// The output read as a table: each user's last record, deletes removing it.
fn joined(setup: &Setup) -> BTreeMap<String, String> {
    setup.latest_text(OUTPUT)
}

#[test]
fn a_count_joins_a_table_exactly_through_a_scale_out_and_a_drain() {
    let (broker, dir, setup) =
        common::start("count-table-join", &[CLICKS, NAMES], OUTPUT, PARTITIONS);
    let mut sent = Sent::default();
    let want = common::scale_out_and_drain(
        &setup,
        (broker.addr.as_str(), dir.as_path()),
        (APP, topology),
        ("named counts", |s: &Setup, n| {
            sent.phase(s, n as usize);
            sent.expected()
        }),
        joined,
    );
    eprintln!(
        "count joined with a table: {} users exact through a scale-out and a drain",
        want.len()
    );
    drop(broker);
    let _ = std::fs::remove_dir_all(&dir);
}

const BUYS: &str = "ctj-buys";
const ACTIVITY: &str = "ctj-activity";

/// Clicks and purchases counted per user, the two counts outer-joined: the two aggregations'
/// sub-topologies become one, reading both topics.
fn two_counts() -> baton_runtime::Topology {
    let builder = StreamsBuilder::new("activity");
    let count = |topic: &str, store: &str| {
        builder
            .stream(topic, Consumed::with(Str, Str))
            .group_by_key(Grouped::with(Str, Str))
            .count(Materialized::named(store))
    };
    let clicks = count(CLICKS, "clicks");
    let buys = count(BUYS, "buys");
    clicks
        .outer_join(buys, |c: Option<&i64>, b: Option<&i64>| {
            format!("{}/{}", c.copied().unwrap_or(0), b.copied().unwrap_or(0))
        })
        .to_stream()
        .to(ACTIVITY, Produced::with(Str, Str));
    builder.build().unwrap()
}

#[test]
fn two_counts_join_exactly_through_a_scale_out_and_a_drain() {
    let (broker, dir, setup) = common::start("two-counts", &[CLICKS, BUYS], ACTIVITY, PARTITIONS);
    let (mut clicks, mut buys) = (
        BTreeMap::<String, i64>::new(),
        BTreeMap::<String, i64>::new(),
    );
    let send = |setup: &Setup, phase: u32| {
        let phase = u64::from(phase);
        for u in 0..10u64 {
            let user = format!("user{u}");
            let p = partition_for(user.as_bytes(), PARTITIONS as u32) as i32;
            for _ in 0..(u + phase) % 3 {
                setup.produce_to(CLICKS, p, &[kv(&user, Some("/"))]);
                *clicks.entry(user.clone()).or_default() += 1;
            }
            if (u + phase).is_multiple_of(4) {
                setup.produce_to(BUYS, p, &[kv(&user, Some("$"))]);
                *buys.entry(user.clone()).or_default() += 1;
            }
        }
        let users: std::collections::BTreeSet<&String> = clicks.keys().chain(buys.keys()).collect();
        users
            .into_iter()
            .map(|u| {
                let (c, b) = (
                    clicks.get(u).copied().unwrap_or(0),
                    buys.get(u).copied().unwrap_or(0),
                );
                (u.clone(), format!("{c}/{b}"))
            })
            .collect::<BTreeMap<String, String>>()
    };
    let read = |s: &Setup| {
        let mut out = BTreeMap::new();
        for r in s.read(ACTIVITY).into_values().flatten() {
            let user = Str.deserialize(&r.key.unwrap()).unwrap();
            out.insert(user, Str.deserialize(&r.value.unwrap()).unwrap());
        }
        out
    };
    let want = common::scale_out_and_drain(
        &setup,
        (broker.addr.as_str(), dir.as_path()),
        ("activity", two_counts),
        ("activity", send),
        read,
    );
    eprintln!(
        "two counts joined: {} users exact through a scale-out and a drain",
        want.len()
    );
    drop(broker);
    let _ = std::fs::remove_dir_all(&dir);
}
