//! Running an application: the whole `baton run` surface (flags, `BATON_*` environment
//! variables, a Kafka Streams properties file), for `baton run` and for any application's own
//! `main`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use baton_assignor::config::MAX_RACK_COST;
use baton_assignor::{AssignmentConfig, AssignorKind, RackStrategy};
use baton_runtime::query::api::Queries;
use baton_runtime::topology::{Topology, TopologyError};
use baton_runtime::{Exit, RuntimeConfig, RuntimeError};
use clap::Args;

/// Every setting of a Baton instance: `baton run`'s flags, and any application's that calls
/// [`run`]. Each flag can also be set by an environment variable (`BATON_` and the flag's name)
/// or, with Kafka Streams' name, in the `--config` properties file; flags win.
#[derive(Args, Debug, Clone)]
pub struct RunArgs {
    /// A broker to bootstrap from, HOST:PORT (repeatable).
    #[arg(long, env = "BATON_BOOTSTRAP", required = true, value_delimiter = ',')]
    pub bootstrap: Vec<String>,
    /// application.id: the consumer group, and the prefix of changelog and repartition
    /// topics [default: the application's own].
    #[arg(long, env = "BATON_APP_ID")]
    pub app_id: Option<String>,
    /// state.dir: task state lives here, one directory per task.
    #[arg(long, env = "BATON_STATE_DIR", default_value = "baton-state")]
    pub state_dir: PathBuf,
    /// This instance's name, the target of `baton drain` [default: a random one].
    #[arg(long, env = "BATON_INSTANCE_ID")]
    pub instance_id: Option<String>,
    /// num.stream.threads.
    #[arg(long, env = "BATON_THREADS", default_value_t = 1)]
    pub threads: u32,
    /// How many cores one stream thread may run its tasks' batches on at once, each task's in
    /// order: 0, the machine's cores shared among the stream threads; 1, one batch at a time,
    /// as a Kafka Streams thread runs its tasks.
    #[arg(long, env = "BATON_BATCH_CORES", default_value_t = 0)]
    pub batch_cores: u32,
    /// high-availability (warm-ups), kafka, or sticky (the pre-KIP-441 baseline).
    #[arg(long, env = "BATON_ASSIGNOR", value_enum, default_value_t = AssignorKind::HighAvailability)]
    pub assignor: AssignorKind,
    /// acceptable.recovery.lag: records a copy may be behind and still count as caught up.
    #[arg(long, env = "BATON_ACCEPTABLE_RECOVERY_LAG", default_value_t = 10_000)]
    pub acceptable_recovery_lag: u64,
    /// max.warmup.replicas: warm-ups running at once, group-wide.
    #[arg(long, env = "BATON_MAX_WARMUP_REPLICAS", default_value_t = 2)]
    pub max_warmup_replicas: u32,
    /// num.standby.replicas.
    #[arg(long, env = "BATON_NUM_STANDBY_REPLICAS", default_value_t = 0)]
    pub num_standby_replicas: u32,
    /// probing.rebalance.interval.ms: the fallback timer; a caught-up warm-up rebalances at once.
    #[arg(
        long,
        env = "BATON_PROBING_REBALANCE_INTERVAL_MS",
        default_value_t = 600_000
    )]
    pub probing_rebalance_interval_ms: u64,
    /// session.timeout.ms.
    #[arg(long, env = "BATON_SESSION_TIMEOUT_MS", default_value_t = 10_000)]
    pub session_timeout_ms: u64,
    /// scale.down.timeout.ms: a drained instance whose tasks have not moved within this long
    /// has them handed to the most caught-up staying instances anyway (they restore there),
    /// and then exits.
    #[arg(long, env = "BATON_SCALE_DOWN_TIMEOUT_MS", default_value_t = baton_assignor::config::DEFAULT_SCALE_DOWN_TIMEOUT_MS)]
    pub scale_down_timeout_ms: u64,
    /// stream.imbalance.percentage: while every instance is within this many percent of its
    /// capacity share, nothing moves (0 to 100; 0 is strict balance).
    #[arg(long, env = "BATON_IMBALANCE_PERCENTAGE", default_value_t = 0)]
    pub imbalance_percentage: u32,
    /// When an instance with warm-ups rejoins for the hand-over: `eager` as soon as one has
    /// caught up, `stable` once all of a thread's have (fewer rebalances), `probing` never
    /// (the hand-over waits for the probing rebalance, as in Kafka Streams).
    #[arg(long, env = "BATON_REJOIN_MODE", default_value = "eager")]
    pub rejoin_mode: baton_assignor::RejoinMode,
    /// heartbeat.interval.ms.
    #[arg(long, env = "BATON_HEARTBEAT_INTERVAL_MS", default_value_t = 500)]
    pub heartbeat_interval_ms: u64,
    /// commit.interval.ms.
    #[arg(long, env = "BATON_COMMIT_INTERVAL_MS", default_value_t = 1_000)]
    pub commit_interval_ms: u64,
    /// state.cleanup.delay.ms: delete task state unused for this long.
    #[arg(long, env = "BATON_STATE_CLEANUP_DELAY_MS", default_value_t = 600_000)]
    pub state_cleanup_delay_ms: u64,
    /// Most bytes one changelog fetch returns while a thread restores with no active running.
    #[arg(long, env = "BATON_RESTORE_FETCH_BYTES", default_value_t = 4 << 20)]
    pub restore_fetch_bytes: i32,
    /// The same while an active of that thread runs: a smaller chunk gets the thread back to
    /// its actives' input sooner (restore yields; docs/RUNTIME.md).
    #[arg(long, env = "BATON_RESTORE_FETCH_BYTES_BESIDE_ACTIVES", default_value_t = 1 << 20)]
    pub restore_fetch_bytes_beside_actives: i32,
    /// Serve Prometheus metrics at http://ADDR/metrics.
    #[arg(long, env = "BATON_METRICS_ADDR", value_name = "ADDR")]
    pub metrics_addr: Option<SocketAddr>,
    /// Use static membership (group.instance.id = INSTANCE-THREAD).
    #[arg(long, env = "BATON_STATIC_MEMBERSHIP")]
    pub static_membership: bool,
    /// application.server: HOST:PORT advertised for interactive queries.
    #[arg(long, env = "BATON_APPLICATION_SERVER", default_value = "")]
    pub application_server: String,
    /// statestore.cache.max.bytes: above 0, Kafka Streams' record cache from one commit to
    /// the next, its bytes shared by the stream threads: a store's updates and a table sink's
    /// (an aggregation, then only key-keeping steps) collapse to the last per key, written
    /// before each commit; records read through it, queries read the stores. Fewer output
    /// records, the same last value per key. 0 writes every update with its batch, as Kafka
    /// Streams does with the cache at 0 (docs/API.md). 10 MiB by default, as Kafka's.
    #[arg(long, env = "BATON_CACHE_MAX_BYTES", default_value_t = baton_runtime::config::DEFAULT_CACHE_MAX_BYTES)]
    pub cache_max_bytes: u64,
    /// What to do with an output record larger than any record batch the broker takes
    /// (message.max.bytes): `fail` stops that task only (the instance and its other tasks go
    /// on) with an error naming the task, partition and input offset; `skip` drops the record, logs it and counts it in
    /// baton_records_skipped_total. Batches are always split to fit; this is for one record.
    #[arg(long, env = "BATON_ON_OVERSIZED_RECORD", default_value = "fail", value_parser = ["fail", "skip"])]
    pub on_oversized_record: String,
    /// auto.offset.reset: where a task reads an input partition from when its position is not
    /// in it (the topic was deleted and made again, or the broker deleted the records):
    /// `earliest` (the default, as Kafka Streams), `latest`, or `none` (that task stops,
    /// naming partition and offset). Said once per partition in the log, either way.
    #[arg(long, env = "BATON_AUTO_OFFSET_RESET", default_value = "earliest", value_parser = ["earliest", "latest", "none"])]
    pub auto_offset_reset: String,
    /// A task stopped by a record it cannot process (`fail` policies, a panic in the runtime)
    /// is tried again after this many milliseconds, then twice as long after each failure (at
    /// most an hour). Without it (the default) the task stays stopped, holding its partitions,
    /// until it moves or the instance restarts.
    #[arg(long, env = "BATON_TASK_RETRY_MS", value_name = "MS", value_parser = clap::value_parser!(u64).range(1..))]
    pub task_retry_ms: Option<u64>,
    /// An output topic deleted while the instance runs is made again, with the partitions it
    /// had at start, instead of being waited for (its tasks meanwhile hold their input and
    /// state, as without the flag).
    #[arg(long, env = "BATON_CREATE_MISSING_OUTPUTS")]
    pub create_missing_outputs: bool,
    /// What a task does with an input record its application code fails on (a panic in a
    /// step): `fail` stops that task only, logging topic, partition and offset, while every
    /// other task goes on; `skip` drops the record, logs it (at most once a second per task)
    /// and counts it in baton_records_skipped_total; `dead-letter=TOPIC` writes the record as
    /// it came to TOPIC (created with one partition if missing), then skips it. A failed
    /// record never leaves a store write or an output behind.
    #[arg(
        long,
        env = "BATON_ON_PROCESSING_ERROR",
        default_value = "fail",
        value_name = "fail|skip|dead-letter=TOPIC"
    )]
    pub on_processing_error: String,
    /// What a task does with an input record whose bytes its serdes cannot read (as Kafka's
    /// DeserializationExceptionHandler): the same three policies as --on-processing-error, and
    /// never a silent drop.
    #[arg(
        long,
        env = "BATON_ON_DESERIALIZATION_ERROR",
        default_value = "fail",
        value_name = "fail|skip|dead-letter=TOPIC"
    )]
    pub on_deserialization_error: String,
    /// Print the topology (sub-topologies, sources, processors, stores, sinks, internal topics)
    /// as Kafka's Topology.describe() does, and exit.
    #[arg(long)]
    pub describe: bool,
    /// A properties file with Kafka Streams' names (application.id, bootstrap.servers,
    /// num.stream.threads, state.dir, num.standby.replicas, ...). Flags win over environment
    /// variables (BATON_*), which win over the file.
    #[arg(long, env = "BATON_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Give up (exit 1) if the broker has not answered the startup requests (topic metadata,
    /// creating the changelog and sink topics) within this long.
    #[arg(long, env = "BATON_STARTUP_TIMEOUT_MS", default_value_t = 60_000)]
    pub startup_timeout_ms: u64,
    /// client.rack: the rack or zone this instance runs in. The assignor keeps a task's
    /// standbys on racks other than its active's.
    #[arg(long, env = "BATON_RACK", value_name = "RACK")]
    pub rack: Option<String>,
    /// client.tag.KEY=VALUE (repeatable, at most 5): sent to the group and shown by
    /// `baton inspect`.
    #[arg(
        long = "client-tag",
        env = "BATON_CLIENT_TAGS",
        value_name = "KEY=VALUE",
        value_delimiter = ','
    )]
    pub client_tags: Vec<String>,
    /// rack.aware.assignment.tags: client tag keys (comma-separated, at most 5) whose values a
    /// task's copies should not share; the standbys go to other values of each.
    #[arg(
        long,
        env = "BATON_RACK_AWARE_ASSIGNMENT_TAGS",
        value_name = "KEY,...",
        value_delimiter = ','
    )]
    pub rack_aware_assignment_tags: Vec<String>,
    /// rack.aware.assignment.strategy: none, min_traffic (run actives where their input
    /// partitions have replicas) or balance_subtopology (the same, each subtopology kept
    /// balanced). Replica racks come from the broker's Metadata; every member needs --rack.
    #[arg(
        long,
        env = "BATON_RACK_AWARE_ASSIGNMENT_STRATEGY",
        value_name = "STRATEGY",
        default_value = "none"
    )]
    pub rack_aware_assignment_strategy: RackStrategy,
    /// rack.aware.assignment.traffic_cost: cost of one input partition read across racks.
    #[arg(long, env = "BATON_RACK_AWARE_TRAFFIC_COST", value_name = "COST", allow_negative_numbers = true, value_parser = clap::value_parser!(i64).range(0..=MAX_RACK_COST))]
    pub rack_aware_traffic_cost: Option<i64>,
    /// rack.aware.assignment.non_overlap_cost: cost of moving an active off its balanced, sticky
    /// client.
    #[arg(long, env = "BATON_RACK_AWARE_NON_OVERLAP_COST", value_name = "COST", allow_negative_numbers = true, value_parser = clap::value_parser!(i64).range(0..=MAX_RACK_COST))]
    pub rack_aware_non_overlap_cost: Option<i64>,
    /// The newest rebalance metadata version to subscribe and lead at (7 to 12). 11 speaks
    /// exactly as Kafka Streams 3.x: with it leading, a newer member is read by its header only
    /// and probes down. Without this flag Baton probes down by itself in a mixed group.
    #[arg(long, env = "BATON_MAX_PROTOCOL_VERSION", value_name = "VERSION", default_value_t = baton_protocol::BATON_VERSION)]
    pub max_protocol_version: i32,
}

