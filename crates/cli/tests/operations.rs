//! `baton drain` as an operator uses it on a live group: `--status`, `--percent` with
//! `--wait`, a `--wait` that times out, and `--cancel` of a drain under way.

mod harness;

use std::time::{Duration, Instant};

use harness::{now_ms, Cluster, Producer};

fn text(out: &std::process::Output) -> (i32, String, String) {
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `(instance, state, actives)` rows of `baton drain --status`.
fn status(cluster: &Cluster) -> Vec<(String, String, usize)> {
    let (code, out, err) = text(&cluster.baton(&["drain", "--group", &cluster.app, "--status"]));
    assert_eq!(code, 0, "{err}");
    out.lines()
        .skip(2)
        .map(|l| {
            let cells: Vec<&str> = l.split_whitespace().collect();
            (
                cells[0].to_owned(),
                cells[2].to_owned(),
                cells[3].parse().unwrap(),
            )
        })
        .collect()
}

fn await_status(cluster: &Cluster, what: &str, ok: impl Fn(&[(String, String, usize)]) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut rows = status(cluster);
    while !ok(&rows) {
        assert!(Instant::now() < deadline, "{what}: {rows:?}");
        std::thread::sleep(Duration::from_millis(300));
        rows = status(cluster);
    }
}

#[test]
fn drain_by_percent_wait_status_and_cancel() {
    let cluster = Cluster::new("ops");
    // Enough state that a warm-up takes seconds: inspect sees it under way, and a cancel lands
    // before it ends.
    cluster.preload_state(5_000_000);
    let mut instances: Vec<_> = ["a", "b", "c", "d"]
        .iter()
        .map(|n| cluster.spawn(n, &[]))
        .collect();
    let mut producer = Producer::start(&cluster.broker.addr, "o-", 200, 30);
    cluster.await_all_processing(now_ms(), "ops: four instances");
    await_status(&cluster, "four running", |rows| {
        rows.len() == 4 && rows.iter().all(|r| r.1 == "running")
    });

    // 25% of four: exactly one, the one holding the least (three partitions: one holds none).
    let rows = status(&cluster);
    let idle: Vec<&str> = rows
        .iter()
        .filter(|r| r.2 == 0)
        .map(|r| r.0.as_str())
        .collect();
    assert_eq!(idle.len(), 1, "{rows:?}");
    let (code, out, err) = text(&cluster.baton(&[
        "drain",
        "--group",
        &cluster.app,
        "--percent",
        "25",
        "--wait",
    ]));
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains(&format!("drain requested for {} (25% of 4", idle[0])),
        "{out}"
    );
    assert!(
        out.contains(&format!("{} left the group", idle[0])),
        "{out}"
    );
    let gone = instances.iter().position(|i| i.name == idle[0]).unwrap();
    assert!(
        instances[gone].await_exit(Duration::from_secs(10)),
        "the drained instance exited"
    );
    instances.remove(gone);

    let cancel = |instance: &str| {
        text(&cluster.baton(&[
            "drain",
            "--group",
            &cluster.app,
            "--instance",
            instance,
            "--cancel",
        ]))
    };
    // A drain that cannot finish within --wait-timeout-ms says so (exit 1); then it is
    // cancelled while its warm-up restores, and the instance stays.
    let busy = status(&cluster).into_iter().find(|r| r.2 > 0).unwrap().0;
    let (code, out, err) = text(&cluster.baton(&[
        "drain",
        "--group",
        &cluster.app,
        "--instance",
        &busy,
        "--wait",
        "--wait-timeout-ms",
        "1",
    ]));
    assert_eq!(code, 1, "{out}{err}");
    assert!(err.contains("still draining after"), "{err}");
    // `baton inspect` shows the move under way, with the warm-up's lag and its catch-up.
    let deadline = Instant::now() + Duration::from_secs(10);
    let move_of_busy = loop {
        let view = cluster.inspect_json();
        let found = view["pending"].as_array().and_then(|p| {
            p.iter()
                .find(|m| m["from"] == busy.as_str() && m["lag"].is_u64())
                .cloned()
        });
        if let Some(m) = found {
            break m;
        }
        assert!(
            Instant::now() < deadline,
            "no pending move from {busy}: {view:#}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    eprintln!("inspect: {move_of_busy}");
    let (code, table, _) = text(&cluster.baton(&["inspect", "--group", &cluster.app]));
    assert_eq!(code, 0);
    assert!(
        table.contains("pending moves: ") && table.contains("CATCH-UP/s"),
        "{table}"
    );
    let (code, out, err) = cancel(&busy);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("drain cancelled"), "{out}");
    await_status(&cluster, "the cancelled instance runs again", |rows| {
        rows.iter()
            .any(|r| r.0 == busy && r.1 == "running" && r.2 > 0)
    });
    std::thread::sleep(Duration::from_secs(3));
    let staying = instances.iter_mut().find(|i| i.name == busy).unwrap();
    assert!(
        !staying.await_exit(Duration::from_millis(100)),
        "a cancelled drain does not exit"
    );
    assert!(
        staying.count_log("drain cancelled: staying in the group") == 1,
        "{}",
        staying.log_text()
    );

    // Cancelling what is not draining, or draining all that is left, changes nothing.
    let (code, _, err) = cancel(&busy);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("nothing to cancel"), "{err}");
    let names: Vec<String> = status(&cluster).into_iter().map(|r| r.0).collect();
    let mut all = vec!["drain", "--group", &cluster.app];
    for n in &names {
        all.extend(["--instance", n]);
    }
    let (code, _, err) = text(&cluster.baton(&all));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("every instance"), "{err}");
    for (code, args) in [
        (2, vec!["--percent", "0"]),
        (2, vec!["--percent", "100"]),
        (2, vec!["--percent", "10"]),
        (2, vec![]),
    ] {
        let mut full = vec!["drain", "--group", &cluster.app];
        full.extend(args.iter().copied());
        let (got, _, err) = text(&cluster.baton(&full));
        assert_eq!(got, code, "{args:?}: {err}");
    }
    assert_eq!(status(&cluster).len(), 3, "nothing changed");
    cluster.await_all_processing(now_ms(), "ops: after the cancel");
    cluster.check_counts(&mut producer, "ops");
}

/// A drain that cannot finish in time: the warm-up of a large store takes longer than the
/// scale-down timeout, so at the timeout the leader hands the task over anyway (the new owner
/// restores it) and the drained instance exits; no event is lost.
#[test]
fn a_drain_past_the_scale_down_timeout_is_forced_and_ends() {
    let cluster = Cluster::new("timeout");
    cluster.preload_state(3_000_000);
    let timeout = ["--scale-down-timeout-ms", "1000"];
    let mut a = cluster.spawn("a", &timeout);
    let b = cluster.spawn("b", &timeout);
    let mut producer = Producer::start(&cluster.broker.addr, "t-", 200, 30);
    cluster.await_all_processing(now_ms(), "timeout: a and b");
    let started = Instant::now();
    cluster.drain("a");
    assert!(
        a.await_exit(Duration::from_secs(1 + 10)),
        "a exits within the timeout plus 10 s\n{}",
        a.log_text()
    );
    eprintln!("drain ended after {:.1} s", started.elapsed().as_secs_f64());
    let forced = [&a, &b]
        .iter()
        .any(|i| i.count_log("scale-down timeout (1000 ms)") > 0);
    assert!(
        forced,
        "the forced hand-over is reported\n{}\n{}",
        a.log_text(),
        b.log_text()
    );
    cluster.await_all_processing(now_ms(), "timeout: b alone");
    cluster.check_counts(&mut producer, "timeout");
}
