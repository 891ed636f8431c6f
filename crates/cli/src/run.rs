//! `baton run`: the example application, counting events per key into a state store and
//! writing each new count to an output topic. It is one user of `baton_streams::run`, which
//! gives any application the same flags.

use baton_runtime::count_per_key;
use clap::Args;

use crate::Failure;

#[derive(Args)]
pub struct CountArgs {
    #[command(flatten)]
    run: baton_streams::RunArgs,
    /// The topic of events to count (it must exist).
    #[arg(long, env = "BATON_INPUT", default_value = "events")]
    input: String,
    /// Where each key's new count goes (if missing, created with the input's partition count).
    #[arg(long, env = "BATON_OUTPUT", default_value = "counts")]
    output: String,
}

pub fn run(args: CountArgs) -> Result<(), Failure> {
    if args.input == args.output {
        return Err(Failure::bad_input(format!(
            "--output {:?} is the input topic: every count would be counted again, forever",
            args.output
        )));
    }
    let (input, output) = (args.input, args.output);
    baton_streams::run(args.run, "baton-count", |app_id| {
        count_per_key(app_id, &input, &output)
    })
    .map_err(|e| Failure {
        message: e.message,
        status: e.status,
    })
}
