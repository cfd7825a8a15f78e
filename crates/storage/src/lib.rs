//! shoal-storage: the partition log.
//!
//! Owns: Kafka record batches (magic v2) stored byte-exact as received in per-partition segment
//! logs with sparse offset and time indexes, crash recovery, retention, compaction
//! ([`log::cleaner`]) and the log start offset checkpoint. [`batch`] parses, validates, rewrites, decodes and encodes batches; [`log`] owns a
//! partition directory.
//!
//! Invariants: nothing on a disk or network path panics; every size read from input is bounded
//! by a named limit. The API is synchronous: the broker serialises calls per partition and may
//! fsync outside its lock through [`log::SyncHandle`]. The one shared state is the pool of open
//! segment files (`log::files`, bounded by [`log::set_open_files_limit`]), locked inside.
//!
//! Must not: spawn threads or tasks, read clocks (time comes in as `now_ms`), or take directory
//! locks (the broker does).

pub mod batch;
pub mod error;
pub mod log;
pub mod producer_snapshot;

pub use batch::{
    assign_offsets, control_record_type, decode_records, encode_batch, encode_end_txn_marker,
    end_txn_marker, set_log_append_time, set_partition_leader_epoch, validate_record_set,
    BatchHeader, BatchOptions, Compression, ControlRecordType, EndTxnMarker, RecordHeader,
    RecordView, TimestampType, ValidationLimits,
};
pub use error::{codes, StorageError};
pub use log::{
    AbortedTxn, AppendInfo, Batch, BatchIter, CleanStats, CompactionConfig, DirtyStats, FileRegion,
    Log, LogConfig, LogSlice, ReadResult, SyncHandle, Throttler,
};
