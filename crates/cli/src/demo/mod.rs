//! `baton demo`: a real scale-out and drain on a real broker, watched live; then the same
//! script with the pre-KIP-441 `sticky` assignor, side by side.

mod board;
mod install;
pub(crate) mod scrape;
pub(crate) mod stage;

use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Duration;

use baton_assignor::AssignorKind;
use clap::Args;

use crate::Failure;
use stage::{Outcome, Plan};

#[derive(Args)]
pub struct DemoArgs {
    /// Input partitions, and so tasks (1 to 64).
    #[arg(long, default_value_t = 6)]
    partitions: u32,
    /// Changelog records of state written per task before the instances start, so that a
    /// restore from scratch takes seconds: sticky's stall grows with it, Baton's does not
    /// (at most 20000000).
    #[arg(long, default_value_t = 10_000_000)]
    state_records: u64,
    /// Events per second the producer writes throughout (1 to 100000).
    #[arg(long, default_value_t = 500)]
    rate: u64,
    /// Keys the events spread over.
    #[arg(long, default_value_t = 60)]
    keys: u64,
    /// How long to watch between the steps (a newcomer joins, a drain, the end).
    #[arg(long, default_value_t = 3000)]
    pause_ms: u64,
    /// Give up (exit 1) when a step has not finished within this long.
    #[arg(long, default_value_t = 180_000)]
    step_timeout_ms: u64,
    /// Only the high-availability run: skip the comparison with `sticky`.
    #[arg(long)]
    no_compare: bool,
    /// Keep instance logs and state here (default: a temporary directory, removed at the end).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Use this broker (HOST:PORT) instead of starting nisshi on a free loopback port.
    #[arg(long)]
    bootstrap: Option<String>,
    /// Without --bootstrap, refuse rather than build and install the broker when it is
    /// missing (building it takes 15 to 45 minutes, once per machine).
    #[arg(long)]
    no_install: bool,
}

pub fn run(args: DemoArgs) -> Result<(), Failure> {
    if !(1..=64).contains(&args.partitions) {
        return Err(Failure::bad_input("--partitions must be 1 to 64"));
    }
    if !(1..=100_000).contains(&args.rate) || args.keys == 0 {
        return Err(Failure::bad_input(
            "--rate must be 1 to 100000 and --keys positive",
        ));
    }
    if args.state_records > 20_000_000 {
        return Err(Failure::bad_input(
            "--state-records must be at most 20000000",
        ));
    }
    let (dir, temporary) = workspace(&args.dir, "baton-demo")?;
    // Kept alive to the end of the demo; dropping it stops the broker.
    let (_broker, bootstrap) = broker(&args.bootstrap, !args.no_install)?;
    let runtime = crate::tokio_runtime()?;
    let result = runtime.block_on(async {
        tokio::select! {
            r = runs(&args, &bootstrap, &dir) => r,
            _ = tokio::signal::ctrl_c() => Err(Failure {
                message: "interrupted: stopped the instances, the producer and the broker".into(),
                status: 130,
            }),
        }
    });
    // Dropping the runs' futures killed their children; wait for nothing more.
    drop(runtime);
    if temporary && result.is_ok() {
        let _ = std::fs::remove_dir_all(&dir);
    } else if result.is_err() {
        eprintln!("logs and state kept in {}", dir.display());
    }
    let outcomes = result?;
    crate::emit(&summary(&outcomes))?;
    if outcomes.iter().any(|o| !o.wrong.is_empty()) {
        return Err(Failure {
            message: "some counts are wrong (see above)".into(),
            status: 1,
        });
    }
    Ok(())
}

/// `--dir`, or a new temporary directory named after `prefix` (and whether it is temporary).
pub(crate) fn workspace(dir: &Option<PathBuf>, prefix: &str) -> Result<(PathBuf, bool), Failure> {
    let (dir, temporary) = match dir {
        Some(d) => (d.clone(), false),
        None => (
            std::env::temp_dir().join(format!("{prefix}-{}", std::process::id())),
            true,
        ),
    };
    std::fs::create_dir_all(&dir)
        .map_err(|e| Failure::bad_input(format!("--dir {}: {e}", dir.display())))?;
    Ok((dir, temporary))
}

/// `--bootstrap`, or nisshi started on a free loopback port (stopped when dropped), built and
/// installed first if it is missing and `install` allows.
pub(crate) fn broker(
    bootstrap: &Option<String>,
    install: bool,
) -> Result<(Option<baton_kafka::testing::Broker>, String), Failure> {
    Ok(match bootstrap {
        Some(b) => (None, b.clone()),
        None => {
            install::ensure_broker(install)?;
            let broker = baton_kafka::testing::Broker::try_start().map_err(|e| Failure {
                message: e.to_string(),
                status: 1,
            })?;
            eprintln!("broker: nisshi at {}", broker.addr);
            let addr = broker.addr.clone();
            (Some(broker), addr)
        }
    })
}

