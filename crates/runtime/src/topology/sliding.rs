//! Kafka Streams' sliding windows (`SlidingWindows`, `KStreamSlidingWindowAggregate`): windows
//! of a fixed time difference `[start, start + diff]`, both ends included, made where records
//! are. A record updates every window of its key that holds it, makes its own left window
//! (`[ts - diff, ts]`, with what the window before held) and, when later records exist, its
//! right window (`[ts + 1, ts + 1 + diff]`), and the right window of the record before it.
//! Windows are kept in a window store (Kafka's key layout, start as the window's time) with
//! timestamped values: the newest record in each.
//!
//! This follows Kafka's `processReverse` (the path its stores take) step for step, so windows
//! are made, updated and sent on in the same order.

use bytes::Bytes;

use super::{event_time, read_timestamped, AggregateFn, Output, Stores, StreamRecord};
use crate::layout::{timestamped, window_store_key, window_store_start, windowed_key};
use crate::store::StoreError;

/// Sliding windows: a time difference and a grace period, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sliding {
    pub diff_ms: i64,
    pub grace_ms: i64,
}

impl Sliding {
    /// How long a window's state is kept: Kafka's default retention for sliding windows,
    /// twice the time difference plus the grace.
    pub fn retention_ms(&self) -> i64 {
        self.diff_ms.saturating_mul(2).saturating_add(self.grace_ms)
    }
}

/// A window of the record's key found in the store: its start, aggregate and newest
/// timestamp.
struct Found {
    start: i64,
    agg: Vec<u8>,
    ts: i64,
}

/// What one record's run needs.
struct Run<'a> {
    store: &'a str,
    w: Sliding,
    f: &'a AggregateFn,
    r: &'a StreamRecord,
    ts: i64,
    close: i64,
}

/// [`super::Step::SlidingAggregate`] for one record.
pub(super) fn sliding_aggregate(
    (store, w, f): (&str, Sliding, &AggregateFn),
    r: &StreamRecord,
    stream_time: i64,
    stores: &mut dyn Stores,
    out: &mut Output,
    next: &mut Vec<StreamRecord>,
) -> Result<(), StoreError> {
    let ts = event_time(r, "sliding windows");
    let close = stream_time.saturating_sub(w.grace_ms);
    if ts.saturating_add(w.diff_ms) < close {
        out.late += 1;
        return Ok(());
    }
    let run = Run {
        store,
        w,
        f,
        r,
        ts,
        close,
    };
    if ts < w.diff_ms {
        return process_early(&run, stores, out, next);
    }
    process(&run, stores, out, next)
}

/// The key's windows starting in `from..=to`, latest start first.
fn windows_of(
    run: &Run<'_>,
    stores: &mut dyn Stores,
    from: i64,
    to: i64,
) -> Result<Vec<Found>, StoreError> {
    let key = &run.r.key;
    let entries = stores.range(
        run.store,
        &window_store_key(key, from),
        &window_store_key(key, to),
    )?;
    let mut found: Vec<Found> = entries
        .into_iter()
        .filter_map(|(k, v)| {
            let start = window_store_start(key, &k)?;
            let (ts, agg) = read_timestamped(run.store, &v);
            Some(Found {
                start,
                agg: agg.to_vec(),
                ts,
            })
        })
        .collect();
    found.reverse();
    Ok(found)
}

