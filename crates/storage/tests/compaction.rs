//! Log compaction checked against a model (the latest record of every key), plus tombstones,
//! transactions, producer state and crash-safe swaps.

mod common;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;

use proptest::prelude::*;
use shoal_storage::batch::{encode_batch, BatchOptions, KeyValue};
use shoal_storage::{
    decode_records, encode_end_txn_marker, AbortedTxn, CompactionConfig, EndTxnMarker, Log,
    LogConfig,
};

type Value = Option<Vec<u8>>;

fn config(segment_bytes: u64) -> LogConfig {
    LogConfig {
        segment_bytes,
        retention_ms: -1,
        index_interval_bytes: 64,
        ..LogConfig::default()
    }
}

fn compaction(delete_retention_ms: i64) -> CompactionConfig {
    CompactionConfig {
        min_cleanable_dirty_ratio: 0.0,
        delete_retention_ms,
        ..CompactionConfig::default()
    }
}

fn no_io(_: u64) -> shoal_storage::error::Result<()> {
    Ok(())
}

fn append(log: &mut Log, records: &[(u8, Value)], opts: BatchOptions, now: i64) -> (i64, i64) {
    let keys: Vec<[u8; 1]> = records.iter().map(|(k, _)| [*k]).collect();
    let recs: Vec<KeyValue<'_>> = records
        .iter()
        .zip(&keys)
        .map(|((_, v), k)| (Some(&k[..]), v.as_deref()))
        .collect();
    let mut b = encode_batch(&recs, opts);
    let info = log.append(&mut b, now).unwrap();
    (info.first_offset, info.last_offset)
}

fn marker(log: &mut Log, pid: i64, commit: bool, now: i64) -> i64 {
    let mut b = encode_end_txn_marker(
        pid,
        0,
        EndTxnMarker {
            commit,
            coordinator_epoch: 0,
        },
        now,
    );
    log.append(&mut b, now).unwrap().first_offset
}

/// Every data record of the log as `(offset, key, value, producer id, transactional)`.
#[allow(clippy::type_complexity)]
fn data_records(log: &Log) -> Vec<(i64, Option<Vec<u8>>, Value, i64, bool)> {
    let mut out = Vec::new();
    for b in log.iter_batches(0) {
        let b = b.unwrap();
        if b.header.is_control() {
            continue;
        }
        for r in decode_records(&b.bytes, 1 << 20).unwrap() {
            out.push((
                r.offset,
                r.key.map(|k| k.to_vec()),
                r.value.map(|v| v.to_vec()),
                b.header.producer_id(),
                b.header.is_transactional(),
            ));
        }
    }
    out
}

/// What a read_committed consumer sees: data records outside aborted transactions.
fn committed(log: &Log) -> Vec<(i64, Vec<u8>, Value)> {
    let aborted = log.collect_aborted_txns(0, log.log_end_offset());
    data_records(log)
        .into_iter()
        .filter(|(o, _, _, pid, txn)| {
            !(*txn
                && aborted
                    .iter()
                    .any(|t| t.producer_id == *pid && t.first_offset <= *o && *o < t.last_offset))
        })
        .filter_map(|(o, k, v, _, _)| k.map(|k| (o, k, v)))
        .collect()
}

fn latest(records: &[(i64, Vec<u8>, Value)]) -> BTreeMap<Vec<u8>, (i64, Value)> {
    let mut m = BTreeMap::new();
    for (o, k, v) in records {
        m.insert(k.clone(), (*o, v.clone()));
    }
    m
}

fn active_bytes(dir: &Path) -> Vec<u8> {
    std::fs::read(common::last_segment(dir)).unwrap()
}

#[derive(Clone, Debug)]
enum Op {
    /// A plain keyed batch (value `None` is a tombstone).
    Put(Vec<(u8, bool)>),
    /// A transaction of one producer: some batches, then COMMIT or ABORT.
    Txn {
        batches: Vec<Vec<(u8, bool)>>,
        commit: bool,
    },
    /// Time passes.
    Tick(i64),
    Sync,
    Clean,
    Reopen,
}

