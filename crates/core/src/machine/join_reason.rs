//! Why a thread joins the group again: one type for the machine, the membership driver, the
//! simulator and the fuzzer, whose text is the log field and the `reason` label of the
//! `baton_rebalance_*` metrics.

use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum JoinReason {
    Startup,
    /// A heartbeat answered "rebalancing": another member started a round.
    GroupRebalancing,
    DrainRequested,
    DrainCancelled,
    /// Revoked actives are committed and let go: the round that hands them over.
    ReleasedRevokedActives,
    /// The leader's probing rebalance interval passed.
    ProbingRebalance,
    /// The leader asked for another round at a version every member speaks.
    VersionProbing,
    /// A warm-up caught up (rejoin mode `eager`).
    WarmupCaughtUp,
    /// Every warm-up of this thread caught up (rejoin mode `stable`).
    EveryWarmupCaughtUp,
    /// The coordinator said this member is fenced.
    Fenced,
    /// No heartbeat answer within the session timeout.
    SessionLapsed,
    /// The assignment left out partitions this member claimed, and their owner has let go.
    ClaimsNotGivenBack,
}

impl JoinReason {
    /// The text in logs and metrics labels.
    pub fn name(self) -> &'static str {
        match self {
            JoinReason::Startup => "startup",
            JoinReason::GroupRebalancing => "the group is rebalancing",
            JoinReason::DrainRequested => "drain requested",
            JoinReason::DrainCancelled => "drain cancelled",
            JoinReason::ReleasedRevokedActives => "released revoked actives",
            JoinReason::ProbingRebalance => "probing rebalance",
            JoinReason::VersionProbing => "version probing",
            JoinReason::WarmupCaughtUp => "a warm-up caught up",
            JoinReason::EveryWarmupCaughtUp => "every warm-up caught up",
            JoinReason::Fenced => "the coordinator fenced this member",
            JoinReason::SessionLapsed => "no heartbeat answer within the session timeout",
            JoinReason::ClaimsNotGivenBack => "claimed partitions were not all given back",
        }
    }

    /// The member lost its membership (fenced, or its session lapsed): it joins as new.
    pub fn lost_membership(self) -> bool {
        matches!(self, JoinReason::Fenced | JoinReason::SessionLapsed)
    }
}

impl fmt::Display for JoinReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
