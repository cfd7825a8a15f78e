//! Helpers shared by the storage integration tests.

#![allow(dead_code)]

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};

use shoal_storage::batch::{encode_batch, BatchOptions, KeyValue};

/// A batch of `n` records valued `{tag}-{i}`, with CreateTime `ts`.
pub fn batch(n: usize, ts: i64, tag: &str) -> Vec<u8> {
    let values: Vec<Vec<u8>> = (0..n).map(|i| format!("{tag}-{i}").into_bytes()).collect();
    let recs: Vec<KeyValue<'_>> = values.iter().map(|v| (None, Some(v.as_slice()))).collect();
    encode_batch(
        &recs,
        BatchOptions {
            timestamp_ms: ts,
            ..BatchOptions::default()
        },
    )
}

/// The active (last) segment file of the log in `dir`.
pub fn last_segment(dir: &Path) -> PathBuf {
    let mut logs: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    logs.sort();
    logs.pop().unwrap()
}

/// Appends raw bytes to `path`, as a write torn by kill -9 leaves them.
pub fn append_garbage(path: &Path, bytes: &[u8]) {
    let mut f = OpenOptions::new().append(true).open(path).unwrap();
    f.write_all(bytes).unwrap();
}
