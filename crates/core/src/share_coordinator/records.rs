//! The records of `__share_group_state` and their exact Kafka encoding.
//!
//! Framing is Kafka's coordinator framing (`CoordinatorRecordSerde`): key =
//! `[i16 record type][key message]`, value = `[i16 value version][value message]`, and a
//! tombstone has no value. Record type 0 is ShareSnapshot and 1 is ShareUpdate; a tombstone
//! carries a ShareSnapshot key, as Kafka writes it.
//!
//! The key messages (`ShareSnapshotKey`, `ShareUpdateKey`: `GroupId string, TopicId uuid,
//! Partition int32`) are not flexible, as every Kafka coordinator key: the group id is an
//! `i16`-length string. The value messages are flexible version 0: compact arrays (unsigned
//! varint length + 1), a tagged-field section after every struct, and the KIP-1226
//! `DeliveryCompleteCount` as tagged field 0 of the value (written only when it is not its
//! default -1). The bytes are those Kafka's generated serializers produce, so Kafka's own
//! tools can decode what this module writes, and this module reads what Kafka writes, unknown
//! tagged fields included (they are skipped).
//!
//! TX_PENDING (KIP-1289, delivery state 5) extends `StateBatch` with Shoal's tagged field
//! [`STAGED_TXN_TAG`] (0) — `ProducerId int64, ProducerEpoch int16, AcknowledgeType int8`, 11
//! bytes — on batches whose state is 5 and only there. Tagged fields are how Kafka versions a
//! flexible message without a version bump: records written before (no tag) decode unchanged
//! with no staging, Kafka's own readers skip the tag, and the value version stays 0. A batch
//! carries the staging of its offsets; batches with different stagings are never joined. The
//! staging member id is not persisted (only the producer decides the outcome).
//!
//! Decoding never panics, never allocates more than the input can describe (an array count is
//! checked against the bytes left before anything is reserved) and refuses trailing bytes.

use super::TopicId;
use shoal_codec::wire::{Reader, Writer};

/// Record type (the key's `apiKey`) of ShareSnapshot records.
pub const SHARE_SNAPSHOT_RECORD_TYPE: i16 = 0;
/// Record type (the key's `apiKey`) of ShareUpdate records.
pub const SHARE_UPDATE_RECORD_TYPE: i16 = 1;
/// The only value version of both value messages.
pub const VALUE_VERSION: i16 = 0;
/// Tag of `DeliveryCompleteCount` in both value messages.
pub const DELIVERY_COMPLETE_COUNT_TAG: u32 = 0;
/// `DeliveryCompleteCount` when unknown (the tagged field's default).
pub const UNINITIALIZED_DELIVERY_COMPLETE_COUNT: i32 = -1;

/// Tag, inside a `StateBatch`, of the TX_PENDING staging ([`StagedTxn`]).
pub const STAGED_TXN_TAG: u32 = 0;
/// Encoded size of [`StagedTxn`]: 8 + 2 + 1, and a flags byte only when a flag is set.
const STAGED_TXN_BYTES: usize = 11;
const STAGED_TXN_FLAGGED_BYTES: usize = 12;
/// [`StagedTxn::dead_lettered`] in the flags byte.
const STAGED_TXN_DEAD_LETTERED: u8 = 1;
/// Persisted delivery state id of TX_PENDING (KIP-1289).
pub const TX_PENDING_STATE_ID: i8 = 5;

/// Encoded size of one `StateBatch`: 8 + 8 + 1 + 2 bytes and an empty tagged-field section.
const STATE_BATCH_BYTES_MIN: usize = 20;

/// Identifies one share partition: `(group, topic id, partition)`; the key of both records.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SharePartitionKey {
    pub group_id: String,
    pub topic_id: TopicId,
    pub partition: i32,
}

impl SharePartitionKey {
    pub fn new(group_id: impl Into<String>, topic_id: TopicId, partition: i32) -> Self {
        SharePartitionKey {
            group_id: group_id.into(),
            topic_id,
            partition,
        }
    }
}

/// The transaction a TX_PENDING batch is staged in (KIP-1289): the producer whose COMMIT or
/// ABORT marker resolves it, and the acknowledge type (wire id: 0 GAP, 1 ACCEPT, 3 REJECT)
/// that COMMIT applies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct StagedTxn {
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub ack_type: i8,
    /// A staged REJECT whose dead-letter records were written in the same transaction
    /// (issue 31): its COMMIT archives it at once, as the marker makes them visible.
    pub dead_lettered: bool,
}

