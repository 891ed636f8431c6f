//! `baton drain`: mark instances as leaving. Their tasks move off through warm-ups, and each
//! exits once it holds nothing. Also: pick a percentage of the group, wait for the drain with
//! progress, show who is draining, and take a drain back.

use std::collections::{BTreeMap, BTreeSet};
use std::io::IsTerminal;
use std::sync::Arc;
use std::time::{Duration, Instant};

use baton_kafka::inspect::{inspect, GroupView};
use baton_kafka::Client;
use baton_runtime::control::{self, Request};
use clap::Args;

use crate::{tokio_runtime, Failure};

/// Milliseconds since the epoch.
fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

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
/// by name. Instances already draining (`leaving`) are not picked again.
pub fn least_state(
    instances: &BTreeMap<String, InstanceState>,
    n: usize,
    leaving: &BTreeSet<String>,
) -> Vec<String> {
    let mut staying: Vec<(&String, &InstanceState)> = instances
        .iter()
        .filter(|(name, _)| !leaving.contains(*name))
        .collect();
    staying.sort_by_key(|(name, i)| (i.active, i.state, (*name).clone()));
    staying
        .into_iter()
        .take(n)
        .map(|(name, _)| name.clone())
        .collect()
}

/// How long a drain request counts as under way before its instance says so itself (it
/// rejoins as leaving within a heartbeat or two; an instance restarted since ignores it).
const PENDING_MS: i64 = 60_000;

/// The instances draining already: those whose subscription says so, and those asked to
/// within [`PENDING_MS`] before `now_ms` by a request written before offset `before` (all, when
/// `None`), whatever their subscription says yet. `targets` are left out.
pub fn already_leaving(
    known: &BTreeMap<String, InstanceState>,
    requests: &BTreeMap<String, control::Written>,
    now_ms: i64,
    before: Option<i64>,
    targets: &[String],
) -> BTreeSet<String> {
    known
        .iter()
        .filter(|(name, i)| {
            let asked = requests.get(*name).is_some_and(|w| {
                w.request == Request::Drain
                    && w.timestamp >= now_ms - PENDING_MS
                    && before.is_none_or(|b| w.offset < b)
            });
            (i.leaving || asked) && !targets.contains(name)
        })
        .map(|(name, _)| name.clone())
        .collect()
}

/// Why draining `targets` while `leaving` drain already is refused, if it is: at least one
/// instance must stay, and with `--percent P` at most P% of the group drains at once.
pub fn refusal(
    known: &BTreeMap<String, InstanceState>,
    leaving: &BTreeSet<String>,
    targets: &[String],
    percent: Option<u32>,
) -> Option<String> {
    let staying = known
        .keys()
        .filter(|name| !leaving.contains(*name) && !targets.contains(name))
        .count();
    if staying == 0 {
        return Some(format!(
            "that would drain every instance: none would be left to take the tasks over \
             (already leaving: {})",
            named(leaving)
        ));
    }
    let p = percent?;
    let allowed = known.len() * p as usize / 100;
    (leaving.len() + targets.len() > allowed)
        .then(|| over_percent(p, allowed, known.len(), leaving))
}

fn over_percent(p: u32, allowed: usize, of: usize, leaving: &BTreeSet<String>) -> String {
    format!(
        "--percent {p} lets {allowed} of {of} instance(s) drain at once, and {} already do: {}",
        leaving.len(),
        named(leaving)
    )
}

fn named(set: &BTreeSet<String>) -> String {
    if set.is_empty() {
        "none".to_owned()
    } else {
        set.iter().cloned().collect::<Vec<_>>().join(", ")
    }
}

/// The arguments make sense together.
fn check_args(args: &DrainArgs) -> Result<(), Failure> {
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
    Ok(())
}

/// The instances to drain: those named, or with `--percent P` the P% (rounded down) holding
/// the least state, less those draining already.
fn choose_targets(
    args: &DrainArgs,
    known: &BTreeMap<String, InstanceState>,
    requested: &BTreeMap<String, control::Written>,
    now: i64,
) -> Result<Vec<String>, Failure> {
    let Some(p) = args.percent else {
        return Ok(args.instances.clone());
    };
    let n = known.len() * p as usize / 100;
    if n == 0 {
        return Err(Failure::bad_input(format!(
            "--percent {p} of {} instance(s) is less than one: nothing to drain",
            known.len()
        )));
    }
    let leaving = already_leaving(known, requested, now, None, &[]);
    if leaving.len() >= n {
        return Err(Failure::bad_input(over_percent(
            p,
            n,
            known.len(),
            &leaving,
        )));
    }
    Ok(least_state(known, n - leaving.len(), &leaving))
}

/// Each target is a member (a broker that names no member lets a named drain through
/// unchecked); one to cancel is draining; a drain leaves an instance and keeps within
/// `--percent`.
fn check_targets(
    args: &DrainArgs,
    known: &BTreeMap<String, InstanceState>,
    requested: &BTreeMap<String, control::Written>,
    targets: &[String],
    now: i64,
) -> Result<(), Failure> {
    if known.is_empty() {
        return Ok(());
    }
    for t in targets {
        let Some(state) = known.get(t) else {
            return Err(Failure::bad_input(format!(
                "instance {t:?} is not a member of group {}; its instances: {}",
                args.group,
                known.keys().cloned().collect::<Vec<_>>().join(", ")
            )));
        };
        let asked = requested.get(t).map(|w| w.request) == Some(Request::Drain);
        if args.cancel && !state.leaving && !asked {
            return Err(Failure::bad_input(format!(
                "instance {t:?} is not draining: nothing to cancel"
            )));
        }
    }
    if !args.cancel {
        let leaving = already_leaving(known, requested, now, None, targets);
        if let Some(why) = refusal(known, &leaving, targets, args.percent) {
            return Err(Failure::bad_input(why));
        }
    }
    Ok(())
}