/// Why a run ended badly, and the exit status it deserves: 2 for what the user must fix (a
/// bad flag, topics that do not fit), 1 for the rest.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct RunError {
    pub message: String,
    pub status: u8,
}

impl RunError {
    pub fn bad_input(message: impl std::fmt::Display) -> RunError {
        RunError {
            message: message.to_string(),
            status: 2,
        }
    }
}

/// Runs the application `build` makes for its application id (`--app-id`, else
/// `default_app_id`) until SIGINT or SIGTERM, or until it is drained.
pub fn run(
    args: RunArgs,
    default_app_id: &str,
    build: impl FnOnce(&str) -> Result<Topology, TopologyError>,
) -> Result<(), RunError> {
    run_with_queries(args, default_app_id, build, Queries::new())
}

/// [`run`], with `queries` answering the application's interactive queries in-process once
/// the instance has started ([`crate::queries`]): keep a clone, and read through it from any
/// tokio task.
pub fn run_with_queries(
    args: RunArgs,
    default_app_id: &str,
    build: impl FnOnce(&str) -> Result<Topology, TopologyError>,
    queries: Queries,
) -> Result<(), RunError> {
    init_logging();
    let app_id = args
        .app_id
        .clone()
        .unwrap_or_else(|| default_app_id.to_owned());
    let topology = build(&app_id).map_err(|e| RunError::bad_input(e.to_string()))?;
    if args.describe {
        print!("{}", topology.describe());
        return Ok(());
    }
    let cfg = config(args)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| RunError {
            message: format!("starting the runtime: {e}"),
            status: 1,
        })?;
    let exit = runtime.block_on(async {
        let (stop, shutdown) = tokio::sync::watch::channel(false);
        tokio::spawn(async move {
            wait_for_signal().await;
            tracing::info!("shutting down: committing, closing stores, leaving the group");
            let _ = stop.send(true);
        });
        baton_runtime::instance::run_with_queries(cfg, topology, shutdown, queries).await
    });
    match exit {
        Ok(Exit::Shutdown | Exit::Drained) => Ok(()),
        // The topics do not fit the application: the user's to fix, as with a bad option.
        Err(e @ RuntimeError::Topology(_)) => Err(RunError::bad_input(e.to_string())),
        Err(e) => Err(RunError {
            message: e.to_string(),
            status: 1,
        }),
    }
}

