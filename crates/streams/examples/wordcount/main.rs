//! Word count, as Kafka's `WordCountDemo` writes it: lines (String values) split into words,
//! grouped by word through a repartition topic, counted; each new count written with the word
//! as its key (String) and the count as an 8-byte big-endian Long.
//!
//! ```sh
//! cargo run --release --example wordcount -- --bootstrap 127.0.0.1:9092 \
//!   --app-id wordcount --instance-id a --state-dir /tmp/wc-a --input lines --output word-counts
//! ```

use std::process::ExitCode;

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
}

fn main() -> ExitCode {
    let args: Args = baton_streams::parse_args();
    let (input, output) = (args.input, args.output);
    baton_streams::main(args.run, "wordcount", move |app_id| {
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
    })
}
