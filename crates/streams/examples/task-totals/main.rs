//! The Processor API on Baton: a processor counts each task's records in its store
//! (`totals`, backed by `<app id>-totals-changelog`) and, every `--every-ms` of wall-clock
//! time, whether records arrive or not, writes the task's total so far: key `total-<task>`
//! (String), value the count (Long). A task that moves to another instance goes on from the
//! total its store holds.
//!
//! ```sh
//! cargo run --release --example task-totals -- --bootstrap 127.0.0.1:9092 \
//!   --app-id totals --instance-id a --state-dir /tmp/totals-a --input events --output totals
//! ```

use std::process::ExitCode;
use std::time::Duration;

use baton_streams::serdes::{Long, Raw, Str};
use baton_streams::{
    Consumed, KeyValueStore, Processor, ProcessorContext, Produced, Record, RunArgs, StreamsBuilder,
};
use clap::Parser;

#[derive(Parser)]
#[command(about = "Each task's record count, written on wall-clock time, on Baton")]
struct Args {
    #[command(flatten)]
    run: RunArgs,
    /// Records of any key and value.
    #[arg(long, env = "BATON_INPUT")]
    input: String,
    /// Each task's total: key `total-<task>` (String), value the count (Long).
    #[arg(long, env = "BATON_OUTPUT")]
    output: String,
    /// How often each task writes its total (wall-clock time).
    #[arg(long, default_value_t = 500)]
    every_ms: u64,
}

/// The store's one key: the task's total.
const TOTAL: &str = "total";

struct Totals {
    store: KeyValueStore<Str, Long>,
    every: Duration,
}

impl Processor<Vec<u8>, Vec<u8>, String, i64> for Totals {
    fn process(&self, _: Record<Vec<u8>, Vec<u8>>, ctx: &mut ProcessorContext<'_, String, i64>) {
        let total = ctx.get(&self.store, &TOTAL.to_owned()).unwrap_or(0) + 1;
        ctx.put(&self.store, &TOTAL.to_owned(), &total);
    }

    fn punctuate_wall_every(&self) -> Option<Duration> {
        Some(self.every)
    }

    fn punctuate_wall(&self, _now_ms: i64, ctx: &mut ProcessorContext<'_, String, i64>) {
        let total = ctx.get(&self.store, &TOTAL.to_owned()).unwrap_or(0);
        let key = format!("total-{}", ctx.task());
        ctx.forward(key, total);
    }
}

fn main() -> ExitCode {
    let args: Args = baton_streams::parse_args();
    let (input, output) = (args.input, args.output);
    let every = Duration::from_millis(args.every_ms.max(1));
    baton_streams::main(args.run, "task-totals", move |app_id| {
        let builder = StreamsBuilder::new(app_id);
        let totals = Totals {
            store: KeyValueStore::new("totals", Str, Long),
            every,
        };
        builder
            .stream(&input, Consumed::with(Raw, Raw))
            .process(totals, &["totals"], Str, Long)
            .to(&output, Produced::with(Str, Long));
        builder.build()
    })
}
