//! Running batches of input: one task's batch through its records ([`records`]), and the
//! batches of several tasks at once, each on a core of its own. Only the record loops run side
//! by side: taking a batch's input before and handing its writes over after stay on the
//! thread, in the order the machine asked for the batches. Tasks share no store, cache or
//! input, so a batch runs the same alone or beside others; a task's own batches are never two
//! at once (the machine gives a task one batch at a time).

use std::ops::ControlFlow;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use baton_assignor::TaskId;
use baton_kafka::records::Record;
use baton_protocol::TopicPartition;

use super::caching::cached_part;
use super::records::{BatchRun, RecordEnv};
use super::{batch_panicked, blocking, merge_by_timestamp, table_stores, take_input};
use super::{Done, Driver, StoreIo};
use crate::cache::TaskCache;
use crate::context::Context;
use crate::heal::StoreFailures;
use crate::machine::{Event, Input, RequestId, ThreadMachine};
use crate::record::SkipLog;

/// Below this many records in all, batches run one after another: starting a thread costs
/// tens of microseconds, a few records far less.
const ALONE_BELOW: usize = 1_000;

/// A batch whose input has been taken from the buffers: what its records need to run.
pub(super) struct Ready {
    task: TaskId,
    batch: RequestId,
    inputs: Vec<Input>,
    sources: Vec<TopicPartition>,
    /// Per source, the store it fills when it is a table's topic.
    table_of: Vec<Option<usize>>,
    stream_time: i64,
    fetched: Vec<(usize, Vec<Record>)>,
    punctuate_at: Option<i64>,
    started: Duration,
}

/// What one batch's records read and keep besides its input: its task's stores and cache,
/// and the thread's logs of skips and store failures (the task's part of them when batches run
/// side by side).
struct Means<'a> {
    ctx: &'a Context,
    stores: &'a [StoreIo],
    cache: Option<&'a TaskCache>,
    skip_log: &'a mut SkipLog,
    store_failures: &'a mut StoreFailures,
}

impl Driver {
    /// Takes a batch's input from the buffers. `Err`: the batch ended here.
    fn ready(
        &mut self,
        task: TaskId,
        batch: RequestId,
        inputs: &[Input],
        punctuate_at: Option<i64>,
    ) -> Result<Ready, Box<Event>> {
        // The fault suite's panic in the runtime's own code for one batch (a fail point: nothing
        // without the `failpoints` feature).
        fail::fail_point!("baton-batch");
        let sources = self.ctx.wire.source_partitions(task);
        self.cache_for(task);
        let Some(t) = self.tasks.get(&task) else {
            return Err(Box::new(failed(task, batch)));
        };
        let table_of = table_stores(&self.ctx, task, &sources, &t.stores);
        // The task's stream time: the largest timestamp it has read, this batch's included;
        // kept only if the batch is done.
        let stream_time = match self.stream_times.get(&task) {
            Some(&t) => t,
            None => self.stream_time_in_stores(task, t),
        };
        let Some(fetched) = take_input(&mut self.buffers, &sources, inputs) else {
            return Err(Box::new(failed(task, batch)));
        };
        Ok(Ready {
            task,
            batch,
            inputs: inputs.to_vec(),
            sources,
            table_of,
            stream_time,
            fetched,
            punctuate_at,
            started: self.now(),
        })
    }

    /// Runs a batch of input, or a wall-clock punctuation (`punctuate_at`: no input, at that
    /// time), and hands its writes over: sinks first, then the changelog; the store takes the
    /// batch only once both are acknowledged, so a failed write leaves it as it was and the
    /// retried batch computes the same values again instead of counting twice. `Some`: the
    /// batch ended here.
    pub(super) fn process(
        &mut self,
        m: &ThreadMachine,
        task: TaskId,
        batch: RequestId,
        inputs: &[Input],
        punctuate_at: Option<i64>,
    ) -> Option<Event> {
        let mut ready = match self.ready(task, batch, inputs, punctuate_at) {
            Ok(ready) => ready,
            Err(e) => return Some(*e),
        };
        match self.run_alone(&mut ready) {
            Ok(Ok(done)) => self.hand_over(m, task, batch, &ready.inputs, done),
            Ok(Err(e)) => Some(*e),
            Err(p) => Some(self.panicked(task, batch, &*p)),
        }
    }

