//! Topics the thread writes that went away: a changelog written again from its store (a
//! re-seed, [`crate::reseed`]), and changelog and output topics made again.

use super::*;
use crate::layout::from_changelog;
use crate::store::StoreError;
use crate::topology::ChangelogHeaders;

/// How often a thread with running actives asks the broker whether their changelogs are still
/// the topics it knows. An active writes its changelog only when input comes: without this, a
/// changelog deleted under an idle application is found only by the next batch, perhaps after
/// its task moved to an instance with no state, which would restore it young and empty.
const CHANGELOG_CHECK: Duration = Duration::from_secs(5);

/// What the broker says of each topic asked: its id, or `None` for no such topic.
type Presence = baton_kafka::Result<BTreeMap<String, Option<uuid::Uuid>>>;

/// The periodic changelog check: one request in flight at most, the next one due.
#[derive(Default)]
pub(super) struct ChangelogCheck {
    /// The request, and the ids this thread knew when it was sent: a topic whose id changed
    /// meanwhile (a fetch or a re-seed learnt it) is not judged by an answer older than that.
    asked: Option<(JoinHandle<Presence>, BTreeMap<String, uuid::Uuid>)>,
    next: Option<Instant>,
}

impl Driver {
    /// Writes the stores of `changelogs` into them again ([`crate::reseed`]), then makes their
    /// new ends the stores' checkpoints.
    pub(super) async fn reseed(
        &mut self,
        m: &ThreadMachine,
        task: TaskId,
        request: RequestId,
        changelogs: &[usize],
    ) -> Event {
        let failed = Event::ReseedFailed { task, request };
        let tps = self.ctx.wire.changelog_partitions(task);
        let mut ends = Vec::with_capacity(changelogs.len());
        for &idx in changelogs {
            let (Some(tp), Some(s)) = (
                tps.get(idx),
                self.tasks.get(&task).and_then(|t| t.stores.get(idx)),
            ) else {
                return failed;
            };
            let (store, layout, checkpoint) =
                (s.store.clone(), s.catchup.layout(), s.catchup.position());
            let headers = self.ctx.topology.changelog_headers(&s.name);
            tracing::warn!(
                task = %task,
                changelog = %tp,
                checkpoint,
                "the changelog ends before its store's checkpoint (deleted and made again?) \
                 while the store is intact: writing the store's contents into it again"
            );
            // Asked before the writes: were it made again once more meanwhile, the store
            // would record the older id, and the next open would write it again.
            let Ok(id) = self.current_id(task, &tp.topic).await else {
                return failed;
            };
            let Some(newer) = self.absorb_new_life(task, tp, &store, layout).await else {
                return failed;
            };
            let Some((end, written)) = self
                .reseed_one(m, task, tp, &store, (layout, headers))
                .await
            else {
                return failed;
            };
            if newer > 0 {
                tracing::info!(task = %task, changelog = %tp, records = newer, "took in what the new changelog held first: newer than the store");
            }
            // No writes, only the checkpoint and whose it is, durably: the changelog ends
            // there now.
            let marked = blocking(|| match id {
                Some(id) => store.mark_changelog(id, Some(end)),
                None => store.apply(&[], Some(end)),
            });
            if let Err(e) = marked {
                self.store_failures.failed(
                    task,
                    "recording a re-seeded changelog's end",
                    &e.to_string(),
                    &self.ctx.cfg.state_dir,
                );
                return failed;
            }
            if let Some(s) = self
                .tasks
                .get_mut(&task)
                .and_then(|t| t.stores.get_mut(idx))
            {
                s.catchup = Catchup::new(end, layout);
            }
            tracing::warn!(task = %task, changelog = %tp, records = written, end, "the changelog holds the store's contents again");
            ends.push((idx, end));
        }
        Event::Reseeded {
            task,
            request,
            ends,
        }
    }

