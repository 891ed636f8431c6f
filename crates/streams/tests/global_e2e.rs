//! A global table on the real broker, through a scale-out and a drain: orders (2 partitions,
//! keyed by order id) joined with the product each names, from a products topic of 3
//! partitions (no co-partitioning: every instance reads the whole topic). Products renamed
//! and deleted while the instances run reach every instance's store: later orders see the new
//! name, and orders of a deleted product are dropped (an inner join). The products topic
//! deleted and made again empties the stores, which read the new topic whole.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use baton_kafka::client::NewTopic;
use baton_kafka::records::KeyValue;
use baton_runtime::partitioner::partition_for;
use baton_streams::serdes::Str;
use baton_streams::{Consumed, Joined, Materialized, Produced, StreamsBuilder};
use bytes::Bytes;
use common::Setup;

const PARTITIONS: i32 = 2;
const PRODUCT_PARTITIONS: i32 = 3;
const APP: &str = "priced-orders";
const ORDERS: &str = "gt-orders";
const PRODUCTS: &str = "gt-products";
const OUTPUT: &str = "gt-priced";
const PRODUCT_COUNT: u64 = 20;

fn topology() -> baton_runtime::Topology {
    let builder = StreamsBuilder::new(APP);
    let products = builder.global_table(
        PRODUCTS,
        Consumed::with(Str, Str),
        Materialized::named("products"),
    );
    builder
        .stream(ORDERS, Consumed::with(Str, Str))
        .join_global(
            &products,
            |_, product: &String| product.clone(),
            |product: &String, name: &String| format!("{product}={name}"),
            Joined::with(Str, Str),
        )
        .to(OUTPUT, Produced::with(Str, Str));
    builder.build().unwrap()
}

fn kv(k: &str, v: Option<&str>) -> KeyValue {
    (
        Some(Bytes::from(k.to_owned())),
        v.map(|v| Bytes::from(v.to_owned())),
    )
}

/// Writes products `ids` named `name-<id>-<version>` (or deletes them: `None`), each to its
/// key's partition.
fn set_products(setup: &Setup, ids: std::ops::Range<u64>, version: Option<&str>) {
    for id in ids {
        let key = format!("p{id}");
        let name = version.map(|v| format!("name-{id}-{v}"));
        let p = partition_for(key.as_bytes(), PRODUCT_PARTITIONS as u32) as i32;
        setup.produce_to(PRODUCTS, p, &[kv(&key, name.as_deref())]);
    }
}

/// Orders `orders` (order n names product n % 20); each expected output `(order, value)`
/// given the products' names `names`.
fn send_orders(
    setup: &Setup,
    orders: std::ops::Range<u64>,
    names: &BTreeMap<String, String>,
) -> BTreeMap<(String, String), usize> {
    let mut want = BTreeMap::new();
    for n in orders {
        let (order, product) = (format!("o{n}"), format!("p{}", n % PRODUCT_COUNT));
        let p = partition_for(order.as_bytes(), PARTITIONS as u32) as i32;
        setup.produce_to(ORDERS, p, &[kv(&order, Some(&product))]);
        if let Some(name) = names.get(&product) {
            want.insert((order, format!("{product}={name}")), 1);
        }
    }
    want
}

fn names(versions: &[(std::ops::Range<u64>, Option<&str>)]) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for (ids, v) in versions {
        for id in ids.clone() {
            match v {
                Some(v) => out.insert(format!("p{id}"), format!("name-{id}-{v}")),
                None => out.remove(&format!("p{id}")),
            };
        }
    }
    out
}

