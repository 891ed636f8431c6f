//! A batch's writes after it ran: dead letters, outputs (sinks and repartition topics) and
//! changelogs, each through one produce path that splits what no batch can carry.

use super::*;
use crate::topology::ChangelogHeaders;
use baton_kafka::records::PartitionBatch;

/// The thread's writing side. A batch's writes own a copy and run beside the thread, which
/// goes on with other tasks' records while they are in flight.
#[derive(Clone)]
pub(super) struct Writer {
    pub ctx: Arc<Context>,
    /// The thread's own connections for produce.
    pub io: Arc<Client>,
    /// The thread's clock, as the machine's.
    pub epoch: Instant,
}

/// What the machine allows a batch's writes, fixed when they are handed over.
#[derive(Debug, Clone, Copy)]
pub(super) struct Allowed {
    /// The last moment a write may start ([`ThreadMachine::write_deadline`]).
    until: Option<Duration>,
    oversized_output: OversizedAnswer,
    oversized_dead_letter: OversizedAnswer,
}

impl Allowed {
    pub fn by(m: &ThreadMachine) -> Allowed {
        Allowed {
            until: m.write_deadline(),
            oversized_output: m.oversized(OversizedWrite::Output),
            oversized_dead_letter: m.oversized(OversizedWrite::DeadLetter),
        }
    }

    /// For a commit's flush of the record cache ([`ThreadMachine::flush_deadline`]).
    pub fn for_flush(m: &ThreadMachine) -> Allowed {
        Allowed {
            until: m.flush_deadline(),
            ..Allowed::by(m)
        }
    }
}

/// A batch's writes as handed over: what its records built, and where it came from.
pub(super) struct BatchWrites {
    pub writes: BTreeMap<usize, StoreWrites>,
    pub tables: BTreeMap<usize, records::TableUpdates>,
    pub outputs: Vec<Emitted>,
    /// (source, offset, first output) of each input record with output.
    pub origins: Vec<(usize, i64, usize)>,
    pub dead_letters: Vec<(String, KeyValue)>,
    /// The task's source partitions, as the batch's inputs index them.
    pub sources: Vec<TopicPartition>,
    pub inputs: Vec<Input>,
    /// Each store's changelog layout and the headers its records with a value carry.
    pub logs: Vec<(Layout, ChangelogHeaders)>,
}

/// How a batch's writes ended: per store, its writes and the changelog offset after them;
/// or the event that ends the batch.
pub(super) type Written = std::result::Result<Vec<(usize, Vec<Write>, i64)>, Event>;

impl Writer {
    fn may_write(&self, allowed: Allowed) -> bool {
        allowed
            .until
            .is_some_and(|until| self.epoch.elapsed() <= until)
    }

    /// Writes what a batch's records built, in the order that keeps state behind outputs:
    /// dead letters, outputs, then changelogs (the stores take them after, on the thread).
    pub(super) async fn write_batch(
        self,
        allowed: Allowed,
        task: TaskId,
        batch: RequestId,
        w: BatchWrites,
    ) -> Written {
        let failed = Event::BatchFailed {
            task,
            batch,
            output_acknowledged: false,
        };
        let BatchWrites {
            writes,
            tables,
            outputs,
            origins,
            dead_letters,
            sources,
            inputs,
            logs,
        } = w;
        let origin_of = |i: usize| {
            let at = origins.partition_point(|o| o.2 <= i);
            origins
                .get(at)
                .and_then(|&(s, offset, _)| Some((sources.get(s)?.clone(), offset)))
        };
        // Before the batch's own output: a batch run again may repeat a dead letter (the
        // dead-letter topic is at least once), but never loses one.
        if !self.write_dead_letters(allowed, task, dead_letters).await {
            return Err(failed);
        }
        // Outputs first, then the changelog: a batch whose output failed (its topic gone, say)
        // leaves no trace in the state, and a crash between the two repeats output with the
        // same values rather than counting the batch twice in the store.
        if let Some(stop) = self
            .write_outputs(allowed, task, batch, outputs, &origin_of)
            .await
        {
            return Err(stop);
        }
        // A table's topic is its changelog: its writes are durable already.
        let mut applied: Vec<(usize, Vec<Write>, i64)> = tables
            .into_iter()
            .map(|(idx, (writes, next))| (idx, sorted(writes), next))
            .collect();
        let input = || input_ranges(&sources, &inputs);
        let written = self
            .write_changelogs(allowed, task, batch, &logs, writes, &input)
            .await?;
        applied.extend(written);
        Ok(applied)
    }