/// One persisted range of offsets with a common delivery state and count (Kafka's
/// `PersisterStateBatch`). The state is the raw persisted id (0 AVAILABLE, 2 ACKNOWLEDGED,
/// 4 ARCHIVED in KIP-932, 5 TX_PENDING in KIP-1289), kept raw so that records written by other
/// versions replay unchanged.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct StateBatch {
    pub first_offset: i64,
    pub last_offset: i64,
    pub delivery_state: i8,
    pub delivery_count: i16,
    /// The staging of TX_PENDING batches (tagged field [`STAGED_TXN_TAG`]); `None` otherwise.
    pub staged_txn: Option<StagedTxn>,
}

impl StateBatch {
    pub fn new(
        first_offset: i64,
        last_offset: i64,
        delivery_state: i8,
        delivery_count: i16,
    ) -> Self {
        StateBatch {
            first_offset,
            last_offset,
            delivery_state,
            delivery_count,
            staged_txn: None,
        }
    }

    /// The same batch staged in `txn` (TX_PENDING batches).
    pub fn with_staged_txn(self, txn: Option<StagedTxn>) -> Self {
        StateBatch {
            staged_txn: txn,
            ..self
        }
    }
}

/// `ShareSnapshotValue` v0: the complete state of one share partition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShareSnapshotValue {
    pub snapshot_epoch: i32,
    pub state_epoch: i32,
    pub leader_epoch: i32,
    pub start_offset: i64,
    /// Tagged field 0; -1 when unknown.
    pub delivery_complete_count: i32,
    pub create_timestamp_ms: i64,
    pub write_timestamp_ms: i64,
    pub state_batches: Vec<StateBatch>,
}

/// `ShareUpdateValue` v0: a change to merge into the last snapshot (no state epoch).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShareUpdateValue {
    pub snapshot_epoch: i32,
    pub leader_epoch: i32,
    /// -1 when the start offset is unchanged.
    pub start_offset: i64,
    /// Tagged field 0; -1 when unknown.
    pub delivery_complete_count: i32,
    pub state_batches: Vec<StateBatch>,
}

/// Every record the share coordinator writes to `__share_group_state`.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ShareStateRecord {
    Snapshot {
        key: SharePartitionKey,
        value: ShareSnapshotValue,
    },
    Update {
        key: SharePartitionKey,
        value: ShareUpdateValue,
    },
    /// The share partition's state was deleted (a ShareSnapshot key without value).
    Tombstone { key: SharePartitionKey },
}

/// Why a record cannot be encoded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EncodeError {
    #[error("group id of {len} bytes is longer than {max}")]
    GroupIdTooLong { len: usize, max: usize },
    #[error("{count} state batches do not fit a compact array")]
    TooManyStateBatches { count: usize },
}

/// Why a stored record could not be decoded (the one decode error of Kafka-encoded bytes).
pub use shoal_codec::DecodeError;

impl ShareStateRecord {
    pub fn key(&self) -> &SharePartitionKey {
        match self {
            ShareStateRecord::Snapshot { key, .. }
            | ShareStateRecord::Update { key, .. }
            | ShareStateRecord::Tombstone { key } => key,
        }
    }

    /// The record type that goes first in the key.
    pub fn record_type(&self) -> i16 {
        match self {
            ShareStateRecord::Snapshot { .. } | ShareStateRecord::Tombstone { .. } => {
                SHARE_SNAPSHOT_RECORD_TYPE
            }
            ShareStateRecord::Update { .. } => SHARE_UPDATE_RECORD_TYPE,
        }
    }

    /// Encodes as (key, value); a tombstone has no value.
    ///
    /// # Errors
    /// A group id longer than `i16::MAX` bytes, or more state batches than a compact array
    /// holds (both far beyond what a request can carry).
    pub fn encode(&self) -> Result<(Vec<u8>, Option<Vec<u8>>), EncodeError> {
        let key = self.key();
        let mut k = Writer::default();
        k.i16(self.record_type());
        k.string(&key.group_id)?;
        k.bytes(&key.topic_id.0);
        k.i32(key.partition);
        let value = match self {
            ShareStateRecord::Tombstone { .. } => None,
            ShareStateRecord::Snapshot { value: v, .. } => {
                let mut w = Writer::default();
                w.i16(VALUE_VERSION);
                w.i32(v.snapshot_epoch);
                w.i32(v.state_epoch);
                w.i32(v.leader_epoch);
                w.i64(v.start_offset);
                w.i64(v.create_timestamp_ms);
                w.i64(v.write_timestamp_ms);
                w.state_batches(&v.state_batches)?;
                w.delivery_complete_count_tag(v.delivery_complete_count);
                Some(w.into_inner())
            }
            ShareStateRecord::Update { value: v, .. } => {
                let mut w = Writer::default();
                w.i16(VALUE_VERSION);
                w.i32(v.snapshot_epoch);
                w.i32(v.leader_epoch);
                w.i64(v.start_offset);
                w.state_batches(&v.state_batches)?;
                w.delivery_complete_count_tag(v.delivery_complete_count);
                Some(w.into_inner())
            }
        };
        Ok((k.into_inner(), value))
    }

