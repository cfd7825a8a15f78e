//! Recovery at restart after kill -9: the broker writes each partition's recovery point every
//! `log.flush.offset.checkpoint.interval.ms`, and the restarted broker scans only the bytes
//! past it, yet serves every acknowledged record, the tail included.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{create_topic, produce_once, TestBroker};
use shoal_broker::topic_registry::Partition;
use shoal_storage::{encode_batch, BatchOptions};

const TOPIC: &str = "rp";

fn records(tag: &str, n: usize) -> bytes::Bytes {
    let values: Vec<Vec<u8>> = (0..n)
        .map(|i| format!("{tag}-{i:04}").into_bytes())
        .collect();
    let kvs: Vec<_> = values.iter().map(|v| (None, Some(v.as_slice()))).collect();
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    bytes::Bytes::from(encode_batch(
        &kvs,
        BatchOptions {
            timestamp_ms: now_ms,
            ..BatchOptions::default()
        },
    ))
}

async fn produce_rounds(broker: &TestBroker, tag: &str, rounds: usize) {
    let mut conn = broker.connect().await;
    for r in 0..rounds {
        for partition in 0..2 {
            let (code, _) = produce_once(
                &mut conn,
                9,
                None,
                TOPIC,
                partition,
                records(&format!("{tag}{r}"), 20),
            )
            .await;
            assert_eq!(code, 0);
        }
    }
}

fn partition(broker: &TestBroker, index: i32) -> Arc<Partition> {
    broker
        .broker
        .topic(TOPIC)
        .unwrap()
        .partition(index)
        .unwrap()
}

fn log_state(broker: &TestBroker, index: i32) -> (i64, u64, usize) {
    let p = partition(broker, index);
    let log = p.lock();
    let mut batches = 0;
    for b in log.iter_batches(0) {
        b.unwrap();
        batches += 1;
    }
    (log.log_end_offset(), log.recovery_scanned_bytes(), batches)
}

fn active_segment_len(dir: &std::path::Path, partition: i32) -> u64 {
    let pdir = dir.join(format!("{TOPIC}-{partition}"));
    let mut logs: Vec<_> = std::fs::read_dir(&pdir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    logs.sort();
    std::fs::metadata(logs.pop().unwrap()).unwrap().len()
}

#[tokio::test]
async fn after_kill_9_only_the_tail_past_the_recovery_point_is_scanned() {
    let dir = tempfile::tempdir().unwrap();
    let settings = [("log.flush.offset.checkpoint.interval.ms", "100")];
    let broker = TestBroker::start_with(dir.path(), &settings).await;
    create_topic(&mut broker.connect().await, TOPIC, 2).await;
    produce_rounds(&broker, "a", 60).await;
    assert_eq!(partition(&broker, 0).lock().segment_count(), 1);
    // Several checkpoint intervals: the recovery point now covers everything so far.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let covered: Vec<u64> = (0..2).map(|p| active_segment_len(dir.path(), p)).collect();
    // With a producer snapshot at the same offset, so the producer-state replay after a
    // crash starts at the point too (the state was loaded by the checkpoint if need be).
    for p in 0..2 {
        let (end, _, _) = log_state(&broker, p);
        let snapshot = dir
            .path()
            .join(format!("{TOPIC}-{p}"))
            .join(format!("{end:020}.snapshot"));
        assert!(
            snapshot.exists(),
            "no producer snapshot at {end} in partition {p}"
        );
    }
    // A tail, then kill -9 before (or while) the next checkpoint runs.
    produce_rounds(&broker, "b", 5).await;
    let before: Vec<_> = (0..2).map(|p| log_state(&broker, p)).collect();
    broker.crash().await;

    let broker = TestBroker::start_with(dir.path(), &settings).await;
    for p in 0..2 {
        let (end, _, batches) = before[p];
        let (end2, scanned, batches2) = log_state(&broker, p as i32);
        assert_eq!((end2, batches2), (end, batches), "partition {p}");
        let tail = active_segment_len(dir.path(), p as i32) - covered[p];
        assert!(tail > 0);
        assert!(
            scanned <= tail,
            "partition {p}: scanned {scanned} bytes, more than the {tail}-byte tail"
        );
    }
    broker.stop().await;
}
