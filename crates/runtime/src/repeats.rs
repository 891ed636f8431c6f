//! Repeated failures, logged once: one line when a failure starts (what, where, the error), a
//! summary at most every [`SUMMARY_EVERY`] while it repeats (how many times, the last error),
//! one line when it ends. A broker outage or a deleted topic fails the same fetch or produce
//! many times a second; logging each one buried the one line that said what was wrong (15,065
//! `no leader` warnings in 3 s for a recreated topic).
//!
//! Pure: the caller passes the time, so the rule is tested without a clock.

use std::collections::BTreeMap;
use std::time::Duration;

/// The least time between two lines about one failure that goes on.
pub const SUMMARY_EVERY: Duration = Duration::from_secs(10);

/// What to log about one failure, if anything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Line {
    /// It failed for the first time (or again after it had ended).
    Started { error: String },
    /// It went on failing: `failures` times in all since it started, `since` ago.
    Repeating {
        failures: u64,
        since: Duration,
        last_error: String,
    },
    /// It succeeded after `failures` failures over `lasted`.
    Ended { failures: u64, lasted: Duration },
}

#[derive(Debug)]
struct Streak {
    started: Duration,
    logged: Duration,
    failures: u64,
}

/// Failures under way, each named by what failed and where (e.g. `fetch events-3`).
#[derive(Debug, Default)]
pub struct Repeats {
    open: BTreeMap<String, Streak>,
}

impl Repeats {
    /// `subject` failed with `error` at `now`.
    pub fn failed(&mut self, subject: &str, error: &str, now: Duration) -> Option<Line> {
        match self.open.get_mut(subject) {
            None => {
                self.open.insert(
                    subject.to_owned(),
                    Streak {
                        started: now,
                        logged: now,
                        failures: 1,
                    },
                );
                Some(Line::Started {
                    error: error.to_owned(),
                })
            }
            Some(s) => {
                s.failures += 1;
                if now.saturating_sub(s.logged) < SUMMARY_EVERY {
                    return None;
                }
                s.logged = now;
                Some(Line::Repeating {
                    failures: s.failures,
                    since: now.saturating_sub(s.started),
                    last_error: error.to_owned(),
                })
            }
        }
    }

    /// `subject` succeeded at `now`: a failure under way ends.
    pub fn succeeded(&mut self, subject: &str, now: Duration) -> Option<Line> {
        // Most successes follow no failure: no allocation, one lookup in an empty map.
        let s = self.open.remove(subject)?;
        Some(Line::Ended {
            failures: s.failures,
            lasted: now.saturating_sub(s.started),
        })
    }

    /// Whether any failure is under way.
    pub fn is_empty(&self) -> bool {
        self.open.is_empty()
    }
}

/// Logs `line` about `subject` at warn level (its end at info).
pub fn log(subject: &str, line: Line) {
    match line {
        Line::Started { error } => tracing::warn!(
            subject,
            error = %error,
            summary_every_s = SUMMARY_EVERY.as_secs(),
            "failed; retrying with backoff (a summary while it goes on, a line when it ends)"
        ),
        Line::Repeating {
            failures,
            since,
            last_error,
        } => tracing::warn!(
            subject,
            failures,
            since_s = since.as_secs(),
            last_error = %last_error,
            "still failing"
        ),
        Line::Ended { failures, lasted } => tracing::info!(
            subject,
            failures,
            lasted_ms = lasted.as_millis() as u64,
            "recovered"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn a_failure_is_logged_when_it_starts_summed_up_while_it_goes_on_and_when_it_ends() {
        let mut r = Repeats::default();
        let started = r.failed("fetch in-0", "no leader", ms(0));
        assert_eq!(
            started,
            Some(Line::Started {
                error: "no leader".into()
            })
        );
        // A thousand failures within the first ten seconds: nothing more.
        let within: Vec<_> = (1..1000)
            .filter_map(|i| r.failed("fetch in-0", "no leader", ms(i * 9)))
            .collect();
        assert!(within.is_empty(), "{within:?}");
        assert_eq!(
            r.failed("fetch in-0", "unknown topic", ms(10_000)),
            Some(Line::Repeating {
                failures: 1001,
                since: ms(10_000),
                last_error: "unknown topic".into()
            })
        );
        assert_eq!(r.failed("fetch in-0", "unknown topic", ms(19_999)), None);
        assert!(r
            .failed("fetch in-0", "unknown topic", ms(20_000))
            .is_some());
        assert_eq!(
            r.succeeded("fetch in-0", ms(21_000)),
            Some(Line::Ended {
                failures: 1003,
                lasted: ms(21_000)
            })
        );
        assert_eq!(r.succeeded("fetch in-0", ms(21_001)), None, "ended once");
        assert!(r.is_empty());
        assert!(
            matches!(
                r.failed("fetch in-0", "no leader", ms(22_000)),
                Some(Line::Started { .. })
            ),
            "a new failure after the end starts again"
        );
    }

    #[test]
    fn each_subject_has_its_own_streak() {
        let mut r = Repeats::default();
        assert!(r.failed("fetch in-0", "x", ms(0)).is_some());
        assert!(r.failed("fetch in-1", "x", ms(1)).is_some());
        assert_eq!(r.failed("fetch in-0", "x", ms(2)), None);
        assert!(r.succeeded("fetch in-1", ms(3)).is_some());
        assert_eq!(r.failed("fetch in-0", "x", ms(4)), None, "still under way");
    }
}
