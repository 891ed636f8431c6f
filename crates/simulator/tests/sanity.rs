//! Figures worked out by hand, and determinism.

use baton_simulator::*;

fn scenario(assignor: &str, protocol: &str, standbys: u32, events: &str) -> Scenario {
    Scenario::parse(&format!(
        r#"
name = "hand"
[app]
subtopologies = [{{ partitions = 2, state_records = 100000, changelog_rate = 0 }}]
[group]
rebalance_ms = 1000
session_timeout_ms = 10000
protocol = "{protocol}"
[assignor]
name = "{assignor}"
config = {{ "acceptable.recovery.lag" = 0, "num.standby.replicas" = {standbys} }}
[[instances]]
id = "i1"
restore_rate = 10000
{events}
"#
    ))
    .unwrap()
}

fn run(sc: &Scenario, spec: &str) -> Report {
    simulate(sc, &RunSpec::parse(spec).unwrap(), &mut |_| {})
}

/// `got` is `want` plus at most `slack` seconds: the runtime's round trips (a fetch, a
/// commit, a 100 ms long poll when a fetch finds nothing) that the figures by hand leave out.
#[track_caller]
fn about(got: f64, want: f64, slack: f64) {
    assert!(
        (want - 1e-6..=want + slack).contains(&got),
        "{got} is not {want} (+ at most {slack})"
    );
}

const ADD_I2: &str = r#"
[[events]]
at_s = 10
add = [{ id = "i2", restore_rate = 10000 }]
"#;

#[test]
fn eager_scale_out_stalls_a_moved_task_for_its_whole_restore() {
    // i1 runs both tasks. i2 joins at 10 s: a 1 s eager rebalance stops both tasks, then the
    // task that moves restores 100,000 records at 10,000/s on i2: 1 + 10 = 11 s.
    let r = run(&scenario("sticky", "eager", 0, ADD_I2), "sticky");
    about(r.unavailable_max_s, 11.0, 0.05);
    // The task that stays is stopped for the rebalance only.
    about(r.unavailable_total_s, 12.0, 0.05);
    assert_eq!(r.rebalances, 1);
    assert_eq!(r.records_restored, 100_000.0);
}

#[test]
fn high_availability_stalls_no_longer_than_the_rebalances() {
    // i2 warms the moving task up (10 s) while i1 keeps running it; the warm-up catching up
    // triggers a follow-up at once. The hand-over is cooperative: that round takes the task
    // from i1 (1 s), i1 commits and rejoins, and the next round gives it to i2 (1 s): the task
    // stops for that second round only.
    let r = run(
        &scenario("high-availability", "cooperative", 0, ADD_I2),
        "high-availability",
    );
    about(r.unavailable_max_s, 1.0, 0.25);
    about(r.unavailable_total_s, 1.0, 0.25);
    // join 1 s + warm-up 10 s + two rounds of the hand-over 2 s
    about(r.time_to_balance_s.unwrap(), 13.0, 0.25);
    assert_eq!(r.records_restored, 100_000.0);

    // Kafka's assignor on the same input waits for the 10-minute probe instead.
    let k = run(
        &scenario("high-availability", "cooperative", 0, ADD_I2),
        "kafka",
    );
    about(k.unavailable_max_s, 1.0, 0.25);
    about(k.time_to_balance_s.unwrap(), 1.0 + 600.0 + 2.0, 0.25);
}

const TWO_THEN_CRASH: &str = r#"
[[instances]]
id = "i2"
restore_rate = 10000
[[events]]
at_s = 100
crash = ["i1"]
"#;

#[test]
fn a_crash_stalls_for_session_timeout_plus_restore_unless_a_standby_is_caught_up() {
    // i1 crashes at 100 s. The coordinator gives up on it a session timeout (10 s) after its
    // last heartbeat, which came up to one heartbeat interval (10 s / 3) before the crash; the
    // rebalance takes 1 s and i2 restores i1's task from scratch for 10 s: 21 s at most.
    let heartbeat = 10.0 / 3.0;
    let within = |got: f64, most: f64| {
        assert!(
            (most - heartbeat..=most + 0.25).contains(&got),
            "{got} is not within a heartbeat below {most}"
        )
    };
    let r = run(
        &scenario("high-availability", "cooperative", 0, TWO_THEN_CRASH),
        "high-availability",
    );
    within(r.unavailable_max_s, 21.0);
    assert_eq!(
        r.unavailable_total_s, r.unavailable_max_s,
        "i2's own task runs on"
    );
    // With a caught-up standby on i2 it takes over at once: timeout + 1 s rebalance.
    let r = run(
        &scenario("high-availability", "cooperative", 1, TWO_THEN_CRASH),
        "high-availability",
    );
    within(r.unavailable_max_s, 11.0);
}

