//! A stream thread's group membership on a task of its own: heartbeats at their interval,
//! never behind a fetch, a produce or a store load (as Kafka's background heartbeat thread,
//! KIP-62), and join rounds when the thread's machine asks for one. Answers go back to the
//! thread as machine events.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use baton_core::{Backoff, Retrying};
use baton_kafka::member::Membership;
use baton_kafka::{Beat, GroupMember};
use tokio::sync::{mpsc, oneshot, watch};

use baton_protocol::TopicPartition;

use crate::context::Context;
use crate::machine::{Assigned, Event, Heartbeat, JoinReason, Report};

/// What the thread asks of its membership task.
pub enum Request {
    /// Run a join round (subscribing with the latest report).
    Join(JoinReason),
    /// Leave the group, then stop.
    Leave(oneshot::Sender<()>),
}

pub struct MembershipTask {
    pub ctx: Arc<Context>,
    pub name: String,
    pub member: GroupMember,
    pub epoch: Instant,
    pub requests: mpsc::UnboundedReceiver<Request>,
    pub report: watch::Receiver<Report>,
    pub events: mpsc::UnboundedSender<Event>,
    /// The latest round's generation and active partitions, until the machine reports them.
    pub latest: Option<(i32, Vec<TopicPartition>)>,
}

/// Between failed join rounds (each its own attempts with their own pauses): forever, while
/// the thread lives.
const ROUND_RETRY: Backoff = Backoff::forever(Duration::from_secs(1), Duration::from_secs(2));

impl MembershipTask {
    pub async fn run(mut self) {
        let interval = self.ctx.cfg.heartbeat_interval;
        let mut next_heartbeat = tokio::time::Instant::now() + interval;
        let mut joined = false;
        // Kafka's rule: a member not given back everything it claimed rejoins, once its
        // machine has taken the assignment in (so the next claim is right). Otherwise a task
        // held back for a claim it no longer backs would wait for nobody.
        // A claim the machine still backs (revoked actives it is releasing) is the machine's to
        // settle: it rejoins once they are released, and an earlier join would claim them again.
        // So is any claim when the machine joins anyway: a second join is a round more.
        let mut rejoin_after: Option<(i32, Vec<TopicPartition>)> = None;
        loop {
            let request = tokio::select! {
                // A request the machine made wins, and serves a pending rejoin with it.
                biased;
                r = self.requests.recv() => r,
                _ = async {
                    let g = rejoin_after.as_ref().map_or(i32::MAX, |(g, _)| *g);
                    let _ = self.report.wait_for(|r| r.generation >= g).await;
                }, if rejoin_after.is_some() => {
                    let short = rejoin_after.take().map(|(_, s)| s).unwrap_or_default();
                    let report = self.report.borrow().clone();
                    if report.joining || short.iter().any(|tp| report.owned.contains(tp)) {
                        continue;
                    }
                    Some(Request::Join(JoinReason::ClaimsNotGivenBack))
                }
                _ = tokio::time::sleep_until(next_heartbeat), if joined => {
                    next_heartbeat = tokio::time::Instant::now() + interval;
                    let at = self.epoch.elapsed();
                    self.ctx.status.heartbeat_sent(&self.name, at);
                    let answer = answer(self.member.heartbeat().await, &self.ctx, &self.name);
                    if self.events.send(Event::Heartbeat { answer, at }).is_err() {
                        return;
                    }
                    continue;
                }
            };
            match request {
                None => return,
                Some(Request::Leave(done)) => {
                    if let Err(e) = self.member.leave().await {
                        tracing::warn!(thread = %self.name, error = %e, "leaving the group");
                    }
                    let _ = done.send(());
                    return;
                }
                Some(Request::Join(mut reason)) => {
                    // Requests that queued up while busy are served by one round.
                    while let Ok(r) = self.requests.try_recv() {
                        match r {
                            Request::Join(r) => reason = r,
                            Request::Leave(done) => {
                                let _ = self.member.leave().await;
                                let _ = done.send(());
                                return;
                            }
                        }
                    }
                    let Some((assigned, short)) = self.round(reason, next_heartbeat).await else {
                        return;
                    };
                    rejoin_after = (!short.is_empty()).then_some((assigned.generation, short));
                    joined = true;
                    // Keep the beat the round kept, rather than restart it.
                    let since = self
                        .ctx
                        .status
                        .last_heartbeat(&self.name)
                        .map_or(Duration::ZERO, |b| self.epoch.elapsed().saturating_sub(b));
                    next_heartbeat = tokio::time::Instant::now() + interval.saturating_sub(since);
                    if self.events.send(Event::Assigned(assigned)).is_err() {
                        return;
                    }
                }
            }
        }
    }

