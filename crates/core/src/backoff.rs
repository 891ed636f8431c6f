//! The one retry policy.

use std::time::Duration;

/// How to retry a failure: the one policy of the client's requests and the runtime's task
/// retries. The wait doubles from `first` up to `max`; `attempts` bounds the tries where a
/// caller gives up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    pub first: Duration,
    pub max: Duration,
    pub attempts: u32,
}

impl Backoff {
    /// The wait before retry number `failures` (1 after the first failure).
    pub fn delay(&self, failures: u32) -> Duration {
        let doublings = failures.saturating_sub(1).min(20);
        self.first.saturating_mul(1 << doublings).min(self.max)
    }
}

impl Default for Backoff {
    fn default() -> Self {
        Self {
            first: Duration::from_millis(50),
            max: Duration::from_secs(1),
            attempts: 20,
        }
    }
}