/// Kafka's `processReverse`: the windows from twice the difference before the record to its
/// right window's start, latest first.
fn process(
    run: &Run<'_>,
    stores: &mut dyn Stores,
    out: &mut Output,
    next: &mut Vec<StreamRecord>,
) -> Result<(), StoreError> {
    let (ts, diff) = (run.ts, run.w.diff_ms);
    let mut starts = Vec::new();
    let (mut left_agg, mut right_agg): (Option<Found>, Option<(Vec<u8>, i64)>) = (None, None);
    let (mut left_made, mut right_made) = (false, false);
    let mut previous: Option<i64> = None;
    let from = ts.saturating_sub(diff.saturating_mul(2)).max(0);
    for win in windows_of(run, stores, from, ts + 1)? {
        starts.push(win.start);
        let end = win.start + diff;
        if win.start == ts + 1 {
            right_made = true;
        } else if end > ts {
            if right_agg.is_none() {
                right_agg = Some((win.agg.clone(), win.ts));
            }
            update(run, win.start, Some((&win.agg, win.ts)), stores, out, next)?;
        } else if end == ts {
            left_made = true;
            update(run, win.start, Some((&win.agg, win.ts)), stores, out, next)?;
            if win.ts < ts {
                previous = Some(win.ts);
            } else {
                return Ok(());
            }
        } else {
            previous = Some(win.ts);
            left_agg = Some(win);
            break;
        }
    }
    let made = Made {
        starts,
        left_made,
        right_made,
        previous,
    };
    create_windows(run, made, left_agg, right_agg, stores, out, next)
}

/// What the scan of a record's windows found.
struct Made {
    starts: Vec<i64>,
    left_made: bool,
    right_made: bool,
    /// The newest timestamp before the record's among the windows found.
    previous: Option<i64>,
}

/// Kafka's `createWindows`: the previous record's right window, the record's left window,
/// and its right window, each where missing and not empty.
fn create_windows(
    run: &Run<'_>,
    made: Made,
    left_agg: Option<Found>,
    right_agg: Option<(Vec<u8>, i64)>,
    stores: &mut dyn Stores,
    out: &mut Output,
    next: &mut Vec<StreamRecord>,
) -> Result<(), StoreError> {
    let (ts, diff) = (run.ts, run.w.diff_ms);
    if let Some(prev) = made.previous {
        let start = prev + 1;
        if !made.starts.contains(&start) && start + diff >= ts {
            update(run, start, None, stores, out, next)?;
        }
    }
    if !made.left_made {
        // The left window holds what the window before held, if the previous record is in it.
        let with = match (made.previous, &left_agg) {
            (Some(prev), Some(l)) if ts - diff <= prev => Some((l.agg.as_slice(), ts)),
            _ => None,
        };
        update(run, ts - diff, with, stores, out, next)?;
    }
    match right_agg {
        Some((agg, agg_ts)) if !made.right_made && agg_ts > ts => {
            right_window(run, agg, agg_ts, stores, next);
        }
        _ => {}
    }
    Ok(())
}

/// Kafka's `processEarly`: a record before the first difference goes into `[0, diff]` with
/// the others of its key there, and its right windows are made as in [`process`].
fn process_early(
    run: &Run<'_>,
    stores: &mut dyn Stores,
    out: &mut Output,
    next: &mut Vec<StreamRecord>,
) -> Result<(), StoreError> {
    let ts = run.ts;
    let mut combined: Option<Found> = None;
    let mut right_agg: Option<(Vec<u8>, i64)> = None;
    let mut right_made = false;
    let mut starts = Vec::new();
    let mut previous = None;
    let mut found = windows_of(run, stores, 0, ts + 1)?;
    // Kafka's early path scans forward.
    found.reverse();
    for win in found {
        starts.push(win.start);
        if win.start == 0 {
            if win.ts < ts {
                previous = Some(win.ts);
            }
            combined = Some(win);
        } else if win.start <= ts {
            right_agg = Some((win.agg.clone(), win.ts));
            update(run, win.start, Some((&win.agg, win.ts)), stores, out, next)?;
        } else {
            right_made = true;
        }
    }
    if right_agg.is_none() {
        if let Some(c) = combined.as_ref().filter(|c| c.ts > ts) {
            right_agg = Some((c.agg.clone(), c.ts));
        }
    }
    match right_agg {
        Some((agg, agg_ts)) if !right_made && agg_ts > ts => {
            right_window(run, agg, agg_ts, stores, next)
        }
        _ => {}
    }
    if let Some(prev) = previous {
        if !starts.contains(&(prev + 1)) {
            update(run, prev + 1, None, stores, out, next)?;
        }
    }
    match &combined {
        None => update(run, 0, None, stores, out, next),
        Some(c) => update(run, 0, Some((&c.agg, c.ts)), stores, out, next),
    }
}