/// [`run`] for an application's `main`: prints the error, and gives the exit status.
///
/// ```no_run
/// use clap::Parser;
/// use baton_streams::{serdes::Str, Consumed, Produced, RunArgs, StreamsBuilder};
///
/// #[derive(Parser)]
/// struct Args {
///     #[command(flatten)]
///     run: RunArgs,
///     #[arg(long)]
///     input: String,
///     #[arg(long)]
///     output: String,
/// }
///
/// fn main() -> std::process::ExitCode {
///     let args: Args = baton_streams::parse_args();
///     baton_streams::main(args.run, "upper", |app_id| {
///         let builder = StreamsBuilder::new(app_id);
///         builder
///             .stream(&args.input, Consumed::with(Str, Str))
///             .map_values(|v: &String| v.to_uppercase())
///             .to(&args.output, Produced::with(Str, Str));
///         builder.build()
///     })
/// }
/// ```
pub fn main(
    args: RunArgs,
    default_app_id: &str,
    build: impl FnOnce(&str) -> Result<Topology, TopologyError>,
) -> ExitCode {
    match run(args, default_app_id, build) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", e.message);
            ExitCode::from(e.status)
        }
    }
}

/// Parses the command line into `A` (which flattens [`RunArgs`]), after setting the
/// `BATON_*` variables that `--config FILE` (or `BATON_CONFIG`) names and the environment does
/// not set already. A bad file exits with status 2, naming the file, line and key.
pub fn parse_args<A: clap::Parser>() -> A {
    if let Err(e) = apply_config_file(std::env::args_os()) {
        eprintln!("error: {e}");
        std::process::exit(2);
    }
    A::parse()
}

