//! Where a task's next copy may go so that its copies do not share a failure domain.
//!
//! With `rack.aware.assignment.tags`, Kafka's semantics (KIP-708, its
//! `ClientTagAwareStandbyTaskAssignor`): a copy goes to a client whose value of every configured
//! tag key differs from the values of the task's copies so far. A key with no more distinct
//! values among the clients that take copies than there are copies already placed is released
//! (partial awareness: three copies over two zones cannot all differ). Without tags, the rack
//! (`client.rack`) is the one key. A client without the key, or without a rack, conflicts with
//! nobody.

use std::collections::BTreeSet;

use super::holders::Holders;
use crate::cluster::{ClientIx, Cluster, TaskIx};
use crate::model::Role;

/// How many other tasks one conflicting copy looks through for a trade.
const TRADE_SEARCH_LIMIT: usize = 256;

pub(super) struct Diversity<'a> {
    cluster: &'a Cluster,
    /// The tag keys that count, each with its number of distinct values among the clients that
    /// take copies; empty when tags are not configured.
    keys: Vec<(&'a str, usize)>,
    /// Distinct racks among those clients, when racks count (no tags configured).
    racks: usize,
}

impl<'a> Diversity<'a> {
    /// `capacities[c] == 0` marks a client that takes no copies (leaving).
    pub fn new(cluster: &'a Cluster, capacities: &[u32]) -> Self {
        let takers = || cluster.client_ixs().filter(|&c| capacities[c] > 0);
        let keys: Vec<(&str, usize)> = cluster
            .config
            .rack_aware_assignment_tags
            .iter()
            .map(|k| {
                let values: BTreeSet<&str> = takers()
                    .filter_map(|c| cluster.clients[c].tags.get(k))
                    .map(String::as_str)
                    .collect();
                (k.as_str(), values.len())
            })
            .collect();
        let racks = if keys.is_empty() {
            takers()
                .filter_map(|c| cluster.clients[c].rack.as_deref())
                .collect::<BTreeSet<_>>()
                .len()
        } else {
            0
        };
        Diversity {
            cluster,
            keys,
            racks,
        }
    }

    /// Whether tags are configured (then they, not racks, decide, and kept copies too).
    pub fn by_tags(&self) -> bool {
        !self.keys.is_empty()
    }

    /// Whether anything can tell copies apart at all.
    pub fn active(&self) -> bool {
        self.by_tags() || self.racks > 1
    }

    /// Whether client `c` may take the next copy of a task whose copies are on `placed`.
    pub fn allows(&self, c: ClientIx, placed: &[ClientIx]) -> bool {
        let client = &self.cluster.clients[c];
        let differs = |value: Option<&String>, of: &dyn Fn(ClientIx) -> Option<&'a String>| {
            value.is_none_or(|v| placed.iter().all(|&h| of(h) != Some(v)))
        };
        if self.by_tags() {
            self.keys
                .iter()
                .filter(|&&(_, values)| values > placed.len())
                .all(|&(key, _)| {
                    differs(client.tags.get(key), &|h| {
                        self.cluster.clients[h].tags.get(key)
                    })
                })
        } else {
            self.racks <= placed.len()
                || differs(client.rack.as_ref(), &|h| {
                    self.cluster.clients[h].rack.as_ref()
                })
        }
    }
}

impl Diversity<'_> {
    /// Whether `c`'s copy of a task keeps apart from its other copies, `holders` less `c`.
    fn fits(&self, c: ClientIx, holders: &[ClientIx]) -> bool {
        let others: Vec<ClientIx> = holders.iter().copied().filter(|&h| h != c).collect();
        self.allows(c, &others)
    }

    /// Balance first placed some copies where they share a failure domain with the task's
    /// others (the clients with room were all there). Trades such a copy's client with a copy
    /// of another task wherever both then fit: every client keeps its count of copies. A copy
    /// whose client runs its task now never moves (the other copy of the pair does), and each
    /// conflict looks through [`TRADE_SEARCH_LIMIT`] other tasks at most.
    pub fn untangle(&self, tasks: &[TaskIx], holders: &mut Holders) {
        if !self.by_tags() {
            return;
        }
        // Two passes: a trade can free the client an earlier conflict needed.
        for _ in 0..2 {
            for (i, &t) in tasks.iter().enumerate() {
                for x in holders.of(t).to_vec() {
                    if self.runs(x, t) || self.fits(x, holders.of(t)) {
                        continue;
                    }
                    let others = tasks[i + 1..].iter().chain(&tasks[..i]);
                    let trade = others
                        .take(TRADE_SEARCH_LIMIT)
                        .find_map(|&u| self.trade(holders, t, x, u).map(|y| (u, y)));
                    if let Some((u, y)) = trade {
                        holders.replace(t, x, y);
                        holders.replace(u, y, x);
                    }
                }
            }
        }
    }

    fn runs(&self, c: ClientIx, t: TaskIx) -> bool {
        self.cluster.owned_role(c, t) == Some(Role::Active)
    }

    /// A client `y` holding task `u` that can take `t`'s copy from `x`, `x` taking `y`'s copy
    /// of `u`, with both tasks' copies apart afterwards.
    fn trade(&self, holders: &Holders, t: TaskIx, x: ClientIx, u: TaskIx) -> Option<ClientIx> {
        if holders.contains(u, x) {
            return None;
        }
        let swapped = |list: &[ClientIx], from: ClientIx, to: ClientIx| -> Vec<ClientIx> {
            list.iter()
                .map(|&h| if h == from { to } else { h })
                .collect()
        };
        holders.of(u).iter().copied().find(|&y| {
            !self.runs(y, u)
                && !holders.contains(t, y)
                && self.fits(y, &swapped(holders.of(t), x, y))
                && self.fits(x, &swapped(holders.of(u), y, x))
        })
    }
}
