//! Names Baton generates for what an application leaves unnamed, against the names Kafka
//! Streams generates for the same DSL calls: every processor, store and internal topic of each
//! program, per sub-topology. A Kafka Streams application moves to Baton with its state only
//! if its stores' changelogs and its repartition topics are found under the same names.
//!
//! Where the expected names come from (Apache Kafka trunk 1eb7644):
//! - Kafka's own tests and docs, quoted in each test: `TopologyTest`,
//!   `PurgeRepartitionTopicIntegrationTest`, `docs/streams/tutorial.html`.
//! - Its rules, for programs no Kafka test has: `InternalStreamsBuilder.newProcessorName` and
//!   `newStoreName` (one counter, `%010d`), taken in this order per call:
//!   `stream` a source; `filter`, `mapValues`, `flatMapValues`, `selectKey`, `map`, `peek`,
//!   `merge`, `process` one each; `to` a sink; `groupBy` a key selection named after its
//!   `Grouped` if named, else numbered (`KStreamImpl.groupBy`); `count()`, `reduce`,
//!   `aggregate` the store (if unnamed) then the processor (`KGroupedStreamImpl`;
//!   `count(Materialized)` without a name takes one more first), then, through a repartition,
//!   three for its sink, filter and source (`KStreamImpl.createRepartitionedSource`), named
//!   `<topic>-sink`, `-filter`, `-source` unless the topic is named after a generated name;
//!   `toStream` one (`KTABLE-TOSTREAM-`); `table` the store (`<topic>-STATE-STORE-`), then a
//!   source and a table source; a stream-table join its repartition's three (named after the
//!   `Joined`, else after the stream's last node), then the join (named as the `Joined`);
//!   `split` the splitter, and one per branch (`BranchedKStreamImpl.createBranch`);
//!   `repartition` its name's number when unnamed (`KStreamImpl.doRepartition`), then the
//!   three of `createRepartitionedSource`.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use baton_streams::serdes::{Long, Str, TimeWindowed};
use baton_streams::{
    Branched, Consumed, Grouped, Joined, Materialized, Produced, Repartitioned, SessionWindows,
    StreamsBuilder, TimeWindows,
};

/// Node names per sub-topology, as `describe` prints them.
type Nodes = BTreeMap<usize, BTreeSet<String>>;

fn nodes_of(described: &str) -> Nodes {
    let mut out = Nodes::new();
    let mut sub = 0;
    for line in described.lines() {
        let line = line.trim();
        if let Some(n) = line.strip_prefix("Sub-topology: ") {
            // "<n>", or "<n> for global store (will not generate tasks)".
            sub = n.split(' ').next().unwrap().parse().unwrap();
            continue;
        }
        for kind in ["Source: ", "Processor: ", "Sink: "] {
            if let Some(rest) = line.strip_prefix(kind) {
                let name = rest.split(" (").next().unwrap();
                out.entry(sub).or_default().insert(name.to_owned());
            }
        }
    }
    out
}

fn expect(subs: &[&[&str]]) -> Nodes {
    subs.iter()
        .enumerate()
        .map(|(i, names)| (i, names.iter().map(|n| (*n).to_owned()).collect()))
        .collect()
}

/// Checks `builder`'s nodes, stores and repartition topics against Kafka's.
fn check(builder: StreamsBuilder, nodes: &[&[&str]], stores: &[&str], repartition: &[&str]) {
    let described = builder.describe();
    assert_eq!(nodes_of(&described), expect(nodes), "{described}");
    let topology = builder.build().unwrap();
    let mut have: Vec<&str> = topology.store_names();
    have.sort_unstable();
    let mut want = stores.to_vec();
    want.sort_unstable();
    assert_eq!(have, want, "stores\n{described}");
    let topics: BTreeSet<&str> = topology
        .repartition_topics()
        .into_iter()
        .map(|(t, _)| t)
        .collect();
    assert_eq!(
        topics,
        repartition.iter().copied().collect(),
        "repartition topics\n{described}"
    );
}

/// `TopologyTest.kGroupedStreamZeroArgCountShouldPreserveTopologyStructure`:
/// `stream("input-topic").groupByKey().count()` has `KSTREAM-AGGREGATE-0000000002` with
/// store `KSTREAM-AGGREGATE-STATE-STORE-0000000001`.
#[test]
fn count_without_a_store_name_is_numbered_as_kafkas_count() {
    let b = StreamsBuilder::new("app");
    b.stream("input-topic", Consumed::with(Str, Str))
        .group_by_key(Grouped::with(Str, Str))
        .count(Materialized::generated());
    check(
        b,
        &[&["KSTREAM-SOURCE-0000000000", "KSTREAM-AGGREGATE-0000000002"]],
        &["KSTREAM-AGGREGATE-STATE-STORE-0000000001"],
        &[],
    );
}

/// `TopologyTest.kGroupedStreamAnonymousMaterializedCountShouldPreserveTopologyStructure`:
/// `count(Materialized.with(null, Serdes.Long()))` takes a number more: aggregate 3, store 2.
/// And `kGroupedStreamNamedMaterializedCountShouldPreserveTopologyStructure`:
/// `count(Materialized.as("count-store"))` is `KSTREAM-AGGREGATE-0000000001`.
#[test]
fn count_with_an_unnamed_or_named_materialized_is_numbered_as_kafkas() {
    let b = StreamsBuilder::new("app");
    b.stream("input-topic", Consumed::with(Str, Str))
        .group_by_key(Grouped::with(Str, Str))
        .count(Materialized::unnamed());
    check(
        b,
        &[&["KSTREAM-SOURCE-0000000000", "KSTREAM-AGGREGATE-0000000003"]],
        &["KSTREAM-AGGREGATE-STATE-STORE-0000000002"],
        &[],
    );
    let b = StreamsBuilder::new("app");
    b.stream("input-topic", Consumed::with(Str, Str))
        .group_by_key(Grouped::with(Str, Str))
        .count(Materialized::named("count-store"));
    check(
        b,
        &[&["KSTREAM-SOURCE-0000000000", "KSTREAM-AGGREGATE-0000000001"]],
        &["count-store"],
        &[],
    );
}

/// `PurgeRepartitionTopicIntegrationTest`: `stream(INPUT).groupBy(mapper).count()` repartitions
/// through `<app>-KSTREAM-AGGREGATE-STATE-STORE-0000000002-repartition`.
#[test]
fn an_unnamed_grouping_repartitions_through_kafkas_topic() {
    let b = StreamsBuilder::new("app");
    b.stream("input", Consumed::with(Str, Str))
        .group_by(|_, v: &String| v.clone(), Grouped::with(Str, Str))
        .count(Materialized::generated());
    check(
        b,
        &[
            &[
                "KSTREAM-SOURCE-0000000000",
                "KSTREAM-KEY-SELECT-0000000001",
                "KSTREAM-FILTER-0000000005",
                "KSTREAM-SINK-0000000004",
            ],
            &["KSTREAM-SOURCE-0000000006", "KSTREAM-AGGREGATE-0000000003"],
        ],
        &["KSTREAM-AGGREGATE-STATE-STORE-0000000002"],
        &["app-KSTREAM-AGGREGATE-STATE-STORE-0000000002-repartition"],
    );
}

