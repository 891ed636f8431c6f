//! `baton`: smooth scaling for stateful stream processing.

mod assign;
mod bench;
mod blob;
mod columns;
mod demo;
mod drain;
mod inspect;
mod produce;
mod query;
mod retry;
mod run;
mod simulate;
mod table;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// mimalloc: a stream thread allocates and frees a dozen small buffers per record, and glibc's
/// `free` took a quarter of count per key's instructions (docs/BENCHMARKS.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "baton",
    version,
    about = "Hand tasks over only when the new owner has caught up"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Compute an assignment from cluster state JSON.
    Assign(assign::AssignArgs),
    /// Print a Kafka Streams subscription or assignment blob as JSON.
    Decode(blob::BlobArgs),
    /// Write a subscription or assignment blob from JSON (the reverse of `decode`).
    Encode(blob::BlobArgs),
    /// Replay scaling scenarios in simulated time and report what each assignor costs.
    Simulate(simulate::SimulateArgs),
    /// Describe a live group: members, subscriptions, assignments and lags.
    Inspect(inspect::InspectArgs),
    /// Run the example application: count events per key, handing tasks over smoothly.
    Run(Box<run::CountArgs>),
    /// Produce test events at a steady rate.
    Produce(produce::ProduceArgs),
    /// Mark an instance as leaving: its tasks move off, then it exits.
    Drain(drain::DrainArgs),
    /// Open an instance's failed tasks again, once what stopped them is dealt with.
    Retry(retry::RetryArgs),
    /// Read one key of a store through any instance's query server.
    Query(query::QueryArgs),
    /// Show a real scale-out and drain on a local broker, live, against the pre-KIP baseline.
    Demo(demo::DemoArgs),
    /// Measure on a real broker what the docs report (docs/BENCHMARKS.md).
    Bench(bench::BenchArgs),
}

/// Exit status for bad input, as documented in the README.
pub const EXIT_BAD_INPUT: u8 = 2;

fn main() -> ExitCode {
    // `baton run --config FILE`: the properties file sets what flags and environment do not.
    if let Err(e) = baton_streams::run::apply_config_file(std::env::args_os()) {
        eprintln!("error: {e}");
        return ExitCode::from(EXIT_BAD_INPUT);
    }
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Assign(args) => assign::run(args),
        Command::Decode(args) => blob::decode(args),
        Command::Encode(args) => blob::encode(args),
        Command::Simulate(args) => simulate::run(args),
        Command::Inspect(args) => inspect::run(args),
        Command::Run(args) => run::run(*args),
        Command::Produce(args) => produce::run(args),
        Command::Drain(args) => drain::run(args),
        Command::Retry(args) => retry::run(args),
        Command::Query(args) => query::run(args),
        Command::Demo(args) => demo::run(args),
        Command::Bench(args) => bench::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("baton: {}", e.message);
            ExitCode::from(e.status)
        }
    }
}

/// Runs `work`, giving up after `limit` with a failure that says the broker did not answer.
/// Every command that talks to a broker runs under one, so none waits forever on a broker
/// that accepts connections and never answers.
pub async fn within<T>(
    limit: std::time::Duration,
    bootstrap: &str,
    work: impl std::future::Future<Output = Result<T, Failure>>,
) -> Result<T, Failure> {
    tokio::time::timeout(limit, work).await.unwrap_or_else(|_| {
        Err(Failure {
            message: format!(
                "no answer from the broker at {bootstrap} within {:.0} s (--timeout-ms)",
                limit.as_secs_f64()
            ),
            status: 1,
        })
    })
}

/// Writes a command's output to stdout. A reader that went away (`| head`) ends the command
/// quietly: what it did not read it did not want. Other write errors are failures.
pub fn emit(text: &str) -> Result<(), Failure> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(Failure {
            message: format!("writing output: {e}"),
            status: 1,
        }),
        _ => Ok(()),
    }
}

/// A failure with the exit status it maps to.
pub struct Failure {
    pub message: String,
    pub status: u8,
}

impl Failure {
    pub fn bad_input(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            status: EXIT_BAD_INPUT,
        }
    }
}

/// A multi-threaded tokio runtime for the commands that talk to brokers.
pub fn tokio_runtime() -> Result<tokio::runtime::Runtime, Failure> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| Failure {
            message: format!("starting the runtime: {e}"),
            status: 1,
        })
}

/// Logs to stderr; `RUST_LOG` filters (default `info`). The same setup as an application's.
pub fn init_logging() {
    baton_streams::run::init_logging();
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::Cli;

    /// Every subcommand's flags build (clap checks names, groups and defaults only when a
    /// command is built, so a clash would otherwise show only when someone runs it).
    #[test]
    fn the_command_line_is_well_formed() {
        Cli::command().debug_assert();
    }
}
