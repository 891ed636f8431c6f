//! How far behind a copy is in time (`lag_ms`): since the oldest changelog write it lacks was
//! first seen at the changelog's end. A copy a few records behind a busy changelog is a few
//! milliseconds stale, not stale since it was last exactly caught up; a copy that has been
//! behind since before it was watched has no known staleness, and meets no time bound.
//!
//! Pure: the caller passes the time.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Changelog ends remembered per copy; older ones are forgotten, and a copy behind all of them
/// has no known staleness.
const KEPT: usize = 512;
/// Ends seen closer together than this are merged into the earlier one: older, so never
/// under-stated.
const MERGE: Duration = Duration::from_millis(20);

#[derive(Debug, Clone, Default)]
pub struct Staleness {
    /// Changelog ends above the copy's position, oldest first, each with when it was first
    /// seen; strictly rising.
    ends: VecDeque<(Instant, i64)>,
    /// The copy has been at or past an end seen before `ends[0]`: the front's time is when it
    /// fell behind.
    known: bool,
    /// The position last observed: one that goes back means the store was rebuilt.
    stored: i64,
}

impl Staleness {
    /// The copy holds everything below `stored`; its changelog ends at `end` now.
    pub fn observe(&mut self, stored: i64, end: i64, now: Instant) {
        if stored < self.stored {
            self.reset();
        }
        self.stored = stored;
        let rises = self.ends.back().is_none_or(|&(_, e)| end > e);
        if end > stored && rises {
            match self.ends.back_mut() {
                Some((at, e)) if now.saturating_duration_since(*at) < MERGE => *e = end,
                _ => self.ends.push_back((now, end)),
            }
        }
        if self.ends.is_empty() && end <= stored {
            self.known = true;
        }
        while self.ends.front().is_some_and(|&(_, e)| e <= stored) {
            self.ends.pop_front();
            self.known = true;
        }
        if self.ends.len() > KEPT {
            self.ends.pop_front();
            self.known = false;
        }
    }

    /// The store was emptied or rebuilt, or its changelog's end is unknown: what was seen
    /// before says nothing now.
    pub fn reset(&mut self) {
        *self = Staleness::default();
    }

    /// Milliseconds since the oldest write the copy lacks was first seen; 0 when it lacks
    /// none; `None` when it has lagged since before it was watched.
    pub fn lag_ms(&self, now: Instant) -> Option<u64> {
        match self.ends.front() {
            None if self.known => Some(0),
            None => None,
            Some(_) if !self.known => None,
            Some(&(at, _)) => Some(now.saturating_duration_since(at).as_millis() as u64),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(base: Instant, n: u64) -> Instant {
        base + Duration::from_millis(n)
    }

    #[test]
    fn a_copy_that_keeps_up_with_a_busy_changelog_is_only_as_stale_as_its_gap() {
        let t = Instant::now();
        let mut s = Staleness::default();
        s.observe(100, 100, t);
        assert_eq!(s.lag_ms(ms(t, 5)), Some(0));
        // Always a few records behind, never exactly caught up.
        for i in 1..=100u64 {
            let now = ms(t, i * 100);
            s.observe(100 + 10 * i as i64 - 5, 100 + 10 * i as i64, now);
        }
        assert_eq!(
            s.lag_ms(ms(t, 10_000)),
            Some(0),
            "its gap was seen just now"
        );
        assert_eq!(s.lag_ms(ms(t, 10_250)), Some(250));
    }

    #[test]
    fn a_copy_that_stops_applying_grows_stale_from_its_first_missing_write() {
        let t = Instant::now();
        let mut s = Staleness::default();
        s.observe(50, 50, t);
        s.observe(50, 60, ms(t, 1_000));
        s.observe(50, 90, ms(t, 2_000));
        assert_eq!(s.lag_ms(ms(t, 3_000)), Some(2_000));
        s.observe(60, 90, ms(t, 3_000));
        assert_eq!(
            s.lag_ms(ms(t, 3_000)),
            Some(1_000),
            "it caught up to the 1 s end"
        );
        s.observe(90, 90, ms(t, 3_500));
        assert_eq!(s.lag_ms(ms(t, 3_500)), Some(0));
    }

    #[test]
    fn a_copy_behind_since_before_it_was_watched_has_no_known_staleness() {
        let t = Instant::now();
        let mut s = Staleness::default();
        s.observe(0, 1_000, t);
        assert_eq!(s.lag_ms(ms(t, 100)), None);
        s.observe(1_000, 1_200, ms(t, 200));
        assert_eq!(s.lag_ms(ms(t, 300)), Some(100), "past the first end seen");
        s.observe(0, 1_200, ms(t, 300));
        assert_eq!(s.lag_ms(ms(t, 300)), None, "rebuilt from nothing");
    }

    #[test]
    fn memory_is_bounded_and_forgetting_is_never_optimistic() {
        let t = Instant::now();
        let mut s = Staleness::default();
        s.observe(0, 0, t);
        for i in 1..=(KEPT as u64 + 10) {
            s.observe(0, i as i64, ms(t, i * 100));
        }
        assert!(s.ends.len() <= KEPT);
        assert_eq!(s.lag_ms(ms(t, 1_000_000)), None);
    }

    #[test]
    fn ends_close_together_merge_into_the_older() {
        let t = Instant::now();
        let mut s = Staleness::default();
        s.observe(0, 0, t);
        s.observe(0, 5, ms(t, 100));
        s.observe(0, 9, ms(t, 110));
        assert_eq!(s.ends.len(), 1);
        s.observe(6, 9, ms(t, 200));
        assert_eq!(s.lag_ms(ms(t, 300)), Some(200), "merged: the older time");
    }
}
