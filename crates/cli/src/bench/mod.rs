//! `baton bench`: measurements that need a real broker and real instances, run the same way
//! each time so that their figures can be compared across changes (docs/BENCHMARKS.md).

mod latency;
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
}

pub fn run(args: BenchArgs) -> Result<(), Failure> {
    match args.which {
        Which::Warmup(a) => warmup::run(a),
    }
}