fn records() -> impl Strategy<Value = Vec<(u8, bool)>> {
    proptest::collection::vec((0u8..12, prop::bool::weighted(0.85)), 1..5)
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => records().prop_map(Op::Put),
        2 => (proptest::collection::vec(records(), 1..3), any::<bool>())
            .prop_map(|(batches, commit)| Op::Txn { batches, commit }),
        2 => (0i64..60).prop_map(Op::Tick),
        2 => Just(Op::Sync),
        3 => Just(Op::Clean),
        1 => Just(Op::Reopen),
    ]
}

const DELETE_RETENTION_MS: i64 = 100;

fn run(ops: Vec<Op>, segment_bytes: u64, map_entries: usize) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), config(segment_bytes)).unwrap();
    let mut cc = compaction(DELETE_RETENTION_MS);
    cc.offset_map_entries = map_entries;
    let mut now = 1_000i64;
    let mut tag = 0u32;
    let mut pid = 100i64;
    // Model: the committed records in offset order (what no clean may change the meaning of).
    let mut model: Vec<(i64, Vec<u8>, Value)> = Vec::new();
    let mut aborted_offsets: HashSet<i64> = HashSet::new();
    let value = |tag: u32, present: bool| present.then(|| format!("v{tag}").into_bytes());
    for op in ops {
        match op {
            Op::Put(recs) => {
                let recs: Vec<(u8, Value)> = recs
                    .into_iter()
                    .map(|(k, p)| {
                        tag += 1;
                        (k, value(tag, p))
                    })
                    .collect();
                let (first, _) = append(&mut log, &recs, BatchOptions::default(), now);
                for (i, (k, v)) in recs.into_iter().enumerate() {
                    model.push((first + i as i64, vec![k], v));
                }
            }
            Op::Txn { batches, commit } => {
                pid += 1;
                let mut first_offset = None;
                let mut written = Vec::new();
                for (seq, recs) in batches.into_iter().enumerate() {
                    let recs: Vec<(u8, Value)> = recs
                        .into_iter()
                        .map(|(k, p)| {
                            tag += 1;
                            (k, value(tag, p))
                        })
                        .collect();
                    let opts = BatchOptions {
                        producer_id: pid,
                        producer_epoch: 0,
                        base_sequence: seq as i32 * 10,
                        transactional: true,
                        ..BatchOptions::default()
                    };
                    let (first, _) = append(&mut log, &recs, opts, now);
                    first_offset.get_or_insert(first);
                    for (i, (k, v)) in recs.into_iter().enumerate() {
                        written.push((first + i as i64, vec![k], v));
                    }
                }
                let at = marker(&mut log, pid, commit, now);
                if commit {
                    model.extend(written);
                } else {
                    aborted_offsets.extend(written.iter().map(|w| w.0));
                    log.append_aborted_txn(AbortedTxn {
                        producer_id: pid,
                        first_offset: first_offset.unwrap(),
                        last_offset: at,
                        last_stable_offset: at + 1,
                    })
                    .unwrap();
                }
            }
            Op::Tick(ms) => now += ms,
            Op::Sync => log.sync().unwrap(),
            Op::Reopen => {
                log.close().unwrap();
                log = Log::open(dir.path(), config(segment_bytes)).unwrap();
            }
            Op::Clean => {
                let before_active = active_bytes(dir.path());
                let before_end = log.log_end_offset();
                let before_start = log.log_start_offset();
                let lso = log.log_end_offset();
                let Some(task) = log.clean_task(now, &cc, lso) else {
                    continue;
                };
                let cleaned = task.run(&mut no_io).unwrap();
                let stats = log.install_clean(cleaned).unwrap();
                prop_assert!(stats.installed);
                prop_assert_eq!(log.log_end_offset(), before_end);
                prop_assert_eq!(log.log_start_offset(), before_start, "log start moved");
                prop_assert_eq!(
                    active_bytes(dir.path()),
                    before_active,
                    "active segment changed"
                );
                let got = committed(&log);
                // Offsets strictly increase.
                prop_assert!(got.windows(2).all(|w| w[0].0 < w[1].0));
                // No aborted record below the cleaned point.
                prop_assert!(got
                    .iter()
                    .all(|r| r.0 >= stats.cleaned_to || !aborted_offsets.contains(&r.0)));
                // At most one record per key below the cleaned point.
                let mut seen = HashSet::new();
                for r in got.iter().filter(|r| r.0 < stats.cleaned_to) {
                    prop_assert!(
                        seen.insert(r.1.clone()),
                        "key {:?} twice below {}",
                        r.1,
                        stats.cleaned_to
                    );
                }
                // Every kept record is one that was written, unchanged.
                let by_offset: HashMap<i64, &(i64, Vec<u8>, Value)> =
                    model.iter().map(|r| (r.0, r)).collect();
                for r in &got {
                    prop_assert_eq!(Some(&r), by_offset.get(&r.0), "record changed");
                }
                // The latest value of every key survives (a tombstone may be gone: then no
                // older value of its key may remain).
                let want = latest(&model);
                let have = latest(&got);
                for (k, (o, v)) in &want {
                    match have.get(k) {
                        Some(h) => prop_assert_eq!(h, &(*o, v.clone()), "key {:?}", k),
                        None => prop_assert!(v.is_none(), "latest value of {:?} lost", k),
                    }
                }
            }
        }
    }
    // Reopening gives the same records.
    let before = committed(&log);
    log.close().unwrap();
    let log = Log::open(dir.path(), config(segment_bytes)).unwrap();
    prop_assert_eq!(committed(&log), before);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn compaction_keeps_the_latest_record_of_every_key(
        ops in proptest::collection::vec(op(), 1..80),
        segment_bytes in prop_oneof![Just(200u64), Just(400), Just(1500)],
        map_entries in prop_oneof![Just(3usize), Just(1000)],
    ) {
        run(ops, segment_bytes, map_entries)?;
    }
}