    /// The id of `topic` as the broker has it now (`None`: the broker gives none), this
    /// thread's other tasks told if it changed; `Err`: not known now, try again.
    async fn current_id(
        &mut self,
        task: TaskId,
        topic: &str,
    ) -> std::result::Result<Option<uuid::Uuid>, ()> {
        let known = self.topic_ids.get(topic).copied();
        match self.ctx.client.topic_ids(&[topic.to_owned()]).await {
            Ok(ids) => {
                let now = ids.get(topic).copied();
                if let Some(id) = now.filter(|&id| known != Some(id)) {
                    self.made_again(topic, id, Some(task));
                }
                Ok(now)
            }
            Err(e) => {
                self.ctx.failing(&format!("reading the id of {topic}"), &e);
                Err(())
            }
        }
    }

    /// Applies what the changelog made again holds already onto the store, before the store is
    /// written into it: every record there came after it was made again (this task's batches
    /// whose store write failed, or was lost in a crash, after the changelog took them), so it
    /// is newer than the store's value for its key. The records taken in; `None`: try again.
    async fn absorb_new_life(
        &mut self,
        task: TaskId,
        tp: &TopicPartition,
        store: &TaskStore,
        layout: Layout,
    ) -> Option<u64> {
        let end = match self.io.end_offsets(std::slice::from_ref(tp)).await {
            Ok(ends) => match ends.get(tp) {
                Some(&end) => end,
                None => {
                    tracing::debug!(changelog = %tp, "no end listed yet; trying again later");
                    return None;
                }
            },
            Err(e) => {
                self.ctx.failing(&format!("listing the end of {tp}"), &e);
                return None;
            }
        };
        let (mut at, mut taken) = (0, 0u64);
        while at < end {
            let read = async {
                let leader = self.ctx.leader(&tp.topic, tp.partition).await?;
                let bytes = RESEED_PAGE_BYTES as i32;
                self.io
                    .fetch(&leader, &tp.topic, tp.partition, at, bytes, FETCH_WAIT_MS)
                    .await
            };
            let f = match read.await {
                Ok(f) => f,
                Err(e) => {
                    self.ctx
                        .failing(&format!("reading {tp} before writing it again"), &e);
                    return None;
                }
            };
            let next = next_position(&f, at, end);
            if next <= at {
                tracing::debug!(changelog = %tp, at, end, "reading a changelog made again: no progress; trying again later");
                return None;
            }
            let writes: Vec<Write> = f
                .records
                .iter()
                .filter(|r| r.offset < end)
                .filter_map(|r| {
                    let value = from_changelog(layout, r.timestamp, r.value.clone());
                    Some((r.key.as_ref()?.to_vec(), value.map(|v| v.to_vec())))
                })
                .collect();
            if let Err(e) = blocking(|| store.apply(&writes, None)) {
                let state_dir = &self.ctx.cfg.state_dir;
                let what = "taking in a changelog made again before writing it again";
                self.store_failures
                    .failed(task, what, &e.to_string(), state_dir);
                return None;
            }
            taken += writes.len() as u64;
            at = next;
        }
        Some(taken)
    }

    /// Produces `store`'s contents to `tp`; its end after them and the records written.
    pub(super) async fn reseed_one(
        &mut self,
        m: &ThreadMachine,
        task: TaskId,
        tp: &TopicPartition,
        store: &TaskStore,
        (layout, headers): (Layout, ChangelogHeaders),
    ) -> Option<(i64, u64)> {
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        let mut at = reseed::Cursor::Start;
        let mut end = None;
        let mut written = 0u64;
        let writer = self.writer(0);
        while at != reseed::Cursor::Done {
            let read = blocking(|| reseed::page(store, layout, &at, RESEED_PAGE_BYTES, now_ms));
            let page = match read {
                Ok(p) => p,
                Err(e) => {
                    let state_dir = &self.ctx.cfg.state_dir;
                    let what = "reading a store to write it into its changelog";
                    self.store_failures
                        .failed(task, what, &e.to_string(), state_dir);
                    return None;
                }
            };
            at = page.next;
            if page.records.is_empty() {
                continue;
            }
            if !m.may_write(self.now()) {
                return None;
            }
            let sent = writer.produce(tp, &page.records, Some(&page.timestamps), headers);
            match sent.await {
                Ok(next) => end = Some(next),
                Err(Produced::Failed) => return None,
                Err(Produced::Oversized { index }) => {
                    let bytes = baton_kafka::records::record_bytes(&page.records[index]);
                    tracing::error!(task = %task, changelog = %tp, record_bytes = bytes, "a store value is larger than any record batch the changelog takes (made again with a lower max.message.bytes?): raise it; the task tries again");
                    return None;
                }
            }
            written += page.records.len() as u64;
        }
        match end {
            Some(end) => Some((end, written)),
            // An empty store: the changelog's end as it is.
            None => match self.io.end_offsets(std::slice::from_ref(tp)).await {
                Ok(ends) => ends.get(tp).map(|&e| (e, 0)),
                Err(e) => {
                    self.ctx.failing(&format!("listing the end of {tp}"), &e);
                    None
                }
            },
        }
    }

