//! Table operations on the real broker, through a scale-out and a drain: clicks counted per
//! user, the table filtered to busy users (three clicks or more) and mapped to text, whose
//! rejected updates reach the output as tombstones; profile updates made a table
//! (`to_table`, kept in a store), empty profiles filtered out as deletes, mapped to their
//! length; users' moves between cities made a table and regrouped by city (`group_by` with
//! `count`: a move subtracts one from the old city and adds one to the new). Read as tables
//! (the last record per key), the outputs equal what the input says, a busy user's text and a
//! quiet user's tombstone alike; no record of the busy output says anything the input does not.
//! After the drain, two tables (names and homes, updated and deleted on either side) joined:
//! the joined table holds exactly the people with both. Purchases, a stream, join the clicks'
//! count (an aggregation's table) once before the scale-out and once after the drain: each
//! purchase of a user who clicked carries the user's count as it stood, once.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use baton_kafka::client::NewTopic;
use baton_kafka::records::KeyValue;
use baton_streams::serdes::{Long, Str};
use baton_streams::{Consumed, Grouped, Joined, Materialized, Produced, StreamsBuilder};
use bytes::Bytes;
use common::Setup;

const PARTITIONS: i32 = 2;
const APP: &str = "busy-users";
const CLICKS: &str = "tb-clicks";
const PROFILES: &str = "tb-profiles";
const BUSY: &str = "tb-busy-users";
const SIZES: &str = "tb-profile-sizes";
const MOVES: &str = "tb-moves";
const CITIES: &str = "tb-users-per-city";
const NAMES: &str = "tb-names";
const HOMES: &str = "tb-homes";
const PROFILES_OUT: &str = "tb-joined-profiles";
const PURCHASES: &str = "tb-purchases";
const PURCHASED: &str = "tb-purchases-with-clicks";

fn topology() -> baton_runtime::Topology {
    let builder = StreamsBuilder::new(APP);
    let clicks = builder
        .stream(CLICKS, Consumed::with(Str, Str))
        .group_by_key(Grouped::with(Str, Str))
        .count(Materialized::named("clicks"));
    builder
        .stream(PURCHASES, Consumed::with(Str, Str))
        .join(
            &clicks,
            |item: &String, n: &i64| format!("{item} after {n} clicks"),
            Joined::with(Str, Str),
        )
        .to(PURCHASED, Produced::with(Str, Str));
    clicks
        .filter(|_, n: &i64| *n >= 3)
        .map_values(|n: &i64| format!("{n} clicks"))
        .to_stream()
        .to(BUSY, Produced::with(Str, Str));
    builder
        .stream(PROFILES, Consumed::with(Str, Str))
        .to_table(Str, Str, Materialized::named("profiles"))
        .filter_not(|_, p: &String| p.is_empty())
        .map_values(|p: &String| p.len() as i64)
        .to_stream()
        .to(SIZES, Produced::with(Str, Long));
    builder
        .stream(MOVES, Consumed::with(Str, Str))
        .to_table(Str, Str, Materialized::named("user-city"))
        .group_by(
            |_, city: &String| (city.clone(), city.clone()),
            Grouped::with(Str, Str).named("by-city"),
        )
        .count(Materialized::named("users-per-city"))
        .to_stream()
        .to(CITIES, Produced::with(Str, Long));
    let names = builder.table(
        NAMES,
        Consumed::with(Str, Str),
        Materialized::named("names"),
    );
    let homes = builder.table(
        HOMES,
        Consumed::with(Str, Str),
        Materialized::named("homes"),
    );
    names
        .join(homes, |n: &String, h: &String| format!("{n}@{h}"))
        .to_stream()
        .to(PROFILES_OUT, Produced::with(Str, Str));
    builder.build().unwrap()
}

/// The input of one phase: clicks and profile updates, keyed by user, over both partitions
/// by key as a producer would send them.
struct Input {
    clicks: Vec<String>,
    profiles: Vec<(String, String)>,
    moves: Vec<(String, String)>,
}

fn phase(n: usize) -> Input {
    // Busy users, plus one quiet user per phase and `quiet0`, who clicks once in each phase
    // and so turns busy in the third (its tombstones, then its count).
    let mut clicks: Vec<String> = (0..600)
        .map(|i| format!("user{}", (i * 7 + n * 3) % 17))
        .collect();
    clicks.push(format!("quiet{}", n + 1));
    clicks.push("quiet0".to_owned());
    let profiles = (0..120)
        .map(|i| {
            let user = format!("user{}", (i * 5 + n) % 23);
            // Every fourth update empties the profile: the filtered table deletes the user.
            let profile = if (i + n).is_multiple_of(4) {
                String::new()
            } else {
                "x".repeat(1 + (i * 3 + n) % 11)
            };
            (user, profile)
        })
        .collect();
    let moves = (0..150)
        .map(|i| {
            let user = format!("user{}", (i * 11 + n * 5) % 31);
            (user, format!("city{}", (i * 3 + n * 7) % 6))
        })
        .collect();
    Input {
        clicks,
        profiles,
        moves,
    }
}

