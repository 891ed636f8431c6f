//! Join rounds from the group's side: a member's JoinGroup, the round every member hears of,
//! the leader's pipeline when it ends, heartbeats and sessions.

use std::collections::BTreeMap;
use std::time::Duration;

use baton_assignor::TaskId;
use baton_core::machine::{Assigned, Event, Heartbeat, Report};
use baton_protocol::leader::{self, JoinedMember, LeaderInput, MemberReport};
use baton_protocol::{TaskOffsetSum, BATON_VERSION};

use super::group::Seat;
use super::{Engine, Pending, REQUEST_LATENCY};
use crate::report::{ms, Handover};
use crate::scenario::Protocol;

impl Engine<'_> {
    /// The subscription a thread joins with: what its machine reports, plus every other
    /// task's checkpoint on the instance's disk (as the runtime reports its state directory).
    pub(super) fn send_join(&mut self, ii: usize, ti: usize, report: &Report, release: bool) {
        let inst = &self.insts[ii];
        let mut sums: BTreeMap<TaskId, i64> = inst.disk.clone();
        sums.extend(report.offset_sums.iter().map(|(t, s)| (*t, *s)));
        let sums: Vec<TaskOffsetSum> = sums
            .into_iter()
            .map(|(task, offset_sum)| TaskOffsetSum { task, offset_sum })
            .collect();
        // An eager member gives everything up before it joins.
        let owned = if self.protocol == Protocol::Eager {
            Vec::new()
        } else {
            report.owned.clone()
        };
        let unique = inst.threads[ti].unique.wrapping_add(1);
        let metadata = leader::encode_subscription(
            &self.logs.topology,
            &MemberReport {
                version: BATON_VERSION,
                latest_supported: BATON_VERSION,
                process_id: uuid::Uuid::from_u128(inst.pid),
                user_endpoint: "",
                offset_sums: &sums,
                leaving: report.leaving,
                leaving_since_ms: inst
                    .leaving_since
                    .filter(|_| report.leaving)
                    .map(|d| d.as_millis() as i64),
                warmups: &report.warmups,
                owned: &owned,
                generation: report.generation,
                unique,
                rack: inst.spec.rack.as_deref(),
                client_tags: &[],
            },
        );
        let id = match inst.threads[ti].member_id.clone() {
            Some(id) => id,
            None => {
                let id = self.group.new_member_id(&inst.spec.id, ti);
                self.insts[ii].threads[ti].member_id = Some(id.clone());
                id
            }
        };
        self.insts[ii].threads[ti].unique = unique;
        let due = self.now + self.rebalance_time();
        let seat = Seat {
            inst: ii,
            thread: ti,
        };
        if self.group.join(&id, seat, metadata, release, due) {
            self.round_started(due);
        }
        self.try_finish_round();
    }

    /// Starts a round unless one is under way (a member left or timed out).
    pub(super) fn start_round(&mut self) {
        let due = self.now + self.rebalance_time();
        if self.group.start(due) {
            self.round_started(due);
        }
    }

    /// Every member hears of the round at once (the scenario's rebalance time covers the
    /// heartbeat that would tell it); a thread that is between rounds joins with what it has.
    fn round_started(&mut self, due: Duration) {
        self.schedule(due, Pending::RoundDue);
        if self.protocol == Protocol::Eager {
            self.refresh_all();
        }
        let now = self.now;
        for ii in 0..self.insts.len() {
            for ti in 0..self.insts[ii].threads.len() {
                let t = &self.insts[ii].threads[ti];
                let Some(m) = &t.machine else { continue };
                let joined = t.member_id.as_ref().is_some_and(|id| {
                    self.group
                        .round
                        .as_ref()
                        .is_some_and(|r| r.joined.contains_key(id))
                });
                if joined || !self.insts[ii].alive {
                    continue;
                }
                if m.is_joining() {
                    let report = m.report();
                    self.send_join(ii, ti, &report, false);
                } else {
                    self.handle_now(
                        ii,
                        ti,
                        Event::Heartbeat {
                            answer: Heartbeat::Rebalancing,
                            at: now,
                        },
                    );
                }
            }
        }
    }

    /// Ends the round if it can: the leader's pipeline assigns, every member gets its answer.
    pub(super) fn try_finish_round(&mut self) {
        if !self.group.ready(self.now) {
            return;
        }
        let Some(generation) = self.group.finish(self.now) else {
            self.refresh_all();
            return;
        };
        let now = self.now;
        let members: Vec<JoinedMember> = generation
            .joined
            .iter()
            .map(|(id, _, metadata)| JoinedMember {
                member_id: id.clone(),
                metadata: metadata.clone(),
            })
            .collect();
        let ends = self.logs.changelog_ends();
        let out = leader::lead(&LeaderInput {
            members: &members,
            topology: &self.logs.topology,
            end_offsets: Some(&ends),
            config: self.config.clone(),
            assignor: self.kind,
            leader_member_id: &generation.leader,
            now_ms: now.as_millis() as i64,
            metadata_limit: baton_protocol::sizing::GROUP_METADATA_LIMIT,
            latest_version: baton_protocol::BATON_VERSION,
            replica_racks: None,
        });
        if !(self.protocol == Protocol::Eager && generation.for_release) {
            self.stats.rebalances += 1;
        }
        self.stats.forced.extend(out.forced.iter().copied());
        let mut settled = true;
        for (id, seat, _) in &generation.joined {
            let blob = out.assignments.get(id).cloned().unwrap_or_default();
            let assigned = match leader::decode_assignment(&blob) {
                Ok((_, info)) => {
                    // `i64::MAX` (Kafka's "never") asks for no follow-up either.
                    let probe = (info.next_rebalance_ms > 0 && info.next_rebalance_ms < i64::MAX)
                        .then(|| Duration::from_millis(info.next_rebalance_ms as u64));
                    settled &= probe.is_none() && info.warmup_tasks.is_empty();
                    for &t in &info.active_tasks {
                        self.hand_to(t, seat.inst);
                    }
                    Assigned::from_info(generation.generation, id, &info, probe, now)
                }
                Err(_) => Assigned {
                    generation: generation.generation,
                    member_id: id.clone(),
                    confirmed_at: now,
                    ..Assigned::default()
                },
            };
            let (ii, ti) = (seat.inst, seat.thread);
            if let Some(p) = assigned.probe_at {
                self.insts[ii].threads[ti].probe_at = Some(p);
                let life = self.insts[ii].life;
                self.schedule(
                    p,
                    Pending::Probe {
                        inst: ii,
                        thread: ti,
                        life,
                    },
                );
            } else {
                self.insts[ii].threads[ti].probe_at = None;
            }
            self.send(ii, ti, REQUEST_LATENCY, Event::Assigned(assigned));
        }
        if settled {
            self.stats.settled_at.get_or_insert(now);
        } else {
            self.stats.settled_at = None;
        }
        if self.protocol == Protocol::Eager {
            self.refresh_all();
        }
        self.load_sample();
    }

    /// Records a task's active going to instance `to`.
    fn hand_to(&mut self, task: TaskId, to: usize) {
        let Some(&t) = self.logs.index.get(&task) else {
            return;
        };
        if let Some(from) = self.owner[t] {
            if from != to && self.now >= self.origin {
                self.stats.moves += 1;
                self.stats.handovers.push(Handover {
                    t_s: ms(self.now.saturating_sub(self.origin).as_secs_f64()),
                    task: task.to_string(),
                    from: self.insts[from].spec.id.clone(),
                    to: self.insts[to].spec.id.clone(),
                });
            }
        }
        self.owner[t] = Some(to);
    }

    /// Heartbeats: every live member is heard from; every thread gets a timer tick.
    pub(super) fn beat(&mut self) {
        let now = self.now;
        let rebalancing = self.group.round.is_some();
        for ii in 0..self.insts.len() {
            if !self.insts[ii].alive {
                continue;
            }
            for ti in 0..self.insts[ii].threads.len() {
                let t = &self.insts[ii].threads[ti];
                if t.machine.is_none() {
                    continue;
                }
                let known = t.member_id.clone().filter(|id| {
                    self.group.members.contains_key(id)
                        || self
                            .group
                            .round
                            .as_ref()
                            .is_some_and(|r| r.joined.contains_key(id))
                });
                let event = match known {
                    Some(id) => {
                        self.group.heard_from(&id, now);
                        Event::Heartbeat {
                            answer: if rebalancing {
                                Heartbeat::Rebalancing
                            } else {
                                Heartbeat::Alive
                            },
                            at: now,
                        }
                    }
                    None => Event::Tick,
                };
                self.handle_now(ii, ti, event);
            }
        }
        self.check_sessions();
    }

    /// Members whose session ran out leave the group, which starts a round.
    pub(super) fn check_sessions(&mut self) {
        let gone = self.group.expire(self.now, self.session);
        if !gone.is_empty() {
            self.start_round();
        }
        self.try_finish_round();
    }
}
