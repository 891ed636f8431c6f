//! `baton assign` end to end: the shipped example, output formats and exit statuses.

use std::io::Write;
use std::process::{Command, Stdio};

fn baton(args: &[&str], stdin: Option<&str>) -> (i32, String, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_baton"))
        .args(args)
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    if let Some(text) = stdin {
        child
            .stdin
            .take()
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
    }
    drop(child.stdin.take());
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

#[test]
fn example_scale_out_assigns_warm_ups_and_is_byte_identical() {
    let (code, first, _) = baton(&["assign", "examples/scale-out.json"], None);
    assert_eq!(code, 0);
    let (_, second, _) = baton(&["assign", "examples/scale-out.json"], None);
    assert_eq!(first, second);
    let v: serde_json::Value = serde_json::from_str(&first).unwrap();
    assert_eq!(v["followup_rebalance"], true);
    assert_eq!(v["probe_after_ms"], 600000);
    assert_eq!(v["clients"]["c4"]["warmup"].as_array().unwrap().len(), 2);
    assert!(v["warnings"].as_array().unwrap().is_empty());
}

#[test]
fn documented_output_shape() {
    let input = r#"{"tasks": [{"id": "0_0", "stateful": true, "end_offset_sum": 150000}, {"id": "1_0", "stateful": false}],
                    "clients": [{"id": "c1", "capacity": 2, "owned_active": ["0_0"], "offset_sums": {"0_0": -2}}]}"#;
    let (code, out, _) = baton(&["assign", "-"], Some(input));
    assert_eq!(code, 0);
    assert_eq!(
        out.trim(),
        r#"{"clients":{"c1":{"active":["0_0","1_0"],"standby":[],"warmup":[],"drained":false}},"followup_rebalance":false,"probe_after_ms":null,"warnings":[]}"#
    );
}

#[test]
fn table_format_lists_pending_moves() {
    let (code, out, _) = baton(
        &["assign", "examples/scale-out.json", "--format", "table"],
        None,
    );
    assert_eq!(code, 0);
    assert!(out.contains("pending moves: 3"), "{out}");
    assert!(out.contains("c1 -> c4 (warming up)"), "{out}");
    for a in ["kafka", "sticky"] {
        let (code, _, _) = baton(
            &[
                "assign",
                "examples/scale-out.json",
                "--assignor",
                a,
                "--format",
                "table",
            ],
            None,
        );
        assert_eq!(code, 0);
    }
}

#[test]
fn bad_input_exits_2_and_names_the_field() {
    let cases = [
        ("{", "input"),
        (
            r#"{"tasks": [{"id": "0_x"}], "clients": [{"id": "a"}]}"#,
            "tasks[0].id",
        ),
        (
            r#"{"tasks": [], "clients": [{"id": "a", "capacity": 0}]}"#,
            "clients[0].capacity",
        ),
        (
            r#"{"tasks": [{"id": "0_0"}, {"id": "0_0"}], "clients": [{"id": "a"}]}"#,
            "tasks[1].id",
        ),
    ];
    for (input, field) in cases {
        let (code, out, err) = baton(&["assign"], Some(input));
        assert_eq!(code, 2, "{input}: {err}");
        assert!(out.is_empty());
        assert!(err.contains(field), "{input}: {err}");
    }
    let (code, _, err) = baton(&["assign", "no/such/file.json"], None);
    assert_eq!(code, 2);
    assert!(err.contains("no/such/file.json"));
}

#[test]
fn decode_and_encode_round_trip_real_bytes() {
    // A v7 subscription written out by hand: version, latest, process id, endpoint, offset sums.
    let hex = "000000070000000c00112233445566778899aabbccddeeff00000009686f73743a3930393200000001000000000000000100000000fffffffffffffffe";
    let (code, json, err) = baton(&["decode", "subscription", "--hex"], Some(hex));
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["version"], 7);
    assert_eq!(v["task_offset_sums"][0]["task"], "0_0");
    assert_eq!(v["user_endpoint"], "host:9092");
    let (code, back, _) = baton(&["encode", "subscription", "--hex"], Some(&json));
    assert_eq!(code, 0);
    assert_eq!(back.trim(), hex);

    let (code, b64, _) = baton(&["encode", "subscription", "--base64"], Some(&json));
    assert_eq!(code, 0);
    let (code, again, _) = baton(&["decode", "subscription", "--base64"], Some(&b64));
    assert_eq!(code, 0);
    assert_eq!(again, json);
}