/// Writes keys 0..n twice (second round supersedes), rolling often, synced.
fn two_rounds(dir: &Path, n: u8) -> Log {
    let mut log = Log::open(dir, config(300)).unwrap();
    for round in 0..2 {
        for k in 0..n {
            append(
                &mut log,
                &[(k, Some(format!("r{round}k{k}").into_bytes()))],
                BatchOptions::default(),
                10,
            );
        }
    }
    log.sync().unwrap();
    log
}

#[test]
fn cleaned_segments_keep_offsets_and_fetch_skips_removed_ones() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = two_rounds(dir.path(), 10);
    let size_before = log.size_bytes();
    let want = latest(&committed(&log));
    let stats = log
        .clean(10, &compaction(0), log.log_end_offset(), &mut no_io)
        .unwrap()
        .unwrap();
    assert!(stats.records_removed > 0);
    assert!(log.size_bytes() < size_before);
    assert_eq!(latest(&committed(&log)), want);
    // Offset 0 (key 0, first round) is gone, but the log still starts there: a fetch from it
    // gets batches (the first an empty one) leading to the next record.
    assert_eq!(log.log_start_offset(), 0);
    let read = log.read(0, 1 << 20, None).unwrap();
    assert!(!read.records.is_empty());
    assert!(committed(&log)[0].0 > 0);
    let mut keys = HashSet::new();
    for (_, k, _) in committed(&log).iter().filter(|r| r.0 < stats.cleaned_to) {
        assert!(keys.insert(k.clone()));
    }
}

