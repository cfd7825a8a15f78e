//! The background log cleaner through the broker: a compacted user topic is compacted, and the
//! internal topics replay to the same coordinator state from their compacted form as from
//! their full log.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use common::TestBroker;
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
use kafka_protocol::messages::txn_offset_commit_request::{
    TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
};
use kafka_protocol::messages::{
    CreateTopicsRequest, EndTxnRequest, GroupId, InitProducerIdRequest, OffsetCommitRequest,
    OffsetFetchRequest, ProducerId, TopicName, TransactionalId, TxnOffsetCommitRequest,
};
use kafka_protocol::protocol::StrBytes;
use shoal_client::Connection;
use shoal_protocol::ErrorCode;
use shoal_storage::{decode_records, encode_batch, BatchOptions};

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

const WAIT_STEPS: usize = 1000;
const WAIT_STEP: Duration = Duration::from_millis(20);

async fn create(conn: &mut Connection, name: &str, configs: &[(&str, &str)]) {
    let r = conn
        .request(
            7,
            &CreateTopicsRequest::default().with_topics(vec![CreatableTopic::default()
                .with_name(TopicName(s(name)))
                .with_num_partitions(3)
                .with_replication_factor(1)
                .with_configs(
                    configs
                        .iter()
                        .map(|(k, v)| {
                            CreatableTopicConfig::default()
                                .with_name(s(k))
                                .with_value(Some(s(v)))
                        })
                        .collect(),
                )]),
        )
        .await
        .unwrap();
    assert_eq!(r.topics[0].error_code, 0, "{:?}", r.topics[0].error_message);
}

/// Keys of partition `p` of `topic` with their latest value, and how many keyed records the
/// log holds.
fn contents(broker: &TestBroker, topic: &str, p: i32) -> (BTreeMap<Vec<u8>, Vec<u8>>, usize) {
    let partition = broker.broker.topic(topic).unwrap().partition(p).unwrap();
    let log = partition.lock();
    let mut latest = BTreeMap::new();
    let mut count = 0;
    for b in log.iter_batches(0) {
        let b = b.unwrap();
        for r in decode_records(&b.bytes, 1 << 20).unwrap() {
            count += 1;
            latest.insert(r.key.unwrap().to_vec(), r.value.unwrap().to_vec());
        }
    }
    (latest, count)
}

#[tokio::test]
async fn a_compacted_topic_is_compacted_in_the_background() {
    let dir = tempfile::tempdir().unwrap();
    let broker = TestBroker::start_with(dir.path(), &[("log.cleaner.backoff.ms", "10")]).await;
    let mut conn = broker.connect().await;
    create(
        &mut conn,
        "kv",
        &[
            ("cleanup.policy", "compact"),
            ("internal.segment.bytes", "1024"),
            ("min.cleanable.dirty.ratio", "0.01"),
        ],
    )
    .await;
    let partition = broker.broker.topic("kv").unwrap().partition(1).unwrap();
    let mut want = BTreeMap::new();
    for round in 0..20 {
        for k in 0..10 {
            let key = format!("k{k}");
            let value = format!("v{round}");
            want.insert(key.clone().into_bytes(), value.clone().into_bytes());
            let mut b = encode_batch(
                &[(Some(key.as_bytes()), Some(value.as_bytes()))],
                BatchOptions::default(),
            );
            let mut log = partition.lock();
            log.append(&mut b, common::now_ms()).unwrap();
            log.sync().unwrap();
        }
    }
    let end = partition.lock().log_end_offset();
    let mut compacted = false;
    for _ in 0..WAIT_STEPS {
        let (latest, count) = contents(&broker, "kv", 1);
        assert_eq!(latest, want, "a latest value changed");
        // Everything but the active segment's records is one record per key.
        if count < 200 && partition.lock().cleaner_checkpoint() > 0 {
            compacted = true;
            break;
        }
        tokio::time::sleep(WAIT_STEP).await;
    }
    assert!(compacted, "the cleaner never compacted the topic");
    assert_eq!(partition.lock().log_end_offset(), end);
    broker.stop().await;
}