#[test]
fn same_scenario_gives_byte_identical_json() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/scenarios/scale-out.toml"
    ))
    .unwrap();
    for spec in ["high-availability", "kafka", "sticky@eager"] {
        let a = serde_json::to_string(&run(&Scenario::parse(&text).unwrap(), spec)).unwrap();
        let b = serde_json::to_string(&run(&Scenario::parse(&text).unwrap(), spec)).unwrap();
        assert_eq!(a, b, "{spec}");
    }
}

#[test]
fn bad_scenarios_say_where() {
    let e = Scenario::parse("name = 1").unwrap_err().to_string();
    assert!(e.starts_with("scenario: "), "{e}");
    let base = scenario("sticky", "eager", 0, "");
    let mut s = base.clone();
    s.instances[0].restore_rate = 0.0;
    assert_eq!(
        s.validate().unwrap_err().to_string(),
        "instances[0].restore_rate: 0 must be a number in (0, 1e15]"
    );
    let json = r#"{"name": "x", "app": {"subtopologies": []}, "group": {"rebalance_ms": 1, "session_timeout_ms": 1}, "instances": [], "assignor": {"name": "nope"}}"#;
    let e = Scenario::parse(json).unwrap_err().to_string();
    assert!(
        e.starts_with("assignor.name: unknown variant `nope`, expected one of `high-availability`"),
        "{e}"
    );
    let json = r#"{"name": "x", "app": {"subtopologies": []}, "group": {"rebalance_ms": 1, "session_timeout_ms": 1}, "instances": []}"#;
    assert_eq!(
        Scenario::parse(json).unwrap_err().to_string(),
        "app.subtopologies: at least one subtopology is required"
    );
    let text = r#"
name = "x"
[app]
subtopologies = [{ partitions = 1 }]
[group]
rebalance_ms = 1
session_timeout_ms = 1
[[instances]]
id = "a"
restore_rate = 1
[[events]]
at_s = 1
crash = ["b"]
"#;
    assert_eq!(
        Scenario::parse(text).unwrap_err().to_string(),
        "events[0].crash: unknown instance \"b\""
    );
}

#[test]
fn out_of_bounds_sizes_rates_and_durations_are_clear_errors() {
    let base = |extra_top: &str, sub: &str, inst: &str| {
        format!(
            r#"
name = "bounds"
{extra_top}
[app]
subtopologies = [{{ partitions = 2, state_records = 1000, changelog_rate = {sub} }}]
[group]
rebalance_ms = 1000
session_timeout_ms = 10000
[[instances]]
id = "i1"
restore_rate = 10000
{inst}
"#
        )
    };
    let cases = [
        (base("max_duration_s = -1", "0", ""), "max_duration_s"),
        (base("max_duration_s = inf", "0", ""), "max_duration_s"),
        (base("", "1e305", ""), "changelog_rate"),
        (
            base("", "0", "threads = 4294967295"),
            "instances[0].threads",
        ),
    ];
    for (text, field) in cases {
        let e = Scenario::parse(&text).unwrap_err().to_string();
        assert!(e.contains(field), "{field}: {e}");
    }
}

#[test]
fn every_instance_crashing_leaves_every_task_unavailable_without_a_panic() {
    let sc = scenario(
        "high-availability",
        "cooperative",
        0,
        "[[events]]\nat_s = 10\ncrash = [\"i1\"]",
    );
    let r = run(&sc, "high-availability");
    assert_eq!(r.time_to_balance_s, None, "nobody left to balance on");
    // Both tasks stop at the crash and stay stopped to the end of the run.
    let after = r.simulated_s - 10.0;
    assert!(r.unavailable_total_s >= 2.0 * after - 1e-6, "{r:?}");
}

/// A drain whose changelog grows faster than a warm-up restores: with a timeout it ends at the
/// timeout plus one rebalance, the moves reported as forced; without one it never ends, and
/// the report says so instead of claiming balance.
#[test]
fn a_drain_no_warm_up_can_finish_ends_only_at_the_timeout() {
    let timed = Scenario::parse(include_str!(
        "../../../examples/scenarios/drain-timeout.toml"
    ))
    .unwrap();
    let r = run(&timed, "high-availability");
    // The timeout (120 s) and the two 2 s rounds of a cooperative hand-over: revoke (i3
    // commits, then joins), assign. The round its leaving starts comes after.
    about(r.time_to_balance_s.expect("the drain ends"), 124.0, 0.25);
    assert_eq!(r.forced_moves, 2, "i3's two tasks");
    assert!(r.unfinished_drains.is_empty());

    let endless = Scenario::parse(include_str!(
        "../../../examples/scenarios/drain-no-timeout.toml"
    ))
    .unwrap();
    let r = run(&endless, "high-availability");
    assert_eq!(r.time_to_balance_s, None, "no balance is claimed");
    assert_eq!(r.unfinished_drains, ["i3"]);
    assert_eq!(r.forced_moves, 0);
    assert_eq!(
        r.unavailable_total_s, 0.0,
        "i3 keeps running its tasks meanwhile"
    );
}