/// Kafka Streams' names of the settings, and the environment variable each sets.
const PROPERTIES: &[(&str, &str)] = &[
    ("application.id", "BATON_APP_ID"),
    ("bootstrap.servers", "BATON_BOOTSTRAP"),
    ("state.dir", "BATON_STATE_DIR"),
    ("num.stream.threads", "BATON_THREADS"),
    ("num.standby.replicas", "BATON_NUM_STANDBY_REPLICAS"),
    ("acceptable.recovery.lag", "BATON_ACCEPTABLE_RECOVERY_LAG"),
    ("max.warmup.replicas", "BATON_MAX_WARMUP_REPLICAS"),
    (
        "probing.rebalance.interval.ms",
        "BATON_PROBING_REBALANCE_INTERVAL_MS",
    ),
    ("session.timeout.ms", "BATON_SESSION_TIMEOUT_MS"),
    ("heartbeat.interval.ms", "BATON_HEARTBEAT_INTERVAL_MS"),
    ("commit.interval.ms", "BATON_COMMIT_INTERVAL_MS"),
    ("state.cleanup.delay.ms", "BATON_STATE_CLEANUP_DELAY_MS"),
    ("application.server", "BATON_APPLICATION_SERVER"),
    ("auto.offset.reset", "BATON_AUTO_OFFSET_RESET"),
    ("task.retry.ms", "BATON_TASK_RETRY_MS"),
    ("client.rack", "BATON_RACK"),
    (
        "rack.aware.assignment.tags",
        "BATON_RACK_AWARE_ASSIGNMENT_TAGS",
    ),
    (
        "rack.aware.assignment.strategy",
        "BATON_RACK_AWARE_ASSIGNMENT_STRATEGY",
    ),
    (
        "rack.aware.assignment.traffic_cost",
        "BATON_RACK_AWARE_TRAFFIC_COST",
    ),
    (
        "rack.aware.assignment.non_overlap_cost",
        "BATON_RACK_AWARE_NON_OVERLAP_COST",
    ),
    (
        "upgrade.from.protocol.version",
        "BATON_MAX_PROTOCOL_VERSION",
    ),
    ("scale.down.timeout.ms", "BATON_SCALE_DOWN_TIMEOUT_MS"),
    ("stream.imbalance.percentage", "BATON_IMBALANCE_PERCENTAGE"),
    ("warmup.rejoin.mode", "BATON_REJOIN_MODE"),
    ("processing.error.policy", "BATON_ON_PROCESSING_ERROR"),
    (
        "deserialization.error.policy",
        "BATON_ON_DESERIALIZATION_ERROR",
    ),
    ("metrics.addr", "BATON_METRICS_ADDR"),
    ("statestore.cache.max.bytes", "BATON_CACHE_MAX_BYTES"),
    ("cache.max.bytes.buffering", "BATON_CACHE_MAX_BYTES"),
];

