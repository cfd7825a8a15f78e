//! Random append / read / reopen / torn-write / truncate / delete-records / close-files
//! sequences checked against an in-memory model (a Vec of batches), with at most two segment
//! files open at a time.

mod common;

use common::{append_garbage, last_segment};
use proptest::prelude::*;
use shoal_storage::batch::{encode_batch, split_batches, BatchOptions};
use shoal_storage::{Log, LogConfig};

#[derive(Clone, Debug)]
enum Op {
    Append {
        records: usize,
        value_len: usize,
        ts: i64,
    },
    Read {
        at: u16,
        max_bytes: usize,
        limit_at: u16,
    },
    Reopen {
        clean: bool,
    },
    Torn {
        garbage: Vec<u8>,
    },
    Sync,
    /// Writes the recovery point (the next unclean reopen trusts the prefix below it).
    Checkpoint,
    Truncate {
        at: u16,
    },
    DeleteRecords {
        at: u16,
    },
    Timestamp {
        ts: i64,
    },
    /// Two idle sweeps: every segment file is closed and must reopen on its next use.
    CloseFiles,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (1usize..6, 0usize..120, 0i64..100).prop_map(|(records, value_len, ts)| Op::Append { records, value_len, ts }),
        3 => (any::<u16>(), 1usize..600, any::<u16>())
            .prop_map(|(at, max_bytes, limit_at)| Op::Read { at, max_bytes, limit_at }),
        1 => any::<bool>().prop_map(|clean| Op::Reopen { clean }),
        1 => proptest::collection::vec(any::<u8>(), 1..150).prop_map(|garbage| Op::Torn { garbage }),
        1 => Just(Op::Sync),
        1 => Just(Op::Checkpoint),
        1 => any::<u16>().prop_map(|at| Op::Truncate { at }),
        1 => any::<u16>().prop_map(|at| Op::DeleteRecords { at }),
        1 => (0i64..110).prop_map(|ts| Op::Timestamp { ts }),
        1 => Just(Op::CloseFiles),
    ]
}

struct ModelBatch {
    base: i64,
    last: i64,
    max_ts: i64,
    bytes: Vec<u8>,
}

#[derive(Default)]
struct Model {
    batches: Vec<ModelBatch>,
    log_start: i64,
    next: i64,
}

impl Model {
    fn pick(&self, at: u16) -> i64 {
        let span = self.next - self.log_start + 1;
        self.log_start + i64::from(at) % span
    }
    fn visible(&self) -> impl Iterator<Item = &ModelBatch> {
        self.batches
            .iter()
            .filter(move |b| b.last >= self.log_start)
    }
}

fn check_all(log: &Log, model: &Model) -> Result<(), TestCaseError> {
    prop_assert_eq!(log.log_end_offset(), model.next);
    prop_assert_eq!(log.log_start_offset(), model.log_start);
    let got: Vec<Vec<u8>> = log
        .iter_batches(0)
        .map(|b| b.unwrap().bytes.to_vec())
        .collect();
    let want: Vec<Vec<u8>> = model.visible().map(|b| b.bytes.clone()).collect();
    prop_assert_eq!(got.len(), want.len());
    prop_assert!(got == want, "batch bytes differ");
    Ok(())
}

/// `read_slice`, jumping along the index and walking every header, locates exactly what `read`
/// returned.
fn check_slices(
    log: &Log,
    offset: i64,
    max_bytes: usize,
    limit: Option<i64>,
    read: &shoal_storage::ReadResult,
) -> Result<(), TestCaseError> {
    let jumped = log.read_slice(offset, max_bytes, limit, false).unwrap();
    let walked = log.read_slice(offset, max_bytes, limit, true).unwrap();
    prop_assert_eq!(jumped.next_offset, read.next_offset);
    prop_assert_eq!(walked.next_offset, read.next_offset);
    for slice in [&jumped, &walked] {
        let bytes = slice
            .region
            .as_ref()
            .map(|r| r.read().unwrap())
            .unwrap_or_default();
        prop_assert_eq!(&bytes[..], &read.records[..]);
    }
    let mut at = walked.region.as_ref().map_or(0, |r| r.position());
    for (header, position) in &walked.batches {
        prop_assert_eq!(*position, at);
        at += header.size_bytes() as u64;
    }
    let end = walked
        .region
        .as_ref()
        .map_or(0, |r| r.position() + r.len() as u64);
    prop_assert_eq!(at, end);
    Ok(())
}

/// The open-file bound for this test: small, so that logs of several segments keep closing
/// and reopening their files.
const OPEN_FILES: usize = 2;

