//! Partition log behaviour: append/read, rolls, recovery, retention, timestamps.

mod common;

use common::{append_garbage, batch, last_segment};
use shoal_storage::batch::{split_batches, TimestampType};
use shoal_storage::{codes, Log, LogConfig, StorageError};

fn small_config() -> LogConfig {
    LogConfig {
        segment_bytes: 1000,
        index_interval_bytes: 128,
        retention_ms: -1,
        ..LogConfig::default()
    }
}

fn offsets(bytes: &[u8]) -> Vec<(i64, i64)> {
    split_batches(bytes)
        .map(|r| r.unwrap().0)
        .map(|h| (h.base_offset(), h.last_offset()))
        .collect()
}

/// Appends `count` batches of 3 records each with timestamps 1000, 1001, ...
fn fill(log: &mut Log, count: usize) {
    for i in 0..count {
        let mut b = batch(3, 1000 + i as i64, &format!("b{i}"));
        log.append(&mut b, 5000).unwrap();
    }
}

#[test]
fn append_read_round_trip_across_rolls() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), small_config()).unwrap();
    assert_eq!(log.log_end_offset(), 0);
    for i in 0..50 {
        let mut b = batch(3, 1000 + i, "v");
        let info = log.append(&mut b, 5000).unwrap();
        assert_eq!(info.first_offset, i * 3);
        assert_eq!(info.last_offset, i * 3 + 2);
        assert_eq!(info.max_timestamp, 1000 + i);
        assert_eq!(info.log_append_time, -1);
    }
    assert_eq!(log.log_end_offset(), 150);
    assert!(log.segment_count() > 3, "segments: {}", log.segment_count());
    // Read everything back batch by batch via the iterator.
    let all: Vec<_> = log.iter_batches(0).map(|b| b.unwrap()).collect();
    assert_eq!(all.len(), 50);
    for (i, b) in all.iter().enumerate() {
        assert_eq!(b.header.base_offset(), i as i64 * 3);
        let recs = shoal_storage::decode_records(&b.bytes, 1 << 20).unwrap();
        assert_eq!(recs[2].value.as_deref(), Some(&b"v-2"[..]));
        assert_eq!(recs[2].offset, i as i64 * 3 + 2);
    }
    // Reopen (clean) and read again.
    log.close().unwrap();
    let log = Log::open(dir.path(), small_config()).unwrap();
    assert_eq!(log.log_end_offset(), 150);
    assert_eq!(log.iter_batches(0).count(), 50);
}

#[test]
fn read_from_middle_and_limits() {
    let dir = tempfile::tempdir().unwrap();
    let config = LogConfig {
        index_interval_bytes: 100,
        segment_bytes: 1 << 20,
        ..small_config()
    };
    let mut log = Log::open(dir.path(), config).unwrap();
    fill(&mut log, 60);
    let one = batch(3, 0, "b10").len();
    // Offset 31 is inside the batch [30, 32].
    let r = log.read(31, 1, None).unwrap();
    assert_eq!(offsets(&r.records), vec![(30, 32)]); // soft limit: one whole batch
    assert_eq!(r.next_offset, 33);
    let r = log.read(31, one * 2, None).unwrap();
    assert_eq!(offsets(&r.records), vec![(30, 32), (33, 35)]);
    let r = log.read(31, one * 2 + one / 2, None).unwrap();
    assert_eq!(offsets(&r.records).len(), 2);
    // max_offset is an exclusive bound on batch last offsets.
    let r = log.read(30, 1 << 20, Some(36)).unwrap();
    assert_eq!(offsets(&r.records), vec![(30, 32), (33, 35)]);
    let r = log.read(30, 1 << 20, Some(35)).unwrap();
    assert_eq!(offsets(&r.records), vec![(30, 32)]);
    let r = log.read(30, 1 << 20, Some(30)).unwrap();
    assert!(r.records.is_empty());
    let r = log.read(0, 1 << 20, None).unwrap();
    assert_eq!(offsets(&r.records).len(), 60);
    // End and out of range.
    assert!(log.read(180, 100, None).unwrap().records.is_empty());
    let e = log.read(181, 100, None).unwrap_err();
    assert_eq!(e.kafka_error_code(), codes::OFFSET_OUT_OF_RANGE);
    assert!(log.read(-1, 100, None).is_err());
    drop(log);
    // With small segments, reads stay within one segment but return data while any remains.
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), small_config()).unwrap();
    fill(&mut log, 60);
    let mut next = 0;
    let mut batches = 0;
    while next < log.log_end_offset() {
        let r = log.read(next, 1 << 20, None).unwrap();
        assert!(!r.records.is_empty() && r.records.len() <= 1000);
        batches += offsets(&r.records).len();
        next = r.next_offset;
    }
    assert_eq!(batches, 60);
    // Every offset finds its containing batch.
    for o in 0..180 {
        let r = log.read(o, 1, None).unwrap();
        let (b, l) = offsets(&r.records)[0];
        assert!(b <= o && o <= l, "offset {o} got {b}..{l}");
    }
}

