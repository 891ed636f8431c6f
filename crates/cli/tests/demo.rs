//! `baton demo` in its short configuration, on a broker it starts itself: the scale-out shows
//! a warm-up and a hand-over, every event is counted in both runs, and Ctrl-C leaves nothing
//! running.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const SHORT: [&str; 10] = [
    "--partitions",
    "3",
    "--state-records",
    "1000000",
    "--rate",
    "200",
    "--keys",
    "30",
    "--pause-ms",
    "1000",
];

fn baton() -> Command {
    Command::new(env!("CARGO_BIN_EXE_baton"))
}

/// Processes whose command line mentions `dir`: what the demo started there.
fn started_in(dir: &Path) -> Vec<String> {
    let needle = dir.display().to_string();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        if let Ok(cmd) = std::fs::read(entry.path().join("cmdline")) {
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            if cmd.contains(&needle) && cmd.contains(" run ") {
                found.push(cmd);
            }
        }
    }
    found
}

#[test]
fn the_demo_shows_a_hand_over_and_counts_every_event() {
    let dir = std::env::temp_dir().join(format!("baton-demo-test-{}", std::process::id()));
    let started = Instant::now();
    let out = baton()
        .arg("demo")
        .args(SHORT)
        .arg("--dir")
        .arg(&dir)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("demo took {:.1} s", started.elapsed().as_secs_f64());
    assert!(out.status.success(), "{stdout}\n{stderr}");
    for expected in [
        "=== high-availability",
        "warm-up on c starts",
        "now processed by c (was ",
        "caught up",
        "=== sticky",
        "ASSIGNOR",
        "verdict (high-availability): every one of",
        "verdict (sticky): every one of",
        "verdict (longest gap): high-availability ",
    ] {
        assert!(stdout.contains(expected), "{expected:?} missing:\n{stdout}");
    }
    assert!(
        started_in(&dir).is_empty(),
        "the demo left instances running"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn ctrl_c_stops_everything_the_demo_started() {
    let dir = std::env::temp_dir().join(format!("baton-demo-int-{}", std::process::id()));
    let mut demo = baton()
        .arg("demo")
        .args(SHORT)
        .arg("--dir")
        .arg(&dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(demo.stdout.take().unwrap()).lines();
    let reached = lines
        .by_ref()
        .map_while(Result::ok)
        .any(|l| l.contains("a and b process every task"));
    assert!(reached, "the demo got its instances going");
    assert_eq!(started_in(&dir).len(), 2, "a and b run");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(demo.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    let status = loop {
        if let Some(s) = demo.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "the demo did not stop on Ctrl-C");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(status.code(), Some(130));
    // Children killed on drop may take a moment to be reaped by init.
    let deadline = Instant::now() + Duration::from_secs(5);
    while !started_in(&dir).is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(started_in(&dir).is_empty(), "instances left running");
    let _ = std::fs::remove_dir_all(&dir);
}