    /// Sends the records the application failed on to their dead-letter topics; `false`:
    /// not all were written (the batch is retried).
    pub(super) async fn write_dead_letters(
        &self,
        allowed: Allowed,
        task: TaskId,
        dead_letters: Vec<(String, KeyValue)>,
    ) -> bool {
        if dead_letters.is_empty() {
            return true;
        }
        if !self.may_write(allowed) {
            return false;
        }
        let mut by_topic: BTreeMap<String, Vec<KeyValue>> = BTreeMap::new();
        for (topic, record) in dead_letters {
            by_topic.entry(topic).or_default().push(record);
        }
        for (topic, records) in by_topic {
            if !self.send_dead_letters(allowed, task, &topic, records).await {
                return false;
            }
        }
        true
    }

    /// Writes a batch's output records, every sink partition's in one produce per leader.
    /// `Some`: the event that ends the batch (a write failed, or an oversized record stopped
    /// the task).
    pub(super) async fn write_outputs(
        &self,
        allowed: Allowed,
        task: TaskId,
        batch_id: RequestId,
        records: Vec<Emitted>,
        origin_of: &(dyn Fn(usize) -> Option<(TopicPartition, i64)> + Sync),
    ) -> Option<Event> {
        let failed = || {
            Some(Event::BatchFailed {
                task,
                batch: batch_id,
                output_acknowledged: false,
            })
        };
        let by_partition = self.outputs_by_partition(task, records);
        if by_partition.is_empty() {
            return None;
        }
        if !self.may_write(allowed) {
            return failed();
        }
        let parts: Vec<Part> = by_partition
            .iter()
            .map(|(tp, out)| Part {
                tp,
                records: &out.records,
                stamps: Some(&out.stamps),
                headers: &[],
            })
            .collect();
        let answers = self.produce_each(&parts).await;
        drop(parts);
        for ((tp, mut out), mut answer) in by_partition.into_iter().zip(answers) {
            loop {
                let index = match answer {
                    Ok(_) => break,
                    Err(Produced::Failed) => return failed(),
                    Err(Produced::Oversized { index }) => index,
                };
                let at = OversizedOutput {
                    task,
                    batch: batch_id,
                    tp: &tp,
                    record: &out.records[index],
                    input: origin_of(out.outputs[index]),
                };
                if let Some(stop) = self.oversized_output(allowed, at) {
                    return Some(stop);
                }
                // What came before it is acknowledged; go on after it.
                out.records.drain(..=index);
                out.outputs.drain(..=index);
                out.stamps.drain(..=index);
                if out.records.is_empty() {
                    break;
                }
                if !self.may_write(allowed) {
                    return failed();
                }
                answer = self
                    .produce(&tp, &out.records, Some(&out.stamps), &[])
                    .await;
            }
        }
        None
    }

