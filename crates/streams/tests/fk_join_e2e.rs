//! A foreign-key join on the real broker through a scale-out and a drain: orders (3
//! partitions, written to partitions of the producer's choosing, not by key) join their
//! product's name (2 partitions) through the subscription and response topics. Orders move
//! to other products, products are renamed, added and deleted, orders deleted, as it runs.
//! Read as a table, the output holds `<quantity>x <name>` for exactly the orders whose
//! product exists, with its latest name: an answer that went back by key, not to the asking
//! order's partition, would find no order there and be dropped.

mod common;

use std::collections::BTreeMap;

use baton_kafka::client::NewTopic;
use baton_kafka::records::KeyValue;
use baton_runtime::partitioner::partition_for;
use baton_streams::serdes::Str;
use baton_streams::{Consumed, Materialized, Produced, StreamsBuilder};
use bytes::Bytes;
use common::Setup;

const ORDER_PARTITIONS: i32 = 3;
const PRODUCT_PARTITIONS: i32 = 2;
const APP: &str = "order-products";
const ORDERS: &str = "fk-orders";
const PRODUCTS: &str = "fk-products";
const OUTPUT: &str = "fk-named-orders";

fn topology() -> baton_runtime::Topology {
    let builder = StreamsBuilder::new(APP);
    let orders = builder.table(
        ORDERS,
        Consumed::with(Str, Str),
        Materialized::named("orders"),
    );
    let products = builder.table(
        PRODUCTS,
        Consumed::with(Str, Str),
        Materialized::named("products"),
    );
    orders
        .join_on_foreign_key(
            products,
            |order: &String| order.split_once('|').map(|(p, _)| p.to_owned()),
            |order: &String, name: &String| {
                let qty = order.split_once('|').map_or("?", |(_, q)| q);
                format!("{qty}x {name}")
            },
        )
        .to_stream()
        .to(OUTPUT, Produced::with(Str, Str));
    builder.build().unwrap()
}

fn kv(k: &str, v: Option<&str>) -> KeyValue {
    (
        Some(Bytes::from(k.to_owned())),
        v.map(|v| Bytes::from(v.to_owned())),
    )
}

/// What the test has sent so far: each order's product and quantity, each product's name.
#[derive(Default)]
struct Sent {
    orders: BTreeMap<String, (String, u32)>,
    products: BTreeMap<String, String>,
}

impl Sent {
    /// Order `n`, always to partition `n % 3`: not where its key hashes, for most keys.
    fn order(&mut self, setup: &Setup, n: u32, line: Option<(&str, u32)>) {
        let key = format!("order{n}");
        let value = line.map(|(p, q)| format!("{p}|{q}"));
        setup.produce_to(ORDERS, (n % 3) as i32, &[kv(&key, value.as_deref())]);
        match line {
            Some((p, q)) => self.orders.insert(key, (p.to_owned(), q)),
            None => self.orders.remove(&key),
        };
    }

    fn product(&mut self, setup: &Setup, product: &str, name: Option<&str>) {
        let p = partition_for(product.as_bytes(), PRODUCT_PARTITIONS as u32) as i32;
        setup.produce_to(PRODUCTS, p, &[kv(product, name)]);
        match name {
            Some(n) => self.products.insert(product.to_owned(), n.to_owned()),
            None => self.products.remove(product),
        };
    }

    fn expected(&self) -> BTreeMap<String, String> {
        self.orders
            .iter()
            .filter_map(|(o, (p, q))| Some((o.clone(), format!("{q}x {}", self.products.get(p)?))))
            .collect()
    }

    /// Phase `phase`: products 0..6 named (renamed each phase), 24 orders of product
    /// `(n + phase) % 7` (product 6 has no row until phase 1); in phase 1 every fifth order is
    /// deleted, in phase 2 product 2 is deleted.
    fn phase(&mut self, setup: &Setup, phase: u32) {
        for p in 0..6 {
            let product = format!("product{p}");
            self.product(setup, &product, Some(&format!("name{p}-{phase}")));
        }
        if phase == 1 {
            self.product(setup, "product6", Some("name6"));
        }
        for n in 0..24 {
            let product = format!("product{}", (n + phase) % 7);
            self.order(setup, n, Some((&product, n % 4 + 1)));
            if phase == 1 && n % 5 == 0 {
                self.order(setup, n, None);
            }
        }
        if phase == 2 {
            self.product(setup, "product2", None);
        }
    }
}

/// The output read as a table: each order's last record, deletes removing it.
fn joined(setup: &Setup) -> BTreeMap<String, String> {
    setup.latest_text(OUTPUT)
}

#[test]
fn orders_join_their_products_exactly_through_a_scale_out_and_a_drain() {
    let (broker, dir, setup) = common::start("fk-join", &[ORDERS], OUTPUT, ORDER_PARTITIONS);
    let products = NewTopic {
        name: PRODUCTS.into(),
        partitions: PRODUCT_PARTITIONS,
        compacted: false,
    };
    setup
        .rt
        .block_on(setup.client.create_topics(std::slice::from_ref(&products)))
        .unwrap();
    let mut sent = Sent::default();
    let want = common::scale_out_and_drain(
        &setup,
        (broker.addr.as_str(), dir.as_path()),
        (APP, topology),
        ("named orders", |s: &Setup, n| {
            sent.phase(s, n);
            sent.expected()
        }),
        joined,
    );
    // The join's topics: the registration topic has the products' partitions, the response
    // topic the orders'.
    let topics = [
        format!("{APP}-KTABLE-FK-JOIN-SUBSCRIPTION-REGISTRATION-0000000004-topic"),
        format!("{APP}-KTABLE-FK-JOIN-SUBSCRIPTION-RESPONSE-0000000012-topic"),
    ];
    let counts = setup.partition_counts(&topics);
    assert_eq!(
        counts,
        [PRODUCT_PARTITIONS as usize, ORDER_PARTITIONS as usize]
    );
    eprintln!(
        "foreign-key join: {} orders exact through a scale-out and a drain",
        want.len()
    );
    drop(broker);
    let _ = std::fs::remove_dir_all(&dir);
}
