//! `baton drain`: mark an instance as leaving. Its tasks move off through warm-ups, and it
//! exits once it holds nothing.

use baton_kafka::Client;
use clap::Args;

use crate::{tokio_runtime, Failure};

#[derive(Args)]
pub struct DrainArgs {
    /// A broker to bootstrap from, HOST:PORT.
    #[arg(long)]
    bootstrap: String,
    /// The group (the application id).
    #[arg(long)]
    group: String,
    /// The instance to drain (its --instance-id).
    #[arg(long)]
    instance: String,
    /// Give up (exit 1) if the broker has not answered within this long.
    #[arg(long, default_value_t = 30_000)]
    timeout_ms: u64,
}

pub fn run(args: DrainArgs) -> Result<(), Failure> {
    if args.instance.is_empty() {
        return Err(Failure::bad_input("--instance must not be empty"));
    }
    let runtime = tokio_runtime()?;
    let limit = std::time::Duration::from_millis(args.timeout_ms);
    let offset = runtime.block_on(crate::within(limit, &args.bootstrap, async {
        let client = Client::new(&[&args.bootstrap], "baton-drain");
        client.set_request_timeout(limit);
        baton_runtime::control::request_drain(&client, &args.group, &args.instance)
            .await
            .map_err(|e| Failure {
                message: format!("draining {} of group {}: {e}", args.instance, args.group),
                status: 1,
            })
    }))?;
    crate::emit(&format!(
        "drain requested for instance {} of group {} (control record {offset}); it exits once its tasks have moved\n",
        args.instance, args.group
    ))
}