#[tokio::test]
async fn the_cleaner_can_be_disabled() {
    let dir = tempfile::tempdir().unwrap();
    let broker = TestBroker::start_with(
        dir.path(),
        &[
            ("log.cleaner.backoff.ms", "10"),
            ("log.cleaner.enable", "false"),
        ],
    )
    .await;
    let mut conn = broker.connect().await;
    create(
        &mut conn,
        "kv",
        &[
            ("cleanup.policy", "compact"),
            ("internal.segment.bytes", "1024"),
            ("min.cleanable.dirty.ratio", "0.01"),
        ],
    )
    .await;
    let partition = broker.broker.topic("kv").unwrap().partition(0).unwrap();
    for round in 0..20 {
        let mut b = encode_batch(
            &[(Some(&b"k"[..]), Some(format!("v{round}").as_bytes()))],
            BatchOptions::default(),
        );
        let mut log = partition.lock();
        log.append(&mut b, 0).unwrap();
        log.sync().unwrap();
    }
    // Give a running cleaner many chances (not a timing threshold: nothing may change).
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(contents(&broker, "kv", 0).1, 20);
    broker.stop().await;
}

const GROUPS: usize = 4;

async fn commit(conn: &mut Connection, group: &str, offsets: &[(i32, i64)]) {
    let r = conn
        .request(
            8,
            &OffsetCommitRequest::default()
                .with_group_id(GroupId(s(group)))
                .with_generation_id_or_member_epoch(-1)
                .with_topics(vec![OffsetCommitRequestTopic::default()
                    .with_name(TopicName(s("out")))
                    .with_partitions(
                        offsets
                            .iter()
                            .map(|(p, o)| {
                                OffsetCommitRequestPartition::default()
                                    .with_partition_index(*p)
                                    .with_committed_offset(*o)
                            })
                            .collect(),
                    )]),
        )
        .await
        .unwrap();
    for p in &r.topics[0].partitions {
        assert_eq!(p.error_code, 0);
    }
}

async fn init(conn: &mut Connection, id: &str) -> (i64, i16) {
    let r = conn
        .request(
            4,
            &InitProducerIdRequest::default()
                .with_transactional_id(Some(TransactionalId(s(id))))
                .with_transaction_timeout_ms(60_000)
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1),
        )
        .await
        .unwrap();
    assert_eq!(r.error_code, 0);
    (r.producer_id.0, r.producer_epoch)
}

/// One TV2 transaction committing `offset` for group "tg" on out-0; returns the next epoch.
async fn txn_commit(
    conn: &mut Connection,
    id: &str,
    pid: i64,
    epoch: i16,
    offset: i64,
    commit: bool,
) -> i16 {
    let r = conn
        .request(
            5,
            &TxnOffsetCommitRequest::default()
                .with_transactional_id(TransactionalId(s(id)))
                .with_group_id(GroupId(s("tg")))
                .with_producer_id(ProducerId(pid))
                .with_producer_epoch(epoch)
                .with_generation_id(-1)
                .with_topics(vec![TxnOffsetCommitRequestTopic::default()
                    .with_name(TopicName(s("out")))
                    .with_partitions(vec![TxnOffsetCommitRequestPartition::default()
                        .with_partition_index(0)
                        .with_committed_offset(offset)])]),
        )
        .await
        .unwrap();
    assert_eq!(r.topics[0].partitions[0].error_code, 0);
    for _ in 0..WAIT_STEPS {
        let r = conn
            .request(
                5,
                &EndTxnRequest::default()
                    .with_transactional_id(TransactionalId(s(id)))
                    .with_producer_id(ProducerId(pid))
                    .with_producer_epoch(epoch)
                    .with_committed(commit),
            )
            .await
            .unwrap();
        if r.error_code == ErrorCode::CONCURRENT_TRANSACTIONS.code() {
            tokio::time::sleep(WAIT_STEP).await;
            continue;
        }
        assert_eq!(r.error_code, 0);
        return r.producer_epoch;
    }
    panic!("EndTxn never completed");
}

