//! The broker the demo and the benches start, built and installed on first use: the same
//! script and version as `scripts/install-broker.sh`, so that `baton demo` works on a fresh
//! machine with nothing but the Rust toolchain.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use baton_kafka::testing::{broker_available, broker_binary};

use crate::Failure;

/// The install script, as the repository has it.
const SCRIPT: &str = include_str!("../../../../scripts/install-broker.sh");

/// Makes sure the broker runs: builds and installs it if it is missing and `install` allows.
pub fn ensure_broker(install: bool) -> Result<(), Failure> {
    if broker_available() {
        return Ok(());
    }
    if !install {
        return Err(Failure {
            message: format!(
                "the broker (nisshi 0.8.1) is not installed ({} does not run): run \
                 scripts/install-broker.sh, set BATON_NISSHI to its path, or leave out \
                 --no-install to let baton build it",
                broker_binary()
            ),
            status: 1,
        });
    }
    for (tool, why) in [
        ("cargo", "builds the broker"),
        ("rustup", "fetches the nightly toolchain the broker needs"),
        ("bash", "runs the install script"),
    ] {
        let runs = Command::new(tool)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !runs {
            return Err(Failure {
                message: format!(
                    "the broker (nisshi 0.8.1) is not installed, and {tool}, which {why}, is \
                     not on PATH: install Rust with rustup (https://rustup.rs), or start a \
                     Kafka-protocol broker yourself and pass --bootstrap"
                ),
                status: 1,
            });
        }
    }
    let root = install_root();
    eprintln!(
        "broker: nisshi 0.8.1 is not installed; building it into {} now (once per machine: \
         about 15 to 45 minutes on 2 cores; cargo's own output follows)",
        root.display()
    );
    let status = run_script(&root).map_err(|e| Failure {
        message: format!("cannot run the broker's install script: {e}"),
        status: 1,
    })?;
    if !status.success() || !broker_available() {
        return Err(Failure {
            message: format!(
                "building the broker into {} failed ({status}): see cargo's output above",
                root.display()
            ),
            status: 1,
        });
    }
    eprintln!("broker: installed {}", broker_binary());
    Ok(())
}

/// `$BATON_BROKER_ROOT`, else `/opt/baton/nisshi-0.8.1` where it can be written, else
/// `~/.baton/nisshi-0.8.1`: the places the broker is looked for, in that order.
fn install_root() -> PathBuf {
    if let Some(r) = std::env::var_os("BATON_BROKER_ROOT") {
        return r.into();
    }
    let opt = PathBuf::from("/opt/baton");
    let writable = std::fs::create_dir_all(&opt).is_ok() && {
        let probe = opt.join(format!(".probe-{}", std::process::id()));
        let ok = std::fs::write(&probe, b"").is_ok();
        let _ = std::fs::remove_file(&probe);
        ok
    };
    if writable {
        return opt.join("nisshi-0.8.1");
    }
    let home = std::env::var_os("HOME").map_or_else(std::env::temp_dir, PathBuf::from);
    home.join(".baton/nisshi-0.8.1")
}

/// Runs the install script for `root`, its output shown as it comes.
fn run_script(root: &std::path::Path) -> std::io::Result<std::process::ExitStatus> {
    let mut child = Command::new("bash")
        .args(["-s", "--"])
        .env("BATON_BROKER_ROOT", root)
        .stdin(Stdio::piped())
        .spawn()?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(SCRIPT.as_bytes())?;
    }
    child.wait()
}
