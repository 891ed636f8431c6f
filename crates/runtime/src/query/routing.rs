//! Where each task's copies live, from the host maps every member's assignment carries
//! (Kafka Streams' `partitionsByHost` and `standbyPartitionsByHost`): the active's endpoint
//! and the endpoints of its standbys and warm-ups, by source partition. Replaced whole on
//! every rebalance.

use std::collections::BTreeMap;

use baton_protocol::{AssignmentInfo, HostInfo, TopicPartition};

/// The endpoints holding one partition's task.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Copies {
    pub active: Option<HostInfo>,
    /// Standbys and warm-ups alike (the assignment does not tell them apart), sorted.
    pub standbys: Vec<HostInfo>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Routing {
    /// The generation the maps came with: a member's assignment of an older one is ignored.
    pub generation: i32,
    by_partition: BTreeMap<TopicPartition, Copies>,
}

impl Routing {
    pub fn from_info(generation: i32, info: &AssignmentInfo) -> Routing {
        let mut by_partition: BTreeMap<TopicPartition, Copies> = BTreeMap::new();
        for hp in &info.partitions_by_host {
            for tp in &hp.partitions {
                by_partition.entry(tp.clone()).or_default().active = Some(hp.host.clone());
            }
        }
        for hp in &info.standby_partitions_by_host {
            for tp in &hp.partitions {
                by_partition
                    .entry(tp.clone())
                    .or_default()
                    .standbys
                    .push(hp.host.clone());
            }
        }
        for c in by_partition.values_mut() {
            c.standbys.sort();
            c.standbys.dedup();
        }
        Routing {
            generation,
            by_partition,
        }
    }

    /// The copies of the task reading `source` (one of its source partitions).
    pub fn copies(&self, source: &TopicPartition) -> Copies {
        self.by_partition.get(source).cloned().unwrap_or_default()
    }

    pub fn is_empty(&self) -> bool {
        self.by_partition.is_empty()
    }
}

/// `HOST:PORT` as the assignment carries it, or `None` when it does not parse.
pub fn parse_endpoint(s: &str) -> Option<HostInfo> {
    let (host, port) = s.rsplit_once(':')?;
    let port: u16 = port.parse().ok()?;
    (!host.is_empty()).then(|| HostInfo {
        host: host.to_owned(),
        port: port as i32,
    })
}

pub fn endpoint(h: &HostInfo) -> String {
    format!("{}:{}", h.host, h.port)
}

#[cfg(test)]
mod tests {
    use baton_protocol::HostPartitions;

    use super::*;

    fn host(port: i32) -> HostInfo {
        HostInfo {
            host: "h".into(),
            port,
        }
    }

    #[test]
    fn copies_come_from_both_host_maps() {
        let tp = |p| TopicPartition::new("in", p);
        let mut info = AssignmentInfo::new(11, 11);
        info.partitions_by_host = vec![HostPartitions {
            host: host(1),
            partitions: vec![tp(0), tp(1)],
        }];
        info.standby_partitions_by_host = vec![
            HostPartitions {
                host: host(3),
                partitions: vec![tp(0)],
            },
            HostPartitions {
                host: host(2),
                partitions: vec![tp(0)],
            },
        ];
        let r = Routing::from_info(4, &info);
        assert_eq!(
            r.copies(&tp(0)),
            Copies {
                active: Some(host(1)),
                standbys: vec![host(2), host(3)],
            }
        );
        assert_eq!(r.copies(&tp(1)).standbys, vec![]);
        assert_eq!(r.copies(&tp(2)), Copies::default());
    }

    #[test]
    fn endpoints_parse_strictly() {
        assert_eq!(parse_endpoint("a:9"), Some(host_named("a", 9)));
        assert_eq!(parse_endpoint("[::1]:80"), Some(host_named("[::1]", 80)));
        for bad in ["", "a", ":9", "a:", "a:x", "a:70000"] {
            assert_eq!(parse_endpoint(bad), None, "{bad}");
        }
    }

    fn host_named(h: &str, port: i32) -> HostInfo {
        HostInfo {
            host: h.into(),
            port,
        }
    }
}
