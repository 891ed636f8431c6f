//! `baton bench queries`: interactive queries against instances that are processing a backlog,
//! and the processing throughput they cost, all measured in the same run.
//!
//! 1. One instance of count per key gets through a backlog with no queries: the baseline rate.
//! 2. A fresh instance gets through a backlog of the same size while a reader asks random keys
//!    of its store at a steady rate: local answers, and the rate it processed at meanwhile.
//! 3. A second instance joins the second application; once it holds tasks, a backlog is
//!    written again and the reader asks the newcomer for every key for at least 5 s: the keys
//!    whose active is on the first instance are forwarded.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use baton_kafka::Client;
use baton_runtime::config::RuntimeConfig;
use baton_runtime::query::forward::get;
use baton_runtime::topology::count_per_key;
use clap::Args;
use serde_json::Value;

use super::throughput::{committed_rate, count_record, fill};
use crate::demo::stage::failed;
use crate::Failure;

/// The shortest time the reader asks the second instance.
const SPREAD_PHASE: Duration = Duration::from_secs(5);

#[derive(Args)]
pub struct QueriesArgs {
    /// Input records of each backlog (keys `k0`..`k9999`).
    #[arg(long, default_value_t = 4_000_000)]
    records: u64,
    /// Queries per second the reader asks for.
    #[arg(long, default_value_t = 500)]
    rate: u64,
    /// Give up (exit 1) when a backlog is not processed within this long.
    #[arg(long, default_value_t = 600_000)]
    step_timeout_ms: u64,
    /// Keep state here (default: a temporary directory, removed at the end).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Use this broker (HOST:PORT) instead of starting nisshi on a free loopback port.
    #[arg(long)]
    bootstrap: Option<String>,
}

/// What one query phase saw.
#[derive(Debug, Default)]
struct Phase {
    failed: u64,
    seconds: f64,
    /// Latencies of local and of forwarded answers.
    local: Vec<f64>,
    forwarded: Vec<f64>,
}

impl Phase {
    fn qps(&self) -> f64 {
        (self.local.len() + self.forwarded.len()) as f64 / self.seconds.max(1e-9)
    }
}

fn free_endpoint() -> Result<String, Failure> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.to_string())
        .map_err(|e| failed(format!("finding a free port: {e}")))
}

fn config(bootstrap: &str, dir: &Path, name: &str, endpoint: Option<&str>) -> RuntimeConfig {
    RuntimeConfig {
        bootstrap: vec![bootstrap.to_owned()],
        state_dir: dir.join(name),
        instance_id: name.into(),
        commit_interval: Duration::from_millis(200),
        user_endpoint: endpoint.unwrap_or_default().to_owned(),
        ..RuntimeConfig::default()
    }
}

/// Asks random keys of `counts` through `endpoint` at `rate` per second until `stop`.
async fn read(endpoint: String, rate: u64, stop: tokio::sync::watch::Receiver<bool>) -> Phase {
    let mut phase = Phase::default();
    let started = Instant::now();
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    let mut n = 0u64;
    while !*stop.borrow() {
        let due = started + Duration::from_secs_f64(n as f64 / rate as f64);
        tokio::time::sleep_until(due.into()).await;
        n += 1;
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let path = format!("/v1/stores/counts/keys/k{}", rng % 10_000);
        let asked = Instant::now();
        match get(&endpoint, &path, Duration::from_secs(10)).await {
            Ok((status, body)) if status.is_success() => {
                let took = asked.elapsed().as_secs_f64();
                if body["forwarded"] == Value::Bool(true) {
                    phase.forwarded.push(took);
                } else {
                    phase.local.push(took);
                }
            }
            other => {
                if phase.failed < 3 {
                    eprintln!("a query failed: {other:?}");
                }
                phase.failed += 1;
            }
        }
    }
    phase.seconds = started.elapsed().as_secs_f64();
    phase
}

/// Waits for the query server at `endpoint` to answer.
async fn up(endpoint: &str, timeout: Duration) -> Result<(), Failure> {
    let deadline = Instant::now() + timeout;
    while get(endpoint, "/v1/stores", Duration::from_secs(1))
        .await
        .is_err()
    {
        if Instant::now() > deadline {
            return Err(failed(format!(
                "the query server at {endpoint} never answered"
            )));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

/// One table row: the answers of `latencies` within `phase` (its failures are the phase's).
fn row(name: &str, latencies: &[f64], phase: &Phase) -> String {
    let mut sorted = latencies.to_vec();
    sorted.sort_by(f64::total_cmp);
    let ms = |p: f64| percentile(&sorted, p) * 1000.0;
    format!(
        "{name:<34} {:>9.0} {:>9} {:>7} {:>8.2} {:>8.2}\n",
        sorted.len() as f64 / phase.seconds.max(1e-9),
        sorted.len(),
        phase.failed,
        ms(0.5),
        ms(0.99)
    )
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() as f64 * p) as usize).min(sorted.len() - 1)]
}