    /// A batch's output records by the partition each goes to, in order.
    fn outputs_by_partition(
        &self,
        task: TaskId,
        records: Vec<Emitted>,
    ) -> Vec<(TopicPartition, OutputBatch)> {
        let ctx = &self.ctx;
        let sinks = ctx.topology.sinks_of(task.subtopology);
        let mut by_partition: BTreeMap<(u16, i32), OutputBatch> = BTreeMap::new();
        for (i, Emitted { sink, record: r }) in records.into_iter().enumerate() {
            // Numbered by the topology when it was built: every index is one of its sinks.
            let topic = &sinks[sink as usize];
            let partitions = ctx.sink_partitions.get(topic).copied().unwrap_or(1);
            // A partition a step chose, if the topic has it (a left table's topic grown
            // since its row asked keeps the row's key's).
            let p = match r.partition {
                Some(p) if p < partitions => p,
                _ => partition_for(&r.key, partitions),
            } as i32;
            let out = by_partition.entry((sink, p)).or_default();
            out.records.push((Some(r.key), r.value));
            out.outputs.push(i);
            out.stamps.push(r.timestamp);
        }
        by_partition
            .into_iter()
            .map(|((sink, p), out)| (TopicPartition::new(&sinks[sink as usize], p), out))
            .collect()
    }

    /// What the policy says of an output record no batch can carry, logged: `Some`, the
    /// event that stops the task; `None`, the record is skipped.
    fn oversized_output(&self, allowed: Allowed, at: OversizedOutput) -> Option<Event> {
        let OversizedOutput {
            task,
            batch,
            tp,
            record,
            input,
        } = at;
        let record_bytes = baton_kafka::records::record_bytes(record);
        let input = input.map_or("unknown".into(), |(tp, o)| format!("{tp} offset {o}"));
        match allowed.oversized_output {
            OversizedAnswer::StopTask => {
                let fate = failed_task_fate(self.ctx.cfg.task_retry);
                tracing::error!(
                    task = %task,
                    partition = %tp,
                    input = %input,
                    bytes = record_bytes,
                    "task {task}: an output record for {tp} ({record_bytes} bytes), \
                     from input {input}, is larger than any record batch the broker \
                     takes; stopping this task only (on-oversized-record=fail): {fate}"
                );
                Some(Event::RecordFailed { task, batch })
            }
            OversizedAnswer::Skip => {
                tracing::error!(task = %task, partition = %tp, input = %input, bytes = record_bytes, "skipping an output record larger than any record batch the broker takes (on-oversized-record=skip)");
                self.ctx.status.add_skipped(task);
                None
            }
        }
    }

    /// Writes a batch's store writes to their changelogs in Kafka's layout (each store's
    /// `logs[idx]`: its layout, and the headers its records with a value carry), all in one
    /// produce per leader: per store, its writes and the changelog offset after them. `Err`:
    /// the event that ends the batch. `input` names the batch's input, for an error.
    pub(super) async fn write_changelogs(
        &self,
        allowed: Allowed,
        task: TaskId,
        batch_id: RequestId,
        logs: &[(Layout, ChangelogHeaders)],
        writes: BTreeMap<usize, StoreWrites>,
        input: &(dyn Fn() -> String + Sync),
    ) -> std::result::Result<Vec<(usize, Vec<Write>, i64)>, Event> {
        let failed = || Event::BatchFailed {
            task,
            batch: batch_id,
            output_acknowledged: false,
        };
        let changelogs = self.ctx.wire.changelog_partitions(task);
        let mut stores = Vec::with_capacity(writes.len());
        for (idx, writes) in writes {
            let writes = sorted(writes);
            let (wire, stamps): (Vec<KeyValue>, Vec<i64>) = writes
                .iter()
                .map(|(k, (v, ts))| {
                    let (value, ts) = to_changelog(logs[idx].0, v.as_deref(), *ts);
                    let value = value.map(Bytes::copy_from_slice);
                    ((Some(Bytes::from(k.clone())), value), ts)
                })
                .unzip();
            if !wire.is_empty() {
                stores.push((idx, writes, wire, stamps));
            }
        }
        if stores.is_empty() {
            return Ok(Vec::new());
        }
        if !self.may_write(allowed) {
            return Err(failed());
        }
        let parts: Vec<Part> = stores
            .iter()
            .map(|(idx, _, wire, stamps)| Part {
                tp: &changelogs[*idx],
                records: wire,
                stamps: Some(stamps),
                headers: logs[*idx].1,
            })
            .collect();
        let answers = self.produce_each(&parts).await;
        drop(parts);
        let mut applied = Vec::with_capacity(stores.len());
        for ((idx, writes, wire, _), answer) in stores.into_iter().zip(answers) {
            match answer {
                Ok(next) => {
                    let writes = writes.into_iter().map(|(k, (v, _))| (k, v)).collect();
                    applied.push((idx, writes, next));
                }
                Err(Produced::Failed) => return Err(failed()),
                Err(Produced::Oversized { index }) => {
                    // A store value no batch can carry cannot be made durable: never skipped,
                    // whatever the output policy. The task stops holding its input.
                    let (key, value) = &wire[index];
                    tracing::error!(
                        task = %task,
                        changelog = %changelogs[idx],
                        key_bytes = key.as_ref().map_or(0, Bytes::len),
                        value_bytes = value.as_ref().map_or(0, Bytes::len),
                        input = %input(),
                        "a changelog record is larger than any record batch the broker takes; \
                         stopping this task only (its input stays unprocessed): raise the \
                         changelog's max.message.bytes, then restart the instance ({})",
                        failed_task_fate(self.ctx.cfg.task_retry)
                    );
                    return Err(Event::RecordFailed {
                        task,
                        batch: batch_id,
                    });
                }
            }
        }
        Ok(applied)
    }