pub fn run(args: DrainArgs) -> Result<(), Failure> {
    check_args(&args)?;
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
    if args.status {
        return crate::emit(&status_table(&args.group, &known));
    }
    // A drain just requested shows in the instance's subscription only after it rejoins: the
    // control topic says it sooner.
    let read_requests = || {
        runtime.block_on(crate::within(limit, &args.bootstrap, async {
            control::requests_in_order(&client, &args.group)
                .await
                .map_err(|e| Failure {
                    message: format!("reading group {}'s control topic: {e}", args.group),
                    status: 1,
                })
        }))
    };
    let requested = read_requests()?;
    let now = now_ms();
    let targets = choose_targets(&args, &known, &requested, now)?;
    check_targets(&args, &known, &requested, &targets, now)?;
    let request = if args.cancel {
        Request::Cancel
    } else {
        Request::Drain
    };
    let send = |request: Request| {
        runtime.block_on(crate::within(limit, &args.bootstrap, async {
            let mut first = None;
            for t in &targets {
                let at = control::send(&client, &args.group, t, request)
                    .await
                    .map_err(|e| Failure {
                        message: format!("writing to group {}'s control topic: {e}", args.group),
                        status: 1,
                    })?;
                first.get_or_insert(at);
            }
            Ok(first)
        }))
    };
    let written = send(request)?;
    if let (Request::Drain, Some(ours), false) = (request, written, known.is_empty()) {
        // Another `baton drain` may have read the group before this one wrote, and this one
        // before it wrote: the control topic orders the two. Requests before ours count; if
        // together they break the rule, this one (the later) is taken back. The earlier one
        // sees nothing of ours before its own, so exactly one of the two stands.
        let requested = read_requests()?;
        let leaving = already_leaving(&known, &requested, now_ms(), Some(ours), &targets);
        if let Some(why) = refusal(&known, &leaving, &targets, args.percent) {
            send(Request::Cancel)?;
            return Err(Failure::bad_input(format!(
                "another drain came first, and {why}; this drain of {} is taken back",
                targets.join(", ")
            )));
        }
    }
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
        let leaving = BTreeSet::from(["d".to_owned()]);
        assert_eq!(least_state(&known, 1, &leaving), ["c"]);
        assert_eq!(least_state(&known, 2, &leaving), ["c", "b"]);
        assert_eq!(
            least_state(&known, 9, &leaving),
            ["c", "b", "a"],
            "d drains already"
        );
    }

    fn written(request: Request, offset: i64, timestamp: i64) -> control::Written {
        control::Written {
            request,
            offset,
            timestamp,
        }
    }

    /// Two drains that read the group at once: each wrote its request, then reads the topic
    /// again. Only the later one counts the other's (earlier) request, and only it refuses.
    #[test]
    fn of_two_racing_drains_only_the_later_is_refused() {
        let known: BTreeMap<String, InstanceState> = [
            ("a".to_owned(), state(1, 10, false)),
            ("b".to_owned(), state(1, 10, false)),
        ]
        .into_iter()
        .collect();
        let now = 1_000_000;
        let requests = BTreeMap::from([
            ("a".to_owned(), written(Request::Drain, 7, now)),
            ("b".to_owned(), written(Request::Drain, 8, now)),
        ]);
        let a = ["a".to_owned()];
        let before_a = already_leaving(&known, &requests, now, Some(7), &a);
        assert!(before_a.is_empty());
        assert_eq!(refusal(&known, &before_a, &a, None), None, "a came first");
        let b = ["b".to_owned()];
        let before_b = already_leaving(&known, &requests, now, Some(8), &b);
        let why = refusal(&known, &before_b, &b, None).expect("b came second");
        assert!(
            why.contains("every instance") && why.contains("already leaving: a"),
            "{why}"
        );
        // An old request (an instance restarted since) and a cancel count for nothing.
        let stale = BTreeMap::from([
            (
                "a".to_owned(),
                written(Request::Drain, 7, now - PENDING_MS - 1),
            ),
            ("c".to_owned(), written(Request::Cancel, 9, now)),
        ]);
        assert!(already_leaving(&known, &stale, now, None, &b).is_empty());
    }

    #[test]
    fn percent_caps_the_instances_draining_at_once() {
        let known: BTreeMap<String, InstanceState> = ["a", "b", "c", "d"]
            .iter()
            .map(|n| ((*n).to_owned(), state(1, 10, *n == "a")))
            .collect();
        let leaving = already_leaving(&known, &BTreeMap::new(), 0, None, &[]);
        assert_eq!(leaving, BTreeSet::from(["a".to_owned()]));
        let why = refusal(&known, &leaving, &["b".to_owned()], Some(25)).unwrap();
        assert!(
            why.contains("lets 1 of 4") && why.contains("1 already do: a"),
            "{why}"
        );
        assert_eq!(refusal(&known, &leaving, &["b".to_owned()], Some(50)), None);
    }
}