/// Word count as Kafka's tutorial writes it (`docs/streams/tutorial.html`: `groupBy` without a
/// name, `count(Materialized.as("counts-store"))`): the tutorial prints
/// `KSTREAM-AGGREGATE-0000000003`, `KTABLE-TOSTREAM-0000000007`, `KSTREAM-SINK-0000000008`
/// and the repartition's numbers 4, 5, 6; Kafka names those three after the topic since
/// (`counts-store-repartition-sink`, `-filter`, `-source`).
#[test]
fn the_tutorials_word_count_has_kafkas_names() {
    let b = StreamsBuilder::new("streams-wordcount");
    b.stream("streams-plaintext-input", Consumed::with(Str, Str))
        .flat_map_values(|l: &String| l.split_whitespace().map(str::to_owned).collect::<Vec<_>>())
        .group_by(|_, w: &String| w.clone(), Grouped::with(Str, Str))
        .count(Materialized::named("counts-store"))
        .to_stream()
        .to("streams-wordcount-output", Produced::with(Str, Long));
    check(
        b,
        &[
            &[
                "KSTREAM-SOURCE-0000000000",
                "KSTREAM-FLATMAPVALUES-0000000001",
                "KSTREAM-KEY-SELECT-0000000002",
                "counts-store-repartition-filter",
                "counts-store-repartition-sink",
            ],
            &[
                "counts-store-repartition-source",
                "KSTREAM-AGGREGATE-0000000003",
                "KTABLE-TOSTREAM-0000000007",
                "KSTREAM-SINK-0000000008",
            ],
        ],
        &["counts-store"],
        &["streams-wordcount-counts-store-repartition"],
    );
}

/// The README's word count (names given) and the same program with none.
#[test]
fn the_readmes_word_count_named_and_unnamed_has_kafkas_names() {
    let wordcount = |grouped: Grouped<Str, Str>, materialized: Materialized| {
        let b = StreamsBuilder::new("wordcount");
        b.stream("lines", Consumed::with(Str, Str))
            .flat_map_values(|line: &String| {
                line.to_lowercase()
                    .split_whitespace()
                    .map(str::to_owned)
                    .collect::<Vec<_>>()
            })
            .group_by(|_, word: &String| word.clone(), grouped)
            .count(materialized)
            .to_stream()
            .to("word-counts", Produced::with(Str, Long));
        b
    };
    // `Grouped.as("words")` names the key selection "words" (no number).
    check(
        wordcount(
            Grouped::with(Str, Str).named("words"),
            Materialized::named("counts"),
        ),
        &[
            &[
                "KSTREAM-SOURCE-0000000000",
                "KSTREAM-FLATMAPVALUES-0000000001",
                "words",
                "words-repartition-filter",
                "words-repartition-sink",
            ],
            &[
                "words-repartition-source",
                "KSTREAM-AGGREGATE-0000000002",
                "KTABLE-TOSTREAM-0000000006",
                "KSTREAM-SINK-0000000007",
            ],
        ],
        &["counts"],
        &["wordcount-words-repartition"],
    );
    check(
        wordcount(Grouped::with(Str, Str), Materialized::generated()),
        &[
            &[
                "KSTREAM-SOURCE-0000000000",
                "KSTREAM-FLATMAPVALUES-0000000001",
                "KSTREAM-KEY-SELECT-0000000002",
                "KSTREAM-FILTER-0000000006",
                "KSTREAM-SINK-0000000005",
            ],
            &[
                "KSTREAM-SOURCE-0000000007",
                "KSTREAM-AGGREGATE-0000000004",
                "KTABLE-TOSTREAM-0000000008",
                "KSTREAM-SINK-0000000009",
            ],
        ],
        &["KSTREAM-AGGREGATE-STATE-STORE-0000000003"],
        &["wordcount-KSTREAM-AGGREGATE-STATE-STORE-0000000003-repartition"],
    );
}

/// The `windowed-views` example without a store name: a windowed `count()` numbers its store
/// and processor as `TimeWindowedKStreamImpl.count()` does.
#[test]
fn a_windowed_count_without_names_has_kafkas_names() {
    let minute = Duration::from_secs(60);
    let b = StreamsBuilder::new("views");
    b.stream("page-views", Consumed::with(Str, Str))
        .group_by_key(Grouped::with(Str, Str))
        .windowed_by(TimeWindows::of_size_and_grace(
            minute,
            Duration::from_secs(10),
        ))
        .count(Materialized::generated())
        .to_stream()
        .to(
            "views-per-user",
            Produced::with(TimeWindowed::new(Str, minute), Long),
        );
    check(
        b,
        &[&[
            "KSTREAM-SOURCE-0000000000",
            "KSTREAM-AGGREGATE-0000000002",
            "KTABLE-TOSTREAM-0000000003",
            "KSTREAM-SINK-0000000004",
        ]],
        &["KSTREAM-AGGREGATE-STATE-STORE-0000000001"],
        &[],
    );
}

/// A `reduce` without a store name is `KSTREAM-REDUCE-...` (`KGroupedStreamImpl.reduce`),
/// after a filter and a `mapValues`; `peek` and `process` take theirs.
#[test]
fn a_reduce_and_stateless_steps_without_names_have_kafkas_names() {
    let b = StreamsBuilder::new("app");
    b.stream("in", Consumed::with(Str, Str))
        .filter(|_, v: &String| !v.is_empty())
        .map_values(|v: &String| v.to_uppercase())
        .peek(|_, _| {})
        .group_by_key(Grouped::with(Str, Str))
        .reduce(|a, b| a + &b, Materialized::generated())
        .to_stream()
        .to("out", Produced::with(Str, Str));
    check(
        b,
        &[&[
            "KSTREAM-SOURCE-0000000000",
            "KSTREAM-FILTER-0000000001",
            "KSTREAM-MAPVALUES-0000000002",
            "KSTREAM-PEEK-0000000003",
            "KSTREAM-REDUCE-0000000005",
            "KTABLE-TOSTREAM-0000000006",
            "KSTREAM-SINK-0000000007",
        ]],
        &["KSTREAM-REDUCE-STATE-STORE-0000000004"],
        &[],
    );
}

/// The `enrich-orders` example without names: `table("customers")` takes the store's number,
/// then its source's and table source's; the re-keyed orders repartition after their last node
/// (`KStreamImpl.repartitionForJoin`), then the left join takes its number.
#[test]
fn a_table_join_without_names_has_kafkas_names() {
    let b = StreamsBuilder::new("shop");
    let customers = b.table(
        "customers",
        Consumed::with(Str, Str),
        Materialized::generated(),
    );
    b.stream("orders", Consumed::with(Str, Str))
        .map(|id: &String, customer: &String| (customer.clone(), id.clone()))
        .left_join(
            &customers,
            |order: &String, c: Option<&String>| format!("{order}:{c:?}"),
            Joined::with(Str, Str),
        )
        .to("enriched", Produced::with(Str, Str));
    check(
        b,
        // The table was read first: Kafka writes its nodes first and numbers their group,
        // the join's, 0 (`InternalTopologyBuilder.makeNodeGroups`).
        &[
            &[
                "KSTREAM-SOURCE-0000000007",
                "KSTREAM-SOURCE-0000000001",
                "KTABLE-SOURCE-0000000002",
                "KSTREAM-LEFTJOIN-0000000008",
                "KSTREAM-SINK-0000000009",
            ],
            &[
                "KSTREAM-SOURCE-0000000003",
                "KSTREAM-MAP-0000000004",
                "KSTREAM-FILTER-0000000006",
                "KSTREAM-SINK-0000000005",
            ],
        ],
        &["customers-STATE-STORE-0000000000"],
        &["shop-KSTREAM-MAP-0000000004-repartition"],
    );
}

