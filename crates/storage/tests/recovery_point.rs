//! The recovery point: after an unclean shutdown only the active segment's bytes past the last
//! written recovery point are scanned with CRC checks; a stale, foreign or garbage recovery
//! point costs a full scan, never data.

mod common;

use std::path::Path;

use common::{append_garbage, batch, last_segment};
use shoal_storage::{Log, LogConfig};

/// One big active segment with a dense index, so the walk and the scan both have work.
fn config() -> LogConfig {
    LogConfig {
        segment_bytes: 1 << 30,
        index_interval_bytes: 256,
        retention_ms: -1,
        ..LogConfig::default()
    }
}

/// Appends `count` batches of 3 records, timestamps from `ts0`.
fn fill(log: &mut Log, count: usize, ts0: i64) {
    for i in 0..count {
        let mut b = batch(3, ts0 + i as i64, &format!("b{ts0}-{i}"));
        log.append(&mut b, 5000).unwrap();
    }
}

fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).unwrap().len()
}

/// Every batch readable at every offset, values in order.
fn assert_whole(log: &Log, end: i64) {
    assert_eq!(log.log_end_offset(), end);
    let mut next = 0;
    for b in log.iter_batches(0) {
        let b = b.unwrap();
        assert_eq!(b.header.base_offset(), next);
        next = b.header.next_offset();
    }
    assert_eq!(next, end);
    for o in (0..end).step_by(7) {
        let r = log.read(o, 1, None).unwrap();
        assert!(!r.records.is_empty(), "offset {o} unreadable");
    }
}

/// A log in `dir` with `batches` batches fsynced, and its recovery point written if
/// `checkpoint`.
fn durable_log(dir: &Path, batches: usize, checkpoint: bool) -> Log {
    let mut log = Log::open(dir, config()).unwrap();
    fill(&mut log, batches, 1000);
    log.sync().unwrap();
    if checkpoint {
        assert!(log.checkpoint_recovery_point().unwrap());
    }
    log
}

/// Reopens after a crash; checks the whole active segment was CRC-scanned and all reads.
fn reopen_expecting_full_scan(dir: &Path, end: i64, case: &str) {
    let log = Log::open(dir, config()).unwrap();
    assert_eq!(
        log.recovery_scanned_bytes(),
        file_len(&last_segment(dir)),
        "{case:?}"
    );
    assert_whole(&log, end);
}

#[test]
fn only_the_tail_past_the_recovery_point_is_scanned() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = durable_log(dir.path(), 300, true);
    assert!(
        !log.checkpoint_recovery_point().unwrap(),
        "unchanged point rewritten"
    );
    let checkpointed = file_len(&last_segment(dir.path()));
    fill(&mut log, 40, 5000);
    let end = log.log_end_offset();
    let ts_offset = log.offset_for_timestamp(1150).unwrap();
    drop(log); // kill -9: no clean shutdown

    let log = Log::open(dir.path(), config()).unwrap();
    let tail = file_len(&last_segment(dir.path())) - checkpointed;
    assert_eq!(log.recovery_scanned_bytes(), tail);
    assert!(tail < checkpointed / 5);
    assert_whole(&log, end);
    assert_eq!(log.offset_for_timestamp(1150).unwrap(), ts_offset);
    assert_eq!(
        log.offset_for_timestamp(5039).unwrap(),
        Some((end - 3, 5039))
    );
}

#[test]
fn without_a_recovery_point_the_whole_segment_is_scanned() {
    let dir = tempfile::tempdir().unwrap();
    let log = durable_log(dir.path(), 100, false);
    let end = log.log_end_offset();
    drop(log);
    reopen_expecting_full_scan(dir.path(), end, "");
}

#[test]
fn a_torn_tail_past_the_recovery_point_is_cut() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = durable_log(dir.path(), 100, true);
    fill(&mut log, 10, 2000);
    let end = log.log_end_offset();
    drop(log);
    let half = batch(3, 1, "torn");
    append_garbage(&last_segment(dir.path()), &half[..half.len() / 2]);
    let mut log = Log::open(dir.path(), config()).unwrap();
    assert_whole(&log, end);
    let info = log.append(&mut batch(1, 1, "after"), 0).unwrap();
    assert_eq!(info.first_offset, end);
}