    /// Decodes a (key, value) pair read from `__share_group_state`.
    ///
    /// # Errors
    /// Truncated, over-long or malformed input; unknown record types (which a loader may
    /// skip, as Kafka's does); value versions other than 0; an update key without value.
    pub fn decode(key: &[u8], value: Option<&[u8]>) -> Result<ShareStateRecord, DecodeError> {
        let mut k = Reader::new(key);
        let record_type = k.i16()?;
        if record_type != SHARE_SNAPSHOT_RECORD_TYPE && record_type != SHARE_UPDATE_RECORD_TYPE {
            return Err(DecodeError::UnknownRecordType(record_type));
        }
        let group_id = k.string()?;
        let topic_id = TopicId(k.array()?);
        let partition = k.i32()?;
        k.finish()?;
        let key = SharePartitionKey {
            group_id,
            topic_id,
            partition,
        };
        let Some(value) = value else {
            return match record_type {
                SHARE_SNAPSHOT_RECORD_TYPE => Ok(ShareStateRecord::Tombstone { key }),
                _ => Err(DecodeError::MissingValue { record_type }),
            };
        };
        let mut r = Reader::new(value);
        let version = r.i16()?;
        if version != VALUE_VERSION {
            return Err(DecodeError::UnsupportedVersion {
                record_type,
                version,
            });
        }
        if record_type == SHARE_SNAPSHOT_RECORD_TYPE {
            let snapshot_epoch = r.i32()?;
            let state_epoch = r.i32()?;
            let leader_epoch = r.i32()?;
            let start_offset = r.i64()?;
            let create_timestamp_ms = r.i64()?;
            let write_timestamp_ms = r.i64()?;
            let state_batches = r.state_batches()?;
            let delivery_complete_count = r.value_tagged_fields()?;
            r.finish()?;
            Ok(ShareStateRecord::Snapshot {
                key,
                value: ShareSnapshotValue {
                    snapshot_epoch,
                    state_epoch,
                    leader_epoch,
                    start_offset,
                    delivery_complete_count,
                    create_timestamp_ms,
                    write_timestamp_ms,
                    state_batches,
                },
            })
        } else {
            let snapshot_epoch = r.i32()?;
            let leader_epoch = r.i32()?;
            let start_offset = r.i64()?;
            let state_batches = r.state_batches()?;
            let delivery_complete_count = r.value_tagged_fields()?;
            r.finish()?;
            Ok(ShareStateRecord::Update {
                key,
                value: ShareUpdateValue {
                    snapshot_epoch,
                    leader_epoch,
                    start_offset,
                    delivery_complete_count,
                    state_batches,
                },
            })
        }
    }
}

/// The [`STAGED_TXN_TAG`] field's bytes.
fn decode_staged_txn(data: &[u8]) -> Result<StagedTxn, DecodeError> {
    StagedTxn::from_bytes(data).ok_or(DecodeError::InvalidTaggedFieldSize {
        tag: STAGED_TXN_TAG,
        size: data.len(),
        expected: STAGED_TXN_BYTES,
    })
}

impl StagedTxn {
    /// The [`STAGED_TXN_TAG`] field's value: `ProducerId int64, ProducerEpoch int16,
    /// AcknowledgeType int8`, big-endian, then a flags byte (bit 0: [`StagedTxn::dead_lettered`])
    /// only when a flag is set — so a staging without one is byte for byte what earlier
    /// versions wrote. In the records and, between brokers, on the state batches of the
    /// share-state RPCs.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(STAGED_TXN_FLAGGED_BYTES);
        out.extend_from_slice(&self.producer_id.to_be_bytes());
        out.extend_from_slice(&self.producer_epoch.to_be_bytes());
        out.push(self.ack_type.to_be_bytes()[0]);
        if self.dead_lettered {
            out.push(STAGED_TXN_DEAD_LETTERED);
        }
        out
    }

    /// Reads [`StagedTxn::to_bytes`]; None unless `data` is 11 bytes, or 12 with only known
    /// flags set.
    pub fn from_bytes(data: &[u8]) -> Option<StagedTxn> {
        let (fixed, flags) = match data.len() {
            STAGED_TXN_BYTES => (data, 0),
            STAGED_TXN_FLAGGED_BYTES => (&data[..STAGED_TXN_BYTES], data[STAGED_TXN_BYTES]),
            _ => return None,
        };
        if flags & !STAGED_TXN_DEAD_LETTERED != 0 {
            return None;
        }
        let bytes: [u8; STAGED_TXN_BYTES] = fixed.try_into().ok()?;
        let [p0, p1, p2, p3, p4, p5, p6, p7, e0, e1, ack_type] = bytes;
        Some(StagedTxn {
            producer_id: i64::from_be_bytes([p0, p1, p2, p3, p4, p5, p6, p7]),
            producer_epoch: i16::from_be_bytes([e0, e1]),
            ack_type: i8::from_be_bytes([ack_type]),
            dead_lettered: flags & STAGED_TXN_DEAD_LETTERED != 0,
        })
    }
}