    /// Runs the batches of several tasks (`(task, batch, inputs)`, as the machine asked for
    /// them), their record loops on up to `threads` cores at once; each batch's outcome goes to
    /// `self.local`, in the order asked.
    pub(super) fn process_many(
        &mut self,
        m: &ThreadMachine,
        batches: Vec<(TaskId, RequestId, Vec<Input>)>,
        threads: usize,
    ) {
        let mut outcomes: Vec<Option<Event>> = Vec::with_capacity(batches.len());
        let mut jobs = Vec::new();
        for (i, (task, batch, inputs)) in batches.iter().enumerate() {
            let ready = std::panic::catch_unwind(AssertUnwindSafe(|| {
                self.ready(*task, *batch, inputs, None)
            }));
            match ready {
                Ok(Ok(ready)) => jobs.push((i, ready)),
                Ok(Err(e)) => outcomes.push(Some(*e)),
                Err(p) => outcomes.push(Some(self.panicked(*task, *batch, &*p))),
            }
            if outcomes.len() == i {
                outcomes.push(None);
            }
        }
        let records: usize = jobs.iter().map(|(_, r)| input_records(r)).sum();
        let ran = if threads < 2 || jobs.len() < 2 || records < ALONE_BELOW {
            jobs.into_iter()
                .map(|(i, mut ready)| {
                    let ran = self.run_alone(&mut ready);
                    (i, ready, ran)
                })
                .collect()
        } else {
            self.run_side_by_side(jobs, threads)
        };
        for (i, ready, ran) in ran {
            let (task, batch) = (ready.task, ready.batch);
            outcomes[i] = match ran {
                Ok(Ok(done)) => {
                    let handed = std::panic::catch_unwind(AssertUnwindSafe(|| {
                        self.hand_over(m, task, batch, &ready.inputs, done)
                    }));
                    handed.unwrap_or_else(|p| Some(self.panicked(task, batch, &*p)))
                }
                Ok(Err(e)) => Some(*e),
                Err(p) => Some(self.panicked(task, batch, &*p)),
            };
        }
        self.local.extend(outcomes.into_iter().flatten());
    }

    fn panicked(
        &self,
        task: TaskId,
        batch: RequestId,
        payload: &(dyn std::any::Any + Send),
    ) -> Event {
        batch_panicked(task, batch, "processing", self.ctx.cfg.task_retry, payload)
    }

    /// One batch's records on the thread, with one hand-over of the worker for the whole
    /// batch, not one per record: a store read may block on the disk, and block_in_place wakes
    /// another worker each time it runs.
    fn run_alone(&mut self, ready: &mut Ready) -> Ran {
        let task = ready.task;
        let Some(t) = self.tasks.get(&task) else {
            return Ok(Err(Box::new(failed(task, ready.batch))));
        };
        let means = Means {
            ctx: &self.ctx,
            stores: &t.stores,
            cache: self.caches.get(&task),
            skip_log: &mut self.skip_log,
            store_failures: &mut self.store_failures,
        };
        std::panic::catch_unwind(AssertUnwindSafe(|| blocking(|| run_records(means, ready))))
    }