#[test]
fn recovery_truncates_torn_tail() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), small_config()).unwrap();
    fill(&mut log, 20);
    let end = log.log_end_offset();
    drop(log); // no close: unclean shutdown
               // Half a batch at the tail, as a kill -9 mid-write leaves.
    let half = batch(3, 1, "torn");
    append_garbage(&last_segment(dir.path()), &half[..half.len() / 2]);
    let mut log = Log::open(dir.path(), small_config()).unwrap();
    assert_eq!(log.log_end_offset(), end);
    assert_eq!(log.iter_batches(0).count(), 20);
    // Appends continue at the right offset.
    let info = log.append(&mut batch(1, 1, "after"), 0).unwrap();
    assert_eq!(info.first_offset, end);
    drop(log);

    // Garbage after a whole batch.
    append_garbage(&last_segment(dir.path()), &[0xde; 37]);
    let log = Log::open(dir.path(), small_config()).unwrap();
    assert_eq!(log.log_end_offset(), end + 1);
    assert_eq!(log.iter_batches(0).count(), 21);
}

#[test]
fn recovery_detects_crc_corruption() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(
        dir.path(),
        LogConfig {
            segment_bytes: 1 << 20,
            ..small_config()
        },
    )
    .unwrap();
    fill(&mut log, 10);
    drop(log);
    // Flip a byte in the value of the 8th batch.
    let path = last_segment(dir.path());
    let mut data = std::fs::read(&path).unwrap();
    let size = batch(3, 0, "b0").len();
    data[size * 7 + size - 2] ^= 0x55;
    std::fs::write(&path, &data).unwrap();
    let log = Log::open(dir.path(), small_config()).unwrap();
    assert_eq!(log.log_end_offset(), 21);
    assert_eq!(log.iter_batches(0).count(), 7);
}

#[test]
fn unclean_restart_keeps_sealed_segments() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), small_config()).unwrap();
    fill(&mut log, 40);
    log.sync().unwrap();
    fill(&mut log, 5);
    let end = log.log_end_offset();
    let segs = log.segment_count();
    drop(log);
    let log = Log::open(dir.path(), small_config()).unwrap();
    assert_eq!(log.log_end_offset(), end);
    assert_eq!(log.segment_count(), segs);
    for o in 0..end {
        let r = log.read(o, 1, None).unwrap();
        let (b, l) = offsets(&r.records)[0];
        assert!(b <= o && o <= l);
    }
}

