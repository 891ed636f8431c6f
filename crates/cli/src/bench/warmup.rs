//! `baton bench warmup`: does a warm-up slow down the actives on its instance?
//!
//! Each run starts a fresh application of three tasks on the broker, with a steady producer,
//! and two instances that share the tasks. Then N records are written to the changelog of a
//! task of one of them that the other has never held, and that one is drained: the task warms
//! up on the other from scratch beside the actives it runs, while the drained one keeps it.
//! Those actives are measured twice: for `--baseline-s` before the drain (no warm-up beside
//! them: the baseline, in the same run) and from the drain until the warm-up has caught up.
//! Measured: every event's latency, from its write to the first output that counts it, and
//! the longest time one of them wrote nothing.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use baton_assignor::AssignorKind;
use baton_kafka::records::Record;
use baton_kafka::Client;
use clap::Args;
use tokio::process::Child;

use super::latency::{measure, Measured};
use crate::demo::scrape::{scrape, InstanceView};
use crate::demo::stage::{
    create_topics, failed, preload, read_topic, spawn_instance, spawn_producer, stop, Instance,
    Launch,
};
use crate::Failure;

/// Each partition's records, in offset order.
type Topic = BTreeMap<i32, Vec<Record>>;

const TICK: Duration = Duration::from_millis(100);

#[derive(Args)]
pub struct WarmupArgs {
    /// Changelog records the warm-up restores, one run each (comma-separated).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "1000000,4000000,16000000"
    )]
    state_records: Vec<u64>,
    /// Events per second the producer writes over the three partitions (1 to 100000).
    #[arg(long, default_value_t = 1000)]
    rate: u64,
    /// Seconds the actives are measured before the drain, with no warm-up beside them.
    #[arg(long, default_value_t = 10)]
    baseline_s: u64,
    /// Give up (exit 1) when a step has not finished within this long.
    #[arg(long, default_value_t = 300_000)]
    step_timeout_ms: u64,
    /// Keep instance logs and state here (default: a temporary directory, removed at the end).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Use this broker (HOST:PORT) instead of starting nisshi on a free loopback port.
    #[arg(long)]
    bootstrap: Option<String>,
}

/// One run's figures.
struct Row {
    state_records: u64,
    /// From the drain until the warm-up runs as the active.
    catch_up_s: f64,
    /// The actives beside it, in the `baseline_s` before the drain.
    baseline: Measured,
    /// The same actives from the drain until the warm-up caught up.
    during: Measured,
}

pub fn run(args: WarmupArgs) -> Result<(), Failure> {
    if args.state_records.iter().any(|&n| n == 0 || n > 50_000_000) {
        return Err(Failure::bad_input(
            "--state-records: each must be 1 to 50000000",
        ));
    }
    if !(1..=100_000).contains(&args.rate) || args.baseline_s == 0 {
        return Err(Failure::bad_input(
            "--rate must be 1 to 100000 and --baseline-s positive",
        ));
    }
    let (dir, temporary) = crate::demo::workspace(&args.dir, "baton-bench")?;
    // Kept alive to the end; dropping it stops the broker.
    let (_broker, bootstrap) = crate::demo::broker(&args.bootstrap, true)?;
    let runtime = crate::tokio_runtime()?;
    let result = runtime.block_on(async {
        let mut rows = Vec::new();
        for &n in &args.state_records {
            rows.push(one(&args, &bootstrap, &dir, n).await?);
        }
        Ok::<_, Failure>(rows)
    });
    drop(runtime);
    if temporary && result.is_ok() {
        let _ = std::fs::remove_dir_all(&dir);
    } else if result.is_err() {
        eprintln!("logs and state kept in {}", dir.display());
    }
    crate::emit(&table(&result?))
}