/// `drain_percent = 20` of forty instances drains eight, and they all leave.
#[test]
fn a_percentage_scale_down_drains_that_many() {
    let sc = Scenario::parse(include_str!(
        "../../../examples/scenarios/scale-down-percent.toml"
    ))
    .unwrap();
    let r = run(&sc, "high-availability");
    assert!(r.unfinished_drains.is_empty());
    let last = r.load.last().unwrap();
    assert_eq!(
        last.actives.len(),
        32,
        "80% of 40 stay: {:?}",
        last.actives.keys()
    );
    assert!(r.time_to_balance_s.is_some());
}

/// The KIP's two knobs on one scale-out: `stable` rejoins take fewer rebalances than `eager`
/// for the same moves; a 20% tolerance stops moving once every instance is within 20% of its
/// share, so fewer tasks move.
#[test]
fn stable_rejoins_and_a_tolerance_trade_rebalances_and_moves() {
    let parse = |text: &str| Scenario::parse(text).unwrap();
    let strict = run(
        &parse(include_str!(
            "../../../examples/scenarios/scale-out-wide.toml"
        )),
        "high-availability",
    );
    let stable = run(
        &parse(include_str!(
            "../../../examples/scenarios/scale-out-wide-stable.toml"
        )),
        "high-availability",
    );
    let tolerant = run(
        &parse(include_str!(
            "../../../examples/scenarios/scale-out-wide-tolerance.toml"
        )),
        "high-availability",
    );
    assert_eq!(strict.active_moves, 15);
    assert_eq!(stable.active_moves, strict.active_moves);
    assert!(
        stable.rebalances < strict.rebalances,
        "{} vs {}",
        stable.rebalances,
        strict.rebalances
    );
    assert!(tolerant.active_moves < strict.active_moves);
    let last = tolerant.load.last().unwrap();
    assert!(
        last.actives.values().all(|&n| (12..=18).contains(&n)),
        "within 20% of 15: {:?}",
        last.actives
    );
}

mod random {
    use super::*;
    use proptest::prelude::*;

    /// A small random scenario: joins, graceful stops, crashes and drains at random times.
    fn scenario_text(tasks: u32, first: usize, events: &[(u8, u8, u16)], eager: bool) -> String {
        let mut text = format!(
            r#"
name = "random"
max_duration_s = 3600
[app]
subtopologies = [{{ partitions = {tasks}, state_records = 20000, changelog_rate = 20 }}]
[group]
rebalance_ms = 500
session_timeout_ms = 3000
protocol = "{}"
[assignor]
config = {{ "acceptable.recovery.lag" = 100, "num.standby.replicas" = 1, "probing.rebalance.interval.ms" = 60000 }}
"#,
            if eager { "eager" } else { "cooperative" }
        );
        for i in 0..first {
            text += &format!("[[instances]]\nid = \"i{i}\"\nrestore_rate = 10000\n");
        }
        let mut next = first;
        let mut at = 0u32;
        for &(kind, who, dt) in events {
            at += 1 + dt as u32 % 40;
            let target = format!("i{}", who as usize % next);
            let body = match kind % 4 {
                0 => {
                    next += 1;
                    format!("add = [{{ id = \"i{}\", restore_rate = 10000 }}]", next - 1)
                }
                1 => format!("crash = [\"{target}\"]"),
                2 => format!("drain = [\"{target}\"]"),
                _ => format!("remove = [\"{target}\"]"),
            };
            text += &format!("[[events]]\nat_s = {at}\n{body}\n");
        }
        text
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        /// Whatever happens, a run ends without a panic, gives the same report twice, counts
        /// each hand-over once, and leaves every task running when it ends quiet with an
        /// instance that stays.
        #[test]
        fn random_scenarios_keep_their_invariants(
            tasks in 1u32..6,
            first in 1usize..4,
            events in proptest::collection::vec((0u8..8, 0u8..8, 0u16..200), 0..5),
            eager in any::<bool>(),
            spec in prop::sample::select(vec!["high-availability", "kafka", "sticky"]),
        ) {
            let sc = Scenario::parse(&scenario_text(tasks, first, &events, eager)).unwrap();
            let a = run(&sc, spec);
            let b = run(&sc, spec);
            prop_assert_eq!(
                serde_json::to_string(&a).unwrap(),
                serde_json::to_string(&b).unwrap()
            );
            prop_assert_eq!(a.handovers.len() as u32, a.active_moves);
            prop_assert!(a.unavailable_max_s <= a.simulated_s + 1e-6);
            let stays = a.load.last().is_some_and(|l| !l.actives.is_empty());
            let ended_quiet = a.simulated_s < sc.max_duration_s;
            if stays && ended_quiet && a.unfinished_drains.is_empty() {
                prop_assert_eq!(a.unavailable_series.last().map(|x| x.1), Some(0), "{:?}", a);
            }
        }
    }
}