#[test]
fn decode_errors_name_field_and_byte_and_exit_2() {
    let (code, out, err) = baton(
        &["decode", "assignment", "--hex"],
        Some("000000070000000700000000000000017fffffff"),
    );
    assert_eq!(code, 2);
    assert!(out.is_empty());
    assert!(
        err.contains("assignment v7: standby task list at byte 12"),
        "{err}"
    );
    let (code, _, err) = baton(&["decode", "subscription", "--hex"], Some("zz"));
    assert_eq!(code, 2);
    assert!(err.contains("not hex"), "{err}");
    let (code, _, err) = baton(
        &["encode", "assignment"],
        Some(r#"{"version": 3, "active_tasks": ["x"]}"#),
    );
    assert_eq!(code, 2);
    assert!(err.contains("not a task id"), "{err}");
}

#[test]
fn simulate_compares_assignors_and_draws() {
    let dir = std::env::temp_dir().join(format!("baton-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let svg = dir.join("plot.svg");
    let (code, out, err) = baton(
        &[
            "simulate",
            "examples/scenarios/scale-out.toml",
            "--compare",
            "sticky@eager,kafka,high-availability",
            "--plot",
            svg.to_str().unwrap(),
        ],
        None,
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("sticky (eager, interval)"), "{out}");
    assert!(
        out.contains("high-availability (cooperative, caught-up)"),
        "{out}"
    );
    assert!(std::fs::read_to_string(&svg).unwrap().contains("<svg"));

    let (code, a, _) = baton(
        &["simulate", "examples/scenarios/scale-down.toml", "--json"],
        None,
    );
    assert_eq!(code, 0);
    let (_, b, _) = baton(
        &["simulate", "examples/scenarios/scale-down.toml", "--json"],
        None,
    );
    assert_eq!(a, b, "byte-identical JSON");
    let v: serde_json::Value = serde_json::from_str(&a).unwrap();
    assert_eq!(v[0]["assignor"], "high-availability");

    let (code, _, err) = baton(
        &[
            "simulate",
            "examples/scenarios/scale-out.toml",
            "--compare",
            "nope",
        ],
        None,
    );
    assert_eq!(code, 2);
    assert!(err.contains("unknown assignor \"nope\""), "{err}");
}

#[test]
fn bad_racks_and_client_tags_are_refused_before_connecting() {
    for (tag, expected) in [
        ("zone", "expected KEY=VALUE"),
        ("baton.leaving=true", "reserved"),
        ("a-key-longer-than-twenty=1", "1 to 20 characters"),
    ] {
        let (code, _, err) = baton(
            &["run", "--bootstrap", "127.0.0.1:1", "--client-tag", tag],
            None,
        );
        assert_eq!(code, 2, "{tag}: {err}");
        assert!(err.contains(expected), "{tag}: {err}");
    }
    let (code, _, err) = baton(&["run", "--bootstrap", "127.0.0.1:1", "--rack", ""], None);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("client.rack"), "{err}");
    let (code, _, err) = baton(
        &[
            "run",
            "--bootstrap",
            "127.0.0.1:1",
            "--rack-aware-assignment-tags",
            "a,b,c,d,e,f",
        ],
        None,
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("rack.aware.assignment.tags: 6 keys, at most 5"),
        "{err}"
    );
    for (flag, value, expected) in [
        (
            "--rack-aware-assignment-strategy",
            "fastest",
            "is not a rack-aware strategy (none, min_traffic or balance_subtopology)",
        ),
        (
            "--rack-aware-traffic-cost",
            "-1",
            "--rack-aware-traffic-cost",
        ),
        (
            "--rack-aware-non-overlap-cost",
            "-5",
            "--rack-aware-non-overlap-cost",
        ),
    ] {
        let (code, _, err) = baton(&["run", "--bootstrap", "127.0.0.1:1", flag, value], None);
        assert_eq!(code, 2, "{flag} {value}: {err}");
        assert!(err.contains(expected), "{flag} {value}: {err}");
    }
    for version in ["6", "13"] {
        let (code, _, err) = baton(
            &[
                "run",
                "--bootstrap",
                "127.0.0.1:1",
                "--max-protocol-version",
                version,
            ],
            None,
        );
        assert_eq!(code, 2, "{version}: {err}");
        assert!(
            err.contains(&format!(
                "max_protocol_version: {version} is not between 7 and 12"
            )),
            "{err}"
        );
    }
}

#[test]
fn runtime_commands_reject_bad_options_before_connecting() {
    // Nothing listens on port 1: these must fail on their options, with status 2.
    let (code, _, err) = baton(
        &[
            "run",
            "--bootstrap",
            "127.0.0.1:1",
            "--assignor",
            "nope",
            "--instance-id",
            "a",
        ],
        None,
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("invalid value 'nope' for '--assignor <ASSIGNOR>'")
            && err.contains("[possible values: high-availability, kafka, sticky]"),
        "{err}"
    );
    let (code, _, err) = baton(
        &["run", "--bootstrap", "127.0.0.1:1", "--app-id", "bad id"],
        None,
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("application id \"bad id\""), "{err}");
    let (code, _, err) = baton(
        &[
            "run",
            "--bootstrap",
            "127.0.0.1:1",
            "--probing-rebalance-interval-ms",
            "1000",
        ],
        None,
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("probing.rebalance.interval.ms"), "{err}");
    let (code, _, err) = baton(
        &["produce", "--bootstrap", "127.0.0.1:1", "--rate", "0"],
        None,
    );
    assert_eq!(code, 2, "{err}");
    let (code, _, err) = baton(
        &[
            "drain",
            "--bootstrap",
            "127.0.0.1:1",
            "--group",
            "g",
            "--instance",
            "",
        ],
        None,
    );
    assert_eq!(code, 2, "{err}");
}

/// A listener that accepts connections and never answers, until dropped.
struct SilentBroker {
    addr: String,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl SilentBroker {
    fn start() -> SilentBroker {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let s = stop.clone();
        std::thread::spawn(move || {
            let mut held = Vec::new();
            while !s.load(std::sync::atomic::Ordering::SeqCst) {
                if let Ok((c, _)) = listener.accept() {
                    held.push(c);
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
        });
        SilentBroker { addr, stop }
    }
}

impl Drop for SilentBroker {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

#[test]
fn broker_commands_give_up_on_a_silent_or_refusing_broker_within_their_timeout() {
    let silent = SilentBroker::start();
    let state = std::env::temp_dir().join(format!("baton-silent-{}", std::process::id()));
    let state = state.to_str().unwrap().to_owned();
    for addr in [silent.addr.as_str(), "127.0.0.1:1"] {
        let commands: [Vec<&str>; 4] = [
            vec!["inspect", "--group", "g", "--timeout-ms", "2000"],
            vec![
                "drain",
                "--group",
                "g",
                "--instance",
                "a",
                "--timeout-ms",
                "2000",
            ],
            vec!["produce", "--count", "10", "--timeout-ms", "2000"],
            vec![
                "run",
                "--instance-id",
                "a",
                "--state-dir",
                &state,
                "--startup-timeout-ms",
                "2000",
            ],
        ];
        for mut args in commands {
            args.extend(["--bootstrap", addr]);
            let started = std::time::Instant::now();
            let (code, _, err) = baton(&args, None);
            let secs = started.elapsed().as_secs_f64();
            assert_eq!(code, 1, "{args:?}: {err}");
            assert!(secs < 15.0, "{args:?} took {secs:.1} s against {addr}");
            assert!(
                err.contains(addr) || err.contains("refused") || err.contains("timed out"),
                "{args:?}: the error says what did not answer: {err}"
            );
            assert!(!err.contains("panicked"), "{err}");
        }
    }
    let _ = std::fs::remove_dir_all(&state);
}

#[test]
fn a_closed_stdout_ends_a_command_quietly() {
    // Enough output to fill the pipe: 3,000 tasks over 30 clients.
    let tasks: Vec<String> = (0..3000).map(|p| format!(r#"{{"id": "0_{p}"}}"#)).collect();
    let clients: Vec<String> = (0..30).map(|c| format!(r#"{{"id": "c{c}"}}"#)).collect();
    let input = format!(
        r#"{{"tasks": [{}], "clients": [{}]}}"#,
        tasks.join(","),
        clients.join(",")
    );
    let mut child = Command::new(env!("CARGO_BIN_EXE_baton"))
        .args(["assign", "--format", "table"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{:?}: {err}", out.status);
    assert!(!err.contains("panicked"), "{err}");
}

/// `baton assign` refuses bad rack settings naming the option, and reports the traffic of a
/// rack-aware assignment.
#[test]
fn assign_checks_rack_settings_and_reports_traffic() {
    let input = |config: &str| {
        format!(
            r#"{{"config": {{{config}}},
 "tasks": [{{"id": "0_0", "stateful": false, "partitions": [{{"topic": "in", "partition": 0, "racks": ["b"]}}]}},
           {{"id": "0_1", "stateful": false, "partitions": [{{"topic": "in", "partition": 1, "racks": ["a"]}}]}}],
 "clients": [{{"id": "x", "rack": "a", "owned_active": ["0_0"]}}, {{"id": "y", "rack": "b", "owned_active": ["0_1"]}}]}}"#
        )
    };
    for (config, expected) in [
        (
            r#""rack.aware.assignment.strategy": "fastest""#,
            "config.rack.aware.assignment.strategy: unknown variant `fastest`",
        ),
        (
            r#""rack.aware.assignment.traffic_cost": -3"#,
            "config.rack.aware.assignment.traffic_cost: -3 is not 0 to 1000000",
        ),
        (
            r#""rack.aware.assignment.non_overlap_cost": -1"#,
            "config.rack.aware.assignment.non_overlap_cost: -1 is not 0 to 1000000",
        ),
        (
            r#""rack.aware.assignment.tags": ["a", "b", "c", "d", "e", "f"]"#,
            "config.rack.aware.assignment.tags: 6 keys, at most 5",
        ),
    ] {
        let (code, _, err) = baton(&["assign", "-"], Some(&input(config)));
        assert_eq!(code, 2, "{config}: {err}");
        assert!(err.contains(expected), "{config}: {err}");
    }
    let (code, out, err) = baton(
        &["assign", "-"],
        Some(&input(r#""rack.aware.assignment.strategy": "min_traffic""#)),
    );
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    // Each task moves to the client on its partition's rack.
    assert_eq!(v["clients"]["x"]["active"][0], "0_1");
    assert_eq!(v["clients"]["y"]["active"][0], "0_0");
    assert_eq!(v["traffic"]["cross_rack_reads"], 0);
}
