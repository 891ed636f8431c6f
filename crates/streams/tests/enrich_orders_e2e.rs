//! The `enrich-orders` example on the real broker, as its docs run it: a customers table read
//! from its topic (also its changelog), orders re-keyed by customer through a repartition
//! topic and left-joined with it, on one instance, then while two more join and the first is
//! drained, then after the table changed (updates and a delete) under the new owners. Every
//! enriched order equals what the table held when its order came, each output record of an
//! order is that one, and the longest stall of each output partition is reported. The broker
//! comes from `scripts/install-broker.sh`.

mod common;

#[path = "../examples/enrich-orders/enrich.rs"]
#[allow(dead_code)]
mod enrich;

use std::collections::BTreeMap;
use std::time::Duration;

use baton_kafka::records::KeyValue;
use baton_protocol::TopicPartition;
use baton_runtime::partitioner::partition_for;
use bytes::Bytes;
use common::{now_ms, Instance, Setup};
use enrich::{Customer, EnrichedOrder, Order};

const PARTITIONS: i32 = 4;
const APP: &str = "enrich-e2e";
const ORDERS: &str = "orders";
const CUSTOMERS: &str = "customers";
const OUTPUT: &str = "enriched-orders";
/// Customers `c0`..`c49` exist; orders also name `c50`..`c59`, whom the table never knew.
const KNOWN: u64 = 50;

fn partition(key: &str) -> i32 {
    partition_for(key.as_bytes(), PARTITIONS as u32) as i32
}

/// The test's view of the input: the table as written, the orders and what each must become.
#[derive(Default)]
struct Shop {
    customers: BTreeMap<String, Customer>,
    /// Records written to each customers partition: where the application must have read to.
    customer_records: BTreeMap<i32, i64>,
    orders: u64,
    want: BTreeMap<String, EnrichedOrder>,
}

impl Shop {
    fn write(setup: &Setup, topic: &str, records: Vec<(String, Option<Vec<u8>>)>) {
        let mut by_partition: BTreeMap<i32, Vec<KeyValue>> = BTreeMap::new();
        for (key, value) in records {
            by_partition
                .entry(partition(&key))
                .or_default()
                .push((Some(Bytes::from(key)), value.map(Bytes::from)));
        }
        setup.rt.block_on(async {
            for (p, records) in by_partition {
                let leader = setup.client.leader(topic, p).await.unwrap();
                setup
                    .client
                    .produce(&leader, topic, p, &records)
                    .await
                    .unwrap();
            }
        });
    }

    /// Sets (or with `None` deletes) customers, then waits until the application has read
    /// them all: orders written after see them.
    fn customers(&mut self, setup: &Setup, changes: Vec<(String, Option<Customer>)>) {
        let mut records = Vec::new();
        for (id, c) in changes {
            *self.customer_records.entry(partition(&id)).or_default() += 1;
            records.push((
                id.clone(),
                c.as_ref().map(|c| serde_json::to_vec(c).unwrap()),
            ));
            match c {
                Some(c) => self.customers.insert(id, c),
                None => self.customers.remove(&id),
            };
        }
        Self::write(setup, CUSTOMERS, records);
        let want: BTreeMap<i32, i64> = (0..PARTITIONS)
            .map(|p| (p, self.customer_records.get(&p).copied().unwrap_or(0)))
            .collect();
        setup.await_equal(&want, "the customers read", |s| {
            let tps: Vec<_> = (0..PARTITIONS)
                .map(|p| TopicPartition::new(CUSTOMERS, p))
                .collect();
            let c =
                s.rt.block_on(s.client.committed(APP, &tps))
                    .unwrap_or_default();
            (0..PARTITIONS)
                .map(|p| {
                    let at = c
                        .get(&TopicPartition::new(CUSTOMERS, p))
                        .map_or(0, |c| c.offset);
                    (p, at.max(0))
                })
                .collect()
        });
    }

    /// Writes `n` more orders, each for customer `c{i % 60}`.
    fn orders(&mut self, setup: &Setup, n: u64) {
        let mut records = Vec::new();
        for i in self.orders..self.orders + n {
            let id = format!("o{i}");
            let order = Order {
                customer: format!("c{}", i % 60),
                item: format!("item-{}", i % 7),
                quantity: (i % 5 + 1) as i64,
            };
            let c = self.customers.get(&order.customer);
            self.want.insert(
                id.clone(),
                EnrichedOrder {
                    order: id.clone(),
                    customer: order.customer.clone(),
                    item: order.item.clone(),
                    quantity: order.quantity,
                    customer_name: c.map(|c| c.name.clone()),
                    tier: c.map(|c| c.tier.clone()),
                },
            );
            records.push((id, Some(serde_json::to_vec(&order).unwrap())));
        }
        self.orders += n;
        Self::write(setup, ORDERS, records);
    }
}