/// The share-state structures on top of Kafka's encoding.
trait WriterExt {
    fn string(&mut self, s: &str) -> Result<(), EncodeError>;
    fn state_batches(&mut self, batches: &[StateBatch]) -> Result<(), EncodeError>;
    fn delivery_complete_count_tag(&mut self, count: i32);
}

impl WriterExt for Writer {
    /// A non-flexible (`i16` length) string, as in the keys.
    fn string(&mut self, s: &str) -> Result<(), EncodeError> {
        self.key_string(s)
            .map_err(|len| EncodeError::GroupIdTooLong {
                len,
                max: i16::MAX as usize,
            })
    }

    fn state_batches(&mut self, batches: &[StateBatch]) -> Result<(), EncodeError> {
        let count = u32::try_from(batches.len())
            .ok()
            .and_then(|n| n.checked_add(1))
            .ok_or(EncodeError::TooManyStateBatches {
                count: batches.len(),
            })?;
        self.unsigned_varint(u64::from(count));
        for b in batches {
            self.i64(b.first_offset);
            self.i64(b.last_offset);
            self.i8(b.delivery_state);
            self.i16(b.delivery_count);
            match b.staged_txn {
                None => self.empty_tagged_fields(),
                Some(t) => {
                    let bytes = t.to_bytes();
                    self.unsigned_varint(1);
                    self.unsigned_varint(u64::from(STAGED_TXN_TAG));
                    self.unsigned_varint(bytes.len() as u64);
                    self.bytes(&bytes);
                }
            }
        }
        Ok(())
    }

    /// The value's tagged-field section: `DeliveryCompleteCount` unless it is the default.
    fn delivery_complete_count_tag(&mut self, count: i32) {
        if count == UNINITIALIZED_DELIVERY_COMPLETE_COUNT {
            self.unsigned_varint(0);
        } else {
            self.unsigned_varint(1);
            self.unsigned_varint(u64::from(DELIVERY_COMPLETE_COUNT_TAG));
            self.unsigned_varint(4);
            self.i32(count);
        }
    }
}

trait ReaderExt {
    fn string(&mut self) -> Result<String, DecodeError>;
    fn state_batches(&mut self) -> Result<Vec<StateBatch>, DecodeError>;
    fn value_tagged_fields(&mut self) -> Result<i32, DecodeError>;
    fn finish(&self) -> Result<(), DecodeError>;
}

impl ReaderExt for Reader<'_> {
    /// A non-flexible, non-nullable string (`i16` length).
    fn string(&mut self) -> Result<String, DecodeError> {
        self.key_string()
    }

    fn state_batches(&mut self) -> Result<Vec<StateBatch>, DecodeError> {
        let n = self.compact_count(STATE_BATCH_BYTES_MIN)?;
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            let first_offset = self.i64()?;
            let last_offset = self.i64()?;
            let delivery_state = self.i8()?;
            let delivery_count = self.i16()?;
            let mut staged_txn = None;
            self.tagged_fields::<DecodeError>(|tag, data| {
                if tag == STAGED_TXN_TAG {
                    staged_txn = Some(decode_staged_txn(data)?);
                }
                // Unknown tags are skipped.
                Ok(())
            })?;
            out.push(StateBatch {
                first_offset,
                last_offset,
                delivery_state,
                delivery_count,
                staged_txn,
            });
        }
        Ok(out)
    }

    /// The value's tagged fields; returns `DeliveryCompleteCount` (default -1).
    fn value_tagged_fields(&mut self) -> Result<i32, DecodeError> {
        let mut count = UNINITIALIZED_DELIVERY_COMPLETE_COUNT;
        self.tagged_fields::<DecodeError>(|tag, data| {
            if tag == DELIVERY_COMPLETE_COUNT_TAG {
                let bytes: [u8; 4] =
                    data.try_into()
                        .map_err(|_| DecodeError::InvalidTaggedFieldSize {
                            tag,
                            size: data.len(),
                            expected: 4,
                        })?;
                count = i32::from_be_bytes(bytes);
            }
            Ok(())
        })?;
        Ok(count)
    }

    fn finish(&self) -> Result<(), DecodeError> {
        self.trailing()
    }
}
