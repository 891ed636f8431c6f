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
        check_member(&client, &args.group, &args.instance).await?;
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

/// Refuses (exit 2) a drain that cannot reach anyone: a group without members, or an instance
/// the group does not have. Nothing is written then (no control topic is created). A broker
/// that does not report its members' client ids (nisshi) lets only the first check through.
async fn check_member(client: &Client, group: &str, instance: &str) -> Result<(), Failure> {
    let no_members = || {
        Failure::bad_input(format!(
            "group {group} has no members: nothing to drain (is the application running, and is \
             --group its --app-id?)"
        ))
    };
    let described = match client.describe_group(group).await {
        Ok(d) => d,
        Err(e) if e.is_group_not_found() => {
            return Err(no_members());
        }
        Err(e) => {
            return Err(Failure {
                message: format!("describing group {group}: {e}"),
                status: 1,
            })
        }
    };
    if described.members.is_empty() {
        return Err(no_members());
    }
    let instances: std::collections::BTreeSet<&str> = described
        .members
        .iter()
        .flat_map(|m| {
            let static_id = m.group_instance_id.as_ref().map(|s| s.as_str());
            [Some(m.client_id.as_str()), static_id]
        })
        .flatten()
        .filter_map(instance_of)
        .collect();
    if !instances.is_empty() && !instances.contains(instance) {
        return Err(Failure::bad_input(format!(
            "instance {instance:?} is not a member of group {group}; its instances: {}",
            instances.into_iter().collect::<Vec<_>>().join(", ")
        )));
    }
    Ok(())
}

/// The instance of a stream thread's client id or `group.instance.id`, `<instance>-<thread>`.
fn instance_of(id: &str) -> Option<&str> {
    let (instance, thread) = id.rsplit_once('-')?;
    (!instance.is_empty() && !thread.is_empty() && thread.bytes().all(|b| b.is_ascii_digit()))
        .then_some(instance)
}

#[cfg(test)]
mod tests {
    use super::instance_of;

    #[test]
    fn thread_ids_name_their_instance() {
        assert_eq!(instance_of("web-7-0"), Some("web-7"));
        assert_eq!(instance_of("a-12"), Some("a"));
        assert_eq!(instance_of("a-12-member"), None);
        assert_eq!(instance_of("a"), None);
        assert_eq!(instance_of("-1"), None);
    }
}