/// `split()` names its splitter `KSTREAM-BRANCH-<n>` and takes a number per branch, whose
/// node is the splitter's name and the branch's (its position when unnamed, 0 the default).
#[test]
fn a_split_without_names_has_kafkas_names() {
    let b = StreamsBuilder::new("app");
    let mut parts = b
        .stream("in", Consumed::with(Str, Str))
        .split()
        .branch(|_, v: &String| v.len() > 3, Branched::generated())
        .default_branch(Branched::generated());
    parts
        .remove("KSTREAM-BRANCH-00000000011")
        .unwrap()
        .to("long", Produced::with(Str, Str));
    parts
        .remove("KSTREAM-BRANCH-00000000010")
        .unwrap()
        .to("short", Produced::with(Str, Str));
    check(
        b,
        &[&[
            "KSTREAM-SOURCE-0000000000",
            "KSTREAM-BRANCH-0000000001",
            "KSTREAM-BRANCH-00000000011",
            "KSTREAM-BRANCH-00000000010",
            "KSTREAM-SINK-0000000004",
            "KSTREAM-SINK-0000000005",
        ]],
        &[],
        &[],
    );
}

/// `KStreamRepartitionIntegrationTest.shouldCreateRepartitionTopicIfKeyChangingOperationWasNotPerformed`:
/// `repartition(Repartitioned.as("dummy"))` writes `<app>-dummy-repartition` through
/// `dummy-repartition-sink`; its filter and source are named after the topic too, and the
/// three numbers are taken all the same (`to` is sink 4).
#[test]
fn a_named_repartition_is_named_as_kafkas() {
    let b = StreamsBuilder::new("app");
    b.stream("input", Consumed::with(Str, Str))
        .repartition(Repartitioned::with(Str, Str).named("dummy"))
        .to("output", Produced::with(Str, Str));
    check(
        b,
        &[
            &[
                "KSTREAM-SOURCE-0000000000",
                "dummy-repartition-filter",
                "dummy-repartition-sink",
            ],
            &["dummy-repartition-source", "KSTREAM-SINK-0000000004"],
        ],
        &[],
        &["app-dummy-repartition"],
    );
}

/// `KStreamRepartitionIntegrationTest.shouldRepartitionTopicIfKeyChangingOperationWasPerformed`
/// (`selectKey(...).repartition()`): the unnamed repartition takes
/// `KSTREAM-REPARTITION-0000000002` for its topic, then sink 3, filter 4 and source 5 keep
/// their numbered names, as the topic's prefix is a generated name.
#[test]
fn an_unnamed_repartition_is_numbered_as_kafkas() {
    let b = StreamsBuilder::new("app");
    b.stream("input", Consumed::with(Str, Str))
        .select_key(|_, v: &String| v.clone())
        .repartition(Repartitioned::with(Str, Str))
        .to("output", Produced::with(Str, Str));
    check(
        b,
        &[
            &[
                "KSTREAM-SOURCE-0000000000",
                "KSTREAM-KEY-SELECT-0000000001",
                "KSTREAM-FILTER-0000000004",
                "KSTREAM-SINK-0000000003",
            ],
            &["KSTREAM-SOURCE-0000000005", "KSTREAM-SINK-0000000006"],
        ],
        &[],
        &["app-KSTREAM-REPARTITION-0000000002-repartition"],
    );
}

/// `KStreamImplTest.shouldNotMaterializedKTableFromKStream`:
/// `stream(input).toTable().toStream().to(output)` is source 0, `KSTREAM-TOTABLE-0000000001`
/// (stores: []), `KTABLE-TOSTREAM-0000000003`, `KSTREAM-SINK-0000000004` (the store's
/// number, 2, is taken and no store made). And `shouldMaterializeKTableFromKStream`:
/// `toTable(Materialized.as("store"))` is `KSTREAM-TOTABLE-0000000001` with store `store`.
#[test]
fn a_stream_made_a_table_is_numbered_as_kafkas_to_table() {
    let b = StreamsBuilder::new("app");
    b.stream("input", Consumed::with(Str, Str))
        .to_table(Str, Str, Materialized::generated())
        .to_stream()
        .to("output", Produced::with(Str, Str));
    check(
        b,
        &[&[
            "KSTREAM-SOURCE-0000000000",
            "KSTREAM-TOTABLE-0000000001",
            "KTABLE-TOSTREAM-0000000003",
            "KSTREAM-SINK-0000000004",
        ]],
        &[],
        &[],
    );
    let b = StreamsBuilder::new("app");
    b.stream("input", Consumed::with(Str, Str))
        .to_table(Str, Str, Materialized::named("store"));
    check(
        b,
        &[&["KSTREAM-SOURCE-0000000000", "KSTREAM-TOTABLE-0000000001"]],
        &["store"],
        &[],
    );
}

/// `KStreamImplTest.shouldSupportKeyChangeKTableFromKStream`: after a `map`, `toTable`
/// repartitions through `KSTREAM-TOTABLE-0000000002-repartition` (sink 4, filter 5, source 6;
/// the store's number, 3, taken), then `KTABLE-TOSTREAM-0000000007` and
/// `KSTREAM-SINK-0000000008` in sub-topology 1.
#[test]
fn a_stream_made_a_table_after_a_key_change_repartitions_as_kafkas() {
    let b = StreamsBuilder::new("app");
    b.stream("input", Consumed::with(Str, Str))
        .map(|k: &String, v: &String| (k.chars().take(1).collect::<String>(), v.clone()))
        .to_table(Str, Str, Materialized::unnamed())
        .to_stream()
        .to("output", Produced::with(Str, Str));
    check(
        b,
        &[
            &[
                "KSTREAM-SOURCE-0000000000",
                "KSTREAM-MAP-0000000001",
                "KSTREAM-FILTER-0000000005",
                "KSTREAM-SINK-0000000004",
            ],
            &[
                "KSTREAM-SOURCE-0000000006",
                "KSTREAM-TOTABLE-0000000002",
                "KTABLE-TOSTREAM-0000000007",
                "KSTREAM-SINK-0000000008",
            ],
        ],
        &[],
        &["app-KSTREAM-TOTABLE-0000000002-repartition"],
    );
}

