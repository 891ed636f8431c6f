//! `baton run`: the example application, counting events per key into a state store and
//! writing each new count to an output topic.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use baton_assignor::config::MAX_RACK_COST;
use baton_assignor::{AssignmentConfig, AssignorKind, RackStrategy};
use baton_runtime::{count_per_key, Exit, RuntimeConfig, RuntimeError};
use clap::Args;

use crate::{tokio_runtime, Failure};

#[derive(Args)]
pub struct RunArgs {
    /// A broker to bootstrap from, HOST:PORT (repeatable).
    #[arg(long, required = true)]
    bootstrap: Vec<String>,
    /// application.id: the consumer group, and the prefix of changelog topics.
    #[arg(long, default_value = "baton-count")]
    app_id: String,
    /// The topic of events to count (it must exist).
    #[arg(long, default_value = "events")]
    input: String,
    /// Where each key's new count goes (if missing, created with the input's partition count).
    #[arg(long, default_value = "counts")]
    output: String,
    /// state.dir: task state lives here, one directory per task.
    #[arg(long, default_value = "baton-state")]
    state_dir: PathBuf,
    /// This instance's name, the target of `baton drain` [default: a random one].
    #[arg(long)]
    instance_id: Option<String>,
    /// num.stream.threads.
    #[arg(long, default_value_t = 1)]
    threads: u32,
    /// high-availability (warm-ups), kafka, or sticky (the pre-KIP-441 baseline).
    #[arg(long, value_enum, default_value_t = AssignorKind::HighAvailability)]
    assignor: AssignorKind,
    /// acceptable.recovery.lag: records a copy may be behind and still count as caught up.
    #[arg(long, default_value_t = 10_000)]
    acceptable_recovery_lag: u64,
    /// max.warmup.replicas: warm-ups running at once, group-wide.
    #[arg(long, default_value_t = 2)]
    max_warmup_replicas: u32,
    /// num.standby.replicas.
    #[arg(long, default_value_t = 0)]
    num_standby_replicas: u32,
    /// probing.rebalance.interval.ms: the fallback timer; a caught-up warm-up rebalances at once.
    #[arg(long, default_value_t = 600_000)]
    probing_rebalance_interval_ms: u64,
    /// session.timeout.ms.
    #[arg(long, default_value_t = 10_000)]
    session_timeout_ms: u64,
    /// scale.down.timeout.ms: a drained instance whose tasks have not moved within this long
    /// has them handed to the most caught-up staying instances anyway (they restore there),
    /// and then exits.
    #[arg(long, default_value_t = baton_assignor::config::DEFAULT_SCALE_DOWN_TIMEOUT_MS)]
    scale_down_timeout_ms: u64,
    /// stream.imbalance.percentage: while every instance is within this many percent of its
    /// capacity share, nothing moves (0 to 100; 0 is strict balance).
    #[arg(long, default_value_t = 0)]
    imbalance_percentage: u32,
    /// When an instance with warm-ups rejoins for the hand-over: `eager` as soon as one has
    /// caught up, `stable` once all of a thread's have (fewer rebalances), `probing` never
    /// (the hand-over waits for the probing rebalance, as in Kafka Streams).
    #[arg(long, default_value = "eager")]
    rejoin_mode: baton_assignor::RejoinMode,
    /// heartbeat.interval.ms.
    #[arg(long, default_value_t = 500)]
    heartbeat_interval_ms: u64,
    /// commit.interval.ms.
    #[arg(long, default_value_t = 1_000)]
    commit_interval_ms: u64,
    /// state.cleanup.delay.ms: delete task state unused for this long.
    #[arg(long, default_value_t = 600_000)]
    state_cleanup_delay_ms: u64,
    /// Serve Prometheus metrics at http://ADDR/metrics.
    #[arg(long, value_name = "ADDR")]
    metrics_addr: Option<SocketAddr>,
    /// Use static membership (group.instance.id = INSTANCE-THREAD).
    #[arg(long)]
    static_membership: bool,
    /// application.server: HOST:PORT advertised for interactive queries.
    #[arg(long, default_value = "")]
    application_server: String,
    /// What to do with an output record larger than any record batch the broker takes
    /// (message.max.bytes): `fail` stops the instance with an error naming the task, partition
    /// and input offset; `skip` drops the record, logs it and counts it in
    /// baton_records_skipped_total. Batches are always split to fit; this is for one record.
    #[arg(long, default_value = "fail", value_parser = ["fail", "skip"])]
    on_oversized_record: String,
    /// What a task does with an input record its application code fails on (a panic in a
    /// step): `fail` stops that task only, logging topic, partition and offset, while every
    /// other task goes on; `skip` drops the record, logs it (at most once a second per task)
    /// and counts it in baton_records_skipped_total; `dead-letter=TOPIC` writes the record as
    /// it came to TOPIC (created with one partition if missing), then skips it. A failed
    /// record never leaves a store write or an output behind.
    #[arg(
        long,
        default_value = "fail",
        value_name = "fail|skip|dead-letter=TOPIC"
    )]
    on_processing_error: String,
    /// Give up (exit 1) if the broker has not answered the startup requests (topic metadata,
    /// creating the changelog and sink topics) within this long.
    #[arg(long, default_value_t = 60_000)]
    startup_timeout_ms: u64,
    /// client.rack: the rack or zone this instance runs in. The assignor keeps a task's
    /// standbys on racks other than its active's.
    #[arg(long, value_name = "RACK")]
    rack: Option<String>,
    /// client.tag.KEY=VALUE (repeatable, at most 5): sent to the group and shown by
    /// `baton inspect`.
    #[arg(long = "client-tag", value_name = "KEY=VALUE")]
    client_tags: Vec<String>,
    /// rack.aware.assignment.tags: client tag keys (comma-separated, at most 5) whose values a
    /// task's copies should not share; the standbys go to other values of each.
    #[arg(long, value_name = "KEY,...", value_delimiter = ',')]
    rack_aware_assignment_tags: Vec<String>,
    /// rack.aware.assignment.strategy: none, min_traffic (run actives where their input
    /// partitions have replicas) or balance_subtopology (the same, each subtopology kept
    /// balanced). Replica racks come from the broker's Metadata; every member needs --rack.
    #[arg(long, value_name = "STRATEGY", default_value = "none")]
    rack_aware_assignment_strategy: RackStrategy,
    /// rack.aware.assignment.traffic_cost: cost of one input partition read across racks.
    #[arg(long, value_name = "COST", allow_negative_numbers = true, value_parser = clap::value_parser!(i64).range(0..=MAX_RACK_COST))]
    rack_aware_traffic_cost: Option<i64>,
    /// rack.aware.assignment.non_overlap_cost: cost of moving an active off its balanced, sticky
    /// client.
    #[arg(long, value_name = "COST", allow_negative_numbers = true, value_parser = clap::value_parser!(i64).range(0..=MAX_RACK_COST))]
    rack_aware_non_overlap_cost: Option<i64>,
    /// The newest rebalance metadata version to subscribe and lead at (7 to 12). 11 speaks
    /// exactly as Kafka Streams 3.x: with it leading, a newer member is read by its header only
    /// and probes down. Without this flag Baton probes down by itself in a mixed group.
    #[arg(long, value_name = "VERSION", default_value_t = baton_protocol::BATON_VERSION)]
    max_protocol_version: i32,
}