#[test]
fn corrupt_index_files_are_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), small_config()).unwrap();
    fill(&mut log, 40);
    log.close().unwrap();
    for e in std::fs::read_dir(dir.path()).unwrap() {
        let p = e.unwrap().path();
        if p.extension()
            .is_some_and(|e| e == "index" || e == "timeindex")
        {
            std::fs::write(&p, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13]).unwrap();
        }
    }
    let log = Log::open(dir.path(), small_config()).unwrap();
    assert_eq!(log.log_end_offset(), 120);
    assert_eq!(log.offset_for_timestamp(1020).unwrap(), Some((60, 1020)));
    assert_eq!(log.iter_batches(0).count(), 40);
}

#[test]
fn sync_handle_group_commit() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), small_config()).unwrap();
    assert_eq!(log.flushed_offset(), 0);
    fill(&mut log, 30);
    let h = log.sync_handle().unwrap();
    assert_eq!(h.end_offset(), 90);
    fill(&mut log, 1);
    std::thread::spawn(move || {
        h.sync().unwrap();
        h
    })
    .join()
    .map(|h| log.mark_flushed(&h))
    .unwrap();
    assert_eq!(log.flushed_offset(), 90);
    // A handle from before a truncation does not advance the flushed offset.
    let h = log.sync_handle().unwrap();
    log.truncate_to(60).unwrap();
    fill(&mut log, 20);
    h.sync().unwrap();
    log.mark_flushed(&h);
    assert_eq!(log.flushed_offset(), 60);
    log.sync().unwrap();
    assert_eq!(log.flushed_offset(), log.log_end_offset());
}

#[test]
fn retention_by_size_and_time() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), small_config()).unwrap();
    fill(&mut log, 60);
    let segs = log.segment_count();
    assert!(segs >= 5);
    // Nothing to delete with unlimited retention.
    assert_eq!(log.enforce_retention(1 << 40).unwrap(), 0);
    // Size.
    log.set_config(LogConfig {
        retention_bytes: 2500,
        ..small_config()
    })
    .unwrap();
    let deleted = log.enforce_retention(0).unwrap();
    assert!(deleted > 0);
    assert!(log.size_bytes() <= 2500 + 1000, "size {}", log.size_bytes());
    let start = log.log_start_offset();
    assert!(start > 0);
    assert!(!log.read(start, 1, None).unwrap().records.is_empty());
    assert!(log.read(start - 1, 1, None).is_err());
    // Time: batches have timestamps 1000..1060; keep those newer than 1050.
    log.set_config(LogConfig {
        retention_ms: 100,
        ..small_config()
    })
    .unwrap();
    log.enforce_retention(1150).unwrap();
    assert!(log.segment_count() >= 1);
    let r = log.read(log.log_start_offset(), 1, None).unwrap();
    let first = shoal_storage::BatchHeader::parse(&r.records).unwrap();
    assert!(first.max_timestamp() >= 1040, "{}", first.max_timestamp());
    // Everything old: only the active segment survives.
    log.enforce_retention(1 << 40).unwrap();
    assert_eq!(log.segment_count(), 1);
    let start = log.log_start_offset();
    // The checkpoint survives a restart.
    drop(log);
    let log = Log::open(dir.path(), small_config()).unwrap();
    assert_eq!(log.log_start_offset(), start);
}

#[test]
fn delete_records_advances_start() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), small_config()).unwrap();
    fill(&mut log, 60);
    let segs = log.segment_count();
    assert_eq!(log.delete_records_before(100).unwrap(), 100);
    assert!(log.segment_count() < segs);
    assert_eq!(log.log_start_offset(), 100);
    // Reading at the start returns the batch containing it (99..101).
    let r = log.read(100, 1, None).unwrap();
    assert_eq!(offsets(&r.records), vec![(99, 101)]);
    assert_eq!(
        log.read(99, 1, None).unwrap_err().kafka_error_code(),
        codes::OFFSET_OUT_OF_RANGE
    );
    assert!(log.delete_records_before(1000).is_err());
    assert_eq!(log.delete_records_before(50).unwrap(), 100);
    log.close().unwrap();
    let log = Log::open(dir.path(), small_config()).unwrap();
    assert_eq!(log.log_start_offset(), 100);
    assert_eq!(
        log.iter_batches(0)
            .next()
            .unwrap()
            .unwrap()
            .header
            .base_offset(),
        99
    );
}

