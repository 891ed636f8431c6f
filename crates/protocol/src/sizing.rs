//! Keeping a group's metadata within the group protocol's limit.
//!
//! The coordinator stores a generation's metadata (every member's subscription and assignment)
//! as one record in `__consumer_offsets`, so together they must fit that topic's maximum message
//! size: 1 MiB by default. The interactive-query host maps are the part that grows with members
//! times partitions, because every member's assignment repeats them in full.

use std::collections::BTreeMap;

use crate::bridge::MemberAssignment;

/// The default limit: `message.max.bytes` of `__consumer_offsets`.
pub const GROUP_METADATA_LIMIT: usize = 1024 * 1024;

/// Encoded bytes of each assignment (0 for one that cannot be encoded).
pub fn assignment_bytes(assignments: &BTreeMap<String, MemberAssignment>) -> usize {
    assignments
        .values()
        .map(|m| m.info.encode().map(|b| b.len()).unwrap_or(0))
        .sum()
}

/// If subscriptions plus assignments exceed `limit`, drops the host maps from every assignment
/// (interactive-query routing then falls back to asking around) and says so. Returns the
/// warning, if any.
pub fn fit_to_limit(
    subscription_bytes: usize,
    assignments: &mut BTreeMap<String, MemberAssignment>,
    limit: usize,
) -> Option<String> {
    let before = subscription_bytes + assignment_bytes(assignments);
    if before <= limit {
        return None;
    }
    for m in assignments.values_mut() {
        m.info.partitions_by_host.clear();
        m.info.standby_partitions_by_host.clear();
    }
    let after = subscription_bytes + assignment_bytes(assignments);
    Some(format!(
        "group metadata of {before} bytes exceeds the {limit}-byte limit: dropped the host maps \
         from every assignment ({after} bytes now{})",
        if after > limit {
            ", still over: add members' state carefully or raise message.max.bytes"
        } else {
            ""
        }
    ))
}
