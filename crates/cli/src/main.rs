//! `baton`: smooth scaling for stateful stream processing.

mod assign;
mod blob;
mod inspect;
mod simulate;
mod table;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

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
}

/// Exit status for bad input, as documented in the README.
pub const EXIT_BAD_INPUT: u8 = 2;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Assign(args) => assign::run(args),
        Command::Decode(args) => blob::decode(args),
        Command::Encode(args) => blob::encode(args),
        Command::Simulate(args) => simulate::run(args),
        Command::Inspect(args) => inspect::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("baton: {}", e.message);
            ExitCode::from(e.status)
        }
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
