//! `baton simulate`: replay scaling scenarios and compare what each assignor costs.

use std::fmt::Write as _;
use std::io::IsTerminal;
use std::path::PathBuf;

use baton_simulator::{plot::plot, simulate, Report, RunSpec, Scenario};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};

use crate::Failure;

#[derive(Args)]
pub struct SimulateArgs {
    /// Scenario files (TOML or JSON).
    #[arg(required = true)]
    scenarios: Vec<PathBuf>,
    /// Run with this assignor instead of the scenario's: `NAME` or `NAME@eager|cooperative`,
    /// NAME one of high-availability, kafka, sticky.
    #[arg(long, conflicts_with = "compare")]
    assignor: Option<String>,
    /// Run each of these on the same scenario, one row each (names as for --assignor), e.g.
    /// `sticky@eager,kafka,high-availability`.
    #[arg(long, value_delimiter = ',')]
    compare: Vec<String>,
    /// Print the full reports as JSON.
    #[arg(long, conflicts_with = "markdown")]
    json: bool,
    /// Print the summary as Markdown tables.
    #[arg(long)]
    markdown: bool,
    /// Draw tasks unavailable and load spread over time (.png or .svg); one scenario only.
    #[arg(long)]
    plot: Option<PathBuf>,
}

pub fn run(args: SimulateArgs) -> Result<(), Failure> {
    if let Some(p) = &args.plot {
        let ext = p.extension().and_then(|e| e.to_str()).unwrap_or("");
        if !matches!(ext, "png" | "svg") {
            return Err(Failure::bad_input(format!(
                "--plot {}: draws .png or .svg files only",
                p.display()
            )));
        }
    }
    if args.plot.is_some() && args.scenarios.len() != 1 {
        return Err(Failure::bad_input(
            "--plot draws one scenario: give exactly one",
        ));
    }
    let mut all: Vec<Report> = Vec::new();
    let mut out = String::new();
    for path in &args.scenarios {
        let text = std::fs::read_to_string(path)
            .map_err(|e| Failure::bad_input(format!("reading {}: {e}", path.display())))?;
        let scenario = Scenario::parse(&text)
            .map_err(|e| Failure::bad_input(format!("{}: {e}", path.display())))?;
        let specs: Vec<String> = if !args.compare.is_empty() {
            args.compare.clone()
        } else {
            vec![args
                .assignor
                .clone()
                .unwrap_or_else(|| scenario.assignor.name.to_string())]
        };
        let mut reports = Vec::new();
        for spec in &specs {
            let run = RunSpec::parse(spec).map_err(|e| Failure::bad_input(e.to_string()))?;
            reports.push(with_progress(&scenario, &run));
        }
        if let Some(plot_path) = &args.plot {
            plot(&reports, plot_path).map_err(|e| Failure {
                message: e.to_string(),
                status: 1,
            })?;
            eprintln!("plot written to {}", plot_path.display());
        }
        if args.markdown {
            out.push_str(&markdown(&scenario, &reports));
        } else if !args.json {
            out.push_str(&table(&scenario, &reports));
        }
        all.extend(reports);
    }
    if args.json {
        out = serde_json::to_string_pretty(&all).expect("reports serialize");
        out.push('\n');
    } else if !args.markdown {
        out.push_str(LEGEND);
    }
    crate::emit(&out)
}

/// A progress bar on a terminal only: scripts and CI get clean output.
fn with_progress(scenario: &Scenario, run: &RunSpec) -> Report {
    if !std::io::stderr().is_terminal() {
        return simulate(scenario, run, &mut |_| {});
    }
    let bar = ProgressBar::new(1000);
    bar.set_style(
        ProgressStyle::with_template("{msg:>32} [{bar:40}] {percent}%").expect("valid template"),
    );
    bar.set_message(format!("{} / {}", scenario.name, run.assignor));
    let report = simulate(scenario, run, &mut |f| {
        bar.set_position((f * 1000.0) as u64)
    });
    bar.finish_and_clear();
    report
}

fn balanced(r: &Report) -> String {
    r.time_to_balance_s
        .map(|s| format!("{s:.1}"))
        .unwrap_or_else(|| "never".into())
}

/// One run's summary cells, in column order, for both the table and Markdown.
fn cells(r: &Report) -> [String; 9] {
    [
        format!("{} ({}, {})", r.assignor, r.protocol, r.probing),
        format!("{:.1}", r.unavailable_total_s),
        format!("{:.1}", r.unavailable_p99_s),
        format!("{:.1}", r.unavailable_max_s),
        r.rebalances.to_string(),
        r.active_moves.to_string(),
        balanced(r),
        format!("{:.0}", r.records_restored),
        r.forced_moves.to_string(),
    ]
}

fn table(scenario: &Scenario, reports: &[Report]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "scenario {} ({} tasks)",
        scenario.name,
        reports.first().map(|r| r.tasks).unwrap_or(0)
    );
    let rows: Vec<Vec<String>> = reports.iter().map(|r| cells(r).to_vec()).collect();
    s.push_str(&crate::columns::render(
        &[
            "RUN",
            "UNAVAILABLE s",
            "P99 s",
            "MAX s",
            "REBALANCES",
            "MOVES",
            "BALANCED AFTER s",
            "RECORDS RESTORED",
            "FORCED",
        ],
        &rows,
    ));
    s.push_str(&unfinished(reports));
    s.push('\n');
    s
}

/// A line per run whose drain never finished: it holds tasks no warm-up could take.
fn unfinished(reports: &[Report]) -> String {
    let mut s = String::new();
    for r in reports.iter().filter(|r| !r.unfinished_drains.is_empty()) {
        let _ = writeln!(
            s,
            "{} ({}): the drain of {} did not finish (no warm-up kept pace; set scale.down.timeout.ms)",
            r.assignor,
            r.protocol,
            r.unfinished_drains.join(", ")
        );
    }
    s
}

/// What the columns and run labels mean, printed once under the tables.
const LEGEND: &str = "\
RUN: assignor (rebalance protocol, follow-up trigger). eager: every member gives up all its
  tasks at each rebalance; cooperative: only the tasks that move stop. caught-up: a member
  rejoins as soon as one of its warm-ups has caught up; interval: only the probing timer
  triggers the follow-up rebalance.
UNAVAILABLE s: task-seconds without a running active, summed over tasks. P99 s, MAX s: the
  99th percentile and the longest single gap of one task. MOVES: times a task's active went to
  another instance. BALANCED AFTER s: from the last
  scenario event until the assignment is balanced with nothing pending (never: not within the
  scenario, or a drain never finished). RECORDS RESTORED: changelog records replayed by new owners
  and warm-ups. FORCED: tasks the scale-down timeout took from a draining instance before their
  new owner caught up.
";

fn markdown(scenario: &Scenario, reports: &[Report]) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "### {}\n", scenario.name);
    if !scenario.description.is_empty() {
        let _ = writeln!(s, "{}\n", scenario.description);
    }
    let _ = writeln!(
        s,
        "| run | task-seconds unavailable | p99 s | max s | rebalances | moves | balanced after s | records restored | forced moves |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|");
    for r in reports {
        let _ = writeln!(s, "| {} |", cells(r).join(" | "));
    }
    let notes = unfinished(reports);
    if !notes.is_empty() {
        let _ = writeln!(s, "\n{}", notes.trim_end());
    }
    s.push('\n');
    s
}