    /// Writes the records the application failed on to the dead-letter topic, partitioned by
    /// key as any output; false when the broker did not take them (the batch runs again).
    pub(super) async fn send_dead_letters(
        &self,
        allowed: Allowed,
        task: TaskId,
        topic: &str,
        records: Vec<KeyValue>,
    ) -> bool {
        let partitions = self.ctx.sink_partitions.get(topic).copied().unwrap_or(1);
        let mut by_partition: BTreeMap<i32, Vec<KeyValue>> = BTreeMap::new();
        for r in records {
            let p = partition_for(r.0.as_deref().unwrap_or_default(), partitions) as i32;
            by_partition.entry(p).or_default().push(r);
        }
        for (p, mut batch) in by_partition {
            let tp = TopicPartition::new(topic, p);
            while !batch.is_empty() {
                match self.produce(&tp, &batch, None, &[]).await {
                    Ok(_) => break,
                    Err(Produced::Failed) => return false,
                    Err(Produced::Oversized { index, .. }) => {
                        let bytes = baton_kafka::records::record_bytes(&batch[index]);
                        match allowed.oversized_dead_letter {
                            OversizedAnswer::Skip => {
                                tracing::error!(task = %task, partition = %tp, bytes, "a record for the dead-letter topic is larger than any batch it takes; it is logged here and not written");
                                batch.drain(..=index);
                            }
                            OversizedAnswer::StopTask => return false,
                        }
                    }
                }
            }
        }
        true
    }