    /// The batches' records on up to `threads` threads (this one among them), each thread
    /// taking the next batch not yet taken. Each batch gets its task's part of the skip and
    /// store-failure logs, given back after.
    fn run_side_by_side(
        &mut self,
        jobs: Vec<(usize, Ready)>,
        threads: usize,
    ) -> Vec<(usize, Ready, Ran)> {
        struct Job<'a> {
            at: usize,
            ready: Ready,
            stores: Option<(&'a [StoreIo], Option<&'a TaskCache>)>,
            skip_log: SkipLog,
            store_failures: StoreFailures,
            ran: Option<Ran>,
        }
        let (tasks, caches) = (&self.tasks, &self.caches);
        let jobs: Vec<Mutex<Job>> = jobs
            .into_iter()
            .map(|(at, ready)| {
                let task = ready.task;
                let stores = tasks
                    .get(&task)
                    .map(|t| (t.stores.as_slice(), caches.get(&task)));
                Mutex::new(Job {
                    at,
                    ready,
                    stores,
                    skip_log: self.skip_log.take_task(task),
                    store_failures: self.store_failures.take_task(task),
                    ran: None,
                })
            })
            .collect();
        let ctx: &Context = &self.ctx;
        ctx.status.count_side_by_side(jobs.len() as u64);
        let next = AtomicUsize::new(0);
        let work = || {
            while let Some(job) = jobs.get(next.fetch_add(1, Ordering::Relaxed)) {
                let mut job = job.lock().unwrap_or_else(|p| p.into_inner());
                let job = &mut *job;
                job.ran = Some(match job.stores {
                    None => Ok(Err(Box::new(failed(job.ready.task, job.ready.batch)))),
                    Some((stores, cache)) => {
                        let means = Means {
                            ctx,
                            stores,
                            cache,
                            skip_log: &mut job.skip_log,
                            store_failures: &mut job.store_failures,
                        };
                        let ready = &mut job.ready;
                        std::panic::catch_unwind(AssertUnwindSafe(|| run_records(means, ready)))
                    }
                });
            }
        };
        blocking(|| {
            std::thread::scope(|s| {
                for _ in 1..threads.min(jobs.len()) {
                    s.spawn(work);
                }
                work();
            })
        });
        let mut out = Vec::with_capacity(jobs.len());
        for job in jobs {
            let job = job.into_inner().unwrap_or_else(|p| p.into_inner());
            self.skip_log.absorb(job.skip_log);
            self.store_failures.absorb(job.store_failures);
            let ran = job
                .ran
                .unwrap_or_else(|| Ok(Err(Box::new(failed(job.ready.task, job.ready.batch)))));
            out.push((job.at, job.ready, ran));
        }
        out
    }
}

/// A batch that ended before any of its output was acknowledged.
fn failed(task: TaskId, batch: RequestId) -> Event {
    Event::BatchFailed {
        task,
        batch,
        output_acknowledged: false,
    }
}

/// A batch's records run: its writes and outputs (`Ok`), or the event that ended it; `Err`:
/// a panic in the runtime's own code, with its payload.
type Ran = std::thread::Result<Result<Done, Box<Event>>>;

fn input_records(ready: &Ready) -> usize {
    ready.fetched.iter().map(|(_, rs)| rs.len()).sum()
}

/// Runs `ready`'s records, in timestamp order across its partitions, then its punctuation if
/// it has one. `Err`: the event that ended the batch.
fn run_records(means: Means, ready: &mut Ready) -> Result<Done, Box<Event>> {
    let Means {
        ctx,
        stores,
        cache,
        skip_log,
        store_failures,
    } = means;
    let mut run = BatchRun::new(
        (stores, cache),
        &ctx.globals,
        ready.stream_time,
        input_records(ready),
    );
    let mut env = RecordEnv {
        ctx,
        task: ready.task,
        batch: ready.batch,
        sources: &ready.sources,
        table_of: &ready.table_of,
        started: ready.started,
        skip_log,
        store_failures,
    };
    let fetched = &mut ready.fetched;
    let stopped = (|| {
        if let [(source, records)] = &mut fetched[..] {
            // One partition: its records in offset order, with no merge to compute.
            for r in records.iter_mut() {
                env.record(&mut run, *source, r)?;
            }
        } else {
            let stamps: Vec<Vec<i64>> = fetched
                .iter()
                .map(|(_, rs)| rs.iter().map(|r| r.timestamp).collect())
                .collect();
            for (list, at) in merge_by_timestamp(&stamps) {
                let (source, records) = &mut fetched[list];
                let (source, r) = (*source, &mut records[at]);
                env.record(&mut run, source, r)?;
            }
        }
        match ready.punctuate_at {
            Some(now_ms) => env.punctuate(&mut run, now_ms),
            None => ControlFlow::Continue(()),
        }
    })();
    if let ControlFlow::Break(event) = stopped {
        return Err(Box::new(event));
    }
    let mut done = Done {
        writes: run.pending.writes,
        tables: run.pending.tables,
        out: run.out,
        stream_time: run.stream_time,
        origins: run.origins,
        records: run.records,
        dead_letters: run.dead_letters,
        sources: std::mem::take(&mut ready.sources),
        cached: None,
    };
    if let Some(cache) = cache {
        done.cached = Some(cached_part(&ctx.topology, (ready.task, cache), &mut done));
    }
    Ok(done)
}