pub fn run(args: RunArgs) -> Result<(), Failure> {
    crate::init_logging();
    if args.input == args.output {
        return Err(Failure::bad_input(format!(
            "--output {:?} is the input topic: every count would be counted again, forever",
            args.output
        )));
    }
    let topology = count_per_key(&args.app_id, &args.input, &args.output)
        .map_err(|e| Failure::bad_input(e.to_string()))?;
    let instance_id = args.instance_id.clone().unwrap_or_else(|| {
        let id = uuid::Uuid::new_v4().simple().to_string();
        format!("instance-{}", &id[..8])
    });
    let cfg = RuntimeConfig {
        bootstrap: args.bootstrap,
        state_dir: args.state_dir,
        instance_id,
        threads: args.threads,
        assignor: args.assignor,
        assignment: AssignmentConfig {
            acceptable_recovery_lag: args.acceptable_recovery_lag,
            max_warmup_replicas: args.max_warmup_replicas,
            num_standby_replicas: args.num_standby_replicas,
            probing_rebalance_interval_ms: args.probing_rebalance_interval_ms,
            scale_down_timeout_ms: args.scale_down_timeout_ms,
            imbalance_percentage: args.imbalance_percentage,
            rejoin_mode: args.rejoin_mode,
            rack_aware_assignment_tags: args.rack_aware_assignment_tags,
            rack_aware_strategy: args.rack_aware_assignment_strategy,
            rack_aware_traffic_cost: args.rack_aware_traffic_cost,
            rack_aware_non_overlap_cost: args.rack_aware_non_overlap_cost,
        },
        session_timeout: Duration::from_millis(args.session_timeout_ms),
        heartbeat_interval: Duration::from_millis(args.heartbeat_interval_ms),
        commit_interval: Duration::from_millis(args.commit_interval_ms),
        state_cleanup_delay: Duration::from_millis(args.state_cleanup_delay_ms),
        metrics_addr: args.metrics_addr,
        static_membership: args.static_membership,
        user_endpoint: args.application_server,
        on_oversized_record: args
            .on_oversized_record
            .parse()
            .map_err(Failure::bad_input)?,
        on_processing_error: args
            .on_processing_error
            .parse()
            .map_err(|e: String| Failure::bad_input(format!("--on-processing-error: {e}")))?,
        startup_timeout: Duration::from_millis(args.startup_timeout_ms),
        rack: args.rack.clone(),
        client_tags: args
            .client_tags
            .iter()
            .map(|t| {
                t.split_once('=')
                    .map(|(k, v)| (k.to_owned(), v.to_owned()))
                    .ok_or_else(|| {
                        Failure::bad_input(format!("--client-tag {t:?}: expected KEY=VALUE"))
                    })
            })
            .collect::<Result<_, _>>()?,
        max_protocol_version: args.max_protocol_version,
        ..RuntimeConfig::default()
    };
    cfg.validate().map_err(Failure::bad_input)?;
    let runtime = tokio_runtime()?;
    let exit = runtime.block_on(async {
        let (stop, shutdown) = tokio::sync::watch::channel(false);
        tokio::spawn(async move {
            wait_for_signal().await;
            tracing::info!("shutting down: committing, closing stores, leaving the group");
            let _ = stop.send(true);
        });
        baton_runtime::instance::run(cfg, topology, shutdown).await
    });
    match exit {
        Ok(Exit::Shutdown | Exit::Drained) => Ok(()),
        // The topics do not fit the application: the user's to fix, as with a bad option.
        Err(e @ RuntimeError::Topology(_)) => Err(Failure::bad_input(e.to_string())),
        Err(e) => Err(Failure {
            message: e.to_string(),
            status: 1,
        }),
    }
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}