    /// Produces each part to its partition as [`Driver::produce`] does one, in fewer round
    /// trips: the parts whose records fit one batch go to their leader in requests of many
    /// partitions (so a batch's writes take one round trip per leader, not one per
    /// partition); the others, and any such batch refused as too large, go `produce`'s way,
    /// which splits them. Answers come in the order of `parts`.
    pub(super) async fn produce_each(
        &self,
        parts: &[Part<'_>],
    ) -> Vec<std::result::Result<i64, Produced>> {
        let mut answers: Vec<Option<std::result::Result<i64, Produced>>> =
            parts.iter().map(|_| None).collect();
        let limit = self.ctx.batch_limit();
        let mut by_leader: BTreeMap<String, Vec<usize>> = BTreeMap::new();
        for (i, p) in parts.iter().enumerate() {
            if p.records.is_empty()
                || baton_kafka::records::fitting(p.records, limit) < p.records.len()
            {
                continue;
            }
            // A partition without a known leader goes `produce`'s way, which says why.
            if let Ok(leader) = self.ctx.leader(&p.tp.topic, p.tp.partition).await {
                by_leader.entry(leader).or_default().push(i);
            }
        }
        for (leader, members) in by_leader {
            for request in requests_of(parts, &members) {
                self.send_parts(&leader, parts, request, &mut answers).await;
            }
        }
        let mut done = Vec::with_capacity(parts.len());
        for (p, answer) in parts.iter().zip(answers) {
            done.push(match answer {
                Some(answer) => answer,
                None => self.produce(p.tp, p.records, p.stamps, p.headers).await,
            });
        }
        done
    }

    /// One request of [`Driver::produce_each`]: `members` of `parts`, all led by `leader`.
    /// A part refused as too large is left unanswered.
    async fn send_parts(
        &self,
        leader: &str,
        parts: &[Part<'_>],
        members: &[usize],
        answers: &mut [Option<std::result::Result<i64, Produced>>],
    ) {
        let mut sent = Vec::with_capacity(members.len());
        let mut batches = Vec::with_capacity(members.len());
        for &i in members {
            let p = &parts[i];
            // One that cannot be encoded goes `produce`'s way, which reports it.
            if let Ok(batch) = baton_kafka::records::encode_records(p.records, p.stamps, p.headers)
            {
                batches.push(PartitionBatch {
                    topic: p.tp.topic.clone(),
                    partition: p.tp.partition,
                    batch,
                });
                sent.push(i);
            }
        }
        match self.io.produce_batches(leader, batches).await {
            Ok(results) => {
                for (i, result) in sent.into_iter().zip(results) {
                    let p = &parts[i];
                    answers[i] = match result {
                        Ok(base) => {
                            self.ctx.recovered(|| format!("produce to {}", p.tp));
                            Some(Ok(base + p.records.len() as i64))
                        }
                        Err(e) if e.is_message_too_large() => None,
                        Err(e) => Some(Err(self.produce_failed(p.tp, &e))),
                    };
                }
            }
            Err(e) => {
                for i in sent {
                    answers[i] = Some(Err(self.produce_failed(parts[i].tp, &e)));
                }
            }
        }
    }

    fn produce_failed(&self, tp: &TopicPartition, e: &baton_kafka::Error) -> Produced {
        self.ctx.forget_leader(&tp.topic, tp.partition);
        self.ctx.failing(&format!("produce to {tp}"), e);
        Produced::Failed
    }

    /// Produces `records` to a partition in batches the broker takes; the offset after the
    /// last. A refusal as too large shrinks the batches and sends again; a record refused on
    /// its own is [`Produced::Oversized`] (those before it are written). Failures are logged.
    /// Stamped records with a value carry `value_headers`.
    pub(super) async fn produce(
        &self,
        tp: &TopicPartition,
        records: &[KeyValue],
        timestamps: Option<&[i64]>,
        value_headers: &[(&str, &[u8])],
    ) -> std::result::Result<i64, Produced> {
        let mut start = 0;
        let mut next = 0;
        // Records per batch after a refusal: halves each time, down to one, whatever the
        // byte limit learnt so far (a topic's limit can be far below the broker's).
        let mut cap = usize::MAX;
        while start < records.len() {
            let limit = self.ctx.batch_limit();
            let n = baton_kafka::records::fitting(&records[start..], limit).min(cap);
            let chunk = &records[start..start + n];
            let leader = match self.ctx.leader(&tp.topic, tp.partition).await {
                Ok(l) => l,
                Err(e) => {
                    self.ctx.failing(&format!("produce to {tp}"), &e);
                    if e.is_unknown_topic() {
                        self.make_changelog_again(&tp.topic).await;
                        self.make_output_again(&tp.topic).await;
                    }
                    return Err(Produced::Failed);
                }
            };
            let sent = match timestamps {
                Some(ts) => {
                    self.io
                        .produce_with_headers(
                            &leader,
                            &tp.topic,
                            tp.partition,
                            chunk,
                            &ts[start..start + n],
                            value_headers,
                        )
                        .await
                }
                None => {
                    self.io
                        .produce(&leader, &tp.topic, tp.partition, chunk)
                        .await
                }
            };
            match sent {
                Ok(base) => {
                    self.ctx.recovered(|| format!("produce to {tp}"));
                    next = base + n as i64;
                    start += n;
                }
                Err(e) if e.is_message_too_large() && n > 1 => {
                    let bytes = chunk.iter().map(baton_kafka::records::record_bytes).sum();
                    self.ctx.shrink_batch_limit(bytes);
                    cap = n / 2;
                }
                Err(e) if e.is_message_too_large() => {
                    return Err(Produced::Oversized { index: start });
                }
                Err(e) => return Err(self.produce_failed(tp, &e)),
            }
        }
        Ok(next)
    }
}

/// Why a produce did not write everything.
pub(super) enum Produced {
    /// Logged; the batch is retried.
    Failed,
    /// `records[index]` is larger than any batch the broker takes; those before it are written.
    Oversized { index: usize },
}

/// One partition's records for [`Driver::produce_each`].
pub(super) struct Part<'a> {
    pub tp: &'a TopicPartition,
    pub records: &'a [KeyValue],
    pub stamps: Option<&'a [i64]>,
    pub headers: &'a [(&'a str, &'a [u8])],
}

/// A sink partition's share of a batch's outputs: the records, the index of each among the
/// batch's outputs (to name its input) and their timestamps.
#[derive(Default)]
pub(super) struct OutputBatch {
    records: Vec<KeyValue>,
    outputs: Vec<usize>,
    stamps: Vec<i64>,
}

/// An output record no batch can carry, and where it came from.
struct OversizedOutput<'a> {
    task: TaskId,
    batch: RequestId,
    tp: &'a TopicPartition,
    record: &'a KeyValue,
    input: Option<(TopicPartition, i64)>,
}

