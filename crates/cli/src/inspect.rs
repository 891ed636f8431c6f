//! `baton inspect`: describe a live group (Baton's or Kafka Streams').

use std::collections::BTreeMap;
use std::fmt::Write as _;

use baton_kafka::inspect::{inspect, GroupView};
use baton_kafka::Client;
use clap::Args;

use crate::Failure;

#[derive(Args)]
pub struct InspectArgs {
    /// A broker to bootstrap from, HOST:PORT.
    #[arg(long)]
    bootstrap: String,
    /// The group (Kafka Streams' application.id).
    #[arg(long)]
    group: String,
    /// Changelog topics of a subtopology, for lags: `SUBTOPOLOGY=TOPIC` (repeatable).
    #[arg(long = "changelog", value_name = "SUBTOPOLOGY=TOPIC")]
    changelogs: Vec<String>,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Give up (exit 1) if the broker has not answered everything within this long.
    #[arg(long, default_value_t = 30_000)]
    timeout_ms: u64,
}

pub fn run(args: InspectArgs) -> Result<(), Failure> {
    let mut changelogs: BTreeMap<u32, Vec<String>> = BTreeMap::new();
    for c in &args.changelogs {
        let (sub, topic) = c
            .split_once('=')
            .and_then(|(s, t)| Some((s.parse::<u32>().ok()?, t)))
            .ok_or_else(|| {
                Failure::bad_input(format!(
                    "--changelog {c:?}: expected SUBTOPOLOGY=TOPIC, e.g. 0=app-store-changelog"
                ))
            })?;
        changelogs.entry(sub).or_default().push(topic.to_owned());
    }
    let runtime = crate::tokio_runtime()?;
    let limit = std::time::Duration::from_millis(args.timeout_ms);
    let view = runtime.block_on(crate::within(limit, &args.bootstrap, async {
        let client = Client::new(&[&args.bootstrap], "baton-inspect");
        client.set_request_timeout(limit);
        let reports = baton_runtime::control::control_topic(&args.group);
        inspect(&client, &args.group, &changelogs, Some(&reports))
            .await
            .map_err(|e| {
                if e.is_group_not_found() {
                    Failure::bad_input(format!(
                        "group {} does not exist (is --group the application's --app-id?)",
                        args.group
                    ))
                } else {
                    Failure {
                        message: format!("inspecting group {}: {e}", args.group),
                        status: 1,
                    }
                }
            })
    }))?;
    if args.json {
        crate::emit(&format!(
            "{}\n",
            serde_json::to_string_pretty(&view).expect("views serialize")
        ))?;
    } else {
        crate::emit(&table(&view))?;
    }
    Ok(())
}

fn list<T: ToString>(v: &[T]) -> String {
    if v.is_empty() {
        "-".into()
    } else {
        v.iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(" ")
    }
}

fn table(v: &GroupView) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "group {} ({}, {} {}), generation {}, {} member(s)",
        v.group,
        v.state,
        v.protocol_type,
        v.protocol,
        v.generation
            .map(|g| g.to_string())
            .unwrap_or_else(|| "?".into()),
        v.members.len()
    );
    for m in &v.members {
        let _ = writeln!(s, "\n{}", m.member_id);
        if let Some(e) = &m.error {
            let _ = writeln!(s, "  cannot decode its metadata: {e}");
            continue;
        }
        let _ = writeln!(
            s,
            "  process {}  version {}  endpoint {}{}",
            m.process_id.as_deref().unwrap_or("?"),
            m.subscription_version
                .map(|x| x.to_string())
                .unwrap_or_default(),
            m.endpoint.as_deref().unwrap_or("-"),
            if m.leaving { "  LEAVING" } else { "" }
        );
        if m.rack.is_some() || !m.client_tags.is_empty() {
            let tags: Vec<String> = m
                .client_tags
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            let _ = writeln!(
                s,
                "  rack {}  tags {}",
                m.rack.as_deref().unwrap_or("-"),
                if tags.is_empty() {
                    "-".into()
                } else {
                    tags.join(",")
                }
            );
        }
        let _ = writeln!(s, "  active:  {}", list(&m.active));
        let _ = writeln!(s, "  standby: {}", list(&m.standby));
        let _ = writeln!(s, "  warmup:  {}", list(&m.warmup));
        if let Some(ms) = m.next_rebalance_ms {
            let _ = writeln!(s, "  next probing rebalance at {ms} ms since the epoch");
        }
        let reported: Vec<String> = m
            .reported
            .iter()
            .map(|r| {
                format!(
                    "{}={}{}",
                    r.task,
                    r.offset_sum,
                    r.lag
                        .as_ref()
                        .map(|l| format!(" (lag {l})"))
                        .unwrap_or_default()
                )
            })
            .collect();
        let _ = writeln!(s, "  offset sums: {}", list(&reported));
    }
    s.push_str(&pending(v));
    s.push_str(&failed(v));
    s
}

/// Tasks stopped on their instances: they hold their partitions until retried (after
/// `--task-retry-ms`), moved, or their instance restarts.
fn failed(v: &GroupView) -> String {
    if v.failed.is_empty() {
        return "\nfailed tasks: none\n".into();
    }
    let rows: Vec<Vec<String>> = v
        .failed
        .iter()
        .map(|f| vec![f.task.to_string(), f.role.clone(), f.instance.clone()])
        .collect();
    let mut s = format!(
        "\nfailed tasks: {} (each instance's log names the record and why)\n",
        rows.len()
    );
    s.push_str(&crate::columns::render(
        &["TASK", "ROLE", "INSTANCE"],
        &rows,
    ));
    s
}

/// The warm-ups under way: who hands what to whom, how far behind, how fast, how long.
fn pending(v: &GroupView) -> String {
    let mut s = String::new();
    if v.pending.is_empty() {
        let _ = writeln!(s, "\npending moves: none");
        return s;
    }
    let rows: Vec<Vec<String>> = v
        .pending
        .iter()
        .map(|p| {
            vec![
                p.task.to_string(),
                p.from.clone().unwrap_or_else(|| "-".into()),
                p.to.clone(),
                p.lag.map_or("?".into(), |l| l.to_string()),
                p.rate.map_or("?".into(), |r| format!("{r:.0}")),
                match (p.eta_s, p.catching_up) {
                    (Some(eta), _) => format!("{eta:.1} s"),
                    (None, Some(false)) => "never (falls behind)".into(),
                    _ => "?".into(),
                },
            ]
        })
        .collect();
    let _ = writeln!(s, "\npending moves: {}", v.pending.len());
    s.push_str(&crate::columns::render(
        &["TASK", "FROM", "TO", "LAG", "CATCH-UP/s", "ETA"],
        &rows,
    ));
    let _ = match v.balanced_in_s {
        Some(eta) => writeln!(
            s,
            "warm-ups under way caught up in about {eta:.1} s (more moves may wait for warm-up slots)"
        ),
        None if v.pending.iter().any(|p| p.catching_up == Some(false)) => writeln!(
            s,
            "a warm-up falls behind its changelog: it ends only by the scale-down timeout"
        ),
        None => writeln!(s, "time to balanced: not measured yet"),
    };
    s
}