pub fn run(args: QueriesArgs) -> Result<(), Failure> {
    if args.records == 0 || args.rate == 0 {
        return Err(Failure::bad_input("--records and --rate must be positive"));
    }
    let (dir, temporary) = crate::demo::workspace(&args.dir, "baton-bench-queries")?;
    let (_broker, bootstrap) = crate::demo::broker(&args.bootstrap, true)?;
    let runtime = crate::tokio_runtime()?;
    let timeout = Duration::from_millis(args.step_timeout_ms);
    let result = runtime.block_on(measure(&args, &bootstrap, &dir, timeout));
    drop(runtime);
    if temporary {
        let _ = std::fs::remove_dir_all(&dir);
    }
    crate::emit(&result?)
}

/// Waits until the instance serving queries at `endpoint` runs an active.
async fn runs_an_active(endpoint: &str, timeout: Duration) -> Result<(), Failure> {
    let settled = Instant::now() + timeout;
    loop {
        let (status, body) = get(endpoint, "/v1/stores", Duration::from_secs(5))
            .await
            .unwrap_or_default();
        let holds = status.is_success()
            && body["stores"][0]["partitions"].as_array().is_some_and(|p| {
                p.iter()
                    .any(|c| c["role"] == "active" && c["phase"] == "running")
            });
        if holds {
            return Ok(());
        }
        if Instant::now() > settled {
            return Err(failed("the second instance never ran an active"));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn measure(
    args: &QueriesArgs,
    bootstrap: &str,
    dir: &Path,
    timeout: Duration,
) -> Result<String, Failure> {
    let client = Client::new(&[bootstrap], "baton-bench-queries");
    let n = args.records;

    // 1. The baseline: no queries.
    let (app, input) = ("bench-queries-base", "bench-queries-base-input");
    fill(&client, input, n, &count_record).await?;
    let topology = count_per_key(app, input, &format!("{app}-out")).map_err(failed)?;
    let (stop, shutdown) = tokio::sync::watch::channel(false);
    let base = tokio::spawn(baton_runtime::instance::run(
        config(bootstrap, dir, "base", None),
        topology,
        shutdown,
    ));
    let baseline = committed_rate(&client, app, input, n, timeout).await;
    let _ = stop.send(true);
    let _ = base.await;
    let baseline = baseline?;
    eprintln!("baseline: {baseline:.0} records/s");

    // 2. The same backlog while the reader asks the instance itself.
    let (app, input) = ("bench-queries", "bench-queries-input");
    fill(&client, input, n, &count_record).await?;
    let first = free_endpoint()?;
    let (stop, shutdown) = tokio::sync::watch::channel(false);
    let topology = count_per_key(app, input, &format!("{app}-out")).map_err(failed)?;
    let one = tokio::spawn(baton_runtime::instance::run(
        config(bootstrap, dir, "one", Some(&first)),
        topology,
        shutdown.clone(),
    ));
    up(&first, timeout).await?;
    let (stop_reading, reading) = tokio::sync::watch::channel(false);
    let reader = tokio::spawn(read(first.clone(), args.rate, reading));
    let with_queries = committed_rate(&client, app, input, n, timeout).await;
    let _ = stop_reading.send(true);
    let local = reader.await.map_err(failed)?;
    let with_queries = with_queries?;
    eprintln!(
        "with {:.0} queries/s: {with_queries:.0} records/s",
        local.qps()
    );

    // 3. A second instance joins; once it holds tasks, the reader asks it for every key
    // while a second backlog is processed.
    let second = free_endpoint()?;
    let topology = count_per_key(app, input, &format!("{app}-out")).map_err(failed)?;
    let two = tokio::spawn(baton_runtime::instance::run(
        config(bootstrap, dir, "two", Some(&second)),
        topology,
        shutdown,
    ));
    runs_an_active(&second, timeout).await?;
    fill(&client, input, n, &count_record).await?;
    let (stop_reading, reading) = tokio::sync::watch::channel(false);
    let reading_from = Instant::now();
    let reader = tokio::spawn(read(second.clone(), args.rate, reading));
    let both = committed_rate(&client, app, input, 2 * n, timeout).await;
    // At least a few seconds of queries, the backlog done or not.
    tokio::time::sleep_until((reading_from + SPREAD_PHASE).into()).await;
    let _ = stop_reading.send(true);
    let spread = reader.await.map_err(failed)?;
    let _ = stop.send(true);
    let _ = one.await;
    let _ = two.await;
    both?;

    let mut out = String::new();
    out += &format!("backlog of {n} records, count per key, one stream thread per instance; reader at {} queries/s\n", args.rate);
    out += "phase                              queries/s  answered  failed   p50 ms   p99 ms\n";
    out += &row("local, while processing", &local.local, &local);
    out += &row("two instances: local part", &spread.local, &spread);
    out += &row("two instances: forwarded part", &spread.forwarded, &spread);
    out += &format!(
        "processing: {baseline:.0} records/s without queries, {with_queries:.0} with them: ratio {:.3}\n",
        with_queries / baseline
    );
    Ok(out)
}