#[test]
fn offset_for_timestamp_and_max() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), small_config()).unwrap();
    assert_eq!(log.offset_for_timestamp(0).unwrap(), None);
    assert_eq!(log.max_timestamp_offset().unwrap(), None);
    fill(&mut log, 50); // batch i: offsets 3i..3i+2, ts 1000+i
    assert_eq!(log.offset_for_timestamp(0).unwrap(), Some((0, 1000)));
    assert_eq!(log.offset_for_timestamp(1025).unwrap(), Some((75, 1025)));
    assert_eq!(log.offset_for_timestamp(1049).unwrap(), Some((147, 1049)));
    assert_eq!(log.offset_for_timestamp(1050).unwrap(), None);
    // Out-of-order timestamps: a later batch with an older timestamp.
    log.append(&mut batch(2, 500, "old"), 0).unwrap();
    log.append(&mut batch(2, 3000, "new"), 0).unwrap();
    log.append(&mut batch(2, 3000, "new2"), 0).unwrap();
    assert_eq!(log.offset_for_timestamp(2000).unwrap(), Some((152, 3000)));
    assert_eq!(log.max_timestamp_offset().unwrap(), Some((152, 3000)));
    log.close().unwrap();
    let log = Log::open(dir.path(), small_config()).unwrap();
    assert_eq!(log.offset_for_timestamp(1025).unwrap(), Some((75, 1025)));
    assert_eq!(log.max_timestamp_offset().unwrap(), Some((152, 3000)));
}

#[test]
fn log_append_time_and_roll_by_time() {
    let dir = tempfile::tempdir().unwrap();
    let config = LogConfig {
        message_timestamp_type: TimestampType::LogAppendTime,
        segment_ms: 1000,
        segment_bytes: 1 << 20,
        ..small_config()
    };
    let mut log = Log::open(dir.path(), config).unwrap();
    let info = log.append(&mut batch(2, 1, "a"), 10_000).unwrap();
    assert_eq!(info.log_append_time, 10_000);
    assert_eq!(info.max_timestamp, 10_000);
    log.append(&mut batch(2, 1, "b"), 10_500).unwrap();
    assert_eq!(log.segment_count(), 1);
    log.append(&mut batch(2, 1, "c"), 11_001).unwrap();
    assert_eq!(log.segment_count(), 2);
    let b = log.iter_batches(0).next().unwrap().unwrap();
    assert_eq!(b.header.timestamp_type(), TimestampType::LogAppendTime);
    let recs = shoal_storage::decode_records(&b.bytes, 1 << 20).unwrap();
    assert!(recs.iter().all(|r| r.timestamp == 10_000));
}

#[test]
fn truncate_to_and_oversized_sets() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), small_config()).unwrap();
    fill(&mut log, 40);
    assert_eq!(log.truncate_to(61).unwrap(), 60); // drops the batch containing 61
    assert_eq!(log.log_end_offset(), 60);
    assert_eq!(
        log.append(&mut batch(1, 1, "x"), 0).unwrap().first_offset,
        60
    );
    assert_eq!(log.truncate_to(0).unwrap(), 0);
    assert_eq!(log.segment_count(), 1);
    fill(&mut log, 3);
    assert_eq!(log.log_end_offset(), 9);
    // A record set larger than a segment.
    let mut big = Vec::new();
    for i in 0..30 {
        big.extend_from_slice(&batch(3, 1, &format!("big{i}")));
    }
    let e = log.append(&mut big, 0).unwrap_err();
    assert!(matches!(e, StorageError::RecordSetTooLarge { .. }), "{e}");
    assert!(log.append(&mut [1, 2, 3], 0).is_err());
    drop(log);
    let log = Log::open(dir.path(), small_config()).unwrap();
    assert_eq!(log.log_end_offset(), 9);
}

