//! Large response buffers, read into again once nothing refers to them.
//!
//! A record's key and value are slices of the fetch answer they came in (see [`crate::batch`]),
//! so a restore keeps its answers alive until the store has loaded them: tens of megabytes,
//! a new 4 MiB buffer every few milliseconds. The allocator hands a freed buffer of that size
//! back to the system, so each new one cost a page fault per 4 KiB on the fetching thread
//! (300 MB of 1 KiB records: about 75,000 faults, a third of the client's CPU; measured in
//! `restore_throughput`, docs/BENCHMARKS.md). Here a buffer whose slices are all gone is read
//! into again.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};

/// Answers smaller than this get a buffer of their own: they are freed and reused cheaply.
pub const POOLED_FROM: usize = 1 << 20;
/// Buffers tracked at most, in use or free: with 4 MiB fetches, 128 MiB, about what a restore
/// holds in three bulk loads' worth of answers (two loading, one gathering).
const TRACKED: usize = 32;
/// Free buffers are given back once no large answer has come for this long.
const IDLE: Duration = Duration::from_secs(1);

#[derive(Debug, Default)]
pub struct Buffers {
    /// Every pooled buffer handed out and not yet given up, oldest first: this handle keeps it
    /// alive; it is free when this is the only handle left.
    tracked: VecDeque<Bytes>,
    last_large: Option<Instant>,
}

impl Buffers {
    /// An empty buffer with room for `len` bytes: a free pooled one if there is one.
    pub fn take(&mut self, len: usize, now: Instant) -> BytesMut {
        if len < POOLED_FROM {
            if self
                .last_large
                .is_some_and(|t| now.duration_since(t) >= IDLE)
            {
                // The large answers have stopped (a restore caught up): free what is free.
                self.tracked.retain(|b| !b.is_unique());
                self.last_large = None;
            }
            return BytesMut::with_capacity(len);
        }
        self.last_large = Some(now);
        let free = self
            .tracked
            .iter()
            .position(|b| b.is_unique() && room(b.len()) >= len);
        if let Some(at) = free {
            let reused = self.tracked.remove(at).expect("found above");
            if let Ok(mut buf) = reused.try_into_mut() {
                buf.clear();
                if buf.capacity() >= len {
                    return buf;
                }
            }
        }
        BytesMut::with_capacity(room(len))
    }

    /// `frame`, just read into a buffer from [`Buffers::take`], whole: kept track of, to be
    /// read into again once the caller's slices of it are gone.
    pub fn track(&mut self, frame: &Bytes) {
        if frame.len() < POOLED_FROM {
            return;
        }
        if self.tracked.len() == TRACKED {
            // Its slices keep it alive as long as they need it.
            self.tracked.pop_front();
        }
        self.tracked.push_back(frame.clone());
    }

    #[cfg(test)]
    fn tracked(&self) -> usize {
        self.tracked.len()
    }
}

/// The room a pooled buffer is given for `len` bytes, and so the least a buffer that held
/// `len` bytes has: answers of one fetch size differ by a batch or so, and one buffer serves
/// them all.
fn room(len: usize) -> usize {
    len.next_multiple_of(POOLED_FROM)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filled(buffers: &mut Buffers, len: usize, now: Instant) -> Bytes {
        let mut buf = buffers.take(len, now);
        buf.resize(len, 7);
        let frame = buf.freeze();
        buffers.track(&frame);
        frame
    }

    #[test]
    fn a_buffer_is_read_into_again_only_once_its_slices_are_gone() {
        let (mut buffers, now) = (Buffers::default(), Instant::now());
        let frame = filled(&mut buffers, POOLED_FROM, now);
        let at = frame.as_ptr();
        let record = frame.slice(10..20);
        drop(frame);
        let other = buffers.take(POOLED_FROM, now);
        assert_ne!(other.as_ptr(), at, "a slice still refers to it");
        drop(record);
        let again = buffers.take(POOLED_FROM, now);
        assert_eq!(again.as_ptr(), at, "free: read into again");
        assert!(again.is_empty() && again.capacity() >= POOLED_FROM);
        assert_eq!(
            buffers.tracked(),
            0,
            "handed out again, tracked again once read"
        );
    }

    #[test]
    fn small_answers_are_not_pooled_and_free_buffers_go_once_large_ones_stop() {
        let (mut buffers, now) = (Buffers::default(), Instant::now());
        drop(filled(&mut buffers, 100, now));
        assert_eq!(buffers.tracked(), 0);
        let kept = filled(&mut buffers, POOLED_FROM, now);
        drop(filled(&mut buffers, POOLED_FROM + 1, now));
        assert_eq!(buffers.tracked(), 2);
        drop(buffers.take(100, now + IDLE / 2));
        assert_eq!(buffers.tracked(), 2, "not idle yet");
        drop(buffers.take(100, now + IDLE));
        assert_eq!(
            buffers.tracked(),
            1,
            "the free one is given back, the used one kept"
        );
        drop(kept);
    }

    #[test]
    fn a_buffer_too_small_for_the_answer_is_not_used_and_tracking_is_bounded() {
        let (mut buffers, now) = (Buffers::default(), Instant::now());
        drop(filled(&mut buffers, POOLED_FROM + 5, now));
        let big = buffers.take(2 * POOLED_FROM + 1, now);
        assert!(big.capacity() > 2 * POOLED_FROM);
        assert_eq!(
            buffers.tracked(),
            1,
            "too small: it stays for a smaller answer"
        );
        let close = buffers.take(2 * POOLED_FROM, now);
        assert_eq!(
            buffers.tracked(),
            0,
            "an answer a little larger than the last fits"
        );
        assert!(close.capacity() >= 2 * POOLED_FROM);
        let held: Vec<Bytes> = (0..TRACKED + 5)
            .map(|_| filled(&mut buffers, POOLED_FROM, now))
            .collect();
        assert_eq!(buffers.tracked(), TRACKED);
        drop(held);
    }
}