#[test]
fn orders_join_a_global_table_through_a_scale_out_and_a_drain() {
    let (broker, dir, setup) = common::start("global", &[ORDERS], OUTPUT, PARTITIONS);
    let products = NewTopic {
        name: PRODUCTS.into(),
        partitions: PRODUCT_PARTITIONS,
        compacted: true,
    };
    setup
        .rt
        .block_on(setup.client.create_topics(std::slice::from_ref(&products)))
        .unwrap();
    set_products(&setup, 0..PRODUCT_COUNT, Some("v1"));
    let (stop, shutdown) = tokio::sync::watch::channel(false);
    let run = |name: &str| {
        let at = (broker.addr.as_str(), dir.as_path());
        common::spawn_instance(&setup, at, (APP, name), topology(), &shutdown)
    };
    let a = run("a");
    let v1 = names(&[(0..PRODUCT_COUNT, Some("v1"))]);
    let mut want = send_orders(&setup, 0..100, &v1);
    setup.await_equal(&want, "priced orders, one instance", |s| s.counted(OUTPUT));
    // b reads the whole products topic before it takes tasks; a follows the topic. b
    // answers queries of the global table from its own copy, in process and over HTTP.
    let queries = baton_streams::queries::Queries::new();
    let cfg = common::serving_config(&broker.addr, &dir, APP, "b");
    let server = cfg.user_endpoint.clone();
    let b = setup.rt.spawn(baton_runtime::instance::run_with_queries(
        cfg,
        topology(),
        shutdown.clone(),
        queries.clone(),
    ));
    set_products(&setup, 0..5, Some("v2"));
    set_products(&setup, 19..20, None);
    let v2 = names(&[
        (0..PRODUCT_COUNT, Some("v1")),
        (0..5, Some("v2")),
        (19..20, None),
    ]);
    // A global table's updates reach the stores within a fetch wait (0.5 s).
    std::thread::sleep(Duration::from_secs(3));
    want.extend(send_orders(&setup, 100..200, &v2));
    setup.await_equal(&want, "priced orders, after the scale-out", |s| {
        s.counted(OUTPUT)
    });
    check_queries(&setup, &queries, &server, &v2);
    common::drain_and_await(&setup, (APP, "a"), a);
    want.extend(send_orders(&setup, 200..300, &v2));
    setup.await_equal(&want, "priced orders, after the drain", |s| {
        s.counted(OUTPUT)
    });
    let dropped = 300 - want.len();
    assert_eq!(dropped, 10, "orders 119, 139, ... 299 name the deleted p19");
    // The products topic deleted and made again with products 0..10 only: the store empties
    // and reads the new topic whole, so products 10..20 are gone and 0..10 renamed.
    setup.rt.block_on(async {
        setup
            .client
            .delete_topics(&[PRODUCTS.into()])
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(500)).await;
        setup
            .client
            .create_topics(std::slice::from_ref(&products))
            .await
            .unwrap();
    });
    set_products(&setup, 0..10, Some("v3"));
    std::thread::sleep(Duration::from_secs(4));
    let v3 = names(&[(0..10, Some("v3"))]);
    let fresh = send_orders(&setup, 300..400, &v3);
    assert_eq!(fresh.len(), 50);
    want.extend(fresh);
    setup.await_equal(
        &want,
        "priced orders, after the products topic was made again",
        |s| s.counted(OUTPUT),
    );
    eprintln!(
        "global table: {} orders priced exact through a scale-out, a drain and the table's topic made again; {} of missing products dropped",
        want.len(),
        400 - want.len()
    );
    stop.send(true).unwrap();
    common::await_shutdown(&setup, "b", b);
    drop(broker);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Every product's row as b's global store holds it, in process and over HTTP: the names
/// `names` says, the deleted product not found.
fn check_queries(
    setup: &Setup,
    queries: &baton_streams::queries::Queries,
    server: &str,
    names: &BTreeMap<String, String>,
) {
    use baton_streams::queries::{QueryOptions, StoreQuery};
    let store = StoreQuery::new(queries, "products", Str, Str);
    for id in 0..PRODUCT_COUNT {
        let key = format!("p{id}");
        let got = setup
            .rt
            .block_on(store.get(&key, &QueryOptions::default()))
            .unwrap();
        assert_eq!(got.value.as_ref(), names.get(&key), "{key} in process");
        assert_eq!(got.served.task, "global");
    }
    let body = http_get(&format!("{server}/v1/stores/products/keys/p3"));
    assert!(body.contains("\"value\":\"name-3-v2\""), "{body}");
    assert!(body.contains("\"role\":\"global\""), "{body}");
    let body = http_get(&format!("{server}/v1/stores/products/keys/p19"));
    assert!(body.contains("\"found\":false"), "{body}");
}

/// A GET over HTTP/1.0 with plain sockets: the body.
fn http_get(url: &str) -> String {
    use std::io::{Read, Write};
    let (host, path) = url.split_at(url.find('/').unwrap());
    let mut s = std::net::TcpStream::connect(host).unwrap();
    write!(s, "GET {path} HTTP/1.0\r\nHost: {host}\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out.split("\r\n\r\n").nth(1).unwrap_or_default().to_owned()
}
