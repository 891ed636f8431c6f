use crate::store::StoreError;
use crate::topology::TopologyError;

#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("config: {0}")]
    Config(String),
    #[error("config: {0}")]
    BadConfig(#[from] crate::config::ConfigError),
    #[error(transparent)]
    Topology(#[from] TopologyError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{what}: {source}")]
    Kafka {
        what: String,
        source: baton_kafka::Error,
    },
    /// A thread met what it must not go past (a record no batch can carry, under
    /// `on.oversized.record=fail`) and stopped the instance.
    #[error("stopped: {0}")]
    Failed(String),
    /// The broker did not answer in time.
    #[error("{0}")]
    Unanswered(String),
    /// The state directory holds stores whose changelogs are in an earlier Baton's layout.
    #[error("{0}")]
    EarlierLayout(String),
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
}

pub type Result<T> = std::result::Result<T, RuntimeError>;

/// Wraps a Kafka error with what was being done.
pub fn kafka(what: impl Into<String>) -> impl FnOnce(baton_kafka::Error) -> RuntimeError {
    let what = what.into();
    move |source| RuntimeError::Kafka { what, source }
}
