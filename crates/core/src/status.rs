//! The words the thread machine and the status board share.

/// A task's role on this instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    Active,
    Standby,
    /// A standby placed to take over an active once caught up (KIP-441).
    Warmup,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Active => "active",
            Role::Standby => "standby",
            Role::Warmup => "warmup",
        }
    }
}

/// Where a held task is in its lifecycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Waiting for another thread of this process to release the task's stores.
    Opening,
    /// An active catching up with its changelog before processing.
    Restoring,
    /// An active processing input.
    Running,
    /// A standby or warm-up following its changelog.
    Tailing,
    /// An active stopped by an input record it could not process
    /// (`on-processing-error=fail`): it keeps its partitions and processes nothing more, so
    /// the record stays unprocessed and the group does not move the failure around.
    Failed,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Opening => "opening",
            Phase::Restoring => "restoring",
            Phase::Running => "running",
            Phase::Tailing => "tailing",
            Phase::Failed => "failed",
        }
    }
}
