//! The simulated tables stay met. Every shipped scenario (examples/scenarios) is simulated as
//! docs/SIMULATIONS.md says to regenerate it, and
//! - every row the simulator prints is the row that page shows, so a change of figure fails
//!   here until the page is regenerated and the change explained;
//! - high-availability leaves tasks without an active for at most as many task-seconds as
//!   Kafka's own assignor, on every scenario.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
const COMPARE: &str = "sticky@eager,kafka,high-availability";

fn scenarios() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(Path::new(ROOT).join("examples/scenarios"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    files.sort();
    files
}

fn simulate(path: &Path) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_baton"))
        .arg("simulate")
        .arg(path)
        .args(["--compare", COMPARE, "--markdown"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}: {}",
        path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Table rows (`| run | ... |`) per `### scenario` section.
fn rows_by_section(markdown: &str) -> BTreeMap<String, Vec<String>> {
    let mut sections: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut current = None;
    for line in markdown.lines() {
        if let Some(name) = line.strip_prefix("### ") {
            current = Some(name.trim().to_owned());
            sections.entry(name.trim().to_owned()).or_default();
        } else if let Some(name) = &current {
            let is_row = line.starts_with("| ") && !line.starts_with("| run |");
            if is_row {
                sections
                    .get_mut(name)
                    .unwrap()
                    .push(line.trim_end().to_owned());
            }
        }
    }
    sections
}

/// The task-seconds column of the row whose run starts with `assignor`.
fn unavailable(rows: &[String], assignor: &str) -> f64 {
    let row = rows
        .iter()
        .find(|r| r.starts_with(&format!("| {assignor} (")))
        .unwrap_or_else(|| panic!("no {assignor} row in {rows:?}"));
    row.split('|').nth(2).unwrap().trim().parse().unwrap()
}

#[test]
fn every_shipped_scenario_matches_its_table_and_high_availability_is_at_most_kafka() {
    let files = scenarios();
    assert!(files.len() >= 10, "the shipped scenarios: {files:?}");
    // Two cores: half the scenarios each.
    let (a, b) = files.split_at(files.len() / 2);
    let (a, b) = (a.to_vec(), b.to_vec());
    let other = std::thread::spawn(move || b.iter().map(|p| simulate(p)).collect::<Vec<_>>());
    let mut outputs: Vec<String> = a.iter().map(|p| simulate(p)).collect();
    outputs.extend(other.join().unwrap());
    let simulated = rows_by_section(&outputs.concat());

    let page = std::fs::read_to_string(Path::new(ROOT).join("docs/SIMULATIONS.md")).unwrap();
    let documented = rows_by_section(&page);
    let mut behind = Vec::new();
    for (scenario, rows) in &simulated {
        assert_eq!(rows.len(), 3, "{scenario}: one row per assignor");
        let doc = documented
            .get(scenario)
            .unwrap_or_else(|| panic!("docs/SIMULATIONS.md has no table for {scenario}"));
        assert_eq!(
            rows, doc,
            "{scenario}: the simulator's rows are not docs/SIMULATIONS.md's; regenerate the page \
             and explain what moved"
        );
        let (ha, kafka) = (
            unavailable(rows, "high-availability"),
            unavailable(rows, "kafka"),
        );
        eprintln!("{scenario}: high-availability {ha} task-s, kafka {kafka}");
        if ha > kafka {
            behind.push(format!("{scenario}: {ha} > {kafka}"));
        }
    }
    assert!(
        behind.is_empty(),
        "high-availability behind Kafka's assignor in task-seconds unavailable: {behind:?}"
    );
}