#[test]
fn dirty_ratio_and_min_compaction_lag_decide_what_is_cleanable() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = two_rounds(dir.path(), 10);
    let cc = CompactionConfig {
        min_cleanable_dirty_ratio: 0.5,
        ..compaction(0)
    };
    let s = log.dirty_stats(10, &cc, log.log_end_offset());
    assert_eq!(s.clean_bytes, 0);
    assert!(s.dirty_bytes > 0);
    assert!(s.needs_cleaning(&cc));
    // A lag longer than the records' age leaves nothing cleanable.
    let lagging = CompactionConfig {
        min_compaction_lag_ms: 1_000,
        ..cc
    };
    assert_eq!(
        log.dirty_stats(500, &lagging, log.log_end_offset())
            .dirty_bytes,
        0
    );
    // An open transaction (LSO 0) too.
    assert_eq!(log.dirty_stats(10, &cc, 0).dirty_bytes, 0);
    log.clean(10, &cc, log.log_end_offset(), &mut no_io)
        .unwrap()
        .unwrap();
    let s = log.dirty_stats(10, &cc, log.log_end_offset());
    assert_eq!(s.dirty_bytes, 0);
    assert!(!s.needs_cleaning(&cc));
    assert!(log
        .clean(10, &cc, log.log_end_offset(), &mut no_io)
        .unwrap()
        .is_none());
    // max.compaction.lag.ms forces a clean below the ratio.
    for k in 0..3 {
        append(
            &mut log,
            &[(k, Some(b"x".to_vec()))],
            BatchOptions::default(),
            20,
        );
    }
    append(
        &mut log,
        &[(50, Some(vec![b'y'; 200]))],
        BatchOptions::default(),
        20,
    );
    log.sync().unwrap();
    let s = log.dirty_stats(30, &cc, log.log_end_offset());
    assert!(s.dirty_bytes > 0 && s.dirty_ratio < 0.5, "{s:?}");
    assert!(!s.needs_cleaning(&cc));
    let forced = CompactionConfig {
        max_compaction_lag_ms: 5,
        ..cc
    };
    assert!(log
        .dirty_stats(30, &forced, log.log_end_offset())
        .needs_cleaning(&forced));
}

#[test]
fn tombstones_go_after_delete_retention() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), config(200)).unwrap();
    append(
        &mut log,
        &[(1, Some(b"a".to_vec()))],
        BatchOptions::default(),
        0,
    );
    append(&mut log, &[(1, None)], BatchOptions::default(), 0);
    for k in 2..8 {
        append(
            &mut log,
            &[(k, Some(b"b".to_vec()))],
            BatchOptions::default(),
            0,
        );
    }
    log.sync().unwrap();
    let cc = compaction(1_000);
    log.clean(100, &cc, log.log_end_offset(), &mut no_io)
        .unwrap()
        .unwrap();
    let tombstones = |log: &Log| {
        committed(log)
            .iter()
            .filter(|r| r.1 == [1])
            .map(|r| r.2.clone())
            .collect::<Vec<_>>()
    };
    // The value is gone, the tombstone stays until 100 + 1000.
    assert_eq!(tombstones(&log), vec![None]);
    assert!(log
        .clean(1_099, &cc, log.log_end_offset(), &mut no_io)
        .unwrap()
        .is_none());
    let task = log.clean_task(1_099, &cc, log.log_end_offset()).unwrap();
    log.install_clean(task.run(&mut no_io).unwrap()).unwrap();
    assert_eq!(tombstones(&log), vec![None]);
    // At the horizon the log is due for a clean although nothing new was written.
    assert!(log
        .clean(1_100, &cc, log.log_end_offset(), &mut no_io)
        .unwrap()
        .is_some());
    assert_eq!(tombstones(&log), Vec::<Value>::new());
    let s = log.dirty_stats(5_000, &cc, log.log_end_offset());
    assert!(!s.needs_cleaning(&cc), "{s:?}");
}

