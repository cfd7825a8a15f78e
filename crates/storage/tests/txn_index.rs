//! The aborted-transaction index: entries follow their segment through seal, clean and
//! unclean reopen, truncation, retention and DeleteRecords; lost indexes are reported.

use shoal_storage::batch::{encode_batch, BatchOptions};
use shoal_storage::{encode_end_txn_marker, AbortedTxn, EndTxnMarker, Log, LogConfig};

fn config() -> LogConfig {
    LogConfig {
        segment_bytes: 400,
        index_interval_bytes: 128,
        retention_ms: -1,
        ..LogConfig::default()
    }
}

fn txn_batch(pid: i64, seq: i32) -> Vec<u8> {
    encode_batch(
        &[(None, Some(b"transactional value"))],
        BatchOptions {
            producer_id: pid,
            producer_epoch: 0,
            base_sequence: seq,
            transactional: true,
            timestamp_ms: 1000,
            ..BatchOptions::default()
        },
    )
}

/// Appends a transaction of `n` batches for `pid` and its ABORT marker, indexing it; returns
/// the entry.
fn aborted_txn(log: &mut Log, pid: i64, n: i32) -> AbortedTxn {
    let mut first = None;
    for seq in 0..n {
        let info = log.append(&mut txn_batch(pid, seq), 5000).unwrap();
        first.get_or_insert(info.first_offset);
    }
    let marker = EndTxnMarker {
        commit: false,
        coordinator_epoch: 0,
    };
    let mut bytes = encode_end_txn_marker(pid, 0, marker, 1000);
    let last = log.append(&mut bytes, 5000).unwrap().first_offset;
    let txn = AbortedTxn {
        producer_id: pid,
        first_offset: first.unwrap(),
        last_offset: last,
        last_stable_offset: last + 1,
    };
    log.append_aborted_txn(txn).unwrap();
    txn
}

#[test]
fn entries_survive_clean_reopen_and_are_searched_across_segments() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), config()).unwrap();
    let txns: Vec<AbortedTxn> = (0..6).map(|i| aborted_txn(&mut log, i, 3)).collect();
    assert!(log.segment_count() > 2, "the test needs several segments");
    // Idempotent.
    log.append_aborted_txn(txns[2]).unwrap();
    assert_eq!(log.collect_aborted_txns(0, log.log_end_offset()), txns);
    let t = txns[3];
    assert_eq!(
        log.collect_aborted(t.first_offset, t.first_offset + 1),
        vec![(t.producer_id, t.first_offset)]
    );
    assert_eq!(log.collect_aborted(t.last_offset, t.last_offset), vec![]);
    assert_eq!(log.aborted_index_incomplete_from(), None);
    log.close().unwrap();

    let log = Log::open(dir.path(), config()).unwrap();
    assert_eq!(log.aborted_index_incomplete_from(), None);
    assert_eq!(log.collect_aborted_txns(0, log.log_end_offset()), txns);
}

#[test]
fn unclean_reopen_reports_the_lost_index_until_replayed() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), config()).unwrap();
    let txns: Vec<AbortedTxn> = (0..6).map(|i| aborted_txn(&mut log, i, 3)).collect();
    log.sync().unwrap(); // seals the rolled segments
    drop(log); // no close: the active segment is recovered by a scan
    let mut log = Log::open(dir.path(), config()).unwrap();
    let from = log
        .aborted_index_incomplete_from()
        .expect("active segment rescanned");
    let kept: Vec<AbortedTxn> = txns
        .iter()
        .copied()
        .filter(|t| t.last_offset < from)
        .collect();
    assert!(!kept.is_empty());
    assert_eq!(log.collect_aborted_txns(0, i64::MAX), kept);
    // The replay puts back the lost entries (and meets the kept ones again).
    for t in &txns {
        log.append_aborted_txn(*t).unwrap();
    }
    log.mark_aborted_index_complete().unwrap();
    assert_eq!(log.aborted_index_incomplete_from(), None);
    assert_eq!(log.collect_aborted_txns(0, i64::MAX), txns);

    // A corrupt file of a sealed segment is reported too.
    log.close().unwrap();
    let first = dir.path().join(format!("{:020}.txnindex", 0));
    let mut bytes = std::fs::read(&first).unwrap();
    let n = bytes.len();
    bytes[n - 1] ^= 0xff;
    std::fs::write(&first, bytes).unwrap();
    let log = Log::open(dir.path(), config()).unwrap();
    assert_eq!(log.aborted_index_incomplete_from(), Some(0));
}

#[test]
fn truncation_retention_and_delete_records_drop_entries() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), config()).unwrap();
    let txns: Vec<AbortedTxn> = (0..6).map(|i| aborted_txn(&mut log, i, 3)).collect();
    log.truncate_to(txns[5].last_offset).unwrap();
    assert_eq!(log.collect_aborted_txns(0, i64::MAX), txns[..5].to_vec());
    log.delete_records_before(txns[2].last_offset + 1).unwrap();
    let left = log.collect_aborted_txns(0, i64::MAX);
    assert!(
        left.len() < 5,
        "segments below the start offset were deleted"
    );
    assert!(left.ends_with(&txns[3..5]));
    assert!(
        log.append_aborted_txn(txns[5]).is_err(),
        "no segment holds it"
    );
}

#[test]
fn a_recovery_point_keeps_the_active_segments_entries_below_it() {
    let big = LogConfig {
        segment_bytes: 1 << 20,
        ..config()
    };
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), big).unwrap();
    let before: Vec<AbortedTxn> = (0..4).map(|i| aborted_txn(&mut log, i, 3)).collect();
    log.sync().unwrap();
    assert!(log.checkpoint_recovery_point().unwrap());
    let point = log.log_end_offset();
    let after: Vec<AbortedTxn> = (4..6).map(|i| aborted_txn(&mut log, i, 2)).collect();
    assert_eq!(log.segment_count(), 1, "one active segment");
    drop(log); // kill -9

    let mut log = Log::open(dir.path(), big).unwrap();
    // Known below the point: a replay may start there, not at the segment's base.
    assert_eq!(log.aborted_index_incomplete_from(), Some(point));
    assert_eq!(log.collect_aborted_txns(0, i64::MAX), before);
    for t in &after {
        log.append_aborted_txn(*t).unwrap();
    }
    log.mark_aborted_index_complete().unwrap();
    let all: Vec<AbortedTxn> = before.iter().chain(&after).copied().collect();
    assert_eq!(log.collect_aborted_txns(0, i64::MAX), all);

    // A recovery point saved while the index was incomplete saves none: the replay must
    // start at the segment's base again.
    drop(log);
    let mut log = Log::open(dir.path(), big).unwrap();
    assert_eq!(log.aborted_index_incomplete_from(), Some(point));
    aborted_txn(&mut log, 9, 1);
    log.sync().unwrap();
    assert!(log.checkpoint_recovery_point().unwrap());
    drop(log);
    let log = Log::open(dir.path(), big).unwrap();
    assert_eq!(log.aborted_index_incomplete_from(), Some(0));
}
