//! Typed client errors, and which of them a retry can fix.

use kafka_protocol::messages::ApiKey;
use kafka_protocol::ResponseError;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("connecting to {addr}: {source}")]
    Connect {
        addr: String,
        source: std::io::Error,
    },
    #[error("talking to {addr}: {source}")]
    Io {
        addr: String,
        source: std::io::Error,
    },
    #[error("{api:?}: {message}")]
    Codec { api: ApiKey, message: String },
    #[error("{api:?}: the broker answered {error} (code {code})", code = error.code())]
    Broker { api: ApiKey, error: ResponseError },
    #[error("{api:?}: no version both sides support (ours {ours}, broker's {theirs})")]
    Unsupported {
        api: ApiKey,
        ours: String,
        theirs: String,
    },
    #[error("{0}")]
    Protocol(String),
    #[error("timed out after {0:?}")]
    Timeout(std::time::Duration),
}

impl Error {
    /// Whether the same request may succeed later (coordinator moved, leader changed, a
    /// rebalance in progress, a dropped connection).
    pub fn is_retriable(&self) -> bool {
        match self {
            Error::Connect { .. } | Error::Io { .. } | Error::Timeout(_) => true,
            Error::Broker { error, .. } => {
                error.is_retriable()
                    || matches!(
                        error,
                        ResponseError::NotCoordinator
                            | ResponseError::CoordinatorNotAvailable
                            | ResponseError::CoordinatorLoadInProgress
                            | ResponseError::NotLeaderOrFollower
                    )
            }
            _ => false,
        }
    }

    /// The coordinator knows no such group.
    pub fn is_group_not_found(&self) -> bool {
        self.broker_error() == Some(ResponseError::GroupIdNotFound)
    }

    /// The topic does not exist (deleted, or never made): the broker says so, or its metadata
    /// leaves the topic out.
    pub fn is_unknown_topic(&self) -> bool {
        self.broker_error() == Some(ResponseError::UnknownTopicOrPartition)
            || matches!(self, Error::Protocol(m) if m.ends_with("is not in the metadata"))
    }

    /// A fetch by topic id found no topic of that id: it was deleted (and perhaps made again
    /// under the same name, with another id).
    pub fn is_unknown_topic_id(&self) -> bool {
        matches!(
            self.broker_error(),
            Some(ResponseError::UnknownTopicId | ResponseError::InconsistentTopicId)
        )
    }

    /// A fetch from an offset the partition does not have (past its end, or before its start).
    pub fn is_offset_out_of_range(&self) -> bool {
        self.broker_error() == Some(ResponseError::OffsetOutOfRange)
    }

    /// The broker refused a record batch as larger than its limit (`message.max.bytes`, the
    /// topic's `max.message.bytes`).
    pub fn is_message_too_large(&self) -> bool {
        matches!(
            self.broker_error(),
            Some(ResponseError::MessageTooLarge | ResponseError::RecordListTooLarge)
        )
    }

    /// The broker's error code, if this is a broker error.
    pub fn broker_error(&self) -> Option<ResponseError> {
        match self {
            Error::Broker { error, .. } => Some(*error),
            _ => None,
        }
    }
}

pub type Result<T> = std::result::Result<T, Error>;

/// Turns a response error code into a typed error.
pub fn check(api: ApiKey, code: i16) -> Result<()> {
    match ResponseError::try_from_code(code) {
        None => Ok(()),
        Some(error) => Err(Error::Broker { api, error }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coordinator_and_rebalance_errors_are_retriable() {
        let broker = |error| Error::Broker {
            api: ApiKey::JoinGroup,
            error,
        };
        assert!(broker(ResponseError::NotCoordinator).is_retriable());
        assert!(broker(ResponseError::CoordinatorNotAvailable).is_retriable());
        assert!(!broker(ResponseError::GroupAuthorizationFailed).is_retriable());
        assert!(Error::Timeout(std::time::Duration::from_secs(1)).is_retriable());
        assert!(!Error::Protocol("x".into()).is_retriable());
        assert!(check(ApiKey::Heartbeat, 0).is_ok());
        assert_eq!(
            check(ApiKey::Heartbeat, 27).unwrap_err().to_string(),
            "Heartbeat: the broker answered RebalanceInProgress (code 27)"
        );
    }
}
