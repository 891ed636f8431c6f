//! `baton bench`: measurements that need a real broker and real instances, run the same way
//! each time so that their figures can be compared across changes (docs/BENCHMARKS.md).

mod cpu;
mod latency;
mod queries;
mod throughput;
mod warmup;

use clap::{Args, Subcommand};

use crate::Failure;

#[derive(Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    which: Which,
}

#[derive(Subcommand)]
enum Which {
    /// Actives' latency and longest gap while a warm-up restores beside them on their
    /// instance, against the same run with no warm-up.
    Warmup(warmup::WarmupArgs),
    /// One instance's input records per second over a backlog (count per key, and word count
    /// with its repartition hop), against a plain consumer reading the same topic.
    Throughput(throughput::ThroughputArgs),
    /// Interactive queries (local and forwarded) against instances processing a backlog, and
    /// the processing throughput they cost.
    Queries(queries::QueriesArgs),
}

pub fn run(args: BenchArgs) -> Result<(), Failure> {
    match args.which {
        Which::Warmup(a) => warmup::run(a),
        Which::Throughput(a) => throughput::run(a),
        Which::Queries(a) => queries::run(a),
    }
}
