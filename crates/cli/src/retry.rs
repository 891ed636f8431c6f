//! `baton retry`: ask instances to open their failed tasks again (tasks stopped by a record
//! or batch they could not process, or a panic), once the cause is dealt with: a fixed
//! deployment reads the same record again, a topic's limit raised. `baton inspect` lists the
//! failed tasks and where they are.

use baton_kafka::Client;
use baton_runtime::control::{self, Request};
use clap::Args;

use crate::{tokio_runtime, Failure};

#[derive(Args)]
pub struct RetryArgs {
    /// A broker to bootstrap from, HOST:PORT.
    #[arg(long)]
    bootstrap: String,
    /// The group (the application id).
    #[arg(long)]
    group: String,
    /// An instance whose failed tasks to open again, by its --instance-id (repeatable; see
    /// `baton inspect` for the failed tasks and their instances).
    #[arg(long = "instance", value_name = "ID", required = true)]
    instances: Vec<String>,
    /// Give up (exit 1) if the broker has not answered within this long.
    #[arg(long, default_value_t = 30_000)]
    timeout_ms: u64,
}

pub fn run(args: RetryArgs) -> Result<(), Failure> {
    let runtime = tokio_runtime()?;
    let limit = std::time::Duration::from_millis(args.timeout_ms);
    runtime.block_on(crate::within(limit, &args.bootstrap, async {
        let client = Client::new(&[&args.bootstrap], "baton-retry");
        client.set_request_timeout(limit);
        for instance in &args.instances {
            let at = control::send(&client, &args.group, instance, Request::Retry)
                .await
                .map_err(|e| Failure {
                    message: format!("asking {instance} to retry: {e}"),
                    status: 1,
                })?;
            crate::emit(&format!(
                "asked {instance} to open its failed tasks again (control record {at})\n"
            ))?;
        }
        Ok(())
    }))
}
