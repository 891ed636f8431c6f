//! The README's two commands are what a fresh clone runs: the demo command starts the demo
//! (and builds the broker when it is missing, or refuses under `--no-install`), and the test
//! command is the one `.ci/run` runs. A change to one without the other fails here.

use std::path::Path;
use std::process::Command;

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

fn read(path: &str) -> String {
    std::fs::read_to_string(Path::new(ROOT).join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The commands of the first `sh` block under `heading`, comments stripped.
fn commands_under(text: &str, heading: &str) -> Vec<String> {
    let section = text
        .split_once(heading)
        .unwrap_or_else(|| panic!("README has no {heading:?}"))
        .1;
    let block = section
        .split_once("```sh\n")
        .and_then(|(_, b)| b.split_once("```"))
        .map(|(b, _)| b)
        .unwrap_or_else(|| panic!("no sh block under {heading:?}"));
    block
        .lines()
        .map(|l| l.split('#').next().unwrap().trim().to_owned())
        .filter(|l| !l.is_empty())
        .collect()
}

#[test]
fn the_readmes_two_commands_are_the_demo_and_what_ci_runs() {
    let readme = read("README.md");
    let commands = commands_under(&readme, "## Two commands, from a fresh clone");
    assert_eq!(
        commands,
        [
            "cargo run --release -p baton-cli -- demo",
            "bash scripts/test.sh"
        ],
        "the README's two commands"
    );
    let ci = read(".ci/run");
    let last = ci
        .lines()
        .map(str::trim)
        .rfind(|l| !l.is_empty() && !l.starts_with('#'))
        .unwrap();
    assert_eq!(
        last, commands[1],
        ".ci/run ends with the README's test command"
    );
    // A reader is told to run no other test command than the one CI runs.
    let others: Vec<&str> = readme
        .lines()
        .filter(|l| l.contains("cargo test") || l.contains("cargo nextest"))
        .collect();
    assert!(
        others.is_empty(),
        "test commands CI does not run: {others:?}"
    );
    let script = read("scripts/test.sh");
    assert!(
        script.contains("bash scripts/install-broker.sh")
            && script.contains("cargo test --workspace"),
        "scripts/test.sh installs the broker, then runs every test:\n{script}"
    );
}

/// With the broker missing, `--no-install` refuses with what to do; the demo's help says it
/// builds the broker otherwise.
#[test]
fn the_demo_without_a_broker_says_what_to_do_under_no_install() {
    let out = Command::new(env!("CARGO_BIN_EXE_baton"))
        .args(["demo", "--no-install", "--no-compare"])
        .env("BATON_NISSHI", "/nonexistent/nisshi")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("not installed") && stderr.contains("scripts/install-broker.sh"),
        "{stderr}"
    );
    let help = Command::new(env!("CARGO_BIN_EXE_baton"))
        .args(["demo", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(help.contains("--no-install"), "{help}");
}