    /// Every [`CHANGELOG_CHECK`], asks the broker about the changelogs of this thread's
    /// running actives (those with a known id; never a source topic read as a table). One
    /// that is gone is made again; one whose id changed is told to each task here that holds
    /// it ([`Driver::made_again`]): a running active that holds state writes its store into
    /// the new topic at once, as when its next batch finds it made again.
    pub(super) async fn watch_changelogs(&mut self, m: &ThreadMachine) {
        if let Some((asked, knew)) = self.changelog_check.asked.take_if(|h| h.0.is_finished()) {
            match asked.await {
                Ok(Ok(mut presence)) => {
                    presence.retain(|topic, _| self.topic_ids.get(topic) == knew.get(topic));
                    self.changelogs_seen(presence).await
                }
                Ok(Err(e)) => self.ctx.failing("checking the changelog topics", &e),
                Err(e) => {
                    tracing::warn!(thread = %self.name, error = %e, "checking the changelog topics")
                }
            }
        }
        let now = Instant::now();
        if self.changelog_check.asked.is_some()
            || self.changelog_check.next.is_some_and(|next| now < next)
        {
            return;
        }
        self.changelog_check.next = Some(now + CHANGELOG_CHECK);
        let mut topics = std::collections::BTreeSet::new();
        for t in m.tasks().values().filter(|t| t.is_running_active()) {
            let sources = self.ctx.wire.source_partitions(t.id);
            for tp in self.ctx.wire.changelog_partitions(t.id) {
                if !sources.contains(&tp) && self.topic_ids.contains_key(&tp.topic) {
                    topics.insert(tp.topic);
                }
            }
        }
        if topics.is_empty() {
            return;
        }
        let topics: Vec<String> = topics.into_iter().collect();
        let io = self.io.clone();
        let asked = tokio::spawn(async move { io.topic_presence(&topics).await });
        self.changelog_check.asked = Some((asked, self.topic_ids.clone()));
    }

    async fn changelogs_seen(&mut self, presence: BTreeMap<String, Option<uuid::Uuid>>) {
        for (topic, id) in presence {
            match id {
                None => {
                    self.writer(0).make_changelog_again(&topic).await;
                    // Its new id is asked for at once, not in 5 s.
                    self.changelog_check.next = None;
                }
                Some(id) if self.topic_ids.get(&topic) != Some(&id) => {
                    self.made_again(&topic, id, None)
                }
                Some(_) => {}
            }
        }
    }

    /// Compares each opened store's changelog id with the one this thread knows: a store with
    /// none recorded (new, or from before ids were recorded) is marked with it, and the stores
    /// that recorded another are returned (index, their id) to be settled with the broker.
    pub(super) fn changelog_ids(
        &mut self,
        task: TaskId,
        stores: &[OpenedStore],
    ) -> std::result::Result<Vec<(usize, uuid::Uuid)>, StoreError> {
        let tps = self.ctx.wire.changelog_partitions(task);
        let mut older = Vec::new();
        for (i, s) in stores.iter().enumerate() {
            let known = tps.get(i).and_then(|tp| self.topic_ids.get(&tp.topic));
            match (s.changelog_id, known) {
                (Some(had), Some(&now)) if had != now => older.push((i, had)),
                (None, Some(&now)) => {
                    if let Err(e) = blocking(|| s.store.mark_changelog(now, None)) {
                        let (what, root) =
                            ("recording the changelog's id", &self.ctx.cfg.state_dir);
                        self.store_failures.failed(task, what, &e.to_string(), root);
                        return Err(e);
                    }
                }
                _ => {}
            }
        }
        Ok(older)
    }

