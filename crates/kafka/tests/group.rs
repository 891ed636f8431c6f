//! The group member against a real broker: elections, joins, graceful leaves, crashes, and a
//! member with garbage metadata.

mod common;

use std::time::{Duration, Instant};

use baton_kafka::Client;
use common::*;
use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::{GroupId, JoinGroupRequest};
use kafka_protocol::protocol::StrBytes;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_join_one_leads_a_fourth_joins_and_one_leaves_gracefully() {
    let broker = Broker::start();
    let client = Client::new(&[&broker.addr], "test");
    create_topics(&client).await;

    let mut drivers: Vec<Driver> = (1..=3)
        .map(|n| drive(client.clone(), config("g1", n, 6000)))
        .collect();
    let all = wait_settled(&drivers.iter().collect::<Vec<_>>(), Duration::from_secs(30)).await;
    assert_eq!(
        all.iter().filter(|m| m.leader).count(),
        1,
        "exactly one leader"
    );
    assert!(
        all.iter().all(|m| m.info.version == 12),
        "Baton members speak v12"
    );

    let start = Instant::now();
    drivers.push(drive(client.clone(), config("g1", 4, 6000)));
    let all = wait_settled(&drivers.iter().collect::<Vec<_>>(), Duration::from_secs(30)).await;
    println!(
        "a 4th member joined: all 4 held the new assignment after {:?}",
        start.elapsed()
    );
    assert_eq!(all.len(), 4);
    assert_eq!(all.iter().filter(|m| m.leader).count(), 1);

    // Graceful leave: the rest rebalance at once, without waiting for a session timeout.
    let mut leaving = drivers.remove(3);
    let start = Instant::now();
    leaving.leave.take().unwrap().send(()).unwrap();
    leaving.handle.await.unwrap();
    wait_settled(&drivers.iter().collect::<Vec<_>>(), Duration::from_secs(30)).await;
    let took = start.elapsed();
    println!("graceful leave: the other 3 held a new assignment after {took:?}");
    assert!(
        took < Duration::from_secs(5),
        "no session-timeout wait after a graceful leave: {took:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_member_and_a_killed_leader_are_replaced_after_the_session_timeout() {
    let broker = Broker::start();
    let client = Client::new(&[&broker.addr], "test");
    create_topics(&client).await;
    let session = Duration::from_millis(6000);
    let mut drivers: Vec<Driver> = (1..=3)
        .map(|n| drive(client.clone(), config("g2", n, 6000)))
        .collect();
    let all = wait_settled(&drivers.iter().collect::<Vec<_>>(), Duration::from_secs(30)).await;

    // Kill the leader without leaving: the others notice only when the session times out.
    let leader = all.iter().position(|m| m.leader).unwrap();
    let dead = drivers.remove(leader);
    dead.handle.abort();
    let start = Instant::now();
    let rest = wait_settled(&drivers.iter().collect::<Vec<_>>(), Duration::from_secs(40)).await;
    let took = start.elapsed();
    println!("leader killed: a new leader and a complete assignment after {took:?}");
    assert!(
        took >= session - Duration::from_secs(1),
        "reassigned before the session timeout: {took:?}"
    );
    assert_eq!(rest.iter().filter(|m| m.leader).count(), 1, "a new leader");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_with_garbage_metadata_does_not_stop_the_leader() {
    let broker = Broker::start();
    let client = Client::new(&[&broker.addr], "test");
    create_topics(&client).await;
    let drivers: Vec<Driver> = (1..=2)
        .map(|n| drive(client.clone(), config("g3", n, 6000)))
        .collect();
    wait_settled(&drivers.iter().collect::<Vec<_>>(), Duration::from_secs(30)).await;

    // A raw member joins with bytes that are no subscription at all.
    let raw = client.clone();
    let garbage = tokio::spawn(async move {
        let coordinator = raw.find_coordinator("g3").await.unwrap();
        let mut member_id = String::new();
        for _ in 0..20 {
            let req = JoinGroupRequest::default()
                .with_group_id(GroupId(StrBytes::from_static_str("g3")))
                .with_session_timeout_ms(6000)
                .with_rebalance_timeout_ms(10_000)
                .with_member_id(StrBytes::from_string(member_id.clone()))
                .with_protocol_type(StrBytes::from_static_str("consumer"))
                .with_protocols(vec![JoinGroupRequestProtocol::default()
                    .with_name(StrBytes::from_static_str("stream"))
                    .with_metadata(bytes::Bytes::from_static(b"\x00\x03garbage!!"))]);
            let resp = raw.send_to(&coordinator, &req).await.unwrap();
            if resp.error_code == 79 {
                member_id = resp.member_id.to_string();
                continue;
            }
            return resp.error_code;
        }
        -1
    });
    // The two real members rejoin (the garbage one triggered a rebalance) and still get everything.
    let all = wait_settled(&drivers.iter().collect::<Vec<_>>(), Duration::from_secs(40)).await;
    assert_eq!(all.iter().filter(|m| m.leader).count(), 1);
    assert_eq!(
        garbage.await.unwrap(),
        0,
        "the garbage member's join completed"
    );
}

/// nisshi 0.8.1 answers DescribeGroups with empty member metadata and assignments (Apache
/// Kafka returns both for a Stable group, docs/BROKERS.md): the member publishes its own, as
/// the runtime does after every join, and `inspect` reads them back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_shows_members_tasks_and_lags() {
    use baton_assignor::TaskId;
    use baton_protocol::TaskOffsetSum;
    let broker = Broker::start();
    let client = Client::new(&[&broker.addr], "test");
    create_topics(&client).await;
    // One member, reporting running actives and a stale copy: lag = end - sum, or end when corrupt.
    let mut cfg = config("g4", 1, 6000);
    cfg.rack = Some("rack-1".into());
    cfg.client_tags = vec![baton_protocol::ClientTag {
        key: "zone".into(),
        value: "z1".into(),
    }];
    let mut m = baton_kafka::GroupMember::new(Client::new(&[&broker.addr], "m1"), cfg);
    m.set_offset_sums(vec![
        TaskOffsetSum {
            task: TaskId::new(0, 0),
            offset_sum: -2,
        },
        TaskOffsetSum {
            task: TaskId::new(0, 1),
            offset_sum: 5,
        },
    ]);
    m.set_leaving(true);
    let joined = m.join().await.unwrap().clone();
    client
        .create_topics(&[baton_kafka::client::NewTopic {
            name: "g4-reports".into(),
            partitions: 1,
            compacted: false,
        }])
        .await
        .unwrap();
    baton_kafka::inspect::publish_member(
        &client,
        "g4-reports",
        &joined.member_id,
        "app-instance",
        &joined.metadata,
        &joined.assignment,
        joined.generation,
    )
    .await
    .unwrap();
    let changelogs = [(0u32, vec!["app-counts-changelog".to_string()])]
        .into_iter()
        .collect();
    let view = baton_kafka::inspect::inspect(&client, "g4", &changelogs, Some("g4-reports"))
        .await
        .unwrap();
    println!(
        "inspect: member metadata from the {}",
        view.members[0].source
    );
    assert_eq!(view.members.len(), 1);
    let v = &view.members[0];
    assert_eq!(v.member_id, joined.member_id);
    assert!(v.leaving, "{v:#?}");
    assert_eq!(v.rack.as_deref(), Some("rack-1"));
    assert_eq!(
        v.client_tags.get("zone").map(String::as_str),
        Some("z1"),
        "user tags shown, Baton's own left out: {:?}",
        v.client_tags
    );
    assert_eq!(v.client_tags.len(), 1);
    assert_eq!(
        v.active.len(),
        PARTITIONS as usize,
        "a lone member runs every task"
    );
    let lags: Vec<(String, Option<String>)> = v
        .reported
        .iter()
        .map(|r| (r.task.to_string(), r.lag.clone()))
        .collect();
    // The changelog is empty (end 0): 0_1's sum of 5 is beyond the end, so it restores from scratch.
    assert_eq!(
        lags,
        vec![
            ("0_0".into(), Some("running".into())),
            ("0_1".into(), Some("0".into()))
        ]
    );
    assert_eq!(view.protocol, "stream");
    // The generation the member was assigned in, not the one its join claimed from (-1 here).
    if v.source == "report" {
        assert_eq!(view.generation, Some(joined.generation));
    } else {
        assert_eq!(view.generation, None, "a first join claims nothing");
    }
    m.leave().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_static_member_restarts_without_waiting_for_its_session_to_expire() {
    let broker = Broker::start();
    let client = Client::new(&[&broker.addr], "test");
    create_topics(&client).await;
    let static_config = |n: u128| {
        let mut c = config("g5", n, 6000);
        c.group_instance_id = Some(format!("instance-{n}"));
        c
    };
    let mut drivers: Vec<Driver> = (1..=2)
        .map(|n| drive(Client::new(&[&broker.addr], "m"), static_config(n)))
        .collect();
    wait_settled(&drivers.iter().collect::<Vec<_>>(), Duration::from_secs(30)).await;

    // Kill member 2 without leaving, and start it again with the same group.instance.id.
    let old = drivers.remove(1);
    old.handle.abort();
    let start = Instant::now();
    drivers.push(drive(Client::new(&[&broker.addr], "m"), static_config(2)));
    let all = wait_settled(&drivers.iter().collect::<Vec<_>>(), Duration::from_secs(30)).await;
    let took = start.elapsed();
    println!("static member restarted: the group held a complete assignment after {took:?}");
    assert_eq!(all.len(), 2);
    assert!(
        took < Duration::from_secs(5),
        "the restart waited for the session timeout: {took:?}"
    );
}

/// Waits until the drivers' memberships satisfy `done`; returns them.
async fn wait_for(
    drivers: &[&Driver],
    timeout: Duration,
    done: impl Fn(&[baton_kafka::member::Membership]) -> bool,
) -> Vec<baton_kafka::member::Membership> {
    let deadline = Instant::now() + timeout;
    loop {
        let all = wait_settled(drivers, timeout).await;
        if done(&all) {
            return all;
        }
        assert!(
            Instant::now() < deadline,
            "not reached in {timeout:?}: {all:#?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Version probing both ways: a member that speaks only v11 (an older Kafka Streams) joins
/// two Baton members. The Baton leader answers everyone at v11; the Baton members switch
/// their subscriptions to v11 and rejoin, and every member gets its share of actives. When
/// the old member leaves, the leader says it supports v12 again and the group returns to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_v11_member_brings_the_group_down_to_v11_and_its_leaving_back_up() {
    let broker = Broker::start();
    let client = Client::new(&[&broker.addr], "test");
    create_topics(&client).await;
    let mut drivers = vec![
        drive(client.clone(), config("gv", 1, 6000)),
        drive(client.clone(), config("gv", 2, 6000)),
    ];
    wait_for(
        &drivers.iter().collect::<Vec<_>>(),
        Duration::from_secs(30),
        |all| all.iter().all(|m| m.info.version == 12),
    )
    .await;

    let started = Instant::now();
    drivers.push(drive_at(client.clone(), config("gv", 3, 6000), 11));
    let all = wait_for(
        &drivers.iter().collect::<Vec<_>>(),
        Duration::from_secs(30),
        |all| {
            all.len() == 3
                && all
                    .iter()
                    .all(|m| m.info.version == 11 && !m.version_probing)
                && all.iter().all(|m| m.info.active_tasks.len() == 2)
        },
    )
    .await;
    println!(
        "a v11 member joined: the group settled at v11 with 2 actives each after {:?} (generation {})",
        started.elapsed(),
        all[0].generation
    );

    let started = Instant::now();
    let mut old = drivers.remove(2);
    old.leave.take().unwrap().send(()).unwrap();
    old.handle.await.unwrap();
    wait_for(
        &drivers.iter().collect::<Vec<_>>(),
        Duration::from_secs(30),
        |all| {
            all.iter()
                .all(|m| m.info.version == 12 && !m.version_probing)
        },
    )
    .await;
    println!(
        "the v11 member left: back at v12 after {:?}",
        started.elapsed()
    );
}
