//! The group coordinator of the classic protocol: member ids, join rounds, generations and
//! sessions. A round ends once every member of the last generation has rejoined (or left, or
//! its session ran out), and not before the scenario's rebalance time.

use std::collections::BTreeMap;
use std::time::Duration;

/// Where a member runs: an instance and one of its stream threads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seat {
    pub inst: usize,
    pub thread: usize,
}

pub struct Round {
    /// The earliest the round can end.
    pub due: Duration,
    /// Member id to where it runs and its JoinGroup metadata.
    pub joined: BTreeMap<String, (Seat, Vec<u8>)>,
    /// A member handing back revoked actives started it: the cooperative protocol's second
    /// round, which an eager group does not have.
    pub for_release: bool,
}

#[derive(Default)]
pub struct Coordinator {
    pub generation: i32,
    /// Members of the current generation, with when the coordinator last heard of them.
    pub members: BTreeMap<String, (Seat, Duration)>,
    pub round: Option<Round>,
    pub leader: Option<String>,
    next_id: u64,
}

/// A finished round: the new generation, its members (in member id order) and its leader.
pub struct Generation {
    pub generation: i32,
    pub joined: Vec<(String, Seat, Vec<u8>)>,
    pub leader: String,
    /// See [`Round::for_release`].
    pub for_release: bool,
}

impl Coordinator {
    pub fn new_member_id(&mut self, instance: &str, thread: usize) -> String {
        self.next_id += 1;
        format!("{instance}-StreamThread-{}-{:06}", thread + 1, self.next_id)
    }

    /// Takes a JoinGroup. True when it started a round.
    pub fn join(
        &mut self,
        id: &str,
        seat: Seat,
        metadata: Vec<u8>,
        release: bool,
        due: Duration,
    ) -> bool {
        let started = self.round.is_none();
        let round = self.round.get_or_insert(Round {
            due,
            joined: BTreeMap::new(),
            for_release: release,
        });
        round.joined.insert(id.to_owned(), (seat, metadata));
        started
    }

    /// Starts a round if none is under way (a member left or timed out). True when it did.
    pub fn start(&mut self, due: Duration) -> bool {
        if self.round.is_some() {
            return false;
        }
        self.round = Some(Round {
            due,
            joined: BTreeMap::new(),
            for_release: false,
        });
        true
    }

    pub fn heard_from(&mut self, id: &str, now: Duration) {
        if let Some((_, seen)) = self.members.get_mut(id) {
            *seen = now;
        }
    }

    /// A LeaveGroup: true when the member was known.
    pub fn leave(&mut self, id: &str) -> bool {
        let known = self.members.remove(id).is_some();
        let joined = self
            .round
            .as_mut()
            .is_some_and(|r| r.joined.remove(id).is_some());
        known || joined
    }

    /// Members whose session ran out (and that have not rejoined): removed.
    pub fn expire(&mut self, now: Duration, session: Duration) -> Vec<String> {
        let joined = |id: &String| {
            self.round
                .as_ref()
                .is_some_and(|r| r.joined.contains_key(id))
        };
        let gone: Vec<String> = self
            .members
            .iter()
            .filter(|(id, (_, seen))| now.saturating_sub(*seen) >= session && !joined(id))
            .map(|(id, _)| id.clone())
            .collect();
        for id in &gone {
            self.members.remove(id);
        }
        gone
    }

    /// The round may end now: its time has come and every member has rejoined.
    pub fn ready(&self, now: Duration) -> bool {
        self.round.as_ref().is_some_and(|r| {
            now >= r.due && self.members.keys().all(|id| r.joined.contains_key(id))
        })
    }

    /// Ends the round. `None` when nobody joined it (the group is empty).
    pub fn finish(&mut self, now: Duration) -> Option<Generation> {
        let round = self.round.take()?;
        if round.joined.is_empty() {
            self.members.clear();
            self.leader = None;
            return None;
        }
        self.generation += 1;
        self.members = round
            .joined
            .iter()
            .map(|(id, (seat, _))| (id.clone(), (*seat, now)))
            .collect();
        // Kafka keeps the leader while it stays; otherwise the first member takes over.
        let leader = match &self.leader {
            Some(l) if self.members.contains_key(l) => l.clone(),
            _ => round.joined.keys().next().cloned().unwrap_or_default(),
        };
        self.leader = Some(leader.clone());
        Some(Generation {
            generation: self.generation,
            joined: round
                .joined
                .into_iter()
                .map(|(id, (seat, metadata))| (id, seat, metadata))
                .collect(),
            leader,
            for_release: round.for_release,
        })
    }

    pub fn seat_of_leader(&self) -> Option<Seat> {
        self.members.get(self.leader.as_ref()?).map(|(s, _)| *s)
    }
}