/// `TopologyTest.kTableNonMaterializedMapValuesShouldPreserveTopologyStructure` and
/// `kTableNonMaterializedFilterShouldPreserveTopologyStructure`: `table("input-topic")`
/// takes the store's number 0, then source 1 and table source 2; `mapValues` (or `filter`)
/// is `KTABLE-MAPVALUES-0000000003` (`KTABLE-FILTER-0000000003`), with no store.
#[test]
fn table_operations_are_numbered_as_kafkas() {
    let b = StreamsBuilder::new("app");
    b.table(
        "input-topic",
        Consumed::with(Str, Str),
        Materialized::generated(),
    )
    .map_values(|v: &String| v.len() as i64);
    check(
        b,
        &[&[
            "KSTREAM-SOURCE-0000000001",
            "KTABLE-SOURCE-0000000002",
            "KTABLE-MAPVALUES-0000000003",
        ]],
        &[],
        &[],
    );
    let b = StreamsBuilder::new("app");
    b.table(
        "input-topic",
        Consumed::with(Str, Str),
        Materialized::generated(),
    )
    .filter(|_, v: &String| !v.is_empty());
    check(
        b,
        &[&[
            "KSTREAM-SOURCE-0000000001",
            "KTABLE-SOURCE-0000000002",
            "KTABLE-FILTER-0000000003",
        ]],
        &[],
        &[],
    );
}

/// `TopologyTest.tableZeroArgCountShouldPreserveTopologyStructure`:
/// `table("input-topic").groupBy(..).count()` keeps the table in
/// `input-topic-STATE-STORE-0000000000`, selects with `KTABLE-SELECT-0000000003`, then the
/// store `KTABLE-AGGREGATE-STATE-STORE-0000000004`, sink 5 to
/// `KTABLE-AGGREGATE-STATE-STORE-0000000004-repartition`, source 6 and
/// `KTABLE-AGGREGATE-0000000007`. And `tableNamedMaterializedCountShouldPreserveTopologyStructure`:
/// `count(Materialized.as("count-store"))`: sink 4 to `count-store-repartition`, source 5,
/// `KTABLE-AGGREGATE-0000000006`.
#[test]
fn a_grouped_table_is_numbered_as_kafkas() {
    let b = StreamsBuilder::new("app");
    b.table(
        "input-topic",
        Consumed::with(Str, Str),
        Materialized::generated(),
    )
    .group_by(
        |k: &String, v: &String| (v.clone(), k.clone()),
        Grouped::with(Str, Str),
    )
    .count(Materialized::generated());
    check(
        b,
        &[
            &[
                "KSTREAM-SOURCE-0000000001",
                "KTABLE-SOURCE-0000000002",
                "KTABLE-SELECT-0000000003",
                "KSTREAM-SINK-0000000005",
            ],
            &["KSTREAM-SOURCE-0000000006", "KTABLE-AGGREGATE-0000000007"],
        ],
        &[
            "input-topic-STATE-STORE-0000000000",
            "KTABLE-AGGREGATE-STATE-STORE-0000000004",
        ],
        &["app-KTABLE-AGGREGATE-STATE-STORE-0000000004-repartition"],
    );
    let b = StreamsBuilder::new("app");
    b.table(
        "input-topic",
        Consumed::with(Str, Str),
        Materialized::generated(),
    )
    .group_by(
        |k: &String, v: &String| (v.clone(), k.clone()),
        Grouped::with(Str, Str),
    )
    .count(Materialized::named("count-store"));
    check(
        b,
        &[
            &[
                "KSTREAM-SOURCE-0000000001",
                "KTABLE-SOURCE-0000000002",
                "KTABLE-SELECT-0000000003",
                "KSTREAM-SINK-0000000004",
            ],
            &["KSTREAM-SOURCE-0000000005", "KTABLE-AGGREGATE-0000000006"],
        ],
        &["input-topic-STATE-STORE-0000000000", "count-store"],
        &["app-count-store-repartition"],
    );
}

/// `TopologyTest.sessionWindowZeroArgCountShouldPreserveTopologyStructure`:
/// `groupByKey().windowedBy(SessionWindows...).count()` is `KSTREAM-AGGREGATE-0000000002` with
/// store `KSTREAM-AGGREGATE-STATE-STORE-0000000001`; `sessionWindowNamedMaterializedCount...`:
/// `count(Materialized.as("count-store"))` is `KSTREAM-AGGREGATE-0000000001`.
#[test]
fn a_session_windowed_count_is_numbered_as_kafkas() {
    let gap = SessionWindows::of_inactivity_gap_with_no_grace(Duration::from_millis(1));
    let b = StreamsBuilder::new("app");
    b.stream("input-topic", Consumed::with(Str, Str))
        .group_by_key(Grouped::with(Str, Str))
        .windowed_by(gap)
        .count(Materialized::generated());
    check(
        b,
        &[&["KSTREAM-SOURCE-0000000000", "KSTREAM-AGGREGATE-0000000002"]],
        &["KSTREAM-AGGREGATE-STATE-STORE-0000000001"],
        &[],
    );
    let b = StreamsBuilder::new("app");
    b.stream("input-topic", Consumed::with(Str, Str))
        .group_by_key(Grouped::with(Str, Str))
        .windowed_by(gap)
        .count(Materialized::named("count-store"));
    check(
        b,
        &[&["KSTREAM-SOURCE-0000000000", "KSTREAM-AGGREGATE-0000000001"]],
        &["count-store"],
        &[],
    );
}

/// Kafka's numbering for `stream(a).merge(stream(b)).to(out)`: both sources (0, 1), the merge
/// (2) and the sink (3) in one sub-topology, as `KStreamImpl.merge` joins their node groups.
#[test]
fn streams_of_two_topics_merge_into_one_sub_topology() {
    let b = StreamsBuilder::new("app");
    let left = b.stream("a", Consumed::with(Str, Str));
    let right = b.stream("b", Consumed::with(Str, Str));
    left.merge(right).to("out", Produced::with(Str, Str));
    check(
        b,
        &[&[
            "KSTREAM-SOURCE-0000000000",
            "KSTREAM-SOURCE-0000000001",
            "KSTREAM-MERGE-0000000002",
            "KSTREAM-SINK-0000000003",
        ]],
        &[],
        &[],
    );
}

/// `TopologyTest.streamStreamJoinTopologyWithDefaultStoresNames`: `stream1.join(stream2, ..,
/// JoinWindows.of(100 ms), StreamJoined.with(..))` is one sub-topology: both sources, the
/// windowed steps 2 and 3 with stores `KSTREAM-JOINTHIS-0000000004-store` and
/// `KSTREAM-JOINOTHER-0000000005-store`, the joins 4 and 5, the merge 6.
#[test]
fn a_stream_stream_join_is_named_as_kafkas() {
    use baton_streams::{JoinWindows, StreamJoined};
    let b = StreamsBuilder::new("app");
    let s1 = b.stream("input-topic1", Consumed::with(Str, Str));
    let s2 = b.stream("input-topic2", Consumed::with(Str, Str));
    s1.join_stream(
        s2,
        |a: &String, b: &String| format!("{a}+{b}"),
        JoinWindows::of_time_difference_with_no_grace(Duration::from_millis(100)),
        StreamJoined::with(Str, Str, Str),
    );
    check(
        b,
        &[&[
            "KSTREAM-SOURCE-0000000000",
            "KSTREAM-SOURCE-0000000001",
            "KSTREAM-WINDOWED-0000000002",
            "KSTREAM-WINDOWED-0000000003",
            "KSTREAM-JOINTHIS-0000000004",
            "KSTREAM-JOINOTHER-0000000005",
            "KSTREAM-MERGE-0000000006",
        ]],
        &[
            "KSTREAM-JOINTHIS-0000000004-store",
            "KSTREAM-JOINOTHER-0000000005-store",
        ],
        &[],
    );
}