#[test]
fn delete_removes_directory() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("topic-0");
    let mut log = Log::open(&path, small_config()).unwrap();
    fill(&mut log, 3);
    log.delete().unwrap();
    assert!(!path.exists());
}

#[test]
fn corruption_in_unsynced_older_segment_drops_later_segments() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), small_config()).unwrap();
    fill(&mut log, 40); // several segments, none synced so none sealed
    assert!(log.segment_count() > 2);
    drop(log);
    let first = dir.path().join(format!("{:020}.log", 0));
    let mut data = std::fs::read(&first).unwrap();
    let size = batch(3, 0, "b0").len();
    data[size + 70] ^= 0x01; // inside the second batch
    std::fs::write(&first, &data).unwrap();
    let log = Log::open(dir.path(), small_config()).unwrap();
    assert_eq!(log.log_end_offset(), 3);
    assert_eq!(log.segment_count(), 1);
}

#[test]
fn create_makes_an_empty_log_that_survives_a_crash_and_keeps_what_was_synced() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("t-0");
    let log = Log::create(&dir, small_config()).unwrap();
    assert_eq!((log.log_start_offset(), log.log_end_offset()), (0, 0));
    drop(log); // kill -9 right after creation: nothing was fsynced, nothing was promised
    let log = Log::open(&dir, small_config()).unwrap();
    assert_eq!(log.log_end_offset(), 0);
    drop(log);

    let fresh = root.path().join("t-1");
    let mut log = Log::create(&fresh, small_config()).unwrap();
    fill(&mut log, 12);
    assert!(log.segment_count() > 1);
    log.sync().unwrap();
    assert_eq!(log.flushed_offset(), 36);
    drop(log); // unclean
    let log = Log::open(&fresh, small_config()).unwrap();
    assert_eq!(log.log_end_offset(), 36);
    let read = log.read(0, 1 << 20, None).unwrap();
    assert_eq!(offsets(&read.records).first(), Some(&(0, 2)));
    log.close().unwrap();
}

/// A log of two batches (six records) in `dir`, closed cleanly.
fn closed_log_of_two_batches(dir: &std::path::Path) {
    let mut log = Log::open(dir, small_config()).unwrap();
    fill(&mut log, 2);
    log.close().unwrap();
}

#[test]
fn create_over_an_existing_log_opens_it() {
    let dir = tempfile::tempdir().unwrap();
    closed_log_of_two_batches(dir.path());
    let log = Log::create(dir.path(), small_config()).unwrap();
    assert_eq!(log.log_end_offset(), 6);
    log.close().unwrap();
}

#[test]
fn a_reopened_active_segment_keeps_its_index_files_until_the_next_append() {
    let dir = tempfile::tempdir().unwrap();
    closed_log_of_two_batches(dir.path());
    let index = last_segment(dir.path()).with_extension("index");
    assert!(index.exists(), "close seals the active segment");

    // An idle open and close neither removes nor rewrites them.
    let log = Log::open(dir.path(), small_config()).unwrap();
    assert!(index.exists());
    let written = std::fs::metadata(&index).unwrap().modified().unwrap();
    log.close().unwrap();
    assert_eq!(
        std::fs::metadata(&index).unwrap().modified().unwrap(),
        written
    );

    // The first append unseals: the files go, and a crash after it recovers by a scan.
    let mut log = Log::open(dir.path(), small_config()).unwrap();
    fill(&mut log, 1);
    assert!(!index.exists());
    log.sync().unwrap();
    drop(log);
    let log = Log::open(dir.path(), small_config()).unwrap();
    assert_eq!(log.log_end_offset(), 9);
    assert_eq!(log.iter_batches(0).count(), 3);
    log.close().unwrap();
}

