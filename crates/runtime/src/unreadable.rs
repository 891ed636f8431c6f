//! A fetched record batch that cannot be read (damaged on the broker's disk, or written by a
//! producer that got its records wrong under a correct CRC). It stops only the task that reads
//! it, never the thread: each fetch would find it again, so it must not be retried blindly.
//!
//! In an input, `--on-deserialization-error` decides, as for a record whose bytes the serdes
//! cannot read: `fail` stops the task (named with topic, partition and offset; it holds its
//! partitions), `skip` and `dead-letter` go on after the batch when its end is known (its CRC
//! matched), counting its offsets as skipped. No record of it can be read, so none reaches a
//! dead-letter topic. In a changelog it always stops the task: state is never skipped.

use std::time::Duration;

use baton_assignor::TaskId;
use baton_kafka::batch::CorruptBatch;
use baton_protocol::TopicPartition;

use crate::config::ProcessingErrorPolicy;
use crate::machine::Event;

/// Whose partition the batch is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Partition {
    Source(usize),
    Changelog,
}

/// A batch that cannot be read, where a task's reader stands.
pub struct Found<'a> {
    pub task: TaskId,
    pub tp: &'a TopicPartition,
    pub partition: Partition,
    pub from: i64,
    pub batch: &'a CorruptBatch,
}

/// What the task does about it, logged once: the event for its machine. `skipped` counts the
/// offsets passed over.
pub fn decide(
    found: Found<'_>,
    policy: &ProcessingErrorPolicy,
    retry: Option<Duration>,
    skipped: impl FnOnce(u64),
) -> Event {
    let Found {
        task,
        tp,
        partition,
        from,
        batch,
    } = found;
    let skip_to = match (partition, policy, batch.end) {
        (Partition::Source(source), ProcessingErrorPolicy::Skip, Some(to))
        | (Partition::Source(source), ProcessingErrorPolicy::DeadLetter(_), Some(to))
            if to > from =>
        {
            Some((source, to))
        }
        _ => None,
    };
    match skip_to {
        Some((source, to)) => {
            tracing::warn!(
                task = %task,
                partition = %tp,
                offsets = %format!("{from}..{to}"),
                reason = %batch.reason,
                "skipped a record batch that cannot be read (--on-deserialization-error); \
                 none of its records can be read, so none is dead-lettered"
            );
            skipped((to - from) as u64);
            Event::InputSkipped {
                task,
                source,
                from,
                to,
            }
        }
        None => {
            let why = match (partition, batch.end) {
                (Partition::Changelog, _) => "a changelog's state is never skipped",
                (_, None) => "its header is damaged too, so where the next batch starts is unknown",
                _ => "--on-deserialization-error=fail",
            };
            tracing::error!(
                task = %task,
                partition = %tp,
                offset = from,
                reason = %batch.reason,
                "a record batch cannot be read; stopping this task only ({why}): {}",
                crate::thread::failed_task_fate(retry)
            );
            Event::Unreadable { task }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(end: Option<i64>) -> CorruptBatch {
        CorruptBatch {
            base_offset: 40,
            end,
            reason: "record 0: 63 bytes declared".into(),
        }
    }

    fn run(partition: Partition, end: Option<i64>, policy: ProcessingErrorPolicy) -> (Event, u64) {
        let mut n = 0;
        let tp = TopicPartition::new("in", 1);
        let task = TaskId::new(0, 1);
        let batch = batch(end);
        let found = Found {
            task,
            tp: &tp,
            partition,
            from: 40,
            batch: &batch,
        };
        let e = decide(found, &policy, None, |k| n = k);
        (e, n)
    }

    #[test]
    fn the_policy_decides_for_an_input_whose_batch_end_is_known() {
        let task = TaskId::new(0, 1);
        let skipped = Event::InputSkipped {
            task,
            source: 0,
            from: 40,
            to: 45,
        };
        let src = Partition::Source(0);
        assert_eq!(
            run(src, Some(45), ProcessingErrorPolicy::Skip),
            (skipped.clone(), 5)
        );
        let dl = ProcessingErrorPolicy::DeadLetter("dlq".into());
        assert_eq!(run(src, Some(45), dl), (skipped, 5));
        let stop = (Event::Unreadable { task }, 0);
        assert_eq!(run(src, Some(45), ProcessingErrorPolicy::Fail), stop);
        assert_eq!(
            run(src, None, ProcessingErrorPolicy::Skip),
            stop,
            "end unknown"
        );
        let cl = Partition::Changelog;
        assert_eq!(
            run(cl, Some(45), ProcessingErrorPolicy::Skip),
            stop,
            "state"
        );
    }
}
