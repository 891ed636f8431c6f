//! Deterministic, simulated-time replays of scaling scenarios against any Baton assignor.
//!
//! The same scenario gives byte-identical reports: there is no wall clock, no thread and no
//! hash-order iteration inside.

mod engine;
pub mod plot;
pub mod report;
pub mod scenario;

use baton_assignor::{AssignorKind, UnknownAssignor};
pub use report::Report;
pub use scenario::{Protocol, Scenario, ScenarioError};

/// Why a run spec does not read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RunSpecError {
    #[error("unknown protocol {protocol:?} in {spec:?} (eager or cooperative)")]
    UnknownProtocol { protocol: String, spec: String },
    #[error(transparent)]
    UnknownAssignor(#[from] UnknownAssignor),
}

/// One run: an assignor, optionally with a rebalance protocol other than the scenario's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunSpec {
    pub assignor: AssignorKind,
    pub protocol: Option<Protocol>,
}

impl RunSpec {
    /// `NAME` or `NAME@eager` / `NAME@cooperative`.
    pub fn parse(text: &str) -> Result<RunSpec, RunSpecError> {
        let (name, protocol) = match text.split_once('@') {
            None => (text, None),
            Some((n, "eager")) => (n, Some(Protocol::Eager)),
            Some((n, "cooperative")) => (n, Some(Protocol::Cooperative)),
            Some((_, p)) => {
                return Err(RunSpecError::UnknownProtocol {
                    protocol: p.to_owned(),
                    spec: text.to_owned(),
                })
            }
        };
        let assignor: AssignorKind = name.parse()?;
        Ok(RunSpec { assignor, protocol })
    }
}

/// Simulates `scenario` with `run`'s assignor. `progress` is told how far the events got.
pub fn simulate(scenario: &Scenario, run: &RunSpec, progress: &mut dyn FnMut(f64)) -> Report {
    let protocol = run.protocol.unwrap_or(scenario.group.protocol);
    engine::Engine::new(scenario, run.assignor, protocol).run(progress)
}
