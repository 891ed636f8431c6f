//! Orders joined with their payments: orders and payments keyed by order id (String keys,
//! String values), each order joined with every payment of it made within 5 minutes of it
//! (before or after), by record timestamp. Each pair is written keyed by the order id, its
//! value `<order> paid by <payment>`, stamped with the later of the two timestamps. The two
//! topics must have as many partitions.
//!
//! ```sh
//! cargo run --release --example order-payments -- --bootstrap 127.0.0.1:9092 \
//!   --app-id order-payments --instance-id a --state-dir /tmp/op-a \
//!   --orders orders --payments payments --output paid-orders
//! ```

use std::process::ExitCode;
use std::time::Duration;

use baton_streams::serdes::Str;
use baton_streams::{Consumed, JoinWindows, Produced, RunArgs, StreamJoined, StreamsBuilder};
use clap::Parser;

#[derive(Parser)]
#[command(about = "Orders joined with their payments within 5 minutes on Baton")]
struct Args {
    #[command(flatten)]
    run: RunArgs,
    /// Orders: key the order id (String), value the order (String).
    #[arg(long, env = "BATON_ORDERS")]
    orders: String,
    /// Payments: key the order id (String), value the payment (String).
    #[arg(long, env = "BATON_PAYMENTS")]
    payments: String,
    /// Each pair: key the order id, value `<order> paid by <payment>` (String).
    #[arg(long, env = "BATON_OUTPUT")]
    output: String,
}

fn main() -> ExitCode {
    let args: Args = baton_streams::parse_args();
    let (orders, payments, output) = (args.orders, args.payments, args.output);
    baton_streams::main(args.run, "order-payments", move |app_id| {
        let builder = StreamsBuilder::new(app_id);
        let orders = builder.stream(&orders, Consumed::with(Str, Str));
        let payments = builder.stream(&payments, Consumed::with(Str, Str));
        orders
            .join_stream(
                payments,
                |order: &String, payment: &String| format!("{order} paid by {payment}"),
                JoinWindows::of_time_difference_with_no_grace(Duration::from_secs(300)),
                StreamJoined::with(Str, Str, Str),
            )
            .to(&output, Produced::with(Str, Str));
        builder.build()
    })
}
