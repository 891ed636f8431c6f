//! `baton drain`: mark instances as leaving. Their tasks move off through warm-ups, and each
//! exits once it holds nothing. Also: pick a percentage of the group, wait for the drain with
//! progress, show who is draining, and take a drain back.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::sync::Arc;
use std::time::{Duration, Instant};

use baton_kafka::inspect::{inspect, GroupView};
use baton_kafka::Client;
use baton_runtime::control::{self, Request};
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
    /// An instance to drain, by its --instance-id (repeatable).
    #[arg(long = "instance", value_name = "ID")]
    instances: Vec<String>,
    /// Drain this share of the group's instances, 1 to 99 percent (rounded down; at least one
    /// must result): the ones whose departure moves the least state. Says which it picked.
    #[arg(long, conflicts_with = "instances", value_name = "P")]
    percent: Option<u32>,
    /// Block until the drained instances have left the group, showing what they still hold;
    /// exit 1 if they have not within --wait-timeout-ms.
    #[arg(long)]
    wait: bool,
    /// How long --wait waits.
    #[arg(long, default_value_t = 600_000)]
    wait_timeout_ms: u64,
    /// Show each instance of the group (running or draining, and what it holds); change nothing.
    #[arg(long, conflicts_with_all = ["percent", "cancel", "wait", "instances"])]
    status: bool,
    /// Take back the drain of the given instances: they stay in the group.
    #[arg(long, conflicts_with_all = ["percent", "wait"])]
    cancel: bool,
    /// Give up (exit 1) if the broker has not answered within this long.
    #[arg(long, default_value_t = 30_000)]
    timeout_ms: u64,
}

/// One instance of the group, its threads' members taken together.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct InstanceState {
    pub threads: usize,
    pub leaving: bool,
    pub active: usize,
    pub standby: usize,
    pub warmup: usize,
    /// Sum of the offset sums it reported for its tasks' state: how much state it has.
    pub state: i64,
}

impl InstanceState {
    fn held(&self) -> usize {
        self.active + self.standby + self.warmup
    }
}

/// The group's instances by name. Members whose instance is unknown (another client's, or a
/// broker that hides client ids without Baton's reports) are left out.
pub fn instances(view: &GroupView) -> BTreeMap<String, InstanceState> {
    let mut out: BTreeMap<String, InstanceState> = BTreeMap::new();
    for m in &view.members {
        let Some(name) = &m.instance else { continue };
        let i = out.entry(name.clone()).or_default();
        i.threads += 1;
        i.leaving |= m.leaving;
        i.active += m.active.len();
        i.standby += m.standby.len();
        i.warmup += m.warmup.len();
        i.state += m.reported.iter().map(|t| t.offset_sum.max(0)).sum::<i64>();
    }
    out
}

/// The `n` instances whose departure moves the least: fewest actives, then least state, then
/// by name. Instances already draining are not picked again.
pub fn least_state(instances: &BTreeMap<String, InstanceState>, n: usize) -> Vec<String> {
    let mut staying: Vec<(&String, &InstanceState)> =
        instances.iter().filter(|(_, i)| !i.leaving).collect();
    staying.sort_by_key(|(name, i)| (i.active, i.state, (*name).clone()));
    staying
        .into_iter()
        .take(n)
        .map(|(name, _)| name.clone())
        .collect()
}

pub fn run(args: DrainArgs) -> Result<(), Failure> {
    if args.instances.iter().any(String::is_empty) {
        return Err(Failure::bad_input("--instance must not be empty"));
    }
    if let Some(p) = args.percent {
        if !(1..=99).contains(&p) {
            return Err(Failure::bad_input(format!(
                "--percent {p}: must be 1 to 99 (at least one instance must stay)"
            )));
        }
    }
    if !args.status && args.percent.is_none() && args.instances.is_empty() {
        return Err(Failure::bad_input(
            "name the instances (--instance ID), or give --percent P, or ask for --status",
        ));
    }
    let runtime = tokio_runtime()?;
    let limit = Duration::from_millis(args.timeout_ms);
    let client = Client::new(&[&args.bootstrap], "baton-drain");
    client.set_request_timeout(limit);
    let view = runtime.block_on(crate::within(
        limit,
        &args.bootstrap,
        describe(&client, &args.group),
    ))?;
    let known = instances(&view);
    // A drain just requested shows in the instance's subscription only after it rejoins.
    let requested = if args.cancel {
        runtime.block_on(crate::within(limit, &args.bootstrap, async {
            control::latest_requests(&client, &args.group)
                .await
                .map_err(|e| Failure {
                    message: format!("reading group {}'s control topic: {e}", args.group),
                    status: 1,
                })
        }))?
    } else {
        BTreeMap::new()
    };
    if args.status {
        return crate::emit(&status_table(&args.group, &known));
    }
    let targets: Vec<String> = match args.percent {
        Some(p) => {
            let n = known.len() * p as usize / 100;
            if n == 0 {
                return Err(Failure::bad_input(format!(
                    "--percent {p} of {} instance(s) is less than one: nothing to drain",
                    known.len()
                )));
            }
            least_state(&known, n)
        }
        None => args.instances.clone(),
    };
    // A broker that names no member lets a named drain through unchecked, as before.
    if !known.is_empty() {
        for t in &targets {
            let Some(state) = known.get(t) else {
                return Err(Failure::bad_input(format!(
                    "instance {t:?} is not a member of group {}; its instances: {}",
                    args.group,
                    known.keys().cloned().collect::<Vec<_>>().join(", ")
                )));
            };
            let asked = requested.get(t) == Some(&Request::Drain);
            if args.cancel && !state.leaving && !asked {
                return Err(Failure::bad_input(format!(
                    "instance {t:?} is not draining: nothing to cancel"
                )));
            }
        }
        let staying = known
            .iter()
            .filter(|(name, i)| !i.leaving && !targets.contains(name))
            .count();
        if !args.cancel && staying == 0 {
            return Err(Failure::bad_input(
                "that would drain every instance: none would be left to take the tasks over",
            ));
        }
    }
    let request = if args.cancel {
        Request::Cancel
    } else {
        Request::Drain
    };
    runtime.block_on(crate::within(limit, &args.bootstrap, async {
        for t in &targets {
            control::send(&client, &args.group, t, request)
                .await
                .map_err(|e| Failure {
                    message: format!("writing to group {}'s control topic: {e}", args.group),
                    status: 1,
                })?;
        }
        Ok(())
    }))?;
    let names = targets.join(", ");
    if args.cancel {
        return crate::emit(&format!(
            "drain cancelled for {names} of group {}: they stay\n",
            args.group
        ));
    }
    let why = match args.percent {
        Some(p) => format!(
            " ({p}% of {} instances, those holding the least)",
            known.len()
        ),
        None => String::new(),
    };
    crate::emit(&format!(
        "drain requested for {names}{why} of group {}; each exits once its tasks have moved\n",
        args.group
    ))?;
    if args.wait {
        let deadline = Duration::from_millis(args.wait_timeout_ms);
        runtime.block_on(wait_gone(&client, &args, &targets, deadline))?;
    }
    Ok(())
}

