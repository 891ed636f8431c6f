//! A real broker for tests and local use: nisshi, started on a free loopback port with
//! in-memory storage and killed when dropped. Install it with `scripts/install-broker.sh`.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// Where `scripts/install-broker.sh` installs the broker, in the order they are looked in:
/// `$BATON_BROKER_ROOT`, `/opt/baton/nisshi-0.8.1`, then `~/.baton/nisshi-0.8.1` (where
/// `baton demo` installs it when `/opt/baton` is not writable).
pub fn install_roots() -> Vec<std::path::PathBuf> {
    let mut roots = Vec::new();
    if let Some(r) = std::env::var_os("BATON_BROKER_ROOT") {
        roots.push(r.into());
    }
    roots.push("/opt/baton/nisshi-0.8.1".into());
    if let Some(home) = std::env::var_os("HOME") {
        roots.push(std::path::Path::new(&home).join(".baton/nisshi-0.8.1"));
    }
    roots
}

/// The broker binary: `$BATON_NISSHI`, the first of [`install_roots`] that holds one, or
/// `nisshi` on PATH.
pub fn broker_binary() -> String {
    if let Ok(p) = std::env::var("BATON_NISSHI") {
        return p;
    }
    for root in install_roots() {
        let bin = root.join("bin/nisshi");
        if bin.exists() {
            return bin.to_string_lossy().into_owned();
        }
    }
    "nisshi".into()
}

/// Whether [`broker_binary`] runs.
pub fn broker_available() -> bool {
    Command::new(broker_binary())
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// A nisshi broker on a free loopback port with in-memory storage; killed on drop.
pub struct Broker {
    child: Child,
    pub addr: String,
    /// nisshi's `--storage-engine`: `memory://baton/`, or `sqlite://./FILE` to survive restarts.
    storage: String,
    /// Where the broker runs: nisshi reads an sqlite path relative to it.
    dir: std::path::PathBuf,
}

impl Broker {
    /// The broker's process id (benches read its CPU time).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn start() -> Broker {
        Broker::try_start().unwrap_or_else(|e| panic!("{e}"))
    }

    /// As [`Broker::start`], with an error that says what to do instead of a panic.
    pub fn try_start() -> Result<Broker, BrokerError> {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(BrokerError::NoPort)?
            .port();
        Broker::try_start_on(port, "memory://baton/", &std::env::temp_dir())
    }

    /// A broker that keeps its data in an sqlite file at `path`: a restart loses nothing.
    pub fn start_persistent(path: &std::path::Path) -> Broker {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let file = path.file_name().expect("a file path").to_string_lossy();
        let dir = path.parent().expect("a file path");
        Broker::start_on(port, &format!("sqlite://./{file}"), dir)
    }

    /// Kills the broker (SIGKILL: no clean shutdown) and starts it again on the same address
    /// and storage, after `down`.
    pub fn restart(&mut self, down: Duration) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        std::thread::sleep(down);
        let port = self.addr.rsplit(':').next().unwrap().parse().unwrap();
        let fresh = Broker::start_on(port, &self.storage.clone(), &self.dir.clone());
        let old = std::mem::replace(self, fresh);
        std::mem::forget(old);
    }

    /// Kills the broker and starts a new one on the same address. Its storage is in memory:
    /// every topic, record and committed offset is lost, as when a broker loses its disk.
    pub fn restart_empty(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let port = self.addr.rsplit(':').next().unwrap().parse().unwrap();
        let fresh = Broker::start_on(port, "memory://baton/", &std::env::temp_dir());
        // Swap in the new child; the old one is reaped already.
        let old = std::mem::replace(self, fresh);
        std::mem::forget(old);
    }

    fn start_on(port: u16, storage: &str, dir: &std::path::Path) -> Broker {
        Broker::try_start_on(port, storage, dir).unwrap_or_else(|e| panic!("{e}"))
    }

    fn try_start_on(
        port: u16,
        storage: &str,
        dir: &std::path::Path,
    ) -> Result<Broker, BrokerError> {
        let url = format!("tcp://127.0.0.1:{port}");
        let child = Command::new(broker_binary())
            .current_dir(dir)
            .args([
                "broker",
                "--listener-url",
                &url,
                "--advertised-listener-url",
                &url,
            ])
            .args([
                "--storage-engine",
                storage,
                "--group-initial-rebalance-delay",
                "0s",
            ])
            .stdout(Stdio::null())
            // BATON_BROKER_LOG=1 shows the broker's log, for debugging a test.
            .stderr(if std::env::var_os("BATON_BROKER_LOG").is_some() {
                Stdio::inherit()
            } else {
                Stdio::null()
            })
            .spawn()
            .map_err(|e| BrokerError::NotStarted(broker_binary(), e))?;
        let addr = format!("127.0.0.1:{port}");
        // Owned from here on, so Drop kills and reaps it even if it never listens.
        let broker = Broker {
            child,
            addr,
            storage: storage.to_owned(),
            dir: dir.to_owned(),
        };
        for _ in 0..100 {
            if std::net::TcpStream::connect(&broker.addr).is_ok() {
                return Ok(broker);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Err(BrokerError::NotListening(
            broker_binary(),
            broker.addr.clone(),
        ))
    }
}

/// Why a test broker did not start.
#[derive(Debug, thiserror::Error)]
pub enum BrokerError {
    #[error("finding a free loopback port: {0}")]
    NoPort(std::io::Error),
    #[error("cannot start the broker {0:?} ({1}): run scripts/install-broker.sh, or set BATON_NISSHI to its path")]
    NotStarted(String, std::io::Error),
    #[error("the broker {0:?} did not listen on {1} within 5 s")]
    NotListening(String, String),
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
