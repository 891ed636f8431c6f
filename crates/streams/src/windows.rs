//! Time windows for [`KGroupedStream::windowed_by`](crate::KGroupedStream::windowed_by), as
//! Kafka Streams' `TimeWindows`: by record timestamp, tumbling or hopping, with a grace
//! period for records that come out of order.

use std::time::Duration;

use baton_runtime::topology::sliding::Sliding;
use baton_runtime::topology::{Sessions, Windows};

/// Windows `[start, start + size)` whose starts are multiples of the advance (the size unless
/// [`TimeWindows::advance_by`] says otherwise). A window takes records until the task's stream
/// time passes its end plus the grace period; later ones are dropped and counted in
/// `baton_late_records_dropped_total`. A window's state is kept for its size plus its grace.
/// Sizes that cannot work (zero, an advance of zero or above the size) are refused when the
/// topology is built.
///
/// ```
/// use std::time::Duration;
/// use baton_streams::TimeWindows;
///
/// let tumbling = TimeWindows::of_size_and_grace(Duration::from_secs(60), Duration::from_secs(10));
/// let hopping = TimeWindows::of_size_with_no_grace(Duration::from_secs(300))
///     .advance_by(Duration::from_secs(60));
/// assert_eq!(hopping.size(), Duration::from_secs(300));
/// # let _ = tumbling;
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeWindows {
    size: Duration,
    advance: Duration,
    grace: Duration,
}

impl TimeWindows {
    /// Tumbling windows of `size` that take no record after they end
    /// (`TimeWindows.ofSizeWithNoGrace`).
    pub fn of_size_with_no_grace(size: Duration) -> TimeWindows {
        TimeWindows::of_size_and_grace(size, Duration::ZERO)
    }

    /// Tumbling windows of `size` that take records up to `grace` after they end
    /// (`TimeWindows.ofSizeAndGrace`).
    pub fn of_size_and_grace(size: Duration, grace: Duration) -> TimeWindows {
        TimeWindows {
            size,
            advance: size,
            grace,
        }
    }

    /// Hopping windows: a new window every `advance` (`TimeWindows.advanceBy`).
    pub fn advance_by(self, advance: Duration) -> TimeWindows {
        TimeWindows { advance, ..self }
    }

    pub fn size(&self) -> Duration {
        self.size
    }

    pub(crate) fn runtime(&self) -> Windows {
        Windows {
            size_ms: millis(self.size),
            advance_ms: millis(self.advance),
            grace_ms: millis(self.grace),
        }
    }
}

/// Sliding windows, as Kafka Streams' `SlidingWindows`: windows `[start, start + time
/// difference]` (both ends included) made where a key's records are, so that every pair of
/// records at most the difference apart shares a window and no window is empty. A window
/// takes records until the task's stream time passes its end plus the grace period; later
/// ones are dropped and counted in `baton_late_records_dropped_total`. A window's state is
/// kept for twice the difference plus the grace. Their tables are keyed as time windows of
/// the difference's size (`TimeWindowed::new(serde, difference)` reads them).
///
/// ```
/// use std::time::Duration;
/// use baton_streams::SlidingWindows;
///
/// let last_minute = SlidingWindows::of_time_difference_and_grace(
///     Duration::from_secs(60),
///     Duration::from_secs(10),
/// );
/// assert_eq!(last_minute.time_difference(), Duration::from_secs(60));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlidingWindows {
    diff: Duration,
    grace: Duration,
}

impl SlidingWindows {
    /// Windows of `diff` that take no record after they end
    /// (`SlidingWindows.ofTimeDifferenceWithNoGrace`).
    pub fn of_time_difference_with_no_grace(diff: Duration) -> SlidingWindows {
        SlidingWindows::of_time_difference_and_grace(diff, Duration::ZERO)
    }

    /// Windows of `diff` that take records up to `grace` after they end
    /// (`SlidingWindows.ofTimeDifferenceAndGrace`).
    pub fn of_time_difference_and_grace(diff: Duration, grace: Duration) -> SlidingWindows {
        SlidingWindows { diff, grace }
    }

    pub fn time_difference(&self) -> Duration {
        self.diff
    }

    pub(crate) fn runtime(&self) -> Sliding {
        Sliding {
            diff_ms: millis(self.diff),
            grace_ms: millis(self.grace),
        }
    }
}

/// Session windows, as Kafka Streams' `SessionWindows`: a key's records closer than the
/// inactivity gap to each other make one session `[first, last]`; a record that bridges two
/// sessions merges them. A session takes records until the task's stream time passes its end
/// plus the gap plus the grace period; later ones are dropped and counted in
/// `baton_late_records_dropped_total`. A gap of zero is refused when the topology is built.
///
/// ```
/// use std::time::Duration;
/// use baton_streams::SessionWindows;
///
/// let visits = SessionWindows::of_inactivity_gap_and_grace(
///     Duration::from_secs(300),
///     Duration::from_secs(30),
/// );
/// assert_eq!(visits.inactivity_gap(), Duration::from_secs(300));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionWindows {
    gap: Duration,
    grace: Duration,
}

impl SessionWindows {
    /// Sessions that end after `gap` without a record and take no record after that
    /// (`SessionWindows.ofInactivityGapWithNoGrace`).
    pub fn of_inactivity_gap_with_no_grace(gap: Duration) -> SessionWindows {
        SessionWindows::of_inactivity_gap_and_grace(gap, Duration::ZERO)
    }

    /// Sessions that end after `gap` without a record and take records up to `grace` after
    /// that (`SessionWindows.ofInactivityGapAndGrace`).
    pub fn of_inactivity_gap_and_grace(gap: Duration, grace: Duration) -> SessionWindows {
        SessionWindows { gap, grace }
    }

    pub fn inactivity_gap(&self) -> Duration {
        self.gap
    }

    pub(crate) fn runtime(&self) -> Sessions {
        Sessions {
            gap_ms: millis(self.gap),
            grace_ms: millis(self.grace),
        }
    }
}

pub(crate) fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}