#[test]
fn reset_to_starts_an_empty_log_above_its_end_durably() {
    let dir = tempfile::tempdir().unwrap();
    // An empty log cannot be moved up by truncation: it is reset.
    let mut log = Log::create(&dir.path().join("t-0"), small_config()).unwrap();
    assert_eq!(log.truncate_to(50).unwrap(), 0);
    log.reset_to(50).unwrap();
    assert_eq!((log.log_start_offset(), log.log_end_offset()), (50, 50));
    assert_eq!(log.flushed_offset(), 50);
    assert_eq!(
        log.append(&mut batch(3, 1, "x"), 0).unwrap().first_offset,
        50
    );
    assert_eq!(
        offsets(&log.read(50, 1 << 20, None).unwrap().records),
        vec![(50, 52)]
    );
    drop(log); // kill -9: the start was durable, the unsynced batch may go
    let log = Log::open(&dir.path().join("t-0"), small_config()).unwrap();
    assert_eq!(log.log_start_offset(), 50);
    assert!(log.log_end_offset() == 50 || log.log_end_offset() == 53);
    drop(log);

    // A log with data, several segments, is emptied wherever the new start is.
    let mut log = Log::open(&dir.path().join("t-1"), small_config()).unwrap();
    fill(&mut log, 40);
    log.sync().unwrap();
    assert!(log.segment_count() > 2);
    let generation = log.generation();
    log.reset_to(70).unwrap();
    assert!(log.generation() > generation);
    assert_eq!((log.log_start_offset(), log.log_end_offset()), (70, 70));
    assert_eq!(log.segment_count(), 1);
    assert_eq!(
        log.read(69, 1, None).unwrap_err().kafka_error_code(),
        codes::OFFSET_OUT_OF_RANGE
    );
    drop(log);
    let mut log = Log::open(&dir.path().join("t-1"), small_config()).unwrap();
    assert_eq!((log.log_start_offset(), log.log_end_offset()), (70, 70));
    assert!(log.reset_to(-1).is_err());
    log.reset_to(3).unwrap();
    assert_eq!((log.log_start_offset(), log.log_end_offset()), (3, 3));
    log.close().unwrap();
    let log = Log::open(&dir.path().join("t-1"), small_config()).unwrap();
    assert_eq!((log.log_start_offset(), log.log_end_offset()), (3, 3));
}

#[test]
fn retention_start_is_where_retention_moves_the_start() {
    let dirs = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut log = Log::open(dirs.0.path(), small_config()).unwrap();
    let mut twin = Log::open(dirs.1.path(), small_config()).unwrap();
    fill(&mut log, 60);
    fill(&mut twin, 60);
    assert!(log.segment_count() >= 5);
    // Batches have timestamps 1000..1060.
    let steps = [
        (small_config(), 1 << 40),
        (
            LogConfig {
                retention_ms: 100,
                ..small_config()
            },
            1110,
        ),
        (
            LogConfig {
                retention_bytes: 2500,
                ..small_config()
            },
            0,
        ),
        (
            LogConfig {
                retention_ms: 100,
                retention_bytes: 1500,
                ..small_config()
            },
            1140,
        ),
        (
            LogConfig {
                retention_ms: 0,
                ..small_config()
            },
            1 << 40,
        ),
    ];
    for (config, now_ms) in steps {
        log.set_config(config).unwrap();
        twin.set_config(config).unwrap();
        let predicted = log.retention_start(now_ms);
        assert_eq!(twin.retention_start(now_ms), predicted, "deletes nothing");
        log.enforce_retention(now_ms).unwrap();
        assert_eq!(log.log_start_offset(), predicted, "{config:?} at {now_ms}");
        // The recorded path: the same start and the same segments left.
        assert_eq!(twin.delete_records_before(predicted).unwrap(), predicted);
        assert_eq!(twin.segment_count(), log.segment_count());
    }
    assert_eq!(log.segment_count(), 1);
}