/// Kafka's `createCurrentRecordRightWindow`: `[ts + 1, ts + 1 + diff]` holding what the
/// window after the record held (the record not in it), sent on as it is.
fn right_window(
    run: &Run<'_>,
    agg: Vec<u8>,
    agg_ts: i64,
    stores: &mut dyn Stores,
    next: &mut Vec<StreamRecord>,
) {
    let start = run.ts + 1;
    let key = &run.r.key;
    stores.put(
        run.store,
        &window_store_key(key, start),
        timestamped(agg_ts, &agg),
    );
    next.push(StreamRecord::new(windowed_key(key, start), agg, agg_ts));
}

/// Kafka's `updateWindowAndForward`: the window starting at `start` takes the record (from
/// `current`, else from the initial aggregate) unless it has closed (then counted late).
fn update(
    run: &Run<'_>,
    start: i64,
    current: Option<(&[u8], i64)>,
    stores: &mut dyn Stores,
    out: &mut Output,
    next: &mut Vec<StreamRecord>,
) -> Result<(), StoreError> {
    if start + run.w.diff_ms < run.close {
        out.late += 1;
        return Ok(());
    }
    let r = run.r;
    let value = r.value.as_deref().unwrap_or_default();
    let agg = (run.f)(current.map(|(a, _)| a), &r.key, value);
    let ts = current.map_or(run.ts, |(_, t)| t.max(run.ts));
    let store_key = window_store_key(&r.key, start);
    let windowed = Bytes::from(windowed_key(&r.key, start));
    match agg {
        Some(agg) => {
            stores.put(run.store, &store_key, timestamped(ts, &agg));
            next.push(StreamRecord::new(windowed, agg, ts));
        }
        None => {
            stores.delete(run.store, &store_key);
            next.push(StreamRecord::delete(windowed, ts));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    //! Kafka's `KStreamSlidingWindowAggregateTest` cases with its inputs and expected
    //! outputs: per window start, the set of (aggregate, timestamp) updates sent on.
    use std::collections::{BTreeMap, BTreeSet};
    use std::sync::Arc;

    use super::*;
    use crate::topology::MemStores;

    /// Kafka's `MockInitializer.STRING_INIT` and `MockAggregator.TOSTRING_ADDER`.
    fn adder() -> AggregateFn {
        Arc::new(|current: Option<&[u8]>, _: &[u8], v: &[u8]| {
            let mut agg = current.map_or(b"0".to_vec(), <[u8]>::to_vec);
            agg.push(b'+');
            agg.extend_from_slice(v);
            Some(agg)
        })
    }

    type Updates = BTreeMap<i64, BTreeSet<(String, i64)>>;

    fn run(w: Sliding, records: &[(&str, i64)]) -> (Updates, u64) {
        let (mut stores, mut out, f) = (MemStores::default(), Output::default(), adder());
        let mut next = Vec::new();
        let mut stream_time = i64::MIN;
        for (v, ts) in records {
            stream_time = stream_time.max(*ts);
            let r = StreamRecord::new(b"A".to_vec(), v.as_bytes().to_vec(), *ts);
            sliding_aggregate(
                ("s", w, &f),
                &r,
                stream_time,
                &mut stores,
                &mut out,
                &mut next,
            )
            .unwrap();
        }
        let mut got = Updates::new();
        for r in next {
            let start = i64::from_be_bytes(r.key[1..9].try_into().unwrap());
            let agg = String::from_utf8(r.value.unwrap().to_vec()).unwrap();
            got.entry(start).or_default().insert((agg, r.timestamp));
        }
        (got, out.late)
    }

    fn want(rows: &[(i64, &[(&str, i64)])]) -> Updates {
        rows.iter()
            .map(|(start, set)| {
                let set = set.iter().map(|(a, t)| ((*a).to_owned(), *t)).collect();
                (*start, set)
            })
            .collect()
    }

    #[test]
    fn aggregate_small_input_is_kafkas() {
        let w = Sliding {
            diff_ms: 10,
            grace_ms: 5,
        };
        let input = [
            ("1", 10),
            ("2", 10),
            ("3", 14),
            ("4", 15),
            ("5", 20),
            ("6", 22),
            ("7", 30),
        ];
        let (got, late) = run(w, &input);
        let expected = want(&[
            (0, &[("0+1", 10), ("0+1+2", 10)]),
            (4, &[("0+1+2+3", 14)]),
            (5, &[("0+1+2+3+4", 15)]),
            (10, &[("0+1+2+3+4+5", 20)]),
            (11, &[("0+3", 14), ("0+3+4", 15), ("0+3+4+5", 20)]),
            (12, &[("0+3+4+5+6", 22)]),
            (15, &[("0+4", 15), ("0+4+5", 20), ("0+4+5+6", 22)]),
            (16, &[("0+5", 20), ("0+5+6", 22)]),
            (20, &[("0+5+6+7", 30)]),
            (21, &[("0+6", 22), ("0+6+7", 30)]),
            (23, &[("0+7", 30)]),
        ]);
        assert_eq!(got, expected);
        assert_eq!(late, 0);
    }

    /// `shouldLogAndMeterWhenSkippingExpiredWindowByGrace`: 7 drops, three updates.
    #[test]
    fn windows_past_the_grace_are_dropped_and_counted_as_kafkas() {
        let w = Sliding {
            diff_ms: 10,
            grace_ms: 90,
        };
        let input = [
            ("100", 200),
            ("0", 100),
            ("1", 101),
            ("2", 102),
            ("3", 103),
            ("4", 104),
            ("5", 105),
            ("6", 15),
            ("101", 300),
            ("102", 400),
        ];
        let (got, late) = run(w, &input);
        let expected = want(&[
            (190, &[("0+100", 200)]),
            (290, &[("0+101", 300)]),
            (390, &[("0+102", 400)]),
        ]);
        assert_eq!((got, late), (expected, 7));
    }

    #[test]
    fn early_records_are_kafkas() {
        let w = Sliding {
            diff_ms: 50,
            grace_ms: 0,
        };
        let input = [
            ("1", 0),
            ("2", 5),
            ("3", 6),
            ("4", 3),
            ("5", 13),
            ("6", 10),
            ("7", 70),
        ];
        let (got, _) = run(w, &input);
        let expected = want(&[
            (
                0,
                &[
                    ("0+1", 0),
                    ("0+1+2", 5),
                    ("0+1+2+3", 6),
                    ("0+1+2+3+4", 6),
                    ("0+1+2+3+4+5", 13),
                    ("0+1+2+3+4+5+6", 13),
                ],
            ),
            (
                1,
                &[
                    ("0+2", 5),
                    ("0+2+3", 6),
                    ("0+2+3+4", 6),
                    ("0+2+3+4+5", 13),
                    ("0+2+3+4+5+6", 13),
                ],
            ),
            (4, &[("0+2+3", 6), ("0+2+3+5", 13), ("0+2+3+5+6", 13)]),
            (6, &[("0+3", 6), ("0+3+5", 13), ("0+3+5+6", 13)]),
            (7, &[("0+5", 13), ("0+5+6", 13)]),
            (11, &[("0+5", 13)]),
            (20, &[("0+7", 70)]),
        ]);
        assert_eq!(got, expected);
    }
}
