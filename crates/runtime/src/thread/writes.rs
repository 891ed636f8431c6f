//! A batch's writes after it ran: dead letters, outputs (sinks and repartition topics) and
//! changelogs, each through one produce path that splits what no batch can carry.

use super::*;

impl Driver {
    /// Sends the records the application failed on to their dead-letter topics; `false`:
    /// not all were written (the batch is retried).
    pub(super) async fn write_dead_letters(
        &self,
        m: &ThreadMachine,
        task: TaskId,
        dead_letters: Vec<(String, KeyValue)>,
    ) -> bool {
        if dead_letters.is_empty() {
            return true;
        }
        if !m.may_write(self.now()) {
            return false;
        }
        let mut by_topic: BTreeMap<String, Vec<KeyValue>> = BTreeMap::new();
        for (topic, record) in dead_letters {
            by_topic.entry(topic).or_default().push(record);
        }
        for (topic, records) in by_topic {
            if !self.send_dead_letters(m, task, &topic, records).await {
                return false;
            }
        }
        true
    }

    /// Writes a batch's output records, each sink partition in turn. `Some`: the event that
    /// ends the batch (a write failed, or an oversized record stopped the task).
    pub(super) async fn write_outputs(
        &self,
        m: &ThreadMachine,
        task: TaskId,
        batch_id: RequestId,
        records: Vec<Emitted>,
        origin_of: &(dyn Fn(usize) -> Option<(TopicPartition, i64)> + Sync),
    ) -> Option<Event> {
        let ctx = &self.ctx;
        let failed = || {
            Some(Event::BatchFailed {
                task,
                batch: batch_id,
                output_acknowledged: false,
            })
        };
        let sinks = ctx.topology.sinks_of(task.subtopology);
        let mut by_partition: BTreeMap<(u16, i32), Vec<Outgoing>> = BTreeMap::new();
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
            by_partition
                .entry((sink, p))
                .or_default()
                .push(((Some(r.key), r.value), (i, r.timestamp)));
        }
        for ((sink, p), batch) in by_partition {
            let tp = TopicPartition::new(&sinks[sink as usize], p);
            let (mut batch, origin): (Vec<KeyValue>, Vec<(usize, i64)>) = batch.into_iter().unzip();
            let (mut output, mut stamps): (Vec<usize>, Vec<i64>) = origin.into_iter().unzip();
            while !batch.is_empty() {
                if !m.may_write(self.now()) {
                    return failed();
                }
                let index = match self.produce(&tp, &batch, Some(&stamps), &[]).await {
                    Ok(_) => break,
                    Err(Produced::Failed) => return failed(),
                    Err(Produced::Oversized { index, .. }) => index,
                };
                let record_bytes = baton_kafka::records::record_bytes(&batch[index]);
                let input = origin_of(output[index])
                    .map_or("unknown".into(), |(tp, o)| format!("{tp} offset {o}"));
                match m.oversized(OversizedWrite::Output) {
                    OversizedAnswer::StopTask => {
                        let fate = failed_task_fate(ctx.cfg.task_retry);
                        tracing::error!(
                            task = %task,
                            partition = %tp,
                            input = %input,
                            bytes = record_bytes,
                            "task {task}: an output record for {tp} ({record_bytes} bytes), \
                             from input {input}, is larger than any record batch the broker \
                             takes; stopping this task only (on-oversized-record=fail): {fate}"
                        );
                        return Some(Event::RecordFailed {
                            task,
                            batch: batch_id,
                        });
                    }
                    OversizedAnswer::Skip => {
                        tracing::error!(task = %task, partition = %tp, input = %input, bytes = record_bytes, "skipping an output record larger than any record batch the broker takes (on-oversized-record=skip)");
                        ctx.status.add_skipped(task);
                        // What came before it is acknowledged; go on after it.
                        batch.drain(..=index);
                        output.drain(..=index);
                        stamps.drain(..=index);
                    }
                }
            }
        }
        None
    }

    /// Writes a batch's store writes to their changelogs in Kafka's layout (each store's
    /// `logs[idx]`: its layout, and the headers its records with a value carry): per store, its writes and the changelog offset after them. `Err`: the
    /// event that ends the batch. `input` names the batch's input, for an error.
    pub(super) async fn write_changelogs(
        &self,
        m: &ThreadMachine,
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
        let mut applied = Vec::with_capacity(writes.len());
        for (idx, writes) in writes {
            let writes = sorted(writes);
            let tp = &changelogs[idx];
            let (wire, stamps): (Vec<KeyValue>, Vec<i64>) = writes
                .iter()
                .map(|(k, (v, ts))| {
                    let (value, ts) = to_changelog(logs[idx].0, v.as_deref(), *ts);
                    let value = value.map(Bytes::copy_from_slice);
                    ((Some(Bytes::from(k.clone())), value), ts)
                })
                .unzip();
            if wire.is_empty() {
                continue;
            }
            if !m.may_write(self.now()) {
                return Err(failed());
            }
            match self.produce(tp, &wire, Some(&stamps), logs[idx].1).await {
                Ok(next) => {
                    let writes = writes.into_iter().map(|(k, (v, _))| (k, v)).collect();
                    applied.push((idx, writes, next));
                }
                Err(Produced::Failed) => return Err(failed()),
                Err(Produced::Oversized { index, .. }) => {
                    // A store value no batch can carry cannot be made durable: never skipped,
                    // whatever the output policy. The task stops holding its input.
                    let (key, value) = &wire[index];
                    tracing::error!(
                        task = %task,
                        changelog = %tp,
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
        m: &ThreadMachine,
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
                        match m.oversized(OversizedWrite::DeadLetter) {
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
                Err(e) => {
                    self.ctx.forget_leader(&tp.topic, tp.partition);
                    self.ctx.failing(&format!("produce to {tp}"), &e);
                    return Err(Produced::Failed);
                }
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
