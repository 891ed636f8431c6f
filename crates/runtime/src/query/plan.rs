//! Which copy answers a query: a pure function of what this instance holds, where the
//! assignment says the other copies are, and what the caller accepts. The server runs the
//! steps in order until one answers.

use baton_protocol::HostInfo;

use crate::query::routing::Copies;
use crate::status::{Phase, Role};

/// A copy this instance holds, as its status board shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Held {
    pub role: Role,
    pub phase: Phase,
    /// Changelog records behind the end.
    pub lag: u64,
    /// Milliseconds behind the end ([`super::staleness`]); `None` when not known.
    pub lag_ms: Option<u64>,
}

/// The staleness a caller accepts: in changelog records, in milliseconds, or both. With
/// neither, only a running active answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Bound {
    pub offsets: Option<u64>,
    pub ms: Option<u64>,
}

impl Bound {
    pub fn is_none(&self) -> bool {
        self.offsets.is_none() && self.ms.is_none()
    }

    /// The caller's bound, or, when it gave none, copies within `recovery_lag` records.
    fn or_recovery_lag(self, recovery_lag: u64) -> Bound {
        if self.is_none() {
            Bound {
                offsets: Some(recovery_lag),
                ms: None,
            }
        } else {
            self
        }
    }
}

impl Held {
    /// Whether this copy may answer: a running active always; a standby, a warm-up or a
    /// restoring active within `bound` (an unknown `lag_ms` meets no time bound); a copy
    /// still opening, or a failed active, never.
    pub fn serves(&self, bound: Bound) -> bool {
        match self.phase {
            Phase::Running => true,
            Phase::Restoring | Phase::Tailing => {
                !bound.is_none()
                    && bound.offsets.is_none_or(|m| self.lag <= m)
                    && bound.ms.is_none_or(|m| self.lag_ms.is_some_and(|l| l <= m))
            }
            Phase::Opening | Phase::Failed => false,
        }
    }

    /// The lag a caller sees: none for a running active.
    pub fn lag_offsets(&self) -> u64 {
        if self.phase == Phase::Running {
            0
        } else {
            self.lag
        }
    }

    /// The time lag a caller sees: none for a running active.
    pub fn lag_ms(&self) -> Option<u64> {
        if self.phase == Phase::Running {
            Some(0)
        } else {
            self.lag_ms
        }
    }
}

/// What the caller asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Ask {
    /// `max_lag_offsets` and `max_lag_ms`.
    pub bound: Bound,
    /// Forwarded here by another instance: answer or refuse, never forward again.
    pub forwarded: bool,
    /// `at_least=`: only an active knows how far it has processed its input.
    pub read_your_writes: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    Local,
    /// Ask `to`, accepting `bound`.
    Forward {
        to: HostInfo,
        bound: Bound,
    },
}

