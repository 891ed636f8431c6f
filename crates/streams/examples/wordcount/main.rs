//! Word count, as Kafka's `WordCountDemo` writes it: lines (String values) split into words,
//! grouped by word through a repartition topic, counted; each new count written with the word
//! as its key (String) and the count as an 8-byte big-endian Long.
//!
//! ```sh
//! cargo run --release --example wordcount -- --bootstrap 127.0.0.1:9092 \
//!   --app-id wordcount --instance-id a --state-dir /tmp/wc-a --input lines --output word-counts
//! ```
//!
//! `--watch WORD` (with `--application-server` on every instance) reads WORD's count every
//! 2 s through the in-process query API and logs it: `watch: WORD = N (...)`.

use std::process::ExitCode;

use std::time::Duration;

use baton_streams::queries::{Queries, QueryFailure, QueryOptions, StoreQuery};
use baton_streams::serdes::{Long, Str};
use baton_streams::{Consumed, Grouped, Materialized, Produced, RunArgs, StreamsBuilder};
use clap::Parser;

mod split;
use split::split_words;

#[derive(Parser)]
#[command(about = "Word count on Baton")]
struct Args {
    #[command(flatten)]
    run: RunArgs,
    /// Lines of text (String values).
    #[arg(long, env = "BATON_INPUT")]
    input: String,
    /// Each word's new count: key the word (String), value the count (Long).
    #[arg(long, env = "BATON_OUTPUT")]
    output: String,
    /// Log this word's count every 2 s, read in-process wherever it is held (repeatable).
    #[arg(long, value_name = "WORD")]
    watch: Vec<String>,
}

/// Reads each watched word's count from the `counts` store every 2 s, in-process (forwarded
/// to the instance holding it when that is another), and logs it.
fn watch(queries: Queries, words: Vec<String>) {
    let Ok(rt) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        return;
    };
    let counts = StoreQuery::new(&queries, "counts", Str, Long);
    let options = QueryOptions::default();
    rt.block_on(async {
        loop {
            tokio::time::sleep(Duration::from_secs(2)).await;
            for w in &words {
                match counts.get(w, &options).await {
                    Ok(a) => eprintln!(
                        "watch: {w} = {} (from the {} at {}, {} records behind)",
                        a.value.unwrap_or(0),
                        a.served.role.as_str(),
                        a.served.served_by,
                        a.served.lag_offsets
                    ),
                    Err(QueryFailure::NotStarted) => {}
                    Err(e) => eprintln!("watch: {w}: {e}"),
                }
            }
        }
    });
}

fn main() -> ExitCode {
    let args: Args = baton_streams::parse_args();
    let (input, output) = (args.input, args.output);
    let queries = Queries::new();
    if !args.watch.is_empty() {
        let (queries, words) = (queries.clone(), args.watch);
        std::thread::spawn(move || watch(queries, words));
    }
    let ran = baton_streams::run_with_queries(
        args.run,
        "wordcount",
        move |app_id| {
            let builder = StreamsBuilder::new(app_id);
            builder
                .stream(&input, Consumed::with(Str, Str))
                .flat_map_values(|line: &String| split_words(&line.to_lowercase()))
                .group_by(
                    |_, word: &String| word.clone(),
                    Grouped::with(Str, Str).named("words"),
                )
                .count(Materialized::named("counts"))
                .to_stream()
                .to(&output, Produced::with(Str, Long));
            builder.build()
        },
        queries,
    );
    match ran {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", e.message);
            ExitCode::from(e.status)
        }
    }
}
