//! The simulated broker's topics: each task's input partition and changelog, and the group's
//! committed offsets. Input arrives at a constant rate; an active's processing appends one
//! changelog record per input record.

use std::collections::BTreeMap;
use std::time::Duration;

use baton_assignor::TaskId;
use baton_protocol::bridge::{Subtopology, Topology};
use baton_protocol::TopicPartition;

use crate::scenario::Scenario;

/// One task's partitions.
pub struct TaskLog {
    pub id: TaskId,
    pub stateful: bool,
    /// Input records per second.
    rate: f64,
    /// Changelog records written before the simulation began.
    base: i64,
    /// Input records processed into the changelog since.
    processed: i64,
    pub committed: Option<i64>,
}

impl TaskLog {
    pub fn input_end(&self, now: Duration) -> i64 {
        (self.rate * now.as_secs_f64()).floor() as i64
    }

    pub fn input_rate(&self) -> f64 {
        self.rate
    }

    pub fn changelog_end(&self) -> i64 {
        self.base + self.processed
    }

    /// Appends what one batch of `n` input records wrote; the changelog's new end.
    pub fn append(&mut self, n: i64) -> i64 {
        if self.stateful {
            self.processed += n.max(0);
        }
        self.changelog_end()
    }
}

/// Which partition a topic partition is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Partition {
    Input(usize),
    Changelog(usize),
}

pub struct Logs {
    pub tasks: Vec<TaskLog>,
    pub index: BTreeMap<TaskId, usize>,
    pub topology: Topology,
    /// Subtopology number to (input topic, changelog topic).
    topics: BTreeMap<String, (u32, bool)>,
}

fn input_topic(s: u32) -> String {
    format!("input-{s}")
}

fn changelog_topic(s: u32) -> String {
    format!("changelog-{s}")
}

impl Logs {
    pub fn new(sc: &Scenario) -> Logs {
        let mut tasks = Vec::new();
        let mut subtopologies = BTreeMap::new();
        let mut topics = BTreeMap::new();
        for (s, sub) in sc.app.subtopologies.iter().enumerate() {
            let s = s as u32;
            topics.insert(input_topic(s), (s, false));
            if sub.stateful {
                topics.insert(changelog_topic(s), (s, true));
            }
            subtopologies.insert(
                s,
                Subtopology {
                    source_topics: vec![input_topic(s)],
                    changelog_topics: if sub.stateful {
                        vec![changelog_topic(s)]
                    } else {
                        Vec::new()
                    },
                    partitions: sub.partitions,
                },
            );
            for p in 0..sub.partitions {
                tasks.push(TaskLog {
                    id: TaskId::new(s, p),
                    stateful: sub.stateful,
                    rate: sub.changelog_rate,
                    base: if sub.stateful {
                        sc.state_records(sub).round() as i64
                    } else {
                        0
                    },
                    processed: 0,
                    committed: None,
                });
            }
        }
        let index = tasks.iter().enumerate().map(|(i, t)| (t.id, i)).collect();
        Logs {
            tasks,
            index,
            topology: Topology { subtopologies },
            topics,
        }
    }

    pub fn resolve(&self, tp: &TopicPartition) -> Option<Partition> {
        let &(s, changelog) = self.topics.get(&tp.topic)?;
        let t = *self
            .index
            .get(&TaskId::new(s, u32::try_from(tp.partition).ok()?))?;
        Some(if changelog {
            Partition::Changelog(t)
        } else {
            Partition::Input(t)
        })
    }

    /// Every changelog's end, as the leader reads them.
    pub fn changelog_ends(&self) -> BTreeMap<TopicPartition, i64> {
        self.tasks
            .iter()
            .filter(|t| t.stateful)
            .map(|t| {
                (
                    TopicPartition {
                        topic: changelog_topic(t.id.subtopology),
                        partition: t.id.partition as i32,
                    },
                    t.changelog_end(),
                )
            })
            .collect()
    }
}
