//! The `top-products` and `order-payments` examples, run as programs on the real broker: two
//! instances, then one drained. `top-products` counts products per category from a table of
//! each product's category (products moving and removed); `order-payments` pairs orders with
//! their payments within 5 minutes. Both outputs end exactly as the input says.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use baton_kafka::records::KeyValue;
use baton_runtime::partitioner::partition_for;
use bytes::Bytes;
use common::{Instance, Setup};

const PARTITIONS: i32 = 2;

fn keyed(k: &str, v: Option<&str>) -> KeyValue {
    (
        Some(Bytes::copy_from_slice(k.as_bytes())),
        v.map(|v| Bytes::copy_from_slice(v.as_bytes())),
    )
}

/// `records` of `(key, value, timestamp)` to `topic`, each to its key's partition.
fn send(setup: &Setup, topic: &str, records: &[(String, Option<String>, i64)]) {
    type Stamped = (Vec<KeyValue>, Vec<i64>);
    let mut by_partition: BTreeMap<i32, Stamped> = BTreeMap::new();
    for (k, v, ts) in records {
        let p = partition_for(k.as_bytes(), PARTITIONS as u32) as i32;
        let (batch, stamps) = by_partition.entry(p).or_default();
        batch.push(keyed(k, v.as_deref()));
        stamps.push(*ts);
    }
    setup.rt.block_on(async {
        for (p, (batch, stamps)) in by_partition {
            let leader = setup.client.leader(topic, p).await.unwrap();
            setup
                .client
                .produce_stamped(&leader, topic, p, &batch, &stamps)
                .await
                .unwrap();
        }
    });
}

/// Each key's last value in `topic`.
fn latest(setup: &Setup, topic: &str) -> BTreeMap<String, Option<Vec<u8>>> {
    let mut out = BTreeMap::new();
    for r in setup.read(topic).into_values().flatten() {
        let k = String::from_utf8(r.key.unwrap().to_vec()).unwrap();
        out.insert(k, r.value.map(|v| v.to_vec()));
    }
    out
}

/// Two instances of `example`, then the first drained; `phases` sent before each step. The
/// second starts once the first has written to `output`: a drain written before an instance
/// read the control topic's end at its start is an earlier life's, and is not for it.
fn scale_and_drain(
    setup: &Setup,
    (broker, dir, output): (&str, &std::path::Path, &str),
    (example, app, args): (&str, &str, &[&str]),
    phases: [&dyn Fn(); 3],
) -> Instance {
    let mut a = Instance::spawn(example, broker, dir, "a", app, args);
    phases[0]();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while setup.read(output).values().all(Vec::is_empty) {
        assert!(
            std::time::Instant::now() < deadline,
            "{example}: no output within 60 s\n{}",
            a.log_text()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let b = Instance::spawn(example, broker, dir, "b", app, args);
    phases[1]();
    setup.drain(app, "a");
    let status = a.exited_within(Duration::from_secs(60));
    assert!(
        status.is_some_and(|s| s.success()),
        "{example}: a exits once drained: {status:?}\n{}",
        a.log_text()
    );
    phases[2]();
    b
}

#[test]
fn top_products_and_order_payments_end_exact_through_a_scale_out_and_a_drain() {
    let (broker, dir, setup) = common::start(
        "examples",
        &["ex-product-categories", "ex-orders", "ex-payments"],
        "ex-products-per-category",
        PARTITIONS,
    );
    setup
        .rt
        .block_on(setup.client.create_topics(&[baton_kafka::client::NewTopic {
            name: "ex-paid".into(),
            partitions: PARTITIONS,
            compacted: false,
        }]))
        .unwrap();

    // top-products: 60 products over 5 categories, moved each phase, some removed.
    let categories = std::cell::RefCell::new(BTreeMap::<String, Option<String>>::new());
    let phase = |n: usize| {
        let records: Vec<(String, Option<String>, i64)> = (0..60)
            .map(|i| {
                let cat =
                    (!(i + n).is_multiple_of(9)).then(|| format!("cat{}", (i * 7 + n * 3) % 5));
                categories.borrow_mut().insert(format!("p{i}"), cat.clone());
                (format!("p{i}"), cat, 1_000_000 + n as i64)
            })
            .collect();
        send(&setup, "ex-product-categories", &records);
    };
    let args = [
        "--input",
        "ex-product-categories",
        "--output",
        "ex-products-per-category",
    ];
    let mut b = scale_and_drain(
        &setup,
        (&broker.addr, &dir, "ex-products-per-category"),
        ("top-products", "top-products", &args),
        [&|| phase(0), &|| phase(1), &|| phase(2)],
    );
    let mut want: BTreeMap<String, Option<Vec<u8>>> = BTreeMap::new();
    for c in (0..5).map(|c| format!("cat{c}")) {
        let n = categories
            .borrow()
            .values()
            .filter(|v| v.as_deref() == Some(&c))
            .count();
        want.insert(c, Some((n as i64).to_be_bytes().to_vec()));
    }
    setup.await_equal(&want, "products per category", |s| {
        latest(s, "ex-products-per-category")
    });
    b.stop();

    // order-payments: each order paid 1 to 6 minutes later; those past 5 minutes unpaired.
    let pairs = std::cell::RefCell::new(BTreeMap::<String, Option<Vec<u8>>>::new());
    let orders = |range: std::ops::Range<i64>| {
        let (mut orders, mut payments) = (Vec::new(), Vec::new());
        for i in range {
            let (id, ts) = (format!("o{i}"), 2_000_000 + i * 1_000);
            let paid_after = (1 + i % 6) * 60_000;
            orders.push((id.clone(), Some(format!("order{i}")), ts));
            payments.push((id.clone(), Some(format!("pay{i}")), ts + paid_after));
            if paid_after <= 300_000 {
                let v = format!("order{i} paid by pay{i}").into_bytes();
                pairs.borrow_mut().insert(id, Some(v));
            }
        }
        send(&setup, "ex-orders", &orders);
        send(&setup, "ex-payments", &payments);
    };
    let args = [
        "--orders",
        "ex-orders",
        "--payments",
        "ex-payments",
        "--output",
        "ex-paid",
    ];
    let mut b = scale_and_drain(
        &setup,
        (&broker.addr, &dir, "ex-paid"),
        ("order-payments", "order-payments", &args),
        [&|| orders(0..100), &|| orders(100..200), &|| {
            orders(200..300)
        }],
    );
    let want = pairs.borrow().clone();
    setup.await_equal(&want, "paid orders", |s| latest(s, "ex-paid"));
    let written: usize = setup.read("ex-paid").values().map(Vec::len).sum();
    assert_eq!(written, want.len(), "each pair written once");
    eprintln!(
        "examples: products per category exact; {} of 300 orders paired exactly once",
        want.len()
    );
    b.stop();
    drop(broker);
    let _ = std::fs::remove_dir_all(&dir);
}
