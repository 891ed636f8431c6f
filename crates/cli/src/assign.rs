//! `baton assign`: cluster state JSON in, assignment out.

use std::io::Read;
use std::path::PathBuf;

use baton_assignor::{input::parse_cluster_json, output, AssignorKind};
use clap::{Args, ValueEnum};

use crate::{table, Failure};

#[derive(Args)]
pub struct AssignArgs {
    /// Cluster state JSON file, or `-` for standard input.
    #[arg(default_value = "-")]
    input: PathBuf,
    /// Which assignor to run.
    #[arg(long, value_enum, default_value_t = AssignorKind::HighAvailability)]
    assignor: AssignorKind,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Json)]
    format: Format,
}

#[derive(Clone, Copy, ValueEnum)]
enum Format {
    Json,
    Table,
}

pub fn read_input(path: &PathBuf) -> Result<String, Failure> {
    let mut text = String::new();
    if path.as_os_str() == "-" {
        std::io::stdin()
            .read_to_string(&mut text)
            .map_err(|e| Failure::bad_input(format!("reading standard input: {e}")))?;
    } else {
        text = std::fs::read_to_string(path)
            .map_err(|e| Failure::bad_input(format!("reading {}: {e}", path.display())))?;
    }
    Ok(text)
}

pub fn run(args: AssignArgs) -> Result<(), Failure> {
    let text = read_input(&args.input)?;
    let cluster = parse_cluster_json(&text).map_err(|e| Failure::bad_input(e.to_string()))?;
    let assignor = args.assignor.assignor();
    let assignment = assignor.assign(&cluster);
    match args.format {
        Format::Json => crate::emit(&format!("{}\n", output::to_json(&assignment, false)))?,
        Format::Table => crate::emit(&table::render(&cluster, &assignment, assignor.name()))?,
    }
    Ok(())
}