fn produce(setup: &Setup, input: &Input) {
    let keyed = |k: &str, v: &str| -> KeyValue {
        (
            Some(Bytes::copy_from_slice(k.as_bytes())),
            Some(Bytes::copy_from_slice(v.as_bytes())),
        )
    };
    let by_partition = |records: Vec<(String, String)>| {
        let mut out: BTreeMap<i32, Vec<KeyValue>> = BTreeMap::new();
        for (k, v) in records {
            let p = baton_runtime::partitioner::partition_for(k.as_bytes(), PARTITIONS as u32);
            out.entry(p as i32).or_default().push(keyed(&k, &v));
        }
        out
    };
    let clicks = input.clicks.iter().map(|u| (u.clone(), "/".to_owned()));
    for (p, records) in by_partition(clicks.collect()) {
        setup.produce_to(CLICKS, p, &records);
    }
    for (p, records) in by_partition(input.profiles.clone()) {
        setup.produce_to(PROFILES, p, &records);
    }
    for (p, records) in by_partition(input.moves.clone()) {
        setup.produce_to(MOVES, p, &records);
    }
}

/// What the outputs say once everything produced so far is processed: per user, the busy
/// text or `None` (a tombstone); per user, the profile's length or `None`; per city, its users.
type Want = (
    BTreeMap<String, Option<String>>,
    BTreeMap<String, Option<i64>>,
    BTreeMap<String, Option<i64>>,
);

fn expected(inputs: &[Input]) -> Want {
    let mut counts: BTreeMap<String, i64> = BTreeMap::new();
    let mut profiles: BTreeMap<String, String> = BTreeMap::new();
    let mut cities: BTreeMap<String, String> = BTreeMap::new();
    for input in inputs {
        for (u, c) in &input.moves {
            cities.insert(u.clone(), c.clone());
        }
        for u in &input.clicks {
            *counts.entry(u.clone()).or_default() += 1;
        }
        for (u, p) in &input.profiles {
            profiles.insert(u.clone(), p.clone());
        }
    }
    let busy = counts
        .into_iter()
        .map(|(u, n)| (u, (n >= 3).then(|| format!("{n} clicks"))))
        .collect();
    let sizes = profiles
        .into_iter()
        .map(|(u, p)| (u, (!p.is_empty()).then_some(p.len() as i64)))
        .collect();
    // Every city any user was in has a count, zero once all left it.
    let mut per_city: BTreeMap<String, Option<i64>> = inputs
        .iter()
        .flat_map(|i| &i.moves)
        .map(|(_, c)| (c.clone(), Some(0)))
        .collect();
    for c in cities.values() {
        *per_city.get_mut(c).unwrap().as_mut().unwrap() += 1;
    }
    (busy, sizes, per_city)
}

/// Round `round` of purchases: one by each of 20 users, three of whom (`user17` to
/// `user19`) never click, so the inner join drops theirs.
fn purchases(round: usize) -> Vec<(String, String)> {
    (0..20)
        .map(|u| (format!("user{u}"), format!("item{round}-{u}")))
        .collect()
}

fn produce_purchases(setup: &Setup, round: usize) {
    for (k, v) in purchases(round) {
        let p = baton_runtime::partitioner::partition_for(k.as_bytes(), PARTITIONS as u32);
        let record: KeyValue = (Some(Bytes::from(k)), Some(Bytes::from(v)));
        setup.produce_to(PURCHASES, p as i32, &[record]);
    }
}

/// Each purchase of `rounds` with the count of its user's clicks in `inputs` (all processed
/// before the round was written), once.
fn expected_purchases(rounds: &[(usize, &[Input])]) -> BTreeMap<(String, String), usize> {
    let mut want = BTreeMap::new();
    for (round, inputs) in rounds {
        for (user, item) in purchases(*round) {
            let n = inputs
                .iter()
                .flat_map(|i| &i.clicks)
                .filter(|u| **u == user)
                .count();
            if n > 0 {
                *want
                    .entry((user, format!("{item} after {n} clicks")))
                    .or_default() += 1;
            }
        }
    }
    want
}

fn purchased_view(setup: &Setup) -> BTreeMap<(String, String), usize> {
    setup.counted(PURCHASED)
}

