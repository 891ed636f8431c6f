//! Products per category: each product's latest category (a table read from its topic, String
//! keys and values; a record without a value removes the product) regrouped by category and
//! counted. A product moving to another category takes one from the old category's count and
//! adds one to the new one's (Kafka's `KGroupedTable` with its subtractor). Each new count is
//! written keyed by the category (String), the count as a Long.
//!
//! ```sh
//! cargo run --release --example top-products -- --bootstrap 127.0.0.1:9092 \
//!   --app-id top-products --instance-id a --state-dir /tmp/tp-a \
//!   --input product-categories --output products-per-category
//! ```

use std::process::ExitCode;

use baton_streams::serdes::{Long, Str};
use baton_streams::{Consumed, Grouped, Materialized, Produced, RunArgs, StreamsBuilder};
use clap::Parser;

#[derive(Parser)]
#[command(about = "Products per category (a regrouped table) on Baton")]
struct Args {
    #[command(flatten)]
    run: RunArgs,
    /// Each product's category: key the product (String), value the category (String), no
    /// value to remove the product.
    #[arg(long, env = "BATON_INPUT")]
    input: String,
    /// Each category's new count: key the category (String), value the count (Long).
    #[arg(long, env = "BATON_OUTPUT")]
    output: String,
}

fn main() -> ExitCode {
    let args: Args = baton_streams::parse_args();
    let (input, output) = (args.input, args.output);
    baton_streams::main(args.run, "top-products", move |app_id| {
        let builder = StreamsBuilder::new(app_id);
        builder
            .table(
                &input,
                Consumed::with(Str, Str),
                Materialized::named("product-category"),
            )
            .group_by(
                |product: &String, category: &String| (category.clone(), product.clone()),
                Grouped::with(Str, Str).named("by-category"),
            )
            .count(Materialized::named("products-per-category"))
            .to_stream()
            .to(&output, Produced::with(Str, Long));
        builder.build()
    })
}
