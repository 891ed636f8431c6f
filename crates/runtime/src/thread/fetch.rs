//! The stream thread's reading: fetches sent on tasks of their own, their answers handed to
//! the machine, and what an answer can hold besides records (a partition past its end, a batch
//! no one can read, a topic made again).

use super::*;

impl Driver {
    /// Sends the fetches among `commands` first: a fetch depends on nothing queued before it,
    /// and in flight it overlaps the store work that follows.
    pub(super) fn start_fetches(&mut self, commands: &mut VecDeque<Command>) {
        if !commands.iter().any(|c| matches!(c, Command::Fetch { .. })) {
            return;
        }
        let mut rest = VecDeque::with_capacity(commands.len());
        for c in commands.drain(..) {
            match c {
                Command::Fetch { fetch, wants } => self.start_fetch(fetch, wants),
                other => rest.push_back(other),
            }
        }
        *commands = rest;
    }

    /// Keeps what came back and tells the machine where each partition stands.
    pub(super) fn fetched(
        &mut self,
        fetch: RequestId,
        results: Vec<(FetchWant, std::result::Result<Fetched, Miss>)>,
    ) -> Event {
        let mut out = Vec::new();
        for (want, f) in results {
            let mut f = match f {
                Ok(f) => f,
                Err(Miss::Failed) => continue,
                Err(Miss::OutOfRange) => {
                    self.out_of_range(&want);
                    continue;
                }
                Err(Miss::MadeAgain(id)) => {
                    self.made_again(&want.tp.topic, id, None);
                    continue;
                }
            };
            inject_unreadable(&want, &mut f);
            let high_watermark = (f.high_watermark >= 0).then_some(f.high_watermark);
            let next = next_position(&f, want.offset, high_watermark.unwrap_or(i64::MAX));
            if let Some(batch) = f.corrupt.as_ref().filter(|_| next == want.offset) {
                // At the reader's position: the records before it were taken by earlier
                // fetches. Fetched again, it would come back the same, at once, for ever.
                self.unreadable(&want, batch);
                continue;
            }
            out.push(FetchResult {
                tp: want.tp.clone(),
                from: want.offset,
                next,
                high_watermark,
            });
            self.buffers.insert(want.tp, f);
        }
        if out.is_empty() {
            return Event::FetchFailed { fetch };
        }
        Event::Fetched {
            fetch,
            results: out,
        }
    }

    /// The batch at `want`'s offset cannot be read: its task decides ([`unreadable::decide`]).
    pub(super) fn unreadable(
        &mut self,
        want: &FetchWant,
        batch: &baton_kafka::batch::CorruptBatch,
    ) {
        let owner = self.tasks.keys().copied().find_map(|t| {
            if let Some(i) = self
                .ctx
                .wire
                .source_partitions(t)
                .iter()
                .position(|tp| *tp == want.tp)
            {
                return Some((t, unreadable::Partition::Source(i)));
            }
            let changelogs = self.ctx.wire.changelog_partitions(t);
            changelogs
                .contains(&want.tp)
                .then_some((t, unreadable::Partition::Changelog))
        });
        let Some((task, partition)) = owner else {
            return;
        };
        let found = unreadable::Found {
            task,
            tp: &want.tp,
            partition,
            from: want.offset,
            batch,
        };
        let cfg = &self.ctx.cfg;
        let status = &self.ctx.status;
        let e = unreadable::decide(found, &cfg.on_deserialization_error, cfg.task_retry, |n| {
            status.add_skipped_n(task, n)
        });
        self.local.push_back(e);
    }

    /// A fetch from past a partition's end. For a changelog, the store's checkpoint belongs to
    /// another life of the topic: the store is rebuilt (Kafka Streams wipes it too). Trusting
    /// it would count everything twice.
    pub(super) fn out_of_range(&mut self, want: &FetchWant) {
        let owner = self.tasks.keys().copied().find_map(|t| {
            let changelogs = self.ctx.wire.changelog_partitions(t);
            Some((t, changelogs.iter().position(|tp| *tp == want.tp)?))
        });
        match owner {
            Some((task, changelog)) => {
                tracing::warn!(
                    task = %task,
                    changelog = %want.tp,
                    checkpoint = want.offset,
                    "the store's checkpoint is past its changelog's end"
                );
                self.local.push_back(Event::ChangelogOutOfRange {
                    task,
                    changelog,
                    offset: want.offset,
                });
            }
            None => {
                let source = self.tasks.keys().copied().find_map(|t| {
                    let i = self
                        .ctx
                        .wire
                        .source_partitions(t)
                        .iter()
                        .position(|tp| *tp == want.tp)?;
                    Some((t, i))
                });
                match source {
                    Some((task, source)) => self.local.push_back(Event::SourceOutOfRange {
                        task,
                        source,
                        offset: want.offset,
                    }),
                    None => tracing::warn!(
                        partition = %want.tp,
                        offset = want.offset,
                        "fetching past the partition's end; retrying"
                    ),
                }
            }
        }
    }