/// Most bytes of records one request of [`Driver::produce_each`] carries: far below the
/// broker's limit on a request (Kafka's socket.request.max.bytes, 100 MiB).
const REQUEST_BYTES: usize = 16 << 20;

/// `members` of `parts` cut into requests of at most [`REQUEST_BYTES`] (one part alone may
/// be larger: a part fits one batch, which the broker's request limit is far above).
fn requests_of<'a>(parts: &[Part<'_>], members: &'a [usize]) -> Vec<&'a [usize]> {
    let mut requests = Vec::new();
    let (mut start, mut bytes) = (0, 0);
    for (at, &i) in members.iter().enumerate() {
        let size: usize = parts[i]
            .records
            .iter()
            .map(baton_kafka::records::record_bytes)
            .sum();
        if at > start && bytes + size > REQUEST_BYTES {
            requests.push(&members[start..at]);
            (start, bytes) = (at, 0);
        }
        bytes += size;
    }
    if start < members.len() {
        requests.push(&members[start..]);
    }
    requests
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part<'a>(tp: &'a TopicPartition, records: &'a [KeyValue]) -> Part<'a> {
        Part {
            tp,
            records,
            stamps: None,
            headers: &[],
        }
    }

    /// Requests stay under the byte bound; a part larger than the bound goes alone; every
    /// member goes once, in order.
    #[test]
    fn parts_are_cut_into_requests_by_bytes() {
        let tp = TopicPartition::new("t", 0);
        let record = |bytes: usize| (None, Some(Bytes::from(vec![0u8; bytes - 32])));
        let quarter = vec![record(REQUEST_BYTES / 4)];
        let whole = vec![record(REQUEST_BYTES + 1)];
        let parts = [
            part(&tp, &quarter),
            part(&tp, &quarter),
            part(&tp, &quarter),
            part(&tp, &whole),
            part(&tp, &quarter),
            part(&tp, &quarter),
        ];
        let members = [0, 1, 2, 3, 4, 5];
        let requests = requests_of(&parts, &members);
        assert_eq!(requests, [&[0, 1, 2][..], &[3], &[4, 5]]);
        assert_eq!(requests_of(&parts, &[]), Vec::<&[usize]>::new());
        assert_eq!(requests_of(&parts, &[3]), [&[3][..]]);
    }
}
