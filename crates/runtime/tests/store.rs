//! The persistent store and restoring it from a real changelog.

use baton_assignor::TaskId;
use baton_kafka::client::NewTopic;
use baton_kafka::testing::Broker;
use baton_kafka::Client;
use baton_runtime::layout::Layout;
use baton_runtime::restore::Target;
use baton_runtime::{restore, TaskStore};
use bytes::Bytes;

fn temp_dir(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("baton-runtime-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

#[test]
fn writes_and_checkpoint_survive_a_reopen_together() {
    let dir = temp_dir("reopen");
    let task = TaskId::new(0, 3);
    {
        let s = TaskStore::open(&dir, task, "counts").unwrap();
        assert_eq!(s.checkpoint().unwrap(), None);
        s.apply(
            &[
                (b"a".to_vec(), Some(b"1".to_vec())),
                (b"b".to_vec(), Some(b"2".to_vec())),
            ],
            Some(10),
        )
        .unwrap();
        s.apply(&[(b"a".to_vec(), None)], Some(11)).unwrap();
    }
    let s = TaskStore::open(&dir, task, "counts").unwrap();
    assert_eq!(s.get(b"a").unwrap(), None, "a tombstone deletes");
    assert_eq!(s.get(b"b").unwrap(), Some(b"2".to_vec()));
    assert_eq!(s.checkpoint().unwrap(), Some(11));
    assert_eq!(s.len().unwrap(), 1);
    assert!(s.path().ends_with("0_3/counts"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restore_applies_the_changelog_and_a_restart_restores_only_the_tail() {
    let broker = Broker::start();
    let client = Client::new(&[&broker.addr], "test");
    client
        .create_topics(&[NewTopic {
            name: "app-counts-changelog".into(),
            partitions: 1,
            compacted: true,
        }])
        .await
        .unwrap();
    let leader = client.leader("app-counts-changelog", 0).await.unwrap();
    // 5,000 updates of 1,000 keys, then a tombstone for key 7.
    for chunk in 0..10 {
        let batch: Vec<(Option<Bytes>, Option<Bytes>)> = (0..500)
            .map(|i| {
                let n = chunk * 500 + i;
                (
                    Some(Bytes::from(format!("k{}", n % 1000))),
                    Some(Bytes::from(format!("{n}"))),
                )
            })
            .collect();
        client
            .produce(&leader, "app-counts-changelog", 0, &batch)
            .await
            .unwrap();
    }
    client
        .produce(
            &leader,
            "app-counts-changelog",
            0,
            &[(Some(Bytes::from("k7")), None)],
        )
        .await
        .unwrap();

    let dir = temp_dir("restore");
    let task = TaskId::new(0, 0);
    let changelog = baton_protocol::TopicPartition::new("app-counts-changelog", 0);
    let end = client
        .end_offsets(std::slice::from_ref(&changelog))
        .await
        .unwrap()[&changelog];
    assert_eq!(end, 5001);
    let stats = {
        let store = TaskStore::open(&dir, task, "counts").unwrap();
        let stats = restore(
            &client,
            &leader,
            "app-counts-changelog",
            0,
            Target {
                store: &store,
                layout: Layout::Plain,
            },
            end,
            256 * 1024,
        )
        .await
        .unwrap();
        assert_eq!(store.get(b"k999").unwrap(), Some(b"4999".to_vec()));
        assert_eq!(store.get(b"k7").unwrap(), None);
        assert_eq!(store.len().unwrap(), 999);
        assert_eq!(store.checkpoint().unwrap(), Some(5001));
        stats
    };
    assert_eq!(
        (stats.from_offset, stats.to_offset, stats.records),
        (0, 5001, 5001)
    );

    // More updates arrive; a restarted instance restores only those.
    let batch: Vec<(Option<Bytes>, Option<Bytes>)> = (0..100)
        .map(|i| (Some(Bytes::from(format!("k{i}"))), Some(Bytes::from("new"))))
        .collect();
    client
        .produce(&leader, "app-counts-changelog", 0, &batch)
        .await
        .unwrap();
    let store = TaskStore::open(&dir, task, "counts").unwrap();
    let stats = restore(
        &client,
        &leader,
        "app-counts-changelog",
        0,
        Target {
            store: &store,
            layout: Layout::Plain,
        },
        5101,
        256 * 1024,
    )
    .await
    .unwrap();
    assert_eq!(
        (stats.from_offset, stats.records),
        (5001, 100),
        "only the tail"
    );
    assert_eq!(store.get(b"k42").unwrap(), Some(b"new".to_vec()));
}
