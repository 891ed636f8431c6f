//! Clicks per visit: clicks keyed by user (String keys, any value), counted per session, a
//! session ending after 5 minutes without a click (30 s of grace for clicks out of order), by
//! record timestamp. Each new count is written with Kafka's session-windowed key (the user's
//! UTF-8 bytes, the session's end, then its start, 8 bytes each big-endian) and the count as
//! a Long; a session merged into a longer one is written as a tombstone.
//!
//! ```sh
//! cargo run --release --example click-sessions -- --bootstrap 127.0.0.1:9092 \
//!   --app-id visits --instance-id a --state-dir /tmp/visits-a --input clicks --output clicks-per-visit
//! ```

use std::process::ExitCode;
use std::time::Duration;

use baton_streams::serdes::{Long, Raw, SessionWindowed, Str};
use baton_streams::{
    Consumed, Grouped, Materialized, Produced, RunArgs, SessionWindows, StreamsBuilder,
};
use clap::Parser;

#[derive(Parser)]
#[command(about = "Clicks per visit (session windows) on Baton")]
struct Args {
    #[command(flatten)]
    run: RunArgs,
    /// Clicks: key the user (String), value anything.
    #[arg(long, env = "BATON_INPUT")]
    input: String,
    /// Each visit's new count: key the user and session (Kafka's session-windowed String
    /// key), value the count (Long); a tombstone for a session merged into another.
    #[arg(long, env = "BATON_OUTPUT")]
    output: String,
}

fn main() -> ExitCode {
    let args: Args = baton_streams::parse_args();
    let (input, output) = (args.input, args.output);
    baton_streams::main(args.run, "click-sessions", move |app_id| {
        let builder = StreamsBuilder::new(app_id);
        builder
            .stream(&input, Consumed::with(Str, Raw))
            .group_by_key(Grouped::with(Str, Raw))
            .windowed_by(SessionWindows::of_inactivity_gap_and_grace(
                Duration::from_secs(300),
                Duration::from_secs(30),
            ))
            .count(Materialized::named("clicks-per-visit"))
            .to_stream()
            .to(&output, Produced::with(SessionWindowed::new(Str), Long));
        builder.build()
    })
}
