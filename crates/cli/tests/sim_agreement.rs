//! The simulator and the runtime agree. `examples/scenarios/scale-out-small.toml` (one instance
//! holding three tasks of 300,000 changelog records, two more join) is run by `baton simulate`
//! and on the broker with `baton run` instances: the same hand-overs in the same order, and
//! the same number of rebalances give or take one.
//!
//! The instances get the process ids the simulator gives its instances, so the assignor breaks
//! ties the same way in both. `a` hears of a round only at its heartbeat (every 3 s, Kafka's
//! default), so `b` and `c`, started together, join the same round as in the scenario; when
//! they do not, the test says so and compares with `c` joining one round later.

mod harness;

use std::time::{Duration, Instant};

use harness::{field, Cluster, Instance, PARTITIONS, SETTLE};

const SCENARIO: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../examples/scenarios/scale-out-small.toml"
);

/// `(rebalances, [(task, to)])` as `baton simulate` reports them.
fn simulated(cluster: &Cluster, scenario: &str) -> (i64, Vec<(String, String)>) {
    let out = std::process::Command::new(&cluster.bin)
        .args(["simulate", scenario, "--json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let report = json.as_array().map_or(&json, |a| &a[0]);
    let handovers = report["handovers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| {
            (
                h["task"].as_str().unwrap().to_owned(),
                h["to"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    (report["rebalances"].as_i64().unwrap(), handovers)
}

/// The generations an instance was assigned in, in order.
fn generations(i: &Instance) -> Vec<i64> {
    i.log_text()
        .lines()
        .filter(|l| l.contains(" assigned "))
        .map(|l| field(l, "generation").parse().unwrap())
        .collect()
}

/// `(log time, task, instance)` each time an instance started running an active.
fn took_over(i: &Instance) -> Vec<(String, String, String)> {
    i.log_text()
        .lines()
        .filter(|l| l.contains("task state") && l.contains("role=\"active\""))
        .filter(|l| field(l, "to") == "running")
        .map(|l| {
            let at = l.split_whitespace().next().unwrap_or_default().to_owned();
            (at, field(l, "task").to_owned(), i.name.clone())
        })
        .collect()
}

fn await_running(instances: &[(&Instance, usize)], what: &str) {
    let deadline = Instant::now() + SETTLE;
    while Instant::now() < deadline {
        if instances.iter().all(|(i, n)| i.running().len() == *n) {
            return;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    panic!("{what}: not settled within {SETTLE:?}");
}

#[test]
fn the_simulator_and_the_runtime_agree_on_a_scale_out() {
    assert_eq!(PARTITIONS, 3, "the scenario has three tasks");
    let cluster = Cluster::new("agree");
    cluster.preload_state(300_000);
    for (n, name) in ["a", "b", "c"].iter().enumerate() {
        let dir = cluster.dir.join(name);
        std::fs::create_dir_all(&dir).unwrap();
        let pid = uuid::Uuid::from_u128(n as u128 + 1);
        std::fs::write(dir.join("process-id"), pid.to_string()).unwrap();
    }
    let args = [
        "--max-warmup-replicas",
        "1",
        "--num-standby-replicas",
        "0",
        "--acceptable-recovery-lag",
        "10000",
    ];
    let a = cluster.spawn_timed("a", "a", (3000, 10_000), &args);
    await_running(&[(&a, 3)], "a alone");
    std::thread::sleep(Duration::from_secs(1));
    let before = generations(&a).len();

    let b = cluster.spawn_timed("b", "b", (300, 6000), &args);
    let c = cluster.spawn_timed("c", "c", (300, 6000), &args);
    let started = Instant::now();
    await_running(&[(&a, 1), (&b, 1), (&c, 1)], "a, b and c");
    let settled = started.elapsed();
    // Long enough for any further round to show.
    std::thread::sleep(Duration::from_secs(4));

    let rebalances = (generations(&a).len() - before) as i64;
    let first = |i: &Instance| generations(i).first().copied();
    let together = first(&b) == first(&c);
    let mut order: Vec<(String, String, String)> = took_over(&b);
    order.extend(took_over(&c));
    order.sort();
    let order: Vec<(String, String)> = order.into_iter().map(|(_, t, i)| (t, i)).collect();

    let (sim_rebalances, sim_order) = if together {
        simulated(&cluster, SCENARIO)
    } else {
        eprintln!("b and c joined different rounds: comparing with c one round later");
        let text = std::fs::read_to_string(SCENARIO).unwrap().replace(
            "add = [{ id = \"b\", restore_rate = 100000 }, { id = \"c\", restore_rate = 100000 }]",
            "add = [{ id = \"b\", restore_rate = 100000 }]\n[[events]]\nat_s = 10.5\nadd = [{ id = \"c\", restore_rate = 100000 }]",
        );
        let path = cluster.dir.join("scale-out-small-c-later.toml");
        std::fs::write(&path, text).unwrap();
        simulated(&cluster, path.to_str().unwrap())
    };
    eprintln!(
        "runtime: {rebalances} rebalances, hand-overs {order:?}, settled in {:.1} s; \
         simulator: {sim_rebalances} rebalances, hand-overs {sim_order:?}",
        settled.as_secs_f64()
    );
    assert_eq!(order, sim_order, "the same hand-overs in the same order");
    assert!(
        (rebalances - sim_rebalances).abs() <= 1,
        "rebalances: runtime {rebalances}, simulator {sim_rebalances}"
    );
}