async fn runs(
    args: &DemoArgs,
    bootstrap: &str,
    dir: &std::path::Path,
) -> Result<Vec<Outcome>, Failure> {
    let mut kinds = vec![AssignorKind::HighAvailability];
    if !args.no_compare {
        kinds.push(AssignorKind::Sticky);
    }
    let mut outcomes = Vec::new();
    for assignor in kinds {
        println!(
            "\n=== {}: scale out from 2 to 3 instances, then drain one ===",
            assignor.name()
        );
        let plan = Plan {
            bootstrap: bootstrap.to_owned(),
            dir: dir.to_owned(),
            assignor,
            partitions: args.partitions,
            state_records: args.state_records,
            rate: args.rate,
            keys: args.keys,
            pause: Duration::from_millis(args.pause_ms),
            step_timeout: Duration::from_millis(args.step_timeout_ms),
            tty: std::io::stdout().is_terminal(),
        };
        outcomes.push(stage::run(&plan).await?);
    }
    Ok(outcomes)
}

fn summary(outcomes: &[Outcome]) -> String {
    let rows: Vec<Vec<String>> = outcomes
        .iter()
        .map(|o| {
            vec![
                o.assignor.name().to_owned(),
                format!(
                    "{:.2} ({} at {:.1} s)",
                    o.longest_gap.seconds, o.longest_gap.task, o.longest_gap.at_s
                ),
                format!("{:.1}", o.balanced_after_s),
                format!("{:.1}", o.drained_after_s),
                o.warmups.to_string(),
                o.handovers.to_string(),
                o.rebalances.to_string(),
                o.events.to_string(),
            ]
        })
        .collect();
    let mut out = String::from("\n");
    out.push_str(&crate::columns::render(
        &[
            "ASSIGNOR",
            "LONGEST GAP s (TASK AT)",
            "BALANCED AFTER s",
            "A GONE AFTER s",
            "WARM-UPS",
            "HAND-OVERS",
            "REBALANCES",
            "EVENTS",
        ],
        &rows,
    ));
    out.push_str(
        "(LONGEST GAP: the longest time one task wrote no output, from the newcomer's start to \
         the producer's stop, and when it began; BALANCED AFTER: from c's start until every instance processes its share with \
         no warm-up left; A GONE AFTER: from the drain (sticky: the shutdown) until a has left and b and c process every task)\n",
    );
    if let [ha, sticky] = outcomes {
        out.push_str(&gap_verdict(
            ha.longest_gap.seconds,
            sticky.longest_gap.seconds,
        ));
    }
    for o in outcomes {
        if o.wrong.is_empty() {
            out.push_str(&format!(
                "verdict ({}): every one of {} events was counted, {} keys checked\n",
                o.assignor.name(),
                o.events,
                o.keys
            ));
        } else {
            out.push_str(&format!(
                "verdict ({}): WRONG counts for {} of {} keys, e.g. {}\n",
                o.assignor.name(),
                o.wrong.len(),
                o.keys,
                o.wrong
                    .iter()
                    .take(5)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
    }
    out
}

/// The demo's promise, checked on what it measured: high-availability's longest gap at most
/// a quarter of sticky's and under a second.
fn gap_verdict(ha_s: f64, sticky_s: f64) -> String {
    let met = ha_s <= sticky_s / 4.0 && ha_s < 1.0;
    let how = if ha_s >= sticky_s {
        "NOT shorter".to_owned()
    } else if ha_s > 0.0 {
        format!("{:.1}x shorter", sticky_s / ha_s)
    } else {
        "none at all".to_owned()
    };
    format!(
        "verdict (longest gap): high-availability {ha_s:.2} s against sticky {sticky_s:.2} s, {how} (goal: at most a quarter of sticky's and under 1 s: {})\n",
        if met { "met" } else { "NOT met" }
    )
}

#[cfg(test)]
mod tests {
    use super::gap_verdict;

    #[test]
    fn the_gap_verdict_says_when_baton_is_not_shorter() {
        assert_eq!(
            gap_verdict(0.23, 4.46),
            "verdict (longest gap): high-availability 0.23 s against sticky 4.46 s, 19.4x shorter \
             (goal: at most a quarter of sticky's and under 1 s: met)\n"
        );
        assert!(gap_verdict(2.13, 2.70)
            .contains("1.3x shorter (goal: at most a quarter of sticky's and under 1 s: NOT met)"));
        assert!(gap_verdict(5.85, 5.21).contains("NOT shorter"));
        assert!(
            gap_verdict(1.2, 8.0).contains("NOT met"),
            "under a quarter, not under 1 s"
        );
    }
}