/// `StreamsBuilderTest.shouldAllowJoinUnmaterializedJoinedKTable`'s numbering: two tables read
/// (`table-topic1`: store 0, source 1, table source 2; `table-topic2`: 3, 4, 5), then
/// `table1.join(table2)`: `KTABLE-MERGE` first, then `KTABLE-JOINTHIS` and `KTABLE-JOINOTHER`
/// (7, 8 and 9 there, after the stream's source 6), both tables kept in their stores, in one
/// sub-topology.
#[test]
fn a_table_table_join_is_numbered_as_kafkas() {
    let b = StreamsBuilder::new("app");
    let t1 = b.table(
        "table-topic1",
        Consumed::with(Str, Str),
        Materialized::generated(),
    );
    let t2 = b.table(
        "table-topic2",
        Consumed::with(Str, Str),
        Materialized::generated(),
    );
    t1.join(t2, |a: &String, b: &String| format!("{a}{b}"))
        .to_stream()
        .to("out", Produced::with(Str, Str));
    check(
        b,
        &[&[
            "KSTREAM-SOURCE-0000000001",
            "KTABLE-SOURCE-0000000002",
            "KSTREAM-SOURCE-0000000004",
            "KTABLE-SOURCE-0000000005",
            "KTABLE-MERGE-0000000006",
            "KTABLE-JOINTHIS-0000000007",
            "KTABLE-JOINOTHER-0000000008",
            "KTABLE-TOSTREAM-0000000009",
            "KSTREAM-SINK-0000000010",
        ]],
        &[
            "table-topic1-STATE-STORE-0000000000",
            "table-topic2-STATE-STORE-0000000003",
        ],
        &[],
    );
}

/// `TopologyTest.kTableNamedMaterializedMapValuesShouldPreserveTopologyStructure`:
/// `mapValues(.., Materialized.as("store-name"))` is `KTABLE-MAPVALUES-0000000003` with store
/// `store-name`; `kTableAnonymousMaterializedMapValues...`: `Materialized.with(..)` takes the
/// store's number, 3, so the step is `KTABLE-MAPVALUES-0000000004`, with no store.
#[test]
fn kept_table_operations_are_numbered_as_kafkas() {
    let b = StreamsBuilder::new("app");
    b.table(
        "input-topic",
        Consumed::with(Str, Str),
        Materialized::generated(),
    )
    .map_values_as(
        |v: &String| v.len() as i64,
        Long,
        Materialized::named("store-name"),
    );
    check(
        b,
        &[&[
            "KSTREAM-SOURCE-0000000001",
            "KTABLE-SOURCE-0000000002",
            "KTABLE-MAPVALUES-0000000003",
        ]],
        &["store-name"],
        &[],
    );
    let b = StreamsBuilder::new("app");
    b.table(
        "input-topic",
        Consumed::with(Str, Str),
        Materialized::generated(),
    )
    .filter_as(|_, v: &String| !v.is_empty(), Materialized::unnamed());
    check(
        b,
        &[&[
            "KSTREAM-SOURCE-0000000001",
            "KTABLE-SOURCE-0000000002",
            "KTABLE-FILTER-0000000004",
        ]],
        &[],
        &[],
    );
}

/// `TopologyTest.streamStreamLeftJoinTopologyWithDefaultStoresNames` and
/// `streamStreamOuterJoinTopologyWithDefaultStoresNames`: a left join's left side is
/// `KSTREAM-JOINTHIS`, its right `KSTREAM-OUTEROTHER`; an outer join's left side is
/// `KSTREAM-OUTERTHIS`; both share `KSTREAM-OUTERSHARED-<left side's number>-store`.
#[test]
fn left_and_outer_stream_stream_joins_are_named_as_kafkas() {
    use baton_streams::{JoinWindows, StreamJoined};
    for outer in [false, true] {
        let b = StreamsBuilder::new("app");
        let s1 = b.stream("input-topic1", Consumed::with(Str, Str));
        let s2 = b.stream("input-topic2", Consumed::with(Str, Str));
        let windows = JoinWindows::of_time_difference_with_no_grace(Duration::from_millis(100));
        if outer {
            s1.outer_join_stream(
                s2,
                |_: Option<&String>, _: Option<&String>| 0i64,
                windows,
                StreamJoined::with(Str, Str, Str),
            );
        } else {
            s1.left_join_stream(
                s2,
                |_: &String, _: Option<&String>| 0i64,
                windows,
                StreamJoined::with(Str, Str, Str),
            );
        }
        let this = if outer {
            "KSTREAM-OUTERTHIS-0000000004"
        } else {
            "KSTREAM-JOINTHIS-0000000004"
        };
        let described = b.describe();
        assert!(
            described.contains(&format!(
                "Processor: {this} (stores: [KSTREAM-OUTEROTHER-0000000005-store, \
                 KSTREAM-OUTERSHARED-0000000004-store])"
            )),
            "{described}"
        );
        assert!(
            described.contains(&format!(
                "Processor: KSTREAM-OUTEROTHER-0000000005 (stores: [{this}-store, \
                 KSTREAM-OUTERSHARED-0000000004-store])"
            )),
            "{described}"
        );
        let store = format!("{this}-store");
        check(
            b,
            &[&[
                "KSTREAM-SOURCE-0000000000",
                "KSTREAM-SOURCE-0000000001",
                "KSTREAM-WINDOWED-0000000002",
                "KSTREAM-WINDOWED-0000000003",
                this,
                "KSTREAM-OUTEROTHER-0000000005",
                "KSTREAM-MERGE-0000000006",
            ]],
            &[
                &store,
                "KSTREAM-OUTEROTHER-0000000005-store",
                "KSTREAM-OUTERSHARED-0000000004-store",
            ],
            &[],
        );
    }
}

