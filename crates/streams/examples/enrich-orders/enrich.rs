//! The enrich-orders application, shared by the example's `main` and its tests.

use baton_runtime::topology::{Topology, TopologyError};
use baton_streams::serdes::{Json, Str};
use baton_streams::{Consumed, Joined, Materialized, Produced, StreamsBuilder};
use serde::{Deserialize, Serialize};

/// An order, keyed by its id.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Order {
    pub customer: String,
    pub item: String,
    pub quantity: i64,
}

/// A customer, keyed by its id.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Customer {
    pub name: String,
    pub tier: String,
}

/// An order on its way to its customer: the id travels in the value while the key is the
/// customer's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OrderById {
    pub id: String,
    pub order: Order,
}

/// An order with its customer as the table knew it when the order was processed; `None`
/// when the customer was unknown (no order is dropped).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EnrichedOrder {
    pub order: String,
    pub customer: String,
    pub item: String,
    pub quantity: i64,
    pub customer_name: Option<String>,
    pub tier: Option<String>,
}

/// Orders re-keyed by customer through `<app id>-orders-by-customer-repartition`, left-joined
/// with the customers table (its topic is the store's changelog), written keyed by order id.
pub fn topology(
    app_id: &str,
    orders: &str,
    customers: &str,
    output: &str,
) -> Result<Topology, TopologyError> {
    let builder = StreamsBuilder::new(app_id);
    let customers = builder.table(
        customers,
        Consumed::with(Str, Json::<Customer>::new()),
        Materialized::named("customers"),
    );
    builder
        .stream(orders, Consumed::with(Str, Json::<Order>::new()))
        .map(|id: &String, order: &Order| {
            let by_id = OrderById {
                id: id.clone(),
                order: order.clone(),
            };
            (order.customer.clone(), by_id)
        })
        .left_join(
            &customers,
            |o: &OrderById, c: Option<&Customer>| EnrichedOrder {
                order: o.id.clone(),
                customer: o.order.customer.clone(),
                item: o.order.item.clone(),
                quantity: o.order.quantity,
                customer_name: c.map(|c| c.name.clone()),
                tier: c.map(|c| c.tier.clone()),
            },
            Joined::with(Str, Json::<OrderById>::new()).named("orders-by-customer"),
        )
        .select_key(|_, e: &EnrichedOrder| e.order.clone())
        .to(output, Produced::with(Str, Json::<EnrichedOrder>::new()));
    builder.build()
}
