//! Orders enriched with their customers: orders keyed by order id (JSON with a customer id)
//! are re-keyed by customer through a repartition topic, left-joined with the customers table
//! (JSON keyed by customer id, read from its topic, which is also the table's changelog), and
//! written as enriched JSON keyed by order id. An order whose customer the table does not know
//! is written with `customer_name` and `tier` null.
//!
//! ```sh
//! cargo run --release --example enrich-orders -- --bootstrap 127.0.0.1:9092 \
//!   --app-id enrich --instance-id a --state-dir /tmp/enrich-a \
//!   --orders orders --customers customers --output enriched-orders
//! ```

use std::process::ExitCode;

use baton_streams::RunArgs;
use clap::Parser;

mod enrich;

#[derive(Parser)]
#[command(about = "Orders enriched with their customers on Baton")]
struct Args {
    #[command(flatten)]
    run: RunArgs,
    /// Orders: key the order id (String), value JSON `{"customer", "item", "quantity"}`.
    #[arg(long, env = "BATON_ORDERS")]
    orders: String,
    /// Customers: key the customer id (String), value JSON `{"name", "tier"}`; a record
    /// without a value deletes the customer. Co-partitioned with the orders' repartition
    /// topic, which Baton creates with this topic's partition count.
    #[arg(long, env = "BATON_CUSTOMERS")]
    customers: String,
    /// Enriched orders: key the order id, value JSON.
    #[arg(long, env = "BATON_OUTPUT")]
    output: String,
}

fn main() -> ExitCode {
    let args: Args = baton_streams::parse_args();
    let (orders, customers, output) = (args.orders, args.customers, args.output);
    baton_streams::main(args.run, "enrich-orders", move |app_id| {
        enrich::topology(app_id, &orders, &customers, &output)
    })
}