    /// Sends the fetch on a task of its own; the loop picks its answer up.
    pub(super) fn start_fetch(&mut self, fetch: RequestId, wants: Vec<FetchWant>) {
        let ctx = self.ctx.clone();
        let io = self.io.clone();
        let ids = self.topic_ids.clone();
        let handle = tokio::spawn(async move {
            let mut by_leader: BTreeMap<String, Vec<FetchWant>> = BTreeMap::new();
            let mut out = Vec::new();
            for want in wants {
                match ctx.leader(&want.tp.topic, want.tp.partition).await {
                    Ok(l) => by_leader.entry(l).or_default().push(want),
                    Err(e) => {
                        ctx.failing(&format!("fetch from {}", want.tp), &e);
                        out.push((want, Err(Miss::Failed)));
                    }
                }
            }
            for (leader, wants) in by_leader {
                out.extend(fetch_from(&ctx, &io, &leader, wants, &ids).await);
            }
            (fetch, out)
        });
        self.fetch = Some((fetch, handle));
    }

    /// A topic this thread reads was deleted and made again (`id`, its new id): every task
    /// here that reads it (but `except`, which the caller settles) is told, and later fetches
    /// read the new topic.
    pub(super) fn made_again(&mut self, topic: &str, id: uuid::Uuid, except: Option<TaskId>) {
        let old = self.topic_ids.insert(topic.to_owned(), id);
        if old == Some(id) {
            return;
        }
        tracing::warn!(
            thread = %self.name,
            topic,
            old_id = %old.map_or("-".into(), |o| o.to_string()),
            new_id = %id,
            "a topic this thread reads was deleted and made again (its id changed)"
        );
        for &task in self.tasks.keys().filter(|&&t| Some(t) != except) {
            let sources = self.ctx.wire.source_partitions(task);
            for (source, tp) in sources.iter().enumerate() {
                if tp.topic == topic {
                    self.local
                        .push_back(Event::SourceRecreated { task, source });
                }
            }
            let changelogs = self.ctx.wire.changelog_partitions(task);
            for (changelog, tp) in changelogs.iter().enumerate() {
                if tp.topic == topic && !sources.contains(tp) {
                    self.local
                        .push_back(Event::ChangelogRecreated { task, changelog });
                }
            }
        }
    }

    /// Changelogs the machine holds as loading whose store's bulk load ended (or whose store is
    /// gone): the machine fetches them again.
    pub(super) fn loads_ended(&self, m: &ThreadMachine) -> Vec<Event> {
        let chunk = restore_chunk(&self.ctx);
        loading(m)
            .filter(|(task, changelog)| {
                !self
                    .tasks
                    .get(task)
                    .and_then(|t| t.stores.get(*changelog))
                    .is_some_and(|s| s.catchup.busy(chunk))
            })
            .map(|(task, changelog)| Event::LoadEnded { task, changelog })
            .collect()
    }
}

/// The changelogs the machine leaves out of fetches while their stores take a bulk load.
pub(super) fn loading(m: &ThreadMachine) -> impl Iterator<Item = (TaskId, usize)> + '_ {
    m.tasks().iter().flat_map(|(&task, t)| {
        t.changelogs
            .iter()
            .enumerate()
            .filter(|(_, c)| c.loading)
            .map(move |(i, _)| (task, i))
    })
}

/// The largest chunk of a changelog one fetch asks for: what a loading store must have room
/// for before it is fetched again.
pub(super) fn restore_chunk(ctx: &Context) -> usize {
    ctx.cfg.restore_fetch_bytes.max(0) as usize
}

