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

impl Backoff {
    /// Retries without end (the caller stops when its work is gone).
    pub const fn forever(first: Duration, max: Duration) -> Backoff {
        Backoff {
            first,
            max,
            attempts: u32::MAX,
        }
    }
}

/// One failure retried under a [`Backoff`]: how many times in a row it failed, hence the next
/// wait, and whether the attempts are spent.
#[derive(Debug, Clone, Default)]
pub struct Retrying {
    failures: u32,
}

impl Retrying {
    /// It failed again: the wait before the next try, or `None` once `policy.attempts` tries
    /// have failed.
    pub fn failed(&mut self, policy: &Backoff) -> Option<Duration> {
        self.failures = self.failures.saturating_add(1);
        (self.failures < policy.attempts).then(|| policy.delay(self.failures))
    }

    /// It failed again, under a policy retried without end ([`Backoff::forever`]): the wait
    /// before the next try, the longest once the attempts are spent.
    pub fn wait(&mut self, policy: &Backoff) -> Duration {
        self.failed(policy).unwrap_or(policy.max)
    }

    /// It worked: the next failure starts from the first wait.
    pub fn succeeded(&mut self) {
        self.failures = 0;
    }

    pub fn failures(&self) -> u32 {
        self.failures
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_double_to_the_max_and_attempts_run_out() {
        let policy = Backoff {
            first: Duration::from_millis(100),
            max: Duration::from_millis(350),
            attempts: 4,
        };
        let mut r = Retrying::default();
        let waits: Vec<Option<Duration>> = (0..4).map(|_| r.failed(&policy)).collect();
        let ms = Duration::from_millis;
        assert_eq!(waits, [Some(ms(100)), Some(ms(200)), Some(ms(350)), None]);
        r.succeeded();
        assert_eq!(r.failed(&policy), Some(ms(100)));
        let forever = Backoff::forever(ms(1), ms(1));
        let mut r = Retrying {
            failures: u32::MAX - 1,
        };
        assert_eq!(r.failed(&forever), None, "u32::MAX tries is the end");
        assert_eq!(r.failed(&forever), None, "and stays there without overflow");
        assert_eq!(
            r.wait(&forever),
            ms(1),
            "a wait all the same where there is no end"
        );
    }
}