fn table(rows: &[Row]) -> String {
    let ratio = |r: &Row| r.during.p99_ms.max(1) as f64 / r.baseline.p99_ms.max(1) as f64;
    let secs = |ms: i64| format!("{:.2}", ms as f64 / 1000.0);
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.state_records.to_string(),
                format!("{:.1}", r.catch_up_s),
                format!("{} / {}", r.during.records, r.baseline.records),
                format!("{} / {}", r.during.p50_ms, r.baseline.p50_ms),
                format!("{} / {}", r.during.p99_ms, r.baseline.p99_ms),
                format!("{:.2}", ratio(r)),
                format!("{} / {}", r.during.max_ms, r.baseline.max_ms),
                format!(
                    "{} / {}",
                    secs(r.during.longest_gap_ms),
                    secs(r.baseline.longest_gap_ms)
                ),
            ]
        })
        .collect();
    let mut out = crate::columns::render(
        &[
            "WARM-UP RECORDS",
            "CATCH-UP s",
            "EVENTS",
            "P50 ms",
            "P99 ms",
            "P99 RATIO",
            "MAX ms",
            "LONGEST GAP s",
        ],
        &cells,
    );
    out.push_str(
        "(each pair: while the warm-up restored / the same actives just before, no warm-up; \
         latency from an event's write to the first output counting it; LONGEST GAP: the \
         longest time one of those actives wrote nothing; CATCH-UP: from the drain until the \
         warmed-up task runs as the active)\n",
    );
    let unanswered: usize = rows
        .iter()
        .map(|r| r.during.unanswered + r.baseline.unanswered)
        .sum();
    let met = rows
        .iter()
        .all(|r| ratio(r) <= 1.5 && r.during.longest_gap_ms <= 500);
    out.push_str(&format!(
        "verdict: {} (goal: p99 within 1.5x of no warm-up and no gap over 0.5 s, at every size){}\n",
        if met { "met" } else { "NOT met" },
        if unanswered > 0 {
            format!("; {unanswered} events were never counted")
        } else {
            String::new()
        }
    ));
    out
}

/// One run with `records` of state on the warming task.
async fn one(
    args: &WarmupArgs,
    bootstrap: &str,
    root: &std::path::Path,
    records: u64,
) -> Result<Row, Failure> {
    let app = format!("baton-bench-warmup-{records}");
    let (input, output, changelog) = (
        format!("{app}-events"),
        format!("{app}-counts"),
        format!("{app}-counts-changelog"),
    );
    let dir = root.join(&app);
    std::fs::create_dir_all(&dir).map_err(|e| failed(format!("{}: {e}", dir.display())))?;
    let client = Client::new(&[bootstrap], "baton-bench");
    create_topics(&client, [&input, &output, &changelog], 3).await?;
    let exe = std::env::current_exe().map_err(|e| failed(format!("finding baton: {e}")))?;
    let mut producer = spawn_producer(&exe, bootstrap, &input, args.rate, 60)?;
    let launch = |name| Launch {
        exe: &exe,
        bootstrap,
        app: &app,
        input: &input,
        output: &output,
        assignor: AssignorKind::HighAvailability,
        dir: &dir,
        name,
    };
    let timeout = Duration::from_millis(args.step_timeout_ms);
    let mut both = [spawn_instance(&launch("a"))?, spawn_instance(&launch("b"))?];
    wait(
        &mut both,
        &mut producer,
        timeout,
        "a and b to share the tasks",
        balanced,
    )
    .await?;
    // One of the drained instance's tasks warms up on the other, beside the actives it runs,
    // from scratch: a task whose store the other has never opened. Those actives are measured,
    // first for `baseline_s` before the drain, then during the warm-up.
    let views = views(&mut both).await;
    let names = [both[0].name, both[1].name];
    let (holder, task, partition) = pick_fresh_task(&views, names, &dir)?;
    let other = 1 - holder;
    let measured_parts: Vec<i32> = running(&views[other])
        .iter()
        .filter_map(|t| t.strip_prefix("0_")?.parse().ok())
        .collect();
    // Written beside what the active writes: the warm-up replays both; the active's own store
    // never reads them (their keys are not the events' keys), so the counts stay exact.
    eprintln!("{app}: writing {records} records of state for {task}");
    preload(&client, &changelog, &[partition], records, false).await?;
    let baseline_from = baton_kafka::member::epoch_ms();
    tokio::time::sleep(Duration::from_secs(args.baseline_s)).await;
    let drained = baton_kafka::member::epoch_ms();
    let name = both[holder].name;
    crate::demo::stage::run_drain(&exe, bootstrap, &app, name).await?;
    eprintln!(
        "{app}: {name} drained; {} warms up {task} beside {measured_parts:?}",
        both[other].name
    );
    wait(
        &mut both,
        &mut producer,
        timeout,
        "the warm-up to catch up",
        |v| v.get(other).is_some_and(|o| runs(o, &[task.as_str()])),
    )
    .await?;
    let caught_up = baton_kafka::member::epoch_ms();
    // A second more of input, so the window's last events have output to be counted by.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let _ = producer.start_kill();
    let _ = producer.wait().await;
    let (inputs, outputs) = settle(&client, &input, &output, &measured_parts, timeout).await?;
    stop(&mut both).await;
    let baseline = measure(&inputs, &outputs, &measured_parts, baseline_from, drained);
    let during = measure(&inputs, &outputs, &measured_parts, drained, caught_up);
    eprintln!(
        "{app}: warm-up {:.1} s; p99 {} ms (before {} ms), longest gap {} ms (before {} ms)",
        (caught_up - drained) as f64 / 1000.0,
        during.p99_ms,
        baseline.p99_ms,
        during.longest_gap_ms,
        baseline.longest_gap_ms
    );
    Ok(Row {
        state_records: records,
        catch_up_s: (caught_up - drained) as f64 / 1000.0,
        baseline,
        during,
    })
}