/// What is wrong with a `--config` file: where, and why.
#[derive(Debug, thiserror::Error)]
pub enum ConfigFileError {
    #[error("--config {}: {source}", .file.display())]
    Unreadable {
        file: PathBuf,
        source: std::io::Error,
    },
    #[error("{}:{line}: expected KEY=VALUE, found {text:?}", .file.display())]
    NotASetting {
        file: PathBuf,
        line: usize,
        text: String,
    },
    #[error("{}:{line}: {key:?} is not a setting Baton knows (known: {})", .file.display(), known_properties())]
    Unknown {
        file: PathBuf,
        line: usize,
        key: String,
    },
}

fn known_properties() -> String {
    PROPERTIES
        .iter()
        .map(|(k, _)| *k)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The `BATON_*` variables a properties file sets, in file order, or what is wrong with it.
pub fn read_properties(
    text: &str,
    file: &Path,
) -> Result<Vec<(&'static str, String)>, ConfigFileError> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with('!') {
            continue;
        }
        let Some((key, value)) = line.split_once(['=', ':']) else {
            return Err(ConfigFileError::NotASetting {
                file: file.to_owned(),
                line: n + 1,
                text: line.to_owned(),
            });
        };
        let key = key.trim();
        let Some(&(_, env)) = PROPERTIES.iter().find(|(k, _)| *k == key) else {
            return Err(ConfigFileError::Unknown {
                file: file.to_owned(),
                line: n + 1,
                key: key.to_owned(),
            });
        };
        out.push((env, value.trim().to_owned()));
    }
    Ok(out)
}