/// `StreamsBuilderTest.shouldUseSpecifiedNameFor{Join,LeftJoin,OuterJoin}Operation
/// BetweenKStreamAndKStream` (`StreamJoined.as(name).withName(name)`) and
/// `shouldUseGeneratedStoreNamesFor...` (`withName` alone): a name takes the steps' places,
/// a store name the stores', and generated names keep their numbers.
#[test]
fn a_stream_stream_join_takes_the_names_it_is_given_as_kafkas() {
    use baton_streams::{JoinWindows, StreamJoined};
    let windows = JoinWindows::of_time_difference_with_no_grace(Duration::from_secs(3600));
    for (kind, this, other, shared) in [
        ("inner", "-this-join", "-other-join", None),
        (
            "left",
            "-this-join",
            "-outer-other-join",
            Some("-left-shared-join"),
        ),
        (
            "outer",
            "-outer-this-join",
            "-outer-other-join",
            Some("-outer-shared-join"),
        ),
    ] {
        for store_named in [true, false] {
            let b = StreamsBuilder::new("app");
            let s1 = b.stream("topic-one", Consumed::with(Str, Str));
            let s2 = b.stream("topic-two", Consumed::with(Str, Str));
            let mut joined = StreamJoined::with(Str, Str, Str).with_name("op");
            if store_named {
                joined = joined.with_store_name("op");
            }
            let out = match kind {
                "inner" => s1.join_stream(s2, |a: &String, _: &String| a.clone(), windows, joined),
                "left" => s1.left_join_stream(
                    s2,
                    |a: &String, _: Option<&String>| a.clone(),
                    windows,
                    joined,
                ),
                _ => s1.outer_join_stream(
                    s2,
                    |_: Option<&String>, _: Option<&String>| String::new(),
                    windows,
                    joined,
                ),
            };
            // The next generated name shows how many numbers the join took.
            out.to("out", Produced::with(Str, Str));
            let (this_store, other_store, shared_store) = if store_named {
                (
                    format!("op{this}-store"),
                    format!("op{other}-store"),
                    shared.map(|s| format!("op{s}-store")),
                )
            } else {
                let (t, o) = match kind {
                    "inner" => ("KSTREAM-JOINTHIS", "KSTREAM-JOINOTHER"),
                    "left" => ("KSTREAM-JOINTHIS", "KSTREAM-OUTEROTHER"),
                    _ => ("KSTREAM-OUTERTHIS", "KSTREAM-OUTEROTHER"),
                };
                (
                    format!("{t}-0000000004-store"),
                    format!("{o}-0000000005-store"),
                    shared.map(|_| "KSTREAM-OUTERSHARED-0000000004-store".to_owned()),
                )
            };
            let mut stores = vec![this_store.as_str(), other_store.as_str()];
            stores.extend(shared_store.as_deref());
            let (this_join, other_join) = (format!("op{this}"), format!("op{other}"));
            check(
                b,
                &[&[
                    "KSTREAM-SOURCE-0000000000",
                    "KSTREAM-SOURCE-0000000001",
                    "op-this-windowed",
                    "op-other-windowed",
                    &this_join,
                    &other_join,
                    "op-merge",
                    "KSTREAM-SINK-0000000007",
                ]],
                &stores,
                &[],
            );
        }
    }
}

/// A stream joining an aggregation's table, by `InternalStreamsBuilder`'s rules: the count
/// takes its store (1) and processor (2), the stream its source (3), the join its node (4),
/// and the stream's source joins the count's sub-topology (Kafka's sub-topologies are the
/// processor graph's connected parts). After a key change the stream goes through
/// `<its last node>-repartition` (three numbers, names numbered as the last node's is
/// generated), read in the count's sub-topology.
#[test]
fn a_stream_joining_an_aggregations_table_is_numbered_as_kafkas() {
    let b = StreamsBuilder::new("app");
    let counts = b
        .stream("clicks", Consumed::with(Str, Str))
        .group_by_key(Grouped::with(Str, Str))
        .count(Materialized::generated());
    b.stream("purchases", Consumed::with(Str, Str))
        .join(
            &counts,
            |p: &String, n: &i64| format!("{p}:{n}"),
            Joined::with(Str, Str),
        )
        .to("out", Produced::with(Str, Str));
    check(
        b,
        &[&[
            "KSTREAM-SOURCE-0000000000",
            "KSTREAM-AGGREGATE-0000000002",
            "KSTREAM-SOURCE-0000000003",
            "KSTREAM-JOIN-0000000004",
            "KSTREAM-SINK-0000000005",
        ]],
        &["KSTREAM-AGGREGATE-STATE-STORE-0000000001"],
        &[],
    );

    let b = StreamsBuilder::new("app");
    let counts = b
        .stream("clicks", Consumed::with(Str, Str))
        .group_by_key(Grouped::with(Str, Str))
        .count(Materialized::generated());
    b.stream("purchases", Consumed::with(Str, Str))
        .select_key(|_, user: &String| user.clone())
        .left_join(
            &counts,
            |p: &String, n: Option<&i64>| format!("{p}:{n:?}"),
            Joined::with(Str, Str),
        )
        .to("out", Produced::with(Str, Str));
    check(
        b,
        &[
            &[
                "KSTREAM-SOURCE-0000000000",
                "KSTREAM-AGGREGATE-0000000002",
                "KSTREAM-LEFTJOIN-0000000008",
                "KSTREAM-SOURCE-0000000007",
                "KSTREAM-SINK-0000000009",
            ],
            &[
                "KSTREAM-SOURCE-0000000003",
                "KSTREAM-KEY-SELECT-0000000004",
                "KSTREAM-FILTER-0000000006",
                "KSTREAM-SINK-0000000005",
            ],
        ],
        &["KSTREAM-AGGREGATE-STATE-STORE-0000000001"],
        &["app-KSTREAM-KEY-SELECT-0000000004-repartition"],
    );
}

/// `SuppressTopologyTest`: a suppression takes the processor's number then its store's
/// (`KTABLE-SUPPRESS-`, `KTABLE-SUPPRESS-STATE-STORE-`), or, named, `<name>` and
/// `<name>-store` and no number; its store is listed with the processor.
#[test]
fn suppress_is_named_and_numbered_as_kafkas() {
    use baton_streams::{BufferConfig, Suppressed};
    let finals = |name: Option<&str>| {
        let b = StreamsBuilder::new("app");
        let mut s = Suppressed::until_window_closes(BufferConfig::unbounded());
        if let Some(n) = name {
            s = s.with_name(n);
        }
        b.stream("input", Consumed::with(Str, Str))
            .group_by(|k: &String, _: &String| k.clone(), Grouped::with(Str, Str))
            .windowed_by(SessionWindows::of_inactivity_gap_and_grace(
                Duration::from_millis(5),
                Duration::from_millis(5),
            ))
            .count(Materialized::named("counts"))
            .suppress(s)
            .to_stream()
            .map(|k, v: &i64| (k.key.clone(), *v))
            .to("output-suppressed", Produced::with(Str, Long));
        b
    };
    let sub0 = [
        "KSTREAM-SOURCE-0000000000",
        "KSTREAM-KEY-SELECT-0000000001",
        "counts-repartition-filter",
        "counts-repartition-sink",
    ];
    let b = finals(None);
    let described = b.describe();
    assert!(
        described.contains(
            "Processor: KTABLE-SUPPRESS-0000000006 (stores: [KTABLE-SUPPRESS-STATE-STORE-0000000007])"
        ),
        "{described}"
    );
    check(
        b,
        &[
            &sub0,
            &[
                "counts-repartition-source",
                "KSTREAM-AGGREGATE-0000000002",
                "KTABLE-SUPPRESS-0000000006",
                "KTABLE-TOSTREAM-0000000008",
                "KSTREAM-MAP-0000000009",
                "KSTREAM-SINK-0000000010",
            ],
        ],
        &["counts", "KTABLE-SUPPRESS-STATE-STORE-0000000007"],
        &["app-counts-repartition"],
    );
    let b = finals(Some("myname"));
    let described = b.describe();
    assert!(
        described.contains("Processor: myname (stores: [myname-store])"),
        "{described}"
    );
    check(
        b,
        &[
            &sub0,
            &[
                "counts-repartition-source",
                "KSTREAM-AGGREGATE-0000000002",
                "myname",
                "KTABLE-TOSTREAM-0000000006",
                "KSTREAM-MAP-0000000007",
                "KSTREAM-SINK-0000000008",
            ],
        ],
        &["counts", "myname-store"],
        &["app-counts-repartition"],
    );
    // An intermediate suppression of a plain count.
    for (name, want) in [(None, "KTABLE-SUPPRESS-0000000003"), (Some("asdf"), "asdf")] {
        let b = StreamsBuilder::new("app");
        let mut s = Suppressed::until_time_limit(Duration::from_secs(1), BufferConfig::unbounded());
        if let Some(n) = name {
            s = s.with_name(n);
        }
        b.stream("input", Consumed::with(Str, Str))
            .group_by_key(Grouped::with(Str, Str))
            .count(Materialized::generated())
            .suppress(s)
            .to_stream()
            .to("output", Produced::with(Str, Long));
        let store = match name {
            None => "KTABLE-SUPPRESS-STATE-STORE-0000000004".to_owned(),
            Some(n) => format!("{n}-store"),
        };
        let (to_stream, sink) = match name {
            None => ("KTABLE-TOSTREAM-0000000005", "KSTREAM-SINK-0000000006"),
            Some(_) => ("KTABLE-TOSTREAM-0000000003", "KSTREAM-SINK-0000000004"),
        };
        check(
            b,
            &[&[
                "KSTREAM-SOURCE-0000000000",
                "KSTREAM-AGGREGATE-0000000002",
                want,
                to_stream,
                sink,
            ]],
            &["KSTREAM-AGGREGATE-STATE-STORE-0000000001", &store],
            &[],
        );
    }
}