#[test]
fn aborted_data_goes_and_markers_follow_their_data() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), config(400)).unwrap();
    let txn = |pid| BatchOptions {
        producer_id: pid,
        producer_epoch: 0,
        base_sequence: 0,
        transactional: true,
        ..BatchOptions::default()
    };
    let (first, _) = append(&mut log, &[(1, Some(b"aborted".to_vec()))], txn(7), 0);
    let abort_at = marker(&mut log, 7, false, 0);
    log.append_aborted_txn(AbortedTxn {
        producer_id: 7,
        first_offset: first,
        last_offset: abort_at,
        last_stable_offset: abort_at + 1,
    })
    .unwrap();
    append(&mut log, &[(2, Some(b"committed".to_vec()))], txn(8), 0);
    marker(&mut log, 8, true, 0);
    // Both keys superseded later by non-transactional records of producer 9 (idempotent).
    let idem = BatchOptions {
        producer_id: 9,
        producer_epoch: 0,
        base_sequence: 0,
        ..BatchOptions::default()
    };
    append(&mut log, &[(2, Some(b"newer".to_vec()))], idem, 0);
    for k in 10..16 {
        append(
            &mut log,
            &[(k, Some(vec![b'p'; 40]))],
            BatchOptions::default(),
            0,
        );
    }
    log.sync().unwrap();
    let cc = compaction(50);
    let controls = |log: &Log| {
        log.iter_batches(0)
            .map(|b| b.unwrap().header)
            .filter(|h| h.is_control())
            .count()
    };
    log.clean(0, &cc, log.log_end_offset(), &mut no_io)
        .unwrap()
        .unwrap();
    let recs = data_records(&log);
    assert!(recs.iter().all(|r| r.2.as_deref() != Some(&b"aborted"[..])));
    // Producers 7 and 8 keep their last batch (the markers) as producer state.
    assert_eq!(controls(&log), 2);
    // Producer 8's data batch is gone (superseded) but its state is the marker; producer 9's
    // batch is kept.
    assert!(recs.iter().any(|r| r.3 == 9));
    // An empty batch keeps a producer's state when all its records are superseded.
    append(
        &mut log,
        &[(2, Some(b"newest".to_vec()))],
        BatchOptions::default(),
        0,
    );
    for k in 20..26 {
        append(
            &mut log,
            &[(k, Some(vec![b'q'; 40]))],
            BatchOptions::default(),
            0,
        );
    }
    log.sync().unwrap();
    log.clean(0, &cc, log.log_end_offset(), &mut no_io)
        .unwrap()
        .unwrap();
    let p9: Vec<_> = log
        .iter_batches(0)
        .map(|b| b.unwrap())
        .filter(|b| b.header.producer_id() == 9)
        .collect();
    assert_eq!(p9.len(), 1);
    assert_eq!(p9[0].header.record_count(), 0);
    assert_eq!(p9[0].header.base_sequence(), 0);
}

#[test]
fn a_full_offset_map_cleans_what_it_covered() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = two_rounds(dir.path(), 20);
    let cc = CompactionConfig {
        offset_map_entries: 5,
        ..compaction(0)
    };
    let end = log.log_end_offset();
    let stats = log.clean(10, &cc, end, &mut no_io).unwrap().unwrap();
    assert_eq!(stats.keys_mapped, 5);
    assert!(stats.cleaned_to < end);
    assert_eq!(log.cleaner_checkpoint(), stats.cleaned_to);
    // Later passes finish the job.
    while log.clean(10, &cc, end, &mut no_io).unwrap().is_some() {}
    let got = committed(&log);
    let keys: HashSet<_> = got.iter().map(|r| r.1.clone()).collect();
    assert_eq!(keys.len(), 20);
}

#[test]
fn the_io_hook_sees_every_byte_and_can_cancel() {
    let dir = tempfile::tempdir().unwrap();
    let log = two_rounds(dir.path(), 10);
    let end = log.log_end_offset();
    let mut seen = 0u64;
    let task = log.clean_task(10, &compaction(0), end).unwrap();
    let cleaned = task
        .run(&mut |b| {
            seen += b;
            Ok(())
        })
        .unwrap();
    assert!(seen >= log.size_bytes() - active_bytes(dir.path()).len() as u64);
    drop(cleaned);
    let task = log.clean_task(10, &compaction(0), end).unwrap();
    let mut n = 0;
    let err = task.run(&mut |_| {
        n += 1;
        if n > 5 {
            Err(shoal_storage::StorageError::InvalidBatchHeader {
                reason: "cancelled",
            })
        } else {
            Ok(())
        }
    });
    assert!(err.is_err());
    // Nothing left behind.
    let leftovers = std::fs::read_dir(dir.path())
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .contains(".cleaned")
        })
        .count();
    assert_eq!(leftovers, 0);
}