/// One fetch request to `leader`, by topic id where every want's topic has one in `ids`.
pub(super) async fn fetch_from(
    ctx: &Context,
    io: &Client,
    leader: &str,
    wants: Vec<FetchWant>,
    ids: &BTreeMap<String, uuid::Uuid>,
) -> Vec<(FetchWant, std::result::Result<Fetched, Miss>)> {
    let wire: Vec<WireWant> = wants
        .iter()
        .map(|w| WireWant {
            topic: w.tp.topic.clone(),
            topic_id: ids.get(&w.tp.topic).copied(),
            partition: w.tp.partition,
            offset: w.offset,
            max_bytes: w.max_bytes,
        })
        .collect();
    let mut out = Vec::with_capacity(wants.len());
    // Each topic's id now, asked once per request however many of its partitions failed.
    let mut ids_now = BTreeMap::new();
    match io.fetch_many_apart(leader, &wire, FETCH_WAIT_MS).await {
        Ok(results) => {
            ctx.recovered(|| format!("fetch from broker {leader}"));
            for ((want, w), result) in wants.into_iter().zip(&wire).zip(results) {
                match result {
                    Ok(f) => {
                        ctx.recovered(|| format!("fetch from {}", want.tp));
                        out.push((want, Ok(f)))
                    }
                    Err(e) if e.is_offset_out_of_range() => {
                        out.push((want, Err(Miss::OutOfRange)));
                    }
                    Err(e) => {
                        ctx.forget_leader(&want.tp.topic, want.tp.partition);
                        ctx.failing(&format!("fetch from {}", want.tp), &e);
                        let miss = gone_or_made_again(ctx, w, &e, &mut ids_now).await;
                        out.push((want, Err(miss)));
                    }
                }
            }
        }
        Err(e) => {
            ctx.failing(&format!("fetch from broker {leader}"), &e);
            for (want, w) in wants.into_iter().zip(&wire) {
                ctx.forget_leader(&want.tp.topic, want.tp.partition);
                let miss = gone_or_made_again(ctx, w, &e, &mut ids_now).await;
                out.push((want, Err(miss)));
            }
        }
    }
    out
}

/// After a fetch by id found no such topic: whether one of the same name exists with another
/// id (made again), or the topic is simply gone for now. `ids_now` keeps the answers.
pub(super) async fn gone_or_made_again(
    ctx: &Context,
    want: &WireWant,
    e: &baton_kafka::Error,
    ids_now: &mut BTreeMap<String, Option<uuid::Uuid>>,
) -> Miss {
    let Some(used) = want.topic_id else {
        return Miss::Failed;
    };
    // Kafka answers UNKNOWN_TOPIC_ID; nisshi 0.8.1 UNKNOWN_TOPIC_OR_PARTITION.
    if !(e.is_unknown_topic_id() || e.is_unknown_topic()) {
        return Miss::Failed;
    }
    if !ids_now.contains_key(&want.topic) {
        let asked = ctx
            .client
            .topic_ids(std::slice::from_ref(&want.topic))
            .await;
        let now = asked.ok().and_then(|ids| ids.get(&want.topic).copied());
        ids_now.insert(want.topic.clone(), now);
    }
    match ids_now[&want.topic] {
        Some(now) if now != used => Miss::MadeAgain(now),
        _ => Miss::Failed,
    }
}

/// The fault suite's armed `baton-unreadable` point, if any.
fn armed_unreadable() -> Option<String> {
    fail::fail_point!("baton-unreadable", |arg| arg);
    None
}

/// The fault suite's unreadable batch, armed as `baton-unreadable=return(TOPIC-P@OFFSET)`:
/// the record at OFFSET of that partition reads as a corrupt one-record batch. Brokers
/// refuse such batches on produce (Kafka and nisshi both parse every record), so only a
/// damaged disk makes one; the suite makes it here, where the decoder hands it over. Nothing
/// without the `failpoints` feature.
pub(super) fn inject_unreadable(want: &FetchWant, f: &mut Fetched) {
    let armed = armed_unreadable();
    let Some((tp, at)) = armed.as_deref().and_then(|a| a.rsplit_once('@')) else {
        return;
    };
    let Ok(at) = at.parse::<i64>() else {
        return;
    };
    let reached = f.records.last().is_some_and(|r| r.offset >= at);
    if tp != want.tp.to_string() || want.offset > at || !(reached || want.offset == at) {
        return;
    }
    f.records.retain(|r| r.offset < at);
    f.next_offset = (want.offset < at).then_some(at);
    f.corrupt = Some(baton_kafka::batch::CorruptBatch {
        base_offset: at,
        end: Some(at + 1),
        reason: "injected by the baton-unreadable fail point".into(),
    });
}