fn run(ops: Vec<Op>, segment_bytes: u64, index_interval_bytes: u32) -> Result<(), TestCaseError> {
    shoal_storage::log::set_open_files_limit(OPEN_FILES);
    let dir = tempfile::tempdir().unwrap();
    let config = LogConfig {
        segment_bytes,
        index_interval_bytes,
        retention_ms: -1,
        ..LogConfig::default()
    };
    let mut log = Some(Log::open(dir.path(), config).unwrap());
    let mut model = Model::default();
    let mut tag = 0u64;
    for op in ops {
        let l = log.as_mut().unwrap();
        match op {
            Op::Append {
                records,
                value_len,
                ts,
            } => {
                tag += 1;
                let values: Vec<Vec<u8>> = (0..records)
                    .map(|i| format!("{tag}:{i}:{}", "v".repeat(value_len)).into_bytes())
                    .collect();
                let recs: Vec<shoal_storage::batch::KeyValue<'_>> = values
                    .iter()
                    .map(|v| (Some(&b"k"[..]), Some(v.as_slice())))
                    .collect();
                let mut b = encode_batch(
                    &recs,
                    BatchOptions {
                        timestamp_ms: ts,
                        ..BatchOptions::default()
                    },
                );
                if b.len() as u64 > segment_bytes {
                    prop_assert!(l.append(&mut b, 0).is_err());
                    continue;
                }
                let info = l.append(&mut b, 0).unwrap();
                prop_assert_eq!(info.first_offset, model.next);
                model.batches.push(ModelBatch {
                    base: model.next,
                    last: info.last_offset,
                    max_ts: ts,
                    bytes: b,
                });
                model.next = info.last_offset + 1;
            }
            Op::Read {
                at,
                max_bytes,
                limit_at,
            } => {
                let o = model.pick(at);
                let r = l.read(o, max_bytes, None).unwrap();
                check_slices(l, o, max_bytes, None, &r)?;
                // The same read bounded by an offset (as by the high watermark or the LSO) is a
                // prefix of it, of batches wholly below the bound.
                let limit = model.pick(limit_at);
                let bounded = l.read(o, max_bytes, Some(limit)).unwrap();
                check_slices(l, o, max_bytes, Some(limit), &bounded)?;
                prop_assert!(r.records.starts_with(&bounded.records));
                for b in split_batches(&bounded.records) {
                    prop_assert!(b.unwrap().0.last_offset() < limit);
                }
                if bounded.records.len() < r.records.len() {
                    let (next, _) = split_batches(&r.records.slice(bounded.records.len()..))
                        .next()
                        .unwrap()
                        .unwrap();
                    prop_assert!(next.last_offset() >= limit, "stopped short of {}", limit);
                }
                let from: Vec<&ModelBatch> = model.visible().filter(|b| b.last >= o).collect();
                if from.is_empty() {
                    prop_assert!(r.records.is_empty());
                    continue;
                }
                prop_assert!(!r.records.is_empty(), "no data at {}", o);
                let mut expect = Vec::new();
                let mut n = 0;
                for (i, b) in split_batches(&r.records).enumerate() {
                    let (_, range) = b.unwrap();
                    prop_assert!(i < from.len());
                    prop_assert!(r.records[range] == from[i].bytes[..]);
                    expect.extend_from_slice(&from[i].bytes);
                    n += 1;
                }
                prop_assert_eq!(&r.records[..], &expect[..]);
                prop_assert!(n == 1 || r.records.len() <= max_bytes);
                prop_assert_eq!(r.next_offset, from[n - 1].last + 1);
            }
            Op::Reopen { clean } => {
                let l = log.take().unwrap();
                if clean {
                    l.close().unwrap();
                } else {
                    drop(l);
                }
                log = Some(Log::open(dir.path(), config).unwrap());
                check_all(log.as_ref().unwrap(), &model)?;
            }
            Op::Torn { garbage } => {
                drop(log.take());
                append_garbage(&last_segment(dir.path()), &garbage);
                log = Some(Log::open(dir.path(), config).unwrap());
                check_all(log.as_ref().unwrap(), &model)?;
            }
            Op::Sync => {
                l.sync().unwrap();
                prop_assert_eq!(l.flushed_offset(), model.next);
            }
            Op::Checkpoint => {
                l.checkpoint_recovery_point().unwrap();
            }
            Op::Truncate { at } => {
                let o = if at % 5 == 0 {
                    (model.log_start - i64::from(at % 3)).max(0)
                } else {
                    model.pick(at)
                };
                let end = l.truncate_to(o).unwrap();
                if o >= model.next {
                    // no-op
                } else if o < model.log_start {
                    model.batches.clear();
                    model.next = o;
                    model.log_start = o;
                } else if let Some(i) = model.batches.iter().position(|b| b.last >= o) {
                    model.next = model.batches[i].base;
                    model.batches.truncate(i);
                    model.log_start = model.log_start.min(model.next);
                }
                prop_assert_eq!(end, model.next);
            }
            Op::DeleteRecords { at } => {
                let o = model.pick(at);
                let start = l.delete_records_before(o).unwrap();
                model.log_start = model.log_start.max(o);
                prop_assert_eq!(start, model.log_start);
            }
            Op::Timestamp { ts } => {
                let got = l.offset_for_timestamp(ts).unwrap();
                // All records of a batch share its timestamp.
                let want = model
                    .visible()
                    .find(|b| b.max_ts >= ts)
                    .map(|b| (b.base.max(model.log_start), b.max_ts));
                prop_assert_eq!(got, want);
            }
            Op::CloseFiles => {
                shoal_storage::log::close_idle_files();
                shoal_storage::log::close_idle_files();
            }
        }
        prop_assert!(shoal_storage::log::open_files() <= OPEN_FILES);
    }
    check_all(log.as_ref().unwrap(), &model)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]
    #[test]
    fn log_matches_model(
        ops in proptest::collection::vec(op(), 1..60),
        segment_bytes in 200u64..3000,
        index_interval_bytes in 1u32..600,
    ) {
        run(ops, segment_bytes, index_interval_bytes)?;
    }
}
