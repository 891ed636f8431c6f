//! Page views per user per minute, by the time each view happened: views keyed by user
//! (String keys, any value), counted in 1-minute tumbling windows with 10 s of grace by record
//! timestamp. Each new count is written with Kafka's time-windowed key (the user's UTF-8
//! bytes, then the window start as 8 bytes big-endian) and the count as a Long. Views more
//! than 10 s behind the task's stream time for a closed window are dropped and counted in
//! `baton_late_records_dropped_total`.
//!
//! ```sh
//! cargo run --release --example windowed-views -- --bootstrap 127.0.0.1:9092 \
//!   --app-id views --instance-id a --state-dir /tmp/views-a --input page-views --output views-per-minute
//! ```

use std::process::ExitCode;
use std::time::Duration;

use baton_streams::serdes::{Long, Raw, Str, TimeWindowed};
use baton_streams::{
    Consumed, Grouped, Materialized, Produced, RunArgs, StreamsBuilder, TimeWindows,
};
use clap::Parser;

#[derive(Parser)]
#[command(about = "Page views per user per minute on Baton")]
struct Args {
    #[command(flatten)]
    run: RunArgs,
    /// Page views: key the user (String), value anything.
    #[arg(long, env = "BATON_INPUT")]
    input: String,
    /// Each new count: key the user and window (Kafka's time-windowed String key), value the
    /// count (Long).
    #[arg(long, env = "BATON_OUTPUT")]
    output: String,
}

fn main() -> ExitCode {
    let args: Args = baton_streams::parse_args();
    let (input, output) = (args.input, args.output);
    let minute = Duration::from_secs(60);
    baton_streams::main(args.run, "windowed-views", move |app_id| {
        let builder = StreamsBuilder::new(app_id);
        builder
            .stream(&input, Consumed::with(Str, Raw))
            .group_by_key(Grouped::with(Str, Raw))
            .windowed_by(TimeWindows::of_size_and_grace(
                minute,
                Duration::from_secs(10),
            ))
            .count(Materialized::named("views-per-minute"))
            .to_stream()
            .to(
                &output,
                Produced::with(TimeWindowed::new(Str, minute), Long),
            );
        builder.build()
    })
}