/// `KStreamImplTest.shouldPropagateRepartitionFlagAfterGlobalKTableJoin` and
/// `StreamsBuilderTest.shouldUseSpecifiedNameForGlobalTableSourceProcessor`: a global table
/// takes its store's number (`<topic>-STATE-STORE-`), a source and a table source, and the
/// sub-topology number of its node group, which makes no tasks; a stream keyed anew before a
/// global join still repartitions at its grouping.
#[test]
fn a_global_table_is_named_and_numbered_as_kafkas() {
    let b = StreamsBuilder::new("app");
    let global = b.global_table(
        "globalTopic",
        Consumed::with(Str, Str),
        Materialized::generated(),
    );
    b.stream("topic", Consumed::with(Str, Str))
        .select_key(|_, v: &String| v.clone())
        .join_global(
            &global,
            |k: &String, v: &String| format!("{k}{v}"),
            |v: &String, g: &String| format!("{v}{g}"),
            Joined::with(Str, Str),
        )
        .group_by_key(Grouped::with(Str, Str))
        .count(Materialized::generated());
    let described = b.describe();
    assert!(
        described.contains("Sub-topology: 0 for global store (will not generate tasks)"),
        "{described}"
    );
    assert!(
        described.contains(
            "Processor: KTABLE-SOURCE-0000000002 (stores: [globalTopic-STATE-STORE-0000000000])"
        ),
        "{described}"
    );
    let topic = "KSTREAM-AGGREGATE-STATE-STORE-0000000006-repartition";
    check(
        b,
        &[
            &["KSTREAM-SOURCE-0000000001", "KTABLE-SOURCE-0000000002"],
            &[
                "KSTREAM-SOURCE-0000000003",
                "KSTREAM-KEY-SELECT-0000000004",
                "KSTREAM-JOIN-0000000005",
                "KSTREAM-FILTER-0000000009",
                "KSTREAM-SINK-0000000008",
            ],
            &["KSTREAM-SOURCE-0000000010", "KSTREAM-AGGREGATE-0000000007"],
        ],
        &["KSTREAM-AGGREGATE-STATE-STORE-0000000006"],
        &[&format!("app-{topic}")],
    );
    let b = StreamsBuilder::new("app");
    let one = b.global_table(
        "stream-topic",
        Consumed::with(Str, Str),
        Materialized::generated(),
    );
    let two = b.global_table(
        "stream-topic-two",
        Consumed::with(Str, Str),
        Materialized::generated(),
    );
    assert_eq!(
        (one.store_name(), two.store_name()),
        (
            "stream-topic-STATE-STORE-0000000000",
            "stream-topic-two-STATE-STORE-0000000003"
        )
    );
    let t = b.build().unwrap();
    let subs: Vec<u32> = t.globals().iter().map(|g| g.subtopology).collect();
    assert_eq!(subs, [0, 1]);
}

/// `RepartitionTopicNamingTest.shouldKeepRepartitionTopicNameForJoins`: a stream-stream join
/// of two sides keyed anew repartitions both, through `<name>-left-repartition` and
/// `<name>-right-repartition` of the join's name, with or without steps after the key change.
#[test]
fn a_join_of_rekeyed_streams_repartitions_both_sides_as_kafkas() {
    use baton_streams::{JoinWindows, StreamJoined};
    for other_operations in [false, true] {
        let b = StreamsBuilder::new("app");
        let one = b.stream("topic-one", Consumed::with(Str, Str));
        let two = b.stream("topic-two", Consumed::with(Str, Str));
        let rekey = |s: baton_streams::KStream<String, String>| {
            let s = s.select_key(|k: &String, v: &String| format!("{k}{v}"));
            if other_operations {
                s.filter(|_, _| true).peek(|_, _| {})
            } else {
                s
            }
        };
        rekey(one).join_stream(
            rekey(two),
            |a: &String, b: &String| format!("{a}{b}"),
            JoinWindows::of_time_difference_with_no_grace(Duration::from_millis(1000)),
            StreamJoined::with(Str, Str, Str).with_name("my-join"),
        );
        let described = b.describe();
        for topic in ["my-join-left-repartition", "my-join-right-repartition"] {
            assert!(
                described.contains(&format!("(topic: app-{topic})")),
                "{described}"
            );
        }
        let t = b.build().unwrap();
        let topics: BTreeSet<&str> = t.repartition_topics().into_iter().map(|(t, _)| t).collect();
        assert_eq!(
            topics,
            [
                "app-my-join-left-repartition",
                "app-my-join-right-repartition"
            ]
            .into(),
        );
    }
}

