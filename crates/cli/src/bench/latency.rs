//! Record latency and output gaps of the count-per-key application, read back from its
//! topics: an input event's latency is the time from its write to the first output of its
//! key whose count includes it.

use std::collections::BTreeMap;

use baton_kafka::records::Record;

use crate::demo::stage::{longest_silence, text};

/// What one window of one run measured.
#[derive(Debug, Clone, PartialEq)]
pub struct Measured {
    /// Input events written within the window.
    pub records: usize,
    /// Of those, events with no output counting them (lost, or not processed at the end).
    pub unanswered: usize,
    pub p50_ms: i64,
    pub p99_ms: i64,
    pub max_ms: i64,
    /// The longest stretch in the window in which one partition wrote no output (the
    /// window's edges count as output), in milliseconds.
    pub longest_gap_ms: i64,
}

/// Latencies and gaps of `partitions`' events written in `[from_ms, to_ms]`. `input` and
/// `output` hold each partition's records from the topics' start, in offset order.
pub fn measure(
    input: &BTreeMap<i32, Vec<Record>>,
    output: &BTreeMap<i32, Vec<Record>>,
    partitions: &[i32],
    from_ms: i64,
    to_ms: i64,
) -> Measured {
    let mut latencies = Vec::new();
    let mut unanswered = 0;
    let mut longest_gap_ms = 0;
    let none = Vec::new();
    for p in partitions {
        let outs = output.get(p).unwrap_or(&none);
        // Key -> (count, when written), counts rising as the output goes on.
        let mut counted: BTreeMap<String, Vec<(i64, i64)>> = BTreeMap::new();
        for r in outs {
            let Ok(count) = text(&r.value).parse::<i64>() else {
                continue;
            };
            let seen = counted.entry(text(&r.key)).or_default();
            if seen.last().is_none_or(|&(c, _)| count > c) {
                seen.push((count, r.timestamp));
            }
        }
        let mut occurrences: BTreeMap<String, i64> = BTreeMap::new();
        for r in input.get(p).unwrap_or(&none) {
            let key = text(&r.key);
            let n = occurrences.entry(key.clone()).or_insert(0);
            *n += 1;
            if r.timestamp < from_ms || r.timestamp > to_ms {
                continue;
            }
            let outs = counted.get(&key).map(Vec::as_slice).unwrap_or(&[]);
            let first = outs.partition_point(|&(c, _)| c < *n);
            match outs.get(first) {
                Some(&(_, at)) => latencies.push((at - r.timestamp).max(0)),
                None => unanswered += 1,
            }
        }
        longest_gap_ms = longest_gap_ms.max(longest_silence(outs, from_ms, to_ms).0);
    }
    latencies.sort_unstable();
    let at = |q: f64| -> i64 {
        if latencies.is_empty() {
            return 0;
        }
        let i = ((latencies.len() as f64 * q).ceil() as usize).clamp(1, latencies.len()) - 1;
        latencies[i]
    };
    Measured {
        records: latencies.len() + unanswered,
        unanswered,
        p50_ms: at(0.50),
        p99_ms: at(0.99),
        max_ms: latencies.last().copied().unwrap_or(0),
        longest_gap_ms,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn rec(key: &str, value: &str, ts: i64) -> Record {
        Record {
            offset: 0,
            timestamp: ts,
            key: Some(Bytes::from(key.to_owned())),
            value: Some(Bytes::from(value.to_owned())),
        }
    }

    #[test]
    fn an_event_waits_for_the_first_output_that_counts_it() {
        let input = BTreeMap::from([(
            0,
            vec![rec("k", "", 100), rec("k", "", 110), rec("j", "", 120)],
        )]);
        // One output counts both k events at once; j is never answered.
        let output = BTreeMap::from([(0, vec![rec("k", "2", 150)])]);
        let m = measure(&input, &output, &[0], 0, 1_000);
        assert_eq!(m.records, 3);
        assert_eq!(m.unanswered, 1);
        assert_eq!((m.p50_ms, m.p99_ms, m.max_ms), (40, 50, 50));
        // From the output at 150 to the window's end.
        assert_eq!(m.longest_gap_ms, 850);
    }

    #[test]
    fn events_outside_the_window_still_count_towards_the_keys_occurrences() {
        let input = BTreeMap::from([(0, vec![rec("k", "", 10), rec("k", "", 500)])]);
        let output = BTreeMap::from([(0, vec![rec("k", "1", 20), rec("k", "2", 530)])]);
        let m = measure(&input, &output, &[0], 400, 600);
        assert_eq!(m.records, 1);
        assert_eq!(m.p99_ms, 30);
        assert_eq!(m.longest_gap_ms, 130);
    }
}