/// The last record of each key of `topic`, its value read by `value` (`None`: a tombstone).
fn latest<V>(
    setup: &Setup,
    topic: &str,
    value: impl Fn(&[u8]) -> V,
) -> BTreeMap<String, Option<V>> {
    let mut out = BTreeMap::new();
    for r in setup.read(topic).into_values().flatten() {
        let k = String::from_utf8(r.key.expect("keyed").to_vec()).unwrap();
        out.insert(k, r.value.as_deref().map(&value));
    }
    out
}

fn busy_view(setup: &Setup) -> BTreeMap<String, Option<String>> {
    latest(setup, BUSY, |v| String::from_utf8(v.to_vec()).unwrap())
}

fn sizes_view(setup: &Setup) -> BTreeMap<String, Option<i64>> {
    latest(setup, SIZES, |v| i64::from_be_bytes(v.try_into().unwrap()))
}

fn cities_view(setup: &Setup) -> BTreeMap<String, Option<i64>> {
    latest(setup, CITIES, |v| i64::from_be_bytes(v.try_into().unwrap()))
}

/// Every record of the busy output says something true of some moment: a tombstone for a
/// count under three, else a count of three or more that never goes back within a key.
fn check_busy_records(setup: &Setup) -> usize {
    let mut last: BTreeMap<String, i64> = BTreeMap::new();
    let mut tombstones = 0;
    for r in setup.read(BUSY).into_values().flatten() {
        let k = String::from_utf8(r.key.unwrap().to_vec()).unwrap();
        let Some(v) = r.value else {
            tombstones += 1;
            assert!(
                last.get(&k).copied().unwrap_or(0) < 3,
                "{k}: a tombstone after a busy count"
            );
            continue;
        };
        let text = String::from_utf8(v.to_vec()).unwrap();
        let n: i64 = text.strip_suffix(" clicks").unwrap().parse().unwrap();
        assert!(n >= 3, "{k}: {text} passed the filter");
        assert!(
            n >= last.get(&k).copied().unwrap_or(0),
            "{k}: went back to {n}"
        );
        last.insert(k, n);
    }
    tombstones
}