/// Each order's enriched output; panics if one order was written two different ways.
fn enriched(setup: &Setup) -> BTreeMap<String, EnrichedOrder> {
    let mut out: BTreeMap<String, EnrichedOrder> = BTreeMap::new();
    for r in setup.read(OUTPUT).into_values().flatten() {
        let id = String::from_utf8(r.key.unwrap().to_vec()).unwrap();
        let e: EnrichedOrder = serde_json::from_slice(&r.value.unwrap()).unwrap();
        assert_eq!(e.order, id, "keyed by order id");
        if let Some(before) = out.get(&id) {
            assert_eq!(before, &e, "order {id} was written two different ways");
        }
        out.insert(id, e);
    }
    out
}

fn spawn(broker: &str, dir: &std::path::Path, name: &str) -> Instance {
    Instance::spawn(
        "enrich-orders",
        broker,
        dir,
        name,
        APP,
        &[
            "--orders",
            ORDERS,
            "--customers",
            CUSTOMERS,
            "--output",
            OUTPUT,
        ],
    )
}

fn customer(i: u64, tier: &str) -> (String, Option<Customer>) {
    (
        format!("c{i}"),
        Some(Customer {
            name: format!("Customer {i}"),
            tier: tier.into(),
        }),
    )
}

#[test]
fn enrich_orders_joins_every_order_exactly_through_a_scale_out_a_drain_and_table_changes() {
    let (broker, dir, setup) = common::start(
        "enrich-orders-e2e",
        &[ORDERS, CUSTOMERS],
        OUTPUT,
        PARTITIONS,
    );
    let mut shop = Shop::default();
    let mut a = spawn(&broker.addr, &dir, "a");
    shop.customers(&setup, (0..KNOWN).map(|i| customer(i, "silver")).collect());
    shop.orders(&setup, 1_000);
    setup.await_equal(&shop.want, "one instance", enriched);
    let unknown = shop
        .want
        .values()
        .filter(|e| e.customer_name.is_none())
        .count();
    assert!(
        unknown > 0,
        "some orders name customers the table never knew"
    );
    eprintln!("enrich-orders: one instance enriched 1,000 orders exactly ({unknown} for unknown customers)");

    let from = now_ms();
    let mut b = spawn(&broker.addr, &dir, "b");
    let mut c = spawn(&broker.addr, &dir, "c");
    for _ in 0..20 {
        shop.orders(&setup, 50);
        std::thread::sleep(Duration::from_millis(250));
    }
    setup.drain(APP, "a");
    for _ in 0..20 {
        shop.orders(&setup, 50);
        std::thread::sleep(Duration::from_millis(250));
    }
    let status = a.exited_within(Duration::from_secs(60));
    assert!(
        status.is_some_and(|s| s.success()),
        "a exits once drained: {status:?}\n{}",
        a.log_text()
    );
    setup.await_equal(&shop.want, "after the scale-out and the drain", enriched);
    let gaps = setup.longest_gaps(OUTPUT, from, now_ms());
    eprintln!(
        "enrich-orders: {} orders enriched exactly through the scale-out and the drain; \
         longest gap per output partition {gaps:?}",
        shop.orders
    );

    // The table changes under its new owners, which restored it from its topic: ten
    // customers move up a tier, one is deleted, one is new.
    let mut changes: Vec<_> = (0..10).map(|i| customer(i, "gold")).collect();
    changes.push(("c10".into(), None));
    changes.push(customer(55, "bronze"));
    shop.customers(&setup, changes);
    shop.orders(&setup, 600);
    setup.await_equal(&shop.want, "after the table changed", enriched);
    let gold = shop
        .want
        .values()
        .filter(|e| e.tier.as_deref() == Some("gold"))
        .count();
    assert!(gold > 0);
    eprintln!(
        "enrich-orders: {} orders in all; {gold} saw a customer's new tier",
        shop.orders
    );

    let worst = gaps.values().copied().fold(0.0, f64::max);
    assert!(worst < 10.0, "an output partition stalled {worst:.2} s");
    for i in [&mut b, &mut c] {
        assert!(
            i.exited_within(Duration::ZERO).is_none(),
            "{} runs on\n{}",
            i.name,
            i.log_text()
        );
    }
    b.stop();
    c.stop();
    let _ = std::fs::remove_dir_all(&dir);
}
