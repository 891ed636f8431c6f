//! The scenario file: the application, its instances, the group protocol, the assignor and
//! timed events. TOML or JSON with the same fields (see docs/SIMULATIONS.md).

use std::collections::BTreeSet;

use baton_assignor::{AssignmentConfig, AssignorKind};
use serde::{Deserialize, Serialize};

/// A whole scenario.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// Seeds the optional rebalance-duration jitter.
    #[serde(default)]
    pub seed: u64,
    /// The simulation stops here at the latest (simulated seconds).
    #[serde(default = "default_duration")]
    pub max_duration_s: f64,
    /// `running`: the first instances start with a balanced assignment and caught-up state.
    /// `empty`: nobody has any state; the changelogs already hold it.
    #[serde(default)]
    pub start: Start,
    pub app: App,
    pub group: Group,
    #[serde(default)]
    pub assignor: AssignorSpec,
    pub instances: Vec<InstanceSpec>,
    #[serde(default)]
    pub events: Vec<Event>,
}

fn default_duration() -> f64 {
    24.0 * 3600.0
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Start {
    #[default]
    Running,
    Empty,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct App {
    pub subtopologies: Vec<SubtopologySpec>,
    /// Bytes per changelog record, to turn `state_bytes` into records.
    #[serde(default = "default_record_bytes")]
    pub record_bytes: f64,
}

fn default_record_bytes() -> f64 {
    1024.0
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubtopologySpec {
    pub partitions: u32,
    #[serde(default = "yes")]
    pub stateful: bool,
    /// State per task, in changelog records...
    #[serde(default)]
    pub state_records: Option<f64>,
    /// ...or in bytes (divided by `app.record_bytes`).
    #[serde(default)]
    pub state_bytes: Option<f64>,
    /// Changelog records written per second per task while it is processing.
    #[serde(default)]
    pub changelog_rate: f64,
}

fn yes() -> bool {
    true
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Protocol {
    /// Every rebalance revokes everything first (Kafka Streams before KIP-429).
    Eager,
    /// Owned tasks keep running; a moved task is revoked, then assigned in a second round.
    #[default]
    Cooperative,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Group {
    /// How long one rebalance takes.
    pub rebalance_ms: f64,
    /// How long until the coordinator notices a crashed member.
    pub session_timeout_ms: f64,
    #[serde(default)]
    pub protocol: Protocol,
    /// Rebalance duration varies by up to this fraction, drawn from `seed`.
    #[serde(default)]
    pub rebalance_jitter: f64,
    /// `heartbeat.interval.ms`; default 3000, or a third of the session timeout if less.
    #[serde(default)]
    pub heartbeat_ms: Option<f64>,
}

impl Group {
    pub fn heartbeat(&self) -> std::time::Duration {
        let ms = self
            .heartbeat_ms
            .unwrap_or((self.session_timeout_ms / 3.0).min(3000.0));
        std::time::Duration::from_secs_f64(ms.max(0.001) / 1000.0)
    }
}

/// When follow-up rebalances happen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Probing {
    /// Only every `probing.rebalance.interval.ms` (Kafka Streams).
    Interval,
    /// As soon as a warm-up catches up, with the interval as a fallback (the KIP's first design).
    CaughtUp,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AssignorSpec {
    #[serde(default)]
    pub name: AssignorKind,
    /// Default: `caught-up` for high-availability, `interval` for the others.
    #[serde(default)]
    pub probing: Option<Probing>,
    #[serde(default)]
    pub config: AssignmentConfig,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InstanceSpec {
    pub id: String,
    #[serde(default = "one")]
    pub threads: u32,
    #[serde(default)]
    pub rack: Option<String>,
    /// Records per second one thread restores.
    pub restore_rate: f64,
}

fn one() -> u32 {
    1
}

/// Something that happens at `at_s` simulated seconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Event {
    pub at_s: f64,
    /// New instances join.
    #[serde(default)]
    pub add: Vec<InstanceSpec>,
    /// Instances shut down gracefully (they leave the group at once).
    #[serde(default)]
    pub remove: Vec<String>,
    /// Instances are killed: noticed after the session timeout.
    #[serde(default)]
    pub crash: Vec<String>,
    /// Instances are marked leaving and exit once drained (assignors without drain support
    /// remove them gracefully instead).
    #[serde(default)]
    pub drain: Vec<String>,
    /// The current group leader is killed.
    #[serde(default)]
    pub crash_leader: bool,
    /// Host swap: a copy of every running instance joins, then the old ones drain.
    #[serde(default)]
    pub swap: bool,
    /// Drains this percentage (1 to 99, rounded down) of the running instances, those running
    /// the fewest actives first (then by id), as `baton drain --percent` picks them.
    #[serde(default)]
    pub drain_percent: Option<u32>,
}

/// Bad scenario, with where it is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {message}")]
pub struct ScenarioError {
    pub path: String,
    pub message: String,
}

fn err(path: impl Into<String>, message: impl Into<String>) -> ScenarioError {
    ScenarioError {
        path: path.into(),
        message: message.into(),
    }
}

/// The longest simulated run: 100 days.
pub const MAX_DURATION_S: f64 = 8_640_000.0;
/// Tasks, instances and threads per instance a scenario may have.
pub const MAX_TASKS: u64 = 1_000_000;
pub const MAX_INSTANCES: usize = 100_000;
pub const MAX_THREADS: u32 = 4_096;
/// Largest record count or rate (records, bytes, records/s): past it, time steps lose meaning.
pub const MAX_AMOUNT: f64 = 1e15;

impl Scenario {
    /// Parses TOML (or JSON when the text starts with `{`) and checks it.
    pub fn parse(text: &str) -> Result<Scenario, ScenarioError> {
        let scenario: Scenario = if text.trim_start().starts_with('{') {
            let de = &mut serde_json::Deserializer::from_str(text);
            serde_path_to_error::deserialize(de)
                .map_err(|e| err(e.path().to_string(), e.into_inner().to_string()))?
        } else {
            toml::from_str(text).map_err(|e| {
                let span = e
                    .span()
                    .map(|s| format!(" (at byte {})", s.start))
                    .unwrap_or_default();
                err("scenario", format!("{}{span}", e.message()))
            })?
        };
        scenario.validate()?;
        Ok(scenario)
    }

    /// Bounds that keep a run's memory and time finite: beyond them a scenario is a typo.
    pub fn validate(&self) -> Result<(), ScenarioError> {
        if !(self.max_duration_s.is_finite()
            && self.max_duration_s > 0.0
            && self.max_duration_s <= MAX_DURATION_S)
        {
            return Err(err(
                "max_duration_s",
                format!(
                    "{} must be a number in (0, {MAX_DURATION_S}]",
                    self.max_duration_s
                ),
            ));
        }
        self.validate_app()?;
        self.validate_group()?;
        if let Err((key, msg)) = self.assignor.config.validate() {
            return Err(err(format!("assignor.config.{key}"), msg));
        }
        self.validate_instances()
    }

    fn validate_app(&self) -> Result<(), ScenarioError> {
        let tasks: u64 = self
            .app
            .subtopologies
            .iter()
            .map(|s| s.partitions as u64)
            .sum();
        if tasks > MAX_TASKS {
            return Err(err(
                "app.subtopologies",
                format!("{tasks} tasks in all; at most {MAX_TASKS} are simulated"),
            ));
        }
        if self.app.subtopologies.is_empty() {
            return Err(err(
                "app.subtopologies",
                "at least one subtopology is required",
            ));
        }
        for (i, s) in self.app.subtopologies.iter().enumerate() {
            let p = format!("app.subtopologies[{i}]");
            if s.partitions == 0 {
                return Err(err(format!("{p}.partitions"), "must be at least 1"));
            }
            if s.state_records.is_some() && s.state_bytes.is_some() {
                return Err(err(p, "give state_records or state_bytes, not both"));
            }
            for (name, v) in [
                ("state_records", s.state_records.unwrap_or(0.0)),
                ("state_bytes", s.state_bytes.unwrap_or(0.0)),
                ("changelog_rate", s.changelog_rate),
            ] {
                if !(v.is_finite() && (0.0..=MAX_AMOUNT).contains(&v)) {
                    return Err(err(
                        format!("{p}.{name}"),
                        format!("{v:e} must be a number in [0, {MAX_AMOUNT:e}]"),
                    ));
                }
            }
        }
        if !(self.app.record_bytes.is_finite() && self.app.record_bytes > 0.0) {
            return Err(err("app.record_bytes", "must be > 0"));
        }
        Ok(())
    }

    fn validate_group(&self) -> Result<(), ScenarioError> {
        if !(self.group.rebalance_ms.is_finite() && self.group.rebalance_ms >= 0.0) {
            return Err(err(
                "group.rebalance_ms",
                format!("{} must be a finite number >= 0", self.group.rebalance_ms),
            ));
        }
        for (name, v) in [
            (
                "group.session_timeout_ms",
                Some(self.group.session_timeout_ms),
            ),
            ("group.heartbeat_ms", self.group.heartbeat_ms),
        ] {
            let Some(v) = v else { continue };
            if !(v.is_finite() && (1.0..=MAX_DURATION_S * 1000.0).contains(&v)) {
                return Err(err(
                    name,
                    format!(
                        "{v} must be a number of milliseconds in [1, {}]",
                        MAX_DURATION_S * 1000.0
                    ),
                ));
            }
        }
        if self
            .group
            .heartbeat_ms
            .is_some_and(|h| h >= self.group.session_timeout_ms)
        {
            return Err(err(
                "group.heartbeat_ms",
                "must be below group.session_timeout_ms, or members time out between heartbeats",
            ));
        }
        if !(0.0..1.0).contains(&self.group.rebalance_jitter) {
            return Err(err("group.rebalance_jitter", "must be in [0, 1)"));
        }
        Ok(())
    }

    /// Instances, at start and added by events, and the events' order and targets.
    fn validate_instances(&self) -> Result<(), ScenarioError> {
        let mut ids = BTreeSet::new();
        let check_instance = |path: String, spec: &InstanceSpec, ids: &mut BTreeSet<String>| {
            if spec.id.is_empty() {
                return Err(err(format!("{path}.id"), "must not be empty"));
            }
            if !ids.insert(spec.id.clone()) {
                return Err(err(
                    format!("{path}.id"),
                    format!("duplicate instance id {:?}", spec.id),
                ));
            }
            if !(1..=MAX_THREADS).contains(&spec.threads) {
                return Err(err(
                    format!("{path}.threads"),
                    format!("{} must be in [1, {MAX_THREADS}]", spec.threads),
                ));
            }
            if !(spec.restore_rate.is_finite()
                && spec.restore_rate > 0.0
                && spec.restore_rate <= MAX_AMOUNT)
            {
                return Err(err(
                    format!("{path}.restore_rate"),
                    format!(
                        "{} must be a number in (0, {MAX_AMOUNT:e}]",
                        spec.restore_rate
                    ),
                ));
            }
            Ok(())
        };
        if self.instances.is_empty() {
            return Err(err("instances", "at least one instance is required"));
        }
        let added: usize = self.events.iter().map(|e| e.add.len()).sum();
        if self.instances.len() + added > MAX_INSTANCES {
            return Err(err(
                "instances",
                format!(
                    "{} instances in all; at most {MAX_INSTANCES}",
                    self.instances.len() + added
                ),
            ));
        }
        for (i, spec) in self.instances.iter().enumerate() {
            check_instance(format!("instances[{i}]"), spec, &mut ids)?;
        }
        let mut last = 0.0;
        for (i, e) in self.events.iter().enumerate() {
            let p = format!("events[{i}]");
            if !(e.at_s.is_finite() && e.at_s >= 0.0) {
                return Err(err(format!("{p}.at_s"), "must be a finite number >= 0"));
            }
            if e.at_s < last {
                return Err(err(format!("{p}.at_s"), "events must be in time order"));
            }
            last = e.at_s;
            for (j, spec) in e.add.iter().enumerate() {
                check_instance(format!("{p}.add[{j}]"), spec, &mut ids)?;
            }
            if let Some(pct) = e.drain_percent {
                if !(1..=99).contains(&pct) {
                    return Err(err(
                        format!("{p}.drain_percent"),
                        format!("{pct} is not 1 to 99"),
                    ));
                }
            }
            for (field, list) in [
                ("remove", &e.remove),
                ("crash", &e.crash),
                ("drain", &e.drain),
            ] {
                for id in list {
                    if !ids.contains(id) {
                        return Err(err(
                            format!("{p}.{field}"),
                            format!("unknown instance {id:?}"),
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    /// State of one task of subtopology `s`, in records.
    pub fn state_records(&self, s: &SubtopologySpec) -> f64 {
        s.state_records
            .or(s.state_bytes.map(|b| b / self.app.record_bytes))
            .unwrap_or(0.0)
    }

    /// The probing mode in force.
    pub fn probing(&self) -> Probing {
        self.probing_for(self.assignor.name)
    }

    /// The probing mode in force when `kind` assigns.
    pub fn probing_for(&self, kind: AssignorKind) -> Probing {
        self.assignor
            .probing
            .unwrap_or(if kind == AssignorKind::HighAvailability {
                Probing::CaughtUp
            } else {
                Probing::Interval
            })
    }
}