/// What the coordinators hold: every group's stable committed offsets, and the transactional
/// ids' states.
async fn coordinator_state(broker: &TestBroker) -> String {
    let mut conn = broker.connect().await;
    let mut out = String::new();
    let groups: Vec<String> = (0..GROUPS)
        .map(|g| format!("g{g}"))
        .chain(["tg".to_string()])
        .collect();
    for g in groups {
        let fetch = OffsetFetchRequest::default()
            .with_group_id(GroupId(s(&g)))
            .with_require_stable(true)
            .with_topics(Some(vec![OffsetFetchRequestTopic::default()
                .with_name(TopicName(s("out")))
                .with_partition_indexes(vec![0, 1, 2])]));
        let mut answer = None;
        for _ in 0..WAIT_STEPS {
            let r = conn.request(7, &fetch).await.unwrap();
            if r.topics[0]
                .partitions
                .iter()
                .all(|p| p.error_code != ErrorCode::UNSTABLE_OFFSET_COMMIT.code())
            {
                answer = Some(r);
                break;
            }
            tokio::time::sleep(WAIT_STEP).await;
        }
        let r = answer.expect("offsets never stable");
        for p in &r.topics[0].partitions {
            out.push_str(&format!(
                "{g} out-{} {} {}\n",
                p.partition_index, p.committed_offset, p.error_code
            ));
        }
    }
    let described = broker
        .broker
        .txn
        .describe(vec!["t0".into(), "t1".into()])
        .await
        .unwrap();
    out.push_str(&format!("{described:?}\n"));
    out
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), target).unwrap();
        }
    }
}

fn internal_bytes(broker: &TestBroker) -> u64 {
    ["__consumer_offsets", "__transaction_state"]
        .iter()
        .flat_map(|t| broker.broker.topic(t).unwrap().partitions())
        .map(|p| p.lock().size_bytes())
        .sum()
}

/// Replays `__consumer_offsets` and `__transaction_state` in full and compacted, and compares
/// what the coordinators then answer.
#[tokio::test]
async fn internal_topics_replay_the_same_state_compacted() {
    let full = tempfile::tempdir().unwrap();
    let compacted = tempfile::tempdir().unwrap();
    let quiet = [
        ("log.cleaner.enable", "false"),
        ("offsets.topic.segment.bytes", "1024"),
        ("transaction.state.log.segment.bytes", "1024"),
        ("transaction.state.log.num.partitions", "2"),
    ];
    let broker = TestBroker::start_with(full.path(), &quiet).await;
    let mut conn = broker.connect().await;
    create(&mut conn, "out", &[]).await;
    let (p0, mut e0) = init(&mut conn, "t0").await;
    let (p1, mut e1) = init(&mut conn, "t1").await;
    for round in 0..40i64 {
        for g in 0..GROUPS {
            let offsets: Vec<(i32, i64)> = (0..3).map(|p| (p, round * 10 + p as i64)).collect();
            commit(&mut conn, &format!("g{g}"), &offsets).await;
        }
        if round % 4 == 0 {
            // Commits and aborts interleaved, the last ones aborted: an aborted pending
            // offset must not hide the committed one before it.
            e0 = txn_commit(&mut conn, "t0", p0, e0, round, round % 8 == 0).await;
            let t1_commits = round % 12 == 0 && round != 36;
            e1 = txn_commit(&mut conn, "t1", p1, e1, round + 1, t1_commits).await;
        }
    }
    let live = coordinator_state(&broker).await;
    broker.stop().await;
    copy_dir(full.path(), compacted.path());
    let replayed = TestBroker::start_with(full.path(), &quiet).await;
    let want = coordinator_state(&replayed).await;
    replayed.stop().await;
    assert!(live.lines().count() > 3 * (GROUPS + 1));

    // Compact a copy in the background.
    let cleaning = TestBroker::start_with(
        compacted.path(),
        &[
            ("log.cleaner.backoff.ms", "10"),
            ("log.cleaner.min.cleanable.ratio", "0.01"),
            ("offsets.topic.segment.bytes", "1024"),
            ("transaction.state.log.segment.bytes", "1024"),
            ("transaction.state.log.num.partitions", "2"),
        ],
    )
    .await;
    let before = internal_bytes(&cleaning);
    let mut done = false;
    for _ in 0..WAIT_STEPS {
        let all_clean = ["__consumer_offsets", "__transaction_state"]
            .iter()
            .flat_map(|t| cleaning.broker.topic(t).unwrap().partitions())
            .all(|p| {
                let log = p.lock();
                log.segment_count() < 2 || log.cleaner_checkpoint() > log.log_start_offset()
            });
        if all_clean {
            done = true;
            break;
        }
        tokio::time::sleep(WAIT_STEP).await;
    }
    assert!(done, "the internal topics were never cleaned");
    let after = internal_bytes(&cleaning);
    assert!(
        after < before,
        "compaction did not shrink them: {before} -> {after}"
    );
    cleaning.stop().await;

    let replayed = TestBroker::start_with(compacted.path(), &quiet).await;
    let got = coordinator_state(&replayed).await;
    replayed.stop().await;
    assert_eq!(got, want);
}

