//! Losses a crash can cause, made on purpose: a partition's segment cut at a batch boundary,
//! as recovery finds a log whose page-cache tail was never written back. Call them on a
//! stopped (crashed) broker's data directory.

use std::path::{Path, PathBuf};

use shoal_storage::batch::split_batches;
use shoal_storage::{decode_records, BatchHeader, RecordView};

/// The first segment of `topic`-`partition` in the data directory `dir` (the only one in
/// these tests' small logs).
pub fn first_segment(dir: &Path, topic: &str, partition: i32) -> PathBuf {
    shoal_broker::topic_registry::partition_dir(dir, topic, partition)
        .join("00000000000000000000.log")
}

/// The (byte position, base offset) of every batch in `segment` (`[i64 base offset][i32
/// length]` framing).
fn batch_positions(segment: &Path) -> Vec<(usize, i64)> {
    let bytes = std::fs::read(segment).unwrap();
    let mut out = Vec::new();
    let mut at = 0;
    while at + 12 <= bytes.len() {
        let base = i64::from_be_bytes(bytes[at..at + 8].try_into().unwrap());
        out.push((at, base));
        let len = i32::from_be_bytes(bytes[at + 8..at + 12].try_into().unwrap());
        at += 12 + len as usize;
    }
    out
}

/// Cuts `segment` just before the batch at `offset`, as a crash that lost the page cache from
/// there would leave it.
pub fn cut_log_at(segment: &Path, offset: i64) {
    let Some((at, _)) = batch_positions(segment)
        .into_iter()
        .find(|(_, base)| *base == offset)
    else {
        panic!("no batch at offset {offset} in {segment:?}");
    };
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(segment)
        .unwrap();
    file.set_len(at as u64).unwrap();
}

/// Cuts the last batch off `segment`; returns its base offset.
pub fn cut_last_batch(segment: &Path) -> i64 {
    let (at, base) = *batch_positions(segment).last().expect("a batch to cut");
    cut_log_at(segment, base);
    assert_eq!(std::fs::metadata(segment).unwrap().len(), at as u64);
    base
}

/// The batches of `segment`, in log order: each one's header and its records (decoded).
pub fn batches(segment: &Path) -> Vec<(BatchHeader, Vec<RecordView>)> {
    let bytes = std::fs::read(segment).unwrap();
    split_batches(&bytes)
        .map(|batch| {
            let (header, range) = batch.unwrap();
            let records = decode_records(&bytes[range], 1 << 20).unwrap();
            (header, records)
        })
        .collect()
}
