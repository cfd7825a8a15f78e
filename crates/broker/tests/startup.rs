//! Start-up opens every partition of every topic on `num.recovery.threads.per.data.dir`
//! threads, after a clean stop and after a crash, each in its place with its own data.

mod common;

use common::{create_topic, produce_once, TestBroker};
use shoal_storage::{encode_batch, BatchOptions};

/// Topics of different sizes, so that partitions of several topics open on each thread.
const TOPICS: [(&str, i32); 3] = [("one", 1), ("five", 5), ("three", 3)];

fn records(n: usize) -> bytes::Bytes {
    let values: Vec<Vec<u8>> = (0..n).map(|i| format!("r{i}").into_bytes()).collect();
    let kvs: Vec<_> = values.iter().map(|v| (None, Some(v.as_slice()))).collect();
    bytes::Bytes::from(encode_batch(&kvs, BatchOptions::default()))
}

/// Partition `p` of topic number `t` holds `t * 10 + p + 1` records: every position distinct.
fn expected(t: usize, p: i32) -> i64 {
    t as i64 * 10 + i64::from(p) + 1
}

fn check(broker: &TestBroker) {
    for (t, (name, partitions)) in TOPICS.iter().enumerate() {
        let topic = broker.broker.topic(name).unwrap();
        assert_eq!(topic.partition_count(), *partitions as usize);
        for p in 0..*partitions {
            let partition = topic.partition(p).unwrap();
            assert_eq!((partition.topic.as_str(), partition.index), (*name, p));
            assert_eq!(partition.lock().log_end_offset(), expected(t, p));
        }
    }
}

#[tokio::test]
async fn every_partition_reopens_in_its_place_on_several_threads() {
    let dir = tempfile::tempdir().unwrap();
    let settings = [("num.recovery.threads.per.data.dir", "3")];
    let broker = TestBroker::start_with(dir.path(), &settings).await;
    let mut conn = broker.connect().await;
    for (t, (name, partitions)) in TOPICS.iter().enumerate() {
        create_topic(&mut conn, name, *partitions).await;
        for p in 0..*partitions {
            let (code, _) = produce_once(
                &mut conn,
                9,
                None,
                name,
                p,
                records(expected(t, p) as usize),
            )
            .await;
            assert_eq!(code, 0);
        }
    }
    check(&broker);
    broker.stop().await;

    let broker = TestBroker::start_with(dir.path(), &settings).await;
    check(&broker);
    broker.crash().await;

    let broker = TestBroker::start_with(dir.path(), &settings).await;
    check(&broker);
    broker.stop().await;
}