/// A task one instance runs whose store the other has never opened (it warms up there from
/// scratch): (its holder, the task, its partition).
fn pick_fresh_task(
    views: &[InstanceView],
    names: [&str; 2],
    dir: &std::path::Path,
) -> Result<(usize, String, i32), Failure> {
    let pick = (0..2).find_map(|holder| {
        let other = 1 - holder;
        let never_held = |t: &&String| !dir.join(names[other]).join(t.as_str()).exists();
        let task = running(&views[holder])
            .into_iter()
            .find(|t| never_held(&t))?;
        Some((holder, task))
    });
    let Some((holder, task)) = pick else {
        return Err(failed(
            "each instance has held every task of the other: no task would warm up from scratch",
        ));
    };
    let Some(partition) = task.strip_prefix("0_").and_then(|p| p.parse().ok()) else {
        return Err(failed(format!("{task} is not a task of subtopology 0")));
    };
    Ok((holder, task, partition))
}

/// The tasks the instance runs as actives.
fn running(v: &InstanceView) -> Vec<String> {
    v.held
        .iter()
        .filter(|(_, h)| h.role == "active" && h.phase == "running")
        .map(|(t, _)| t.clone())
        .collect()
}

/// Both instances run actives, every task runs once, and nothing warms up.
fn balanced(views: &[InstanceView]) -> bool {
    let running = |v: &InstanceView| running(v).len();
    views.len() == 2
        && views.iter().all(|v| running(v) > 0)
        && views.iter().map(running).sum::<usize>() == 3
        && views
            .iter()
            .all(|v| v.held.values().all(|h| h.role != "warmup"))
}

async fn views(instances: &mut [Instance]) -> Vec<InstanceView> {
    let mut out = Vec::new();
    for i in instances.iter() {
        out.push(scrape(i.metrics).await.unwrap_or_default());
    }
    out
}

/// `tasks` all run as actives on the instance.
fn runs(v: &InstanceView, tasks: &[&str]) -> bool {
    tasks.iter().all(|t| {
        v.held
            .get(*t)
            .is_some_and(|h| h.role == "active" && h.phase == "running")
    })
}

/// Waits until `done` holds for the instances' views (in order; a missing view is empty). An
/// instance or the producer exiting, or the step's timeout, is a failure.
async fn wait(
    instances: &mut [Instance],
    producer: &mut Child,
    timeout: Duration,
    what: &str,
    done: impl Fn(&[InstanceView]) -> bool,
) -> Result<(), Failure> {
    let started = Instant::now();
    loop {
        if let Ok(Some(status)) = producer.try_wait() {
            return Err(failed(format!("the producer stopped ({status})")));
        }
        let mut views = Vec::new();
        for i in instances.iter_mut() {
            if let Ok(Some(status)) = i.child.try_wait() {
                if !status.success() {
                    return Err(failed(format!("instance {} stopped ({status})", i.name)));
                }
            }
            views.push(scrape(i.metrics).await.unwrap_or_default());
        }
        if done(&views) {
            return Ok(());
        }
        if started.elapsed() > timeout {
            return Err(failed(format!(
                "waited {:.0} s for {what} (--step-timeout-ms)",
                timeout.as_secs_f64()
            )));
        }
        tokio::time::sleep(TICK).await;
    }
}

/// Reads the input and the output back once every event of `parts` has been counted (or the
/// timeout passed: the uncounted ones are reported).
async fn settle(
    client: &Client,
    input: &str,
    output: &str,
    parts: &[i32],
    timeout: Duration,
) -> Result<(Topic, Topic), Failure> {
    let deadline = Instant::now() + timeout;
    let inputs = read_topic(client, input, 3).await?;
    loop {
        let outputs = read_topic(client, output, 3).await?;
        let m = measure(&inputs, &outputs, parts, i64::MIN, i64::MAX);
        if m.unanswered == 0 || Instant::now() > deadline {
            return Ok((inputs, outputs));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