    /// Stores of `task` whose checkpoint counts in another changelog topic than the one this
    /// thread knows by that name. The broker says which topic is current: when it is the
    /// store's, this thread's knowledge was old and is brought up to date (its other tasks
    /// told); when not, the changelog was deleted and made again since the store was last
    /// written, its checkpoint is no offset of the new topic, and the machine decides what the
    /// store becomes ([`Event::ChangelogRecreated`]).
    pub(super) async fn checkpoints_of_older_changelogs(
        &mut self,
        task: TaskId,
        older: &[(usize, uuid::Uuid)],
    ) {
        let tps = self.ctx.wire.changelog_partitions(task);
        let mut topics: Vec<String> = older
            .iter()
            .filter_map(|&(i, _)| tps.get(i).map(|tp| tp.topic.clone()))
            .collect();
        topics.dedup();
        match self.ctx.client.topic_ids(&topics).await {
            Ok(now) => {
                for (topic, id) in now {
                    if self.topic_ids.get(&topic) != Some(&id) {
                        self.made_again(&topic, id, Some(task));
                    }
                }
            }
            Err(e) => self.ctx.failing("reading changelog topic ids", &e),
        }
        for &(changelog, had) in older {
            let Some(tp) = tps.get(changelog) else {
                continue;
            };
            let now = self.topic_ids.get(&tp.topic).copied();
            if now == Some(had) {
                continue;
            }
            tracing::warn!(
                task = %task,
                changelog = %tp,
                store_id = %had,
                topic_id = %now.map_or("-".into(), |n| n.to_string()),
                "the store's checkpoint counts in an earlier topic of this name: the changelog \
                 was deleted and made again since the store was last written"
            );
            self.local
                .push_back(Event::ChangelogRecreated { task, changelog });
        }
    }
}

impl Writer {
    /// One of this application's changelogs is gone (deleted under it): made again as
    /// `prepare` makes it, always, since it is the application's own. The task that writes
    /// to it next finds it younger than its store and writes the store into it (a re-seed).
    pub(super) async fn make_changelog_again(&self, topic: &str) {
        let topology = &self.ctx.topology;
        let Some((sub, s)) = self.ctx.wire.subtopologies.iter().find(|(_, s)| {
            s.changelog_topics.iter().any(|t| t == topic)
                && !s.source_topics.iter().any(|t| t == topic)
        }) else {
            return;
        };
        let retention = topology
            .stores_of(*sub)
            .into_iter()
            .find(|store| topology.changelog_topic(store) == topic)
            .and_then(|store| topology.changelog_retention_ms(store));
        let partitions = s.partitions as i32;
        let made =
            crate::instance::create_changelog(&self.ctx.client, topic, partitions, retention).await;
        match made {
            Ok(()) => tracing::warn!(
                topic,
                partitions = s.partitions,
                "the changelog topic was gone; made it again: each task writes its store into it before going on"
            ),
            Err(e) => self
                .ctx
                .failing(&format!("making changelog topic {topic} again"), &e),
        }
    }

    /// `--create-missing-outputs`: makes output topic `topic`, which the broker says does not
    /// exist, again with the partitions it had at start. Changelogs and inputs are never made
    /// here; without the flag the task waits for an operator to make the topic.
    pub(super) async fn make_output_again(&self, topic: &str) {
        let Some(&partitions) = self.ctx.sink_partitions.get(topic) else {
            return;
        };
        if !self.ctx.cfg.create_missing_outputs {
            return;
        }
        let new = baton_kafka::client::NewTopic {
            name: topic.to_owned(),
            partitions: partitions as i32,
            compacted: false,
        };
        match self.ctx.client.create_topics(&[new]).await {
            Ok(()) => tracing::warn!(
                topic,
                partitions,
                "the output topic was gone; made it again (--create-missing-outputs)"
            ),
            Err(e) => self
                .ctx
                .failing(&format!("making output topic {topic} again"), &e),
        }
    }
}