/// The group's view; a group with no members is the user's mistake (exit 2).
async fn describe(client: &Arc<Client>, group: &str) -> Result<GroupView, Failure> {
    let reports = control::control_topic(group);
    let no_members = || {
        Failure::bad_input(format!(
            "group {group} has no members: nothing to drain (is the application running, and is \
             --group its --app-id?)"
        ))
    };
    match inspect(client, group, &BTreeMap::new(), Some(&reports)).await {
        Ok(v) if v.members.is_empty() => Err(no_members()),
        Ok(v) => Ok(v),
        Err(e) if e.is_group_not_found() => Err(no_members()),
        Err(e) => Err(Failure {
            message: format!("describing group {group}: {e}"),
            status: 1,
        }),
    }
}

/// Polls until none of `targets` is a member any more, with a progress line on a terminal.
async fn wait_gone(
    client: &Arc<Client>,
    args: &DrainArgs,
    targets: &[String],
    limit: Duration,
) -> Result<(), Failure> {
    let started = Instant::now();
    let bar = if std::io::stderr().is_terminal() {
        let b = indicatif::ProgressBar::new_spinner();
        b.enable_steady_tick(Duration::from_millis(200));
        b
    } else {
        indicatif::ProgressBar::hidden()
    };
    loop {
        let left: BTreeMap<String, InstanceState> = match describe(client, &args.group).await {
            Ok(view) => instances(&view)
                .into_iter()
                .filter(|(name, _)| targets.contains(name))
                .collect(),
            // Every member gone: nothing of ours is left either.
            Err(f) if f.status == crate::EXIT_BAD_INPUT => BTreeMap::new(),
            Err(f) => return Err(f),
        };
        if left.is_empty() {
            bar.finish_and_clear();
            return crate::emit(&format!(
                "{} left the group after {:.1} s\n",
                targets.join(", "),
                started.elapsed().as_secs_f64()
            ));
        }
        let holding: Vec<String> = left
            .iter()
            .map(|(n, i)| format!("{n} holds {} task(s)", i.held()))
            .collect();
        bar.set_message(format!(
            "draining: {} ({:.0} s)",
            holding.join(", "),
            started.elapsed().as_secs_f64()
        ));
        if started.elapsed() >= limit {
            bar.finish_and_clear();
            return Err(Failure {
                message: format!(
                    "still draining after {:.0} s (--wait-timeout-ms): {}",
                    limit.as_secs_f64(),
                    holding.join(", ")
                ),
                status: 1,
            });
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

fn status_table(group: &str, known: &BTreeMap<String, InstanceState>) -> String {
    let rows: Vec<Vec<String>> = known
        .iter()
        .map(|(name, i)| {
            vec![
                name.clone(),
                i.threads.to_string(),
                if i.leaving { "draining" } else { "running" }.to_owned(),
                i.active.to_string(),
                i.standby.to_string(),
                i.warmup.to_string(),
            ]
        })
        .collect();
    let mut out = format!("group {group}: {} instance(s)\n", known.len());
    out.push_str(&crate::columns::render(
        &[
            "INSTANCE", "THREADS", "STATE", "ACTIVE", "STANDBY", "WARMUP",
        ],
        &rows,
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(active: usize, state: i64, leaving: bool) -> InstanceState {
        InstanceState {
            threads: 1,
            leaving,
            active,
            state,
            ..InstanceState::default()
        }
    }

    #[test]
    fn the_least_loaded_staying_instances_are_picked() {
        let known: BTreeMap<String, InstanceState> = [
            ("a".to_owned(), state(3, 900, false)),
            ("b".to_owned(), state(2, 500, false)),
            ("c".to_owned(), state(2, 100, false)),
            ("d".to_owned(), state(0, 0, true)),
        ]
        .into_iter()
        .collect();
        assert_eq!(least_state(&known, 1), ["c"]);
        assert_eq!(least_state(&known, 2), ["c", "b"]);
        assert_eq!(least_state(&known, 9), ["c", "b", "a"], "d drains already");
    }
}