#[test]
fn table_operations_answer_exactly_through_a_scale_out_and_a_drain() {
    let (broker, dir, setup) = common::start("tables", &[CLICKS, PROFILES], BUSY, PARTITIONS);
    let topic = |name: &str| NewTopic {
        name: name.into(),
        partitions: PARTITIONS,
        compacted: false,
    };
    setup
        .rt
        .block_on(setup.client.create_topics(&[
            topic(SIZES),
            topic(MOVES),
            topic(CITIES),
            topic(NAMES),
            topic(HOMES),
            topic(PROFILES_OUT),
            topic(PURCHASES),
            topic(PURCHASED),
        ]))
        .unwrap();
    let (stop, shutdown) = tokio::sync::watch::channel(false);
    let run = |name: &str| {
        let cfg = common::runtime_config(&broker.addr, &dir, APP, name, &[]);
        setup.rt.spawn(baton_runtime::instance::run(
            cfg,
            topology(),
            shutdown.clone(),
        ))
    };
    let mut inputs = vec![phase(0)];
    let a = run("a");
    produce(&setup, &inputs[0]);
    let want = expected(&inputs);
    setup.await_equal(&want.0, "busy users, one instance", busy_view);
    setup.await_equal(&want.1, "profile sizes, one instance", sizes_view);
    setup.await_equal(&want.2, "users per city, one instance", cities_view);
    produce_purchases(&setup, 0);
    let bought = expected_purchases(&[(0, &inputs[..1])]);
    setup.await_equal(
        &bought,
        "purchases with clicks, one instance",
        purchased_view,
    );

    // Scale out to two, then drain the first, with input before each.
    // b serves queries: the kept tables are read by key.
    let queries = baton_streams::queries::Queries::new();
    let b = {
        let cfg = common::serving_config(&broker.addr, &dir, APP, "b");
        setup.rt.spawn(baton_runtime::instance::run_with_queries(
            cfg,
            topology(),
            shutdown.clone(),
            queries.clone(),
        ))
    };
    inputs.push(phase(1));
    produce(&setup, &inputs[1]);
    common::drain_and_await(&setup, (APP, "a"), a);
    inputs.push(phase(2));
    produce(&setup, &inputs[2]);
    let want = expected(&inputs);
    setup.await_equal(&want.0, "busy users, after the drain", busy_view);
    setup.await_equal(&want.1, "profile sizes, after the drain", sizes_view);
    setup.await_equal(&want.2, "users per city, after the drain", cities_view);
    produce_purchases(&setup, 1);
    let bought = expected_purchases(&[(0, &inputs[..1]), (1, &inputs[..])]);
    setup.await_equal(
        &bought,
        "purchases with clicks, after the drain",
        purchased_view,
    );
    check_table_join(&setup);
    check_kept_tables(&setup, &queries, &inputs);
    let tombstones = check_busy_records(&setup);
    let quiet = want.0.values().filter(|v| v.is_none()).count();
    let deleted = want.1.values().filter(|v| v.is_none()).count();
    assert!(
        quiet > 0 && deleted > 0,
        "the input has quiet users and emptied profiles"
    );
    let moved: usize = inputs.iter().map(|i| i.moves.len()).sum();
    eprintln!(
        "tables: {} users ({quiet} quiet, {tombstones} tombstones written), {} profiles \
         ({deleted} deleted), {moved} moves over {} cities, {} purchases joined with the \
         clicks' count exact through a scale-out and a drain",
        want.0.len(),
        want.1.len(),
        want.2.len(),
        bought.len()
    );
    stop.send(true).unwrap();
    common::await_shutdown(&setup, "b", b);
    drop(broker);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Names and homes of 40 people, some changed and some deleted (a record without a value) on
/// either side: the joined table holds `name@home` exactly for those with both at the end, and
/// a person missing either has no row or a deleted one.
fn check_table_join(setup: &Setup) {
    let mut names: BTreeMap<String, Option<String>> = BTreeMap::new();
    let mut homes: BTreeMap<String, Option<String>> = BTreeMap::new();
    let mut records: BTreeMap<(&str, i32), Vec<KeyValue>> = BTreeMap::new();
    for round in 0..3 {
        for i in 0..40u32 {
            let person = format!("person{i}");
            let name = ((i + round) % 5 != 0).then(|| format!("n{i}r{round}"));
            let home = ((i * 3 + round) % 7 != 0).then(|| format!("h{}", (i + round) % 9));
            let p = baton_runtime::partitioner::partition_for(person.as_bytes(), PARTITIONS as u32)
                as i32;
            for (topic, value, side) in [(NAMES, &name, &mut names), (HOMES, &home, &mut homes)] {
                side.insert(person.clone(), value.clone());
                records.entry((topic, p)).or_default().push((
                    Some(Bytes::from(person.clone())),
                    value.clone().map(Bytes::from),
                ));
            }
        }
    }
    for ((topic, p), batch) in &records {
        setup.produce_to(topic, *p, batch);
    }
    let want: BTreeMap<String, Option<String>> = names
        .iter()
        .filter_map(|(k, n)| {
            let (n, h) = (n.as_ref()?, homes.get(k)?.as_ref()?);
            Some((k.clone(), Some(format!("{n}@{h}"))))
        })
        .collect();
    let live = |s: &Setup| -> BTreeMap<String, Option<String>> {
        latest(s, PROFILES_OUT, |v| String::from_utf8(v.to_vec()).unwrap())
            .into_iter()
            .filter(|(_, v)| v.is_some())
            .collect()
    };
    setup.await_equal(&want, "names joined with homes", live);
}

/// The stream made a table (`profiles`) and the regrouped one (`users-per-city`) answer
/// queries by key with what the input says.
fn check_kept_tables(setup: &Setup, queries: &baton_streams::queries::Queries, inputs: &[Input]) {
    use baton_streams::queries::{QueryOptions, StoreQuery};
    let mut profiles: BTreeMap<String, String> = BTreeMap::new();
    for input in inputs {
        for (u, p) in &input.profiles {
            profiles.insert(u.clone(), p.clone());
        }
    }
    let (_, _, per_city) = expected(inputs);
    let store = StoreQuery::new(queries, "profiles", Str, Str);
    let counts = StoreQuery::new(queries, "users-per-city", Str, Long);
    let options = QueryOptions::default();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let mut wrong = Vec::new();
        for (user, profile) in &profiles {
            let got = setup
                .rt
                .block_on(store.get(user, &options))
                .map(|a| a.value);
            if got.as_ref().ok() != Some(&Some(profile.clone())) {
                wrong.push(format!("{user}: {got:?}, want {profile:?}"));
            }
        }
        for (city, n) in &per_city {
            let got = setup
                .rt
                .block_on(counts.get(city, &options))
                .map(|a| a.value);
            if got.as_ref().ok() != Some(n) {
                wrong.push(format!("{city}: {got:?}, want {n:?}"));
            }
        }
        if wrong.is_empty() {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "kept tables answer queries: {}",
            wrong.join("; ")
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}