/// Sets what `--config FILE` (or `BATON_CONFIG`) says, where the environment is silent.
/// Call it before any thread starts (it sets environment variables).
pub fn apply_config_file(
    args: impl IntoIterator<Item = std::ffi::OsString>,
) -> Result<(), ConfigFileError> {
    let mut args = args.into_iter().map(|a| a.to_string_lossy().into_owned());
    let mut file = std::env::var("BATON_CONFIG").ok().map(PathBuf::from);
    while let Some(a) = args.next() {
        if a == "--config" {
            file = args.next().map(PathBuf::from);
        } else if let Some(f) = a.strip_prefix("--config=") {
            file = Some(PathBuf::from(f));
        }
    }
    let Some(file) = file else { return Ok(()) };
    let text = match std::fs::read_to_string(&file) {
        Ok(text) => text,
        Err(source) => return Err(ConfigFileError::Unreadable { file, source }),
    };
    for (env, value) in read_properties(&text, &file)? {
        if std::env::var_os(env).is_none() {
            std::env::set_var(env, value);
        }
    }
    Ok(())
}

/// The runtime's configuration from the flags.
pub fn config(args: RunArgs) -> Result<RuntimeConfig, RunError> {
    let instance_id = args.instance_id.clone().unwrap_or_else(|| {
        let id = uuid::Uuid::new_v4().simple().to_string();
        format!("instance-{}", &id[..8])
    });
    let policy = |flag: &str, value: &str| {
        value
            .parse()
            .map_err(|e: baton_runtime::config::PolicyError| {
                RunError::bad_input(format!("--{flag}: {e}"))
            })
    };
    let cfg = RuntimeConfig {
        bootstrap: args.bootstrap,
        state_dir: args.state_dir,
        instance_id,
        threads: args.threads,
        batch_cores: args.batch_cores,
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
        restore_fetch_bytes: args.restore_fetch_bytes,
        restore_fetch_bytes_beside_actives: args.restore_fetch_bytes_beside_actives,
        metrics_addr: args.metrics_addr,
        static_membership: args.static_membership,
        user_endpoint: args.application_server,
        cache_max_bytes: args.cache_max_bytes,
        on_oversized_record: args
            .on_oversized_record
            .parse()
            .map_err(RunError::bad_input)?,
        auto_offset_reset: args
            .auto_offset_reset
            .parse()
            .map_err(RunError::bad_input)?,
        task_retry: args.task_retry_ms.map(std::time::Duration::from_millis),
        create_missing_outputs: args.create_missing_outputs,
        on_processing_error: policy("on-processing-error", &args.on_processing_error)?,
        on_deserialization_error: policy(
            "on-deserialization-error",
            &args.on_deserialization_error,
        )?,
        startup_timeout: Duration::from_millis(args.startup_timeout_ms),
        rack: args.rack.clone(),
        client_tags: args
            .client_tags
            .iter()
            .map(|t| {
                t.split_once('=')
                    .map(|(k, v)| (k.to_owned(), v.to_owned()))
                    .ok_or_else(|| {
                        RunError::bad_input(format!("--client-tag {t:?}: expected KEY=VALUE"))
                    })
            })
            .collect::<Result<_, _>>()?,
        max_protocol_version: args.max_protocol_version,
    };
    cfg.validate().map_err(RunError::bad_input)?;
    Ok(cfg)
}

/// Logs to stderr; `RUST_LOG` filters (default `info`).
pub fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn properties_use_kafka_streams_names_and_bad_lines_say_where() {
        let file = Path::new("app.properties");
        let text = "# comment\napplication.id = wordcount\nbootstrap.servers=a:9092,b:9092\n\nnum.stream.threads: 2\n";
        assert_eq!(
            read_properties(text, file).unwrap(),
            vec![
                ("BATON_APP_ID", "wordcount".to_owned()),
                ("BATON_BOOTSTRAP", "a:9092,b:9092".to_owned()),
                ("BATON_THREADS", "2".to_owned()),
            ]
        );
        let e = read_properties("state.dir=/x\nno.such.thing=1\n", file)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("app.properties:2: \"no.such.thing\" is not a setting"),
            "{e}"
        );
        let e = read_properties("just words\n", file)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("app.properties:1: expected KEY=VALUE"), "{e}");
    }
}

#[cfg(test)]
mod surface {
    use clap::{CommandFactory, Parser};

    use super::RunArgs;

    #[derive(Parser)]
    struct App {
        #[command(flatten)]
        run: RunArgs,
        #[arg(long)]
        input: String,
    }

    #[test]
    fn an_application_flattens_the_run_surface() {
        App::command().debug_assert();
        let app = App::try_parse_from(["app", "--bootstrap", "a:1,b:2", "--input", "in"]).unwrap();
        assert_eq!(app.run.bootstrap, ["a:1", "b:2"]);
        assert_eq!(app.run.threads, 1);
        assert_eq!(app.input, "in");
    }
}