#[test]
fn a_changed_log_refuses_the_swap() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = two_rounds(dir.path(), 10);
    let end = log.log_end_offset();
    let task = log.clean_task(10, &compaction(0), end).unwrap();
    let cleaned = task.run(&mut no_io).unwrap();
    log.delete_records_before(12).unwrap();
    let before = committed(&log);
    let stats = log.install_clean(cleaned).unwrap();
    assert!(!stats.installed);
    assert_eq!(committed(&log), before);
}

#[test]
fn throttler_pauses_to_the_rate() {
    let mut t = shoal_storage::Throttler::new(1000.0);
    assert_eq!(t.record(500, 0), 0);
    // 1500 bytes in 100 ms at 1000 B/s should take 1500 ms: pause 1400.
    assert_eq!(t.record(1000, 100), 1400);
    let mut unlimited = shoal_storage::Throttler::new(f64::MAX);
    assert_eq!(unlimited.record(u64::MAX / 2, 0), 0);
    assert_eq!(unlimited.record(u64::MAX / 2, 1000), 0);
}

/// Stops the swap after every possible number of file operations, reopens, and checks the log
/// is readable with every record a consumer must see.
#[test]
fn a_crash_at_any_step_of_the_swap_loses_nothing() {
    for steps in 0..40 {
        let dir = tempfile::tempdir().unwrap();
        let mut log = two_rounds(dir.path(), 12);
        append(&mut log, &[(3, None)], BatchOptions::default(), 10);
        for k in 30..36 {
            append(
                &mut log,
                &[(k, Some(vec![b'z'; 30]))],
                BatchOptions::default(),
                10,
            );
        }
        log.sync().unwrap();
        let want = latest(&committed(&log));
        let end = log.log_end_offset();
        let task = log.clean_task(10, &compaction(1_000), end).unwrap();
        let cleaned = task.run(&mut no_io).unwrap();
        let (_, done) = log.install_clean_steps(cleaned, steps).unwrap();
        drop(log); // a crash: no clean shutdown
        let log = Log::open(dir.path(), config(300)).unwrap();
        assert_eq!(log.log_end_offset(), end, "steps {steps}");
        assert_eq!(log.log_start_offset(), 0, "steps {steps}");
        let got = committed(&log);
        assert!(got.windows(2).all(|w| w[0].0 < w[1].0), "steps {steps}");
        let have = latest(&got);
        assert_eq!(have, want, "steps {steps}");
        let names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(
            names
                .iter()
                .all(|n| !n.ends_with(".swap") && !n.ends_with(".cleaned")),
            "steps {steps}: {names:?}"
        );
        if done {
            assert!(steps > 0);
            return;
        }
    }
    panic!("the swap never completed");
}

/// The leftovers of a crash, built by hand: a `.cleaned` file is discarded, a `.swap` file
/// replaces the segments inside its range.
#[test]
fn open_recovers_swap_and_cleaned_files() {
    let dir = tempfile::tempdir().unwrap();
    let log = two_rounds(dir.path(), 12);
    let end = log.log_end_offset();
    let task = log.clean_task(10, &compaction(0), end).unwrap();
    let cleaned = task.run(&mut no_io).unwrap();
    let want = latest(&committed(&log));
    drop(log);
    // Build the leftovers by hand: every file of the cleaned log and a stray `.cleaned` file.
    let mut swaps = 0;
    for e in std::fs::read_dir(dir.path()).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        if let Some(stem) = name.strip_suffix(".log.cleaned") {
            std::fs::rename(&p, dir.path().join(format!("{stem}.log.swap"))).unwrap();
            swaps += 1;
        }
    }
    assert!(swaps > 0);
    std::fs::write(dir.path().join(format!("{:020}.log.cleaned", 999)), b"junk").unwrap();
    // The swap files are committed: the inputs they cover must go.
    std::mem::forget(cleaned);
    let names = |d: &Path| {
        let mut v: Vec<String> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    };
    assert!(names(dir.path()).iter().any(|n| n.ends_with(".log.swap")));
    let log = Log::open(dir.path(), config(300)).unwrap();
    assert_eq!(latest(&committed(&log)), want);
    assert!(names(dir.path())
        .iter()
        .all(|n| !n.ends_with(".swap") && !n.ends_with(".cleaned")));
}