/// The cleaner stops at the last stable offset: an open transaction holds back everything
/// after its first batch until its marker is written.
#[tokio::test]
async fn an_open_transaction_holds_the_cleaner_back() {
    use std::sync::atomic::AtomicBool;
    let dir = tempfile::tempdir().unwrap();
    let broker = TestBroker::start_with(dir.path(), &[("log.cleaner.enable", "false")]).await;
    let mut conn = broker.connect().await;
    create(
        &mut conn,
        "kv",
        &[
            ("cleanup.policy", "compact"),
            ("internal.segment.bytes", "1024"),
        ],
    )
    .await;
    let b = &broker.broker;
    let partition = b.topic("kv").unwrap().partition(0).unwrap();
    let now = common::now_ms();
    let append = |bytes: &mut Vec<u8>| {
        let mut log = partition.lock();
        log.append(bytes, now).unwrap();
        log.sync().unwrap();
    };
    // An open transaction first, then keys written over and over.
    append(&mut encode_batch(
        &[(Some(&b"t"[..]), Some(&b"in a transaction"[..]))],
        BatchOptions {
            producer_id: 77,
            producer_epoch: 0,
            base_sequence: 0,
            transactional: true,
            ..BatchOptions::default()
        },
    ));
    for round in 0..20 {
        for k in 0..5 {
            append(&mut encode_batch(
                &[(
                    Some(format!("k{k}").as_bytes()),
                    Some(format!("v{round}").as_bytes()),
                )],
                BatchOptions::default(),
            ));
        }
    }
    let cc = shoal_broker::cleaner::topic_compaction(b, "kv").unwrap();
    let cc = shoal_storage::CompactionConfig {
        min_cleanable_dirty_ratio: 0.0,
        ..cc
    };
    let stop = AtomicBool::new(false);
    let cleaned = shoal_broker::cleaner::clean_partition(b, &partition, &cc, now, &stop).unwrap();
    assert!(
        cleaned.is_none(),
        "cleaned past an open transaction: {cleaned:?}"
    );
    assert_eq!(contents(&broker, "kv", 0).1, 101);
    shoal_broker::markers::write_marker(b, &partition, 77, 0, true, 0).unwrap();
    partition.lock().sync().unwrap();
    let stats = shoal_broker::cleaner::clean_partition(b, &partition, &cc, now, &stop)
        .unwrap()
        .expect("nothing cleaned once the transaction ended");
    assert!(stats.records_removed > 0);
    let (latest, _) = contents(&broker, "kv", 0);
    assert_eq!(latest[&b"t"[..]], b"in a transaction");
    assert_eq!(latest[&b"k4"[..]], b"v19");
    broker.stop().await;
}