/// `KTableKTableForeignKeyJoinScenarioTest.shouldUseExpectedTopicsWithSerde`: two tables read
/// without store names, joined on a foreign key, have the registration topic
/// `KTABLE-FK-JOIN-SUBSCRIPTION-REGISTRATION-0000000006-topic` and the response topic
/// `KTABLE-FK-JOIN-SUBSCRIPTION-RESPONSE-0000000014-topic`, and the stores
/// `left_table-STATE-STORE-0000000000` and `right_table-STATE-STORE-0000000003`; the nodes
/// are `KStreamImplTest.shouldSupportForeignKeyTableTableJoinWithKTableFromKStream`'s, whose
/// tables come from streams (the same numbers, Kafka's subscription store
/// `KTABLE-FK-JOIN-SUBSCRIPTION-STATE-STORE-0000000010`, output 18, the result's store number
/// 19 taken, `KTABLE-TOSTREAM-0000000020`).
#[test]
fn a_foreign_key_join_is_named_and_numbered_as_kafkas() {
    let b = StreamsBuilder::new("ktable-ktable-joinOnForeignKey");
    let left = b.table(
        "left_table",
        Consumed::with(Str, Str),
        Materialized::generated(),
    );
    let right = b.table(
        "right_table",
        Consumed::with(Str, Str),
        Materialized::generated(),
    );
    left.join_on_foreign_key(
        right,
        |v: &String| v.split('|').nth(1).map(str::to_owned),
        |a: &String, b: &String| format!("({a},{b})"),
    )
    .to_stream()
    .to("output-topic", Produced::with(Str, Str));
    check(
        b,
        &[
            &[
                "KSTREAM-SOURCE-0000000001",
                "KTABLE-SOURCE-0000000002",
                "KTABLE-FK-JOIN-SUBSCRIPTION-REGISTRATION-0000000007",
                "KTABLE-SINK-0000000008",
                "KTABLE-SOURCE-0000000016",
                "KTABLE-FK-JOIN-SUBSCRIPTION-RESPONSE-RESOLVER-PROCESSOR-0000000017",
                "KTABLE-FK-JOIN-OUTPUT-0000000018",
                "KTABLE-TOSTREAM-0000000020",
                "KSTREAM-SINK-0000000021",
            ],
            &[
                "KSTREAM-SOURCE-0000000004",
                "KTABLE-SOURCE-0000000005",
                "KTABLE-SOURCE-0000000009",
                "KTABLE-FK-JOIN-SUBSCRIPTION-PROCESSOR-0000000011",
                "KTABLE-FK-JOIN-SUBSCRIPTION-PROCESSOR-0000000012",
                "KTABLE-FK-JOIN-SUBSCRIPTION-PROCESSOR-0000000013",
                "KTABLE-SINK-0000000015",
            ],
        ],
        &[
            "left_table-STATE-STORE-0000000000",
            "right_table-STATE-STORE-0000000003",
            "KTABLE-FK-JOIN-SUBSCRIPTION-STATE-STORE-0000000010",
        ],
        &[
            "ktable-ktable-joinOnForeignKey-KTABLE-FK-JOIN-SUBSCRIPTION-REGISTRATION-0000000006-topic",
            "ktable-ktable-joinOnForeignKey-KTABLE-FK-JOIN-SUBSCRIPTION-RESPONSE-0000000014-topic",
        ],
    );
}

/// `KStreamImplTest.shouldSupportForeignKeyTableTableJoinWithKTableFromKStream`, word for
/// word: two streams made tables without store names (`toTable()`), joined on a foreign key.
/// Kafka keeps each in the store whose number `toTable` took
/// (`KSTREAM-TOTABLE-STATE-STORE-0000000002` and `-0000000005`) because the join reads them.
#[test]
fn a_foreign_key_join_of_streams_made_tables_is_kafkas() {
    let b = StreamsBuilder::new("app");
    let left =
        b.stream("input1", Consumed::with(Str, Str))
            .to_table(Str, Str, Materialized::generated());
    let right =
        b.stream("input2", Consumed::with(Str, Str))
            .to_table(Str, Str, Materialized::generated());
    left.join_on_foreign_key(
        right,
        |v: &String| v.split('|').nth(1).map(str::to_owned),
        |a: &String, b: &String| format!("({a},{b})"),
    )
    .to_stream()
    .to("output", Produced::with(Str, Str));
    check(
        b,
        &[
            &[
                "KSTREAM-SOURCE-0000000000",
                "KSTREAM-TOTABLE-0000000001",
                "KTABLE-FK-JOIN-SUBSCRIPTION-REGISTRATION-0000000007",
                "KTABLE-SINK-0000000008",
                "KTABLE-SOURCE-0000000016",
                "KTABLE-FK-JOIN-SUBSCRIPTION-RESPONSE-RESOLVER-PROCESSOR-0000000017",
                "KTABLE-FK-JOIN-OUTPUT-0000000018",
                "KTABLE-TOSTREAM-0000000020",
                "KSTREAM-SINK-0000000021",
            ],
            &[
                "KSTREAM-SOURCE-0000000003",
                "KSTREAM-TOTABLE-0000000004",
                "KTABLE-SOURCE-0000000009",
                "KTABLE-FK-JOIN-SUBSCRIPTION-PROCESSOR-0000000011",
                "KTABLE-FK-JOIN-SUBSCRIPTION-PROCESSOR-0000000012",
                "KTABLE-FK-JOIN-SUBSCRIPTION-PROCESSOR-0000000013",
                "KTABLE-SINK-0000000015",
            ],
        ],
        &[
            "KSTREAM-TOTABLE-STATE-STORE-0000000002",
            "KSTREAM-TOTABLE-STATE-STORE-0000000005",
            "KTABLE-FK-JOIN-SUBSCRIPTION-STATE-STORE-0000000010",
        ],
        &[
            "app-KTABLE-FK-JOIN-SUBSCRIPTION-REGISTRATION-0000000006-topic",
            "app-KTABLE-FK-JOIN-SUBSCRIPTION-RESPONSE-0000000014-topic",
        ],
    );
}

/// A foreign-key join named with `TableJoined` (Kafka's `TableJoined.as("orders-products")`):
/// by `KTableImpl.doJoinOnForeignKey`'s `suffixWithOrElseGet`, every node, the store and both
/// topics are the name with its suffix and take no number; the result's store, unnamed, still
/// takes one (6: the tables took 0-5), then `toStream` (7) and the sink (8).
#[test]
fn a_named_foreign_key_join_is_named_as_kafkas() {
    let b = StreamsBuilder::new("app");
    let left = b.table("left", Consumed::with(Str, Str), Materialized::generated());
    let right = b.table("right", Consumed::with(Str, Str), Materialized::generated());
    left.join_on_foreign_key_named(
        right,
        |v: &String| Some(v.clone()),
        |a: &String, b: &String| format!("{a}{b}"),
        baton_streams::TableJoined::named("op"),
    )
    .to_stream()
    .to("output", Produced::with(Str, Str));
    check(
        b,
        &[
            &[
                "KSTREAM-SOURCE-0000000001",
                "KTABLE-SOURCE-0000000002",
                "op-subscription-registration-processor",
                "op-subscription-registration-sink",
                "op-subscription-response-source",
                "op-subscription-response-resolver",
                "op-result",
                "KTABLE-TOSTREAM-0000000007",
                "KSTREAM-SINK-0000000008",
            ],
            &[
                "KSTREAM-SOURCE-0000000004",
                "KTABLE-SOURCE-0000000005",
                "op-subscription-registration-source",
                "op-subscription-receive",
                "op-subscription-join-foreign",
                "op-foreign-join-subscription",
                "op-subscription-response-sink",
            ],
        ],
        &[
            "left-STATE-STORE-0000000000",
            "right-STATE-STORE-0000000003",
            "op-subscription-store",
        ],
        &[
            "app-op-subscription-registration-topic",
            "app-op-subscription-response-topic",
        ],
    );
}