    /// One join round, retried until it succeeds (or the thread is gone). Also returns the
    /// partitions the join claimed that the assignment left out.
    /// `due` is when the next heartbeat is due: the round keeps the beat going from there.
    async fn round(
        &mut self,
        reason: JoinReason,
        due: tokio::time::Instant,
    ) -> Option<(Assigned, Vec<TopicPartition>)> {
        let mut due = due;
        let mut retrying = Retrying::default();
        loop {
            let report = self.report.borrow().clone();
            self.member.set_offset_sums(self.ctx.status.offset_sums());
            self.member.set_leaving(report.leaving);
            self.member.set_warmups(report.warmups.clone());
            let claimed = report.claimed(self.latest.as_ref());
            self.member.set_owned(claimed.clone());
            tracing::info!(thread = %self.name, reason = reason.name(), "rebalance");
            let started = Instant::now();
            // The coordinator refreshes the session of a member that heartbeats while its join
            // is pending: keep beating, so the thread may go on writing through a long round.
            // On a task of its own: the join (the leader's requests among it) must never wait
            // for a heartbeat, nor a heartbeat for it.
            let beats = tokio::spawn(beat_during_round(
                self.member.pulse(),
                self.ctx.clone(),
                self.name.clone(),
                self.epoch,
                self.events.clone(),
                due,
            ));
            let joined = self.member.join().await.cloned();
            beats.abort();
            match joined {
                Ok(m) => {
                    self.ctx
                        .recovered(|| format!("joining the group ({})", self.name));
                    self.ctx.status.count_rebalance();
                    let seconds = started.elapsed().as_secs_f64();
                    self.ctx.status.observe_rebalance(reason.name(), seconds);
                    tracing::info!(
                        thread = %self.name,
                        generation = m.generation,
                        leader = m.leader,
                        version = m.info.version,
                        active = m.info.active_tasks.len(),
                        standby = m.info.standby_tasks.len().saturating_sub(m.info.warmup_tasks.len()),
                        warmup = m.info.warmup_tasks.len(),
                        seconds = format!("{seconds:.3}"),
                        reason = reason.name(),
                        "assigned"
                    );
                    self.latest = Some((m.generation, m.partitions.clone()));
                    self.publish(&m);
                    let short = claimed
                        .into_iter()
                        .filter(|tp| !m.partitions.contains(tp))
                        .collect();
                    return Some((self.assigned(&m), short));
                }
                Err(e) => {
                    self.ctx
                        .failing(&format!("joining the group ({})", self.name), &e);
                    if self.events.is_closed() {
                        return None;
                    }
                    let wait = retrying.wait(&ROUND_RETRY);
                    tokio::time::sleep(wait).await;
                    due = tokio::time::Instant::now();
                }
            }
        }
    }

    /// Publishes what this member sent and received, for `baton inspect` on brokers whose
    /// DescribeGroups leaves member metadata out. Best effort, off the round's path.
    fn publish(&self, m: &Membership) {
        let ctx = self.ctx.clone();
        let (id, metadata, assignment, generation) = (
            m.member_id.clone(),
            m.metadata.clone(),
            m.assignment.clone(),
            m.generation,
        );
        tokio::spawn(async move {
            let topic = crate::control::control_topic(ctx.group());
            let published = baton_kafka::inspect::publish_member(
                &ctx.client,
                &topic,
                &id,
                &ctx.cfg.instance_id,
                &metadata,
                &assignment,
                generation,
            )
            .await;
            if let Err(e) = published {
                tracing::debug!(error = %e, "publishing the member's report for inspect");
            }
        });
    }

    fn assigned(&self, m: &Membership) -> Assigned {
        self.ctx.set_routing(m.generation, &m.info);
        let next = m.info.next_rebalance_ms;
        let probe_at = (next > 0).then(|| {
            let now_ms = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_millis() as i64)
                .unwrap_or(0);
            self.epoch.elapsed() + Duration::from_millis((next - now_ms).max(0) as u64)
        });
        let confirmed_at = m.synced_at.saturating_duration_since(self.epoch);
        let mut a =
            Assigned::from_info(m.generation, &m.member_id, &m.info, probe_at, confirmed_at);
        a.version_probing |= m.version_probing;
        a
    }
}

/// A heartbeat's outcome as the machine sees it.
fn answer(beat: baton_kafka::Result<Beat>, ctx: &Context, thread: &str) -> Heartbeat {
    let subject = || format!("heartbeat ({thread})");
    match beat {
        Ok(b) => {
            ctx.recovered(subject);
            match b {
                Beat::Alive => Heartbeat::Alive,
                Beat::Rebalancing => Heartbeat::Rebalancing,
                Beat::Fenced => Heartbeat::Fenced,
            }
        }
        Err(e) => {
            ctx.failing(&subject(), &e);
            Heartbeat::Failed
        }
    }
}

/// Heartbeats every interval, the first at `due`, until aborted (when the join round ends).
/// Each beat is timed from the previous one's send, not its answer (Kafka's rule), so a slow
/// answer does not stretch the interval.
async fn beat_during_round(
    pulse: baton_kafka::Pulse,
    ctx: Arc<Context>,
    name: String,
    epoch: Instant,
    events: mpsc::UnboundedSender<Event>,
    due: tokio::time::Instant,
) {
    let mut due = due;
    loop {
        tokio::time::sleep_until(due).await;
        due = tokio::time::Instant::now() + ctx.cfg.heartbeat_interval;
        let at = epoch.elapsed();
        ctx.status.heartbeat_sent(&name, at);
        let answer = during_round(answer(pulse.beat().await, &ctx, &name));
        if events.send(Event::Heartbeat { answer, at }).is_err() {
            return;
        }
    }
}

/// A heartbeat's answer while this member's join is under way. "Rebalancing" is about the
/// round already being joined: it confirms the session and must start no other round. (Taken
/// as a reason to join, it queued a join the round did not serve; served after it, that join
/// began a new round whose heartbeats queued the next: a storm of one round per heartbeat
/// interval, seen live whenever the round was one the machine had not asked for.) "Fenced"
/// is about the generation being left; the join itself says whether the member is gone.
fn during_round(answer: Heartbeat) -> Heartbeat {
    match answer {
        Heartbeat::Rebalancing => Heartbeat::Alive,
        Heartbeat::Fenced => Heartbeat::Failed,
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_during_a_round_start_no_round() {
        assert_eq!(during_round(Heartbeat::Rebalancing), Heartbeat::Alive);
        assert_eq!(during_round(Heartbeat::Fenced), Heartbeat::Failed);
        assert_eq!(during_round(Heartbeat::Alive), Heartbeat::Alive);
        assert_eq!(during_round(Heartbeat::Failed), Heartbeat::Failed);
    }
}