#[test]
fn a_recovery_point_that_does_not_match_the_file_costs_a_full_scan_only() {
    for garbage in [
        "0 17 2\n",                   // not a batch boundary
        "0 999999999 300\n",          // past the end of the file
        "7 0 7\n",                    // another segment
        "0 0 0 extra\n",              // not three numbers
        "bogus\n",                    // not numbers
        "0 4294967296000 4\n",        // absurd
        "18446744073709551615 0 0\n", // not an i64
    ] {
        let dir = tempfile::tempdir().unwrap();
        let log = durable_log(dir.path(), 50, false);
        let end = log.log_end_offset();
        drop(log);
        std::fs::write(dir.path().join("recovery-point"), garbage).unwrap();
        reopen_expecting_full_scan(dir.path(), end, garbage);
    }
}

#[test]
fn a_recovery_point_whose_offset_disagrees_is_not_trusted() {
    // A point at a real batch boundary whose offset is wrong (the file changed under it):
    // the walk lands on the position but not on the offset, so everything is scanned.
    let dir = tempfile::tempdir().unwrap();
    let log = durable_log(dir.path(), 50, true);
    let end = log.log_end_offset();
    drop(log);
    let text = std::fs::read_to_string(dir.path().join("recovery-point")).unwrap();
    let fields: Vec<&str> = text.split_whitespace().collect();
    let wrong = format!("{} {} {}\n", fields[0], fields[1], end + 3);
    std::fs::write(dir.path().join("recovery-point"), wrong).unwrap();
    reopen_expecting_full_scan(dir.path(), end, "");
}

#[test]
fn truncation_drops_the_recovery_point() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = durable_log(dir.path(), 50, true);
    log.truncate_to(30).unwrap();
    assert!(!dir.path().join("recovery-point").exists());
    // Different bytes where the old point was: it must not be trusted.
    fill(&mut log, 40, 9000);
    let end = log.log_end_offset();
    drop(log);
    reopen_expecting_full_scan(dir.path(), end, "");
}

#[test]
fn a_clean_shutdown_scans_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = durable_log(dir.path(), 50, true);
    fill(&mut log, 5, 2000);
    let end = log.log_end_offset();
    log.close().unwrap();
    let log = Log::open(dir.path(), config()).unwrap();
    assert_eq!(log.recovery_scanned_bytes(), 0);
    assert_whole(&log, end);
}

#[test]
fn the_saved_index_is_used_and_a_bad_one_costs_a_walk_only() {
    // Entries that parse but lie: not increasing, past the point, pointing inside a batch.
    let lies: [&[u8]; 5] = [
        &[0, 0, 0, 5, 0, 0, 1, 0, 0, 0, 0, 3, 0, 0, 0, 200],
        &[0, 0, 0, 9, 0x7f, 0, 0, 0],
        &[0, 0, 0, 3, 0, 0, 0, 7],
        &[1, 2, 3],
        &[],
    ];
    for (i, lie) in lies.iter().enumerate() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = durable_log(dir.path(), 200, true);
        let saved = std::fs::read(dir.path().join("recovery-point.index")).unwrap();
        assert!(saved.len() >= 8 * 10, "the saved index has entries");
        fill(&mut log, 20, 3000);
        let end = log.log_end_offset();
        let ts = log.offset_for_timestamp(1100).unwrap();
        drop(log);
        if i > 0 || lie.is_empty() {
            std::fs::write(dir.path().join("recovery-point.index"), lie).unwrap();
        }
        let log = Log::open(dir.path(), config()).unwrap();
        // Either way only the tail past the point is CRC-scanned, and everything reads; the
        // prefix is walked from the saved index's last entry only when that index is good.
        let len = file_len(&last_segment(dir.path()));
        assert!(log.recovery_scanned_bytes() < len / 5);
        if i == 0 {
            assert!(
                log.recovery_walked_bytes() <= 2 * 256,
                "{}",
                log.recovery_walked_bytes()
            );
        } else if i < 4 {
            assert!(log.recovery_walked_bytes() > len / 2, "case {i}");
        }
        assert_whole(&log, end);
        assert_eq!(log.offset_for_timestamp(1100).unwrap(), ts, "case {i}");
    }
}