/// The copies to try, best first. Without a bound, the active answers; while it is moving,
/// restoring or gone, any copy within `recovery_lag` (acceptable.recovery.lag) may.
pub fn plan(
    held: Option<Held>,
    copies: &Copies,
    me: Option<&HostInfo>,
    ask: Ask,
    recovery_lag: u64,
) -> Vec<Step> {
    let local = |bound: Bound| {
        held.is_some_and(|h| {
            if ask.read_your_writes {
                h.role == Role::Active && h.phase == Phase::Running
            } else {
                h.serves(bound)
            }
        })
    };
    if local(ask.bound) {
        return vec![Step::Local];
    }
    if ask.forwarded {
        return Vec::new();
    }
    let elsewhere = |h: &&HostInfo| Some(*h) != me;
    let mut steps: Vec<Step> = copies
        .active
        .iter()
        .filter(elsewhere)
        .map(|a| Step::Forward {
            to: a.clone(),
            bound: ask.bound,
        })
        .collect();
    if ask.read_your_writes {
        return steps;
    }
    let fallback = ask.bound.or_recovery_lag(recovery_lag);
    if local(fallback) {
        steps.push(Step::Local);
    }
    steps.extend(
        copies
            .standbys
            .iter()
            .filter(elsewhere)
            .map(|s| Step::Forward {
                to: s.clone(),
                bound: fallback,
            }),
    );
    steps
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(port: i32) -> HostInfo {
        HostInfo {
            host: "h".into(),
            port,
        }
    }

    fn held(role: Role, phase: Phase, lag: u64) -> Option<Held> {
        Some(Held {
            role,
            phase,
            lag,
            lag_ms: Some(lag * 10),
        })
    }

    fn copies() -> Copies {
        Copies {
            active: Some(host(1)),
            standbys: vec![host(2), host(3)],
        }
    }

    fn offsets(n: u64) -> Bound {
        Bound {
            offsets: Some(n),
            ms: None,
        }
    }

    fn fwd(port: i32, bound: Bound) -> Step {
        Step::Forward {
            to: host(port),
            bound,
        }
    }

    #[test]
    fn a_running_active_answers_itself() {
        let me = host(1);
        let steps = plan(
            held(Role::Active, Phase::Running, 7),
            &copies(),
            Some(&me),
            Ask::default(),
            100,
        );
        assert_eq!(steps, vec![Step::Local]);
    }

    #[test]
    fn without_a_bound_the_active_first_then_copies_within_the_recovery_lag() {
        let me = host(2);
        let steps = plan(
            held(Role::Standby, Phase::Tailing, 50),
            &copies(),
            Some(&me),
            Ask::default(),
            100,
        );
        assert_eq!(
            steps,
            vec![fwd(1, Bound::default()), Step::Local, fwd(3, offsets(100))]
        );
        // Too far behind: not this copy.
        let steps = plan(
            held(Role::Standby, Phase::Tailing, 500),
            &copies(),
            Some(&me),
            Ask::default(),
            100,
        );
        assert_eq!(steps, vec![fwd(1, Bound::default()), fwd(3, offsets(100))]);
    }

    #[test]
    fn a_copy_within_the_callers_bound_answers_without_a_hop() {
        let me = host(3);
        let ask = Ask {
            bound: offsets(10),
            ..Ask::default()
        };
        let steps = plan(
            held(Role::Warmup, Phase::Tailing, 10),
            &copies(),
            Some(&me),
            ask,
            100,
        );
        assert_eq!(steps, vec![Step::Local]);
        let steps = plan(
            held(Role::Warmup, Phase::Tailing, 11),
            &copies(),
            Some(&me),
            ask,
            100,
        );
        assert_eq!(steps, vec![fwd(1, offsets(10)), fwd(2, offsets(10))]);
    }

    #[test]
    fn a_forwarded_query_is_answered_here_or_refused() {
        let me = host(1);
        let ask = Ask {
            forwarded: true,
            ..Ask::default()
        };
        let restoring = held(Role::Active, Phase::Restoring, 3);
        assert_eq!(plan(restoring, &copies(), Some(&me), ask, 100), vec![]);
        let ask = Ask {
            forwarded: true,
            bound: offsets(5),
            ..Ask::default()
        };
        assert_eq!(
            plan(restoring, &copies(), Some(&me), ask, 100),
            vec![Step::Local]
        );
    }

    #[test]
    fn read_your_writes_goes_to_the_active_only() {
        let ask = Ask {
            read_your_writes: true,
            bound: offsets(1000),
            ..Ask::default()
        };
        let me = host(2);
        let steps = plan(
            held(Role::Standby, Phase::Tailing, 0),
            &copies(),
            Some(&me),
            ask,
            100,
        );
        assert_eq!(steps, vec![fwd(1, offsets(1000))]);
    }

    #[test]
    fn copies_opening_or_failed_never_answer() {
        for phase in [Phase::Opening, Phase::Failed] {
            let h = Held {
                role: Role::Active,
                phase,
                lag: 0,
                lag_ms: Some(0),
            };
            assert!(!h.serves(offsets(u64::MAX)));
        }
    }

    #[test]
    fn a_time_bound_is_met_only_by_a_copy_whose_staleness_is_known_and_within_it() {
        let me = host(2);
        let ask = Ask {
            bound: Bound {
                offsets: None,
                ms: Some(500),
            },
            ..Ask::default()
        };
        // lag 40 records, 400 ms.
        let steps = plan(
            held(Role::Standby, Phase::Tailing, 40),
            &copies(),
            Some(&me),
            ask,
            100,
        );
        assert_eq!(steps, vec![Step::Local]);
        let unknown = Some(Held {
            role: Role::Standby,
            phase: Phase::Tailing,
            lag: 0,
            lag_ms: None,
        });
        let steps = plan(unknown, &copies(), Some(&me), ask, 100);
        assert_eq!(steps, vec![fwd(1, ask.bound), fwd(3, ask.bound)]);
        // Both bounds: both must hold.
        let both = Bound {
            offsets: Some(10),
            ms: Some(500),
        };
        assert!(!held(Role::Standby, Phase::Tailing, 40)
            .unwrap()
            .serves(both));
        assert!(held(Role::Standby, Phase::Tailing, 10)
            .unwrap()
            .serves(both));
    }

    #[test]
    fn with_no_copy_known_nothing_is_tried() {
        let steps = plan(None, &Copies::default(), None, Ask::default(), 100);
        assert_eq!(steps, vec![]);
    }
}
