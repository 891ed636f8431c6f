//! baton-core and the simulator stay free of I/O: neither links, even transitively, an async
//! runtime, a store, an HTTP stack or the crates that drive them (`cargo metadata`).

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

use serde_json::Value;

const FORBIDDEN: [&str; 7] = [
    "tokio",
    "fjall",
    "axum",
    "hyper",
    "baton-runtime",
    "baton-kafka",
    "kafka-protocol",
];

/// The packages `name` depends on through normal (not dev or build) dependencies.
fn normal_dependencies(metadata: &Value, name: &str) -> BTreeSet<String> {
    let names: BTreeMap<&str, &str> = metadata["packages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["id"].as_str().unwrap(), p["name"].as_str().unwrap()))
        .collect();
    let nodes: BTreeMap<&str, &Value> = metadata["resolve"]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| (n["id"].as_str().unwrap(), n))
        .collect();
    let root = names
        .iter()
        .find(|(_, n)| **n == name)
        .map(|(id, _)| *id)
        .unwrap_or_else(|| panic!("{name} is not in the workspace"));
    let (mut seen, mut todo) = (BTreeSet::new(), vec![root]);
    while let Some(id) = todo.pop() {
        for dep in nodes[id]["deps"].as_array().unwrap() {
            let normal = dep["dep_kinds"]
                .as_array()
                .unwrap()
                .iter()
                .any(|k| k["kind"].is_null());
            let pkg = dep["pkg"].as_str().unwrap();
            if normal && seen.insert(pkg) {
                todo.push(pkg);
            }
        }
    }
    seen.into_iter().map(|id| names[id].to_owned()).collect()
}

/// The host's target triple, from `rustc -vV`.
fn host() -> String {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let out = Command::new(rustc).arg("-vV").output().expect("rustc runs");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("host: "))
        .expect("rustc -vV names the host")
        .to_owned()
}

#[test]
fn core_and_the_simulator_link_no_io_crate() {
    // This platform's dependencies only: the build has them all, so no download is needed.
    let out = Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1", "--offline"])
        .args(["--filter-platform", &host()])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo metadata runs");
    assert!(
        out.status.success(),
        "cargo metadata: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let metadata: Value = serde_json::from_slice(&out.stdout).unwrap();
    for name in ["baton-core", "baton-simulator"] {
        let deps = normal_dependencies(&metadata, name);
        let bad: Vec<&str> = FORBIDDEN
            .iter()
            .copied()
            .filter(|f| deps.contains(*f))
            .collect();
        assert!(bad.is_empty(), "{name} links {bad:?}");
        if name == "baton-simulator" {
            assert!(
                deps.contains("baton-core"),
                "the simulator drives baton-core"
            );
        }
    }
}
