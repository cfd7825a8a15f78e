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
//! Decoding never panics, never allocates more than the input can describe (an array count is
//! checked against the bytes left before anything is reserved) and refuses trailing bytes.

use super::TopicId;

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

/// One persisted range of offsets with a common delivery state and count (Kafka's
/// `PersisterStateBatch`). The state is the raw persisted id (0 AVAILABLE, 2 ACKNOWLEDGED,
/// 4 ARCHIVED in KIP-932; later versions add others), kept raw so that records written by other
/// versions replay unchanged.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct StateBatch {
    pub first_offset: i64,
    pub last_offset: i64,
    pub delivery_state: i8,
    pub delivery_count: i16,
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

/// Why a stored record could not be decoded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    #[error("record truncated: needed {needed} bytes at offset {at}, {remaining} remaining")]
    Truncated {
        at: usize,
        needed: usize,
        remaining: usize,
    },
    /// Kafka's loader skips records of unknown types; so may the caller.
    #[error("unknown record type {0}")]
    UnknownRecordType(i16),
    #[error("unsupported value version {0}")]
    UnsupportedVersion(i16),
    #[error("an update record without value (only snapshot keys are tombstones)")]
    UpdateTombstone,
    #[error("invalid length {length} at offset {at}")]
    InvalidLength { at: usize, length: i64 },
    #[error("unsigned varint too long at offset {at}")]
    VarintTooLong { at: usize },
    #[error("invalid UTF-8 in a string at offset {at}")]
    InvalidUtf8 { at: usize },
    #[error("null in a non-nullable field at offset {at}")]
    UnexpectedNull { at: usize },
    #[error("tagged field {tag} has size {size}, expected {expected}")]
    InvalidTaggedFieldSize {
        tag: u32,
        size: usize,
        expected: usize,
    },
    #[error("{count} trailing bytes")]
    TrailingBytes { count: usize },
}

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
                Some(w.0)
            }
            ShareStateRecord::Update { value: v, .. } => {
                let mut w = Writer::default();
                w.i16(VALUE_VERSION);
                w.i32(v.snapshot_epoch);
                w.i32(v.leader_epoch);
                w.i64(v.start_offset);
                w.state_batches(&v.state_batches)?;
                w.delivery_complete_count_tag(v.delivery_complete_count);
                Some(w.0)
            }
        };
        Ok((k.0, value))
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
                _ => Err(DecodeError::UpdateTombstone),
            };
        };
        let mut r = Reader::new(value);
        let version = r.i16()?;
        if version != VALUE_VERSION {
            return Err(DecodeError::UnsupportedVersion(version));
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

#[derive(Default)]
struct Writer(Vec<u8>);

impl Writer {
    fn bytes(&mut self, b: &[u8]) {
        self.0.extend_from_slice(b);
    }
    fn i8(&mut self, v: i8) {
        self.bytes(&v.to_be_bytes());
    }
    fn i16(&mut self, v: i16) {
        self.bytes(&v.to_be_bytes());
    }
    fn i32(&mut self, v: i32) {
        self.bytes(&v.to_be_bytes());
    }
    fn i64(&mut self, v: i64) {
        self.bytes(&v.to_be_bytes());
    }

    fn unsigned_varint(&mut self, mut v: u32) {
        while v >= 0x80 {
            // Low 7 bits with the continuation bit; the cast keeps exactly those bits.
            self.0.push((v as u8 & 0x7f) | 0x80);
            v >>= 7;
        }
        self.0.push(v as u8);
    }

    /// A non-flexible (`i16` length) string, as in the keys.
    fn string(&mut self, s: &str) -> Result<(), EncodeError> {
        let len = i16::try_from(s.len()).map_err(|_| EncodeError::GroupIdTooLong {
            len: s.len(),
            max: i16::MAX as usize,
        })?;
        self.i16(len);
        self.bytes(s.as_bytes());
        Ok(())
    }

    fn state_batches(&mut self, batches: &[StateBatch]) -> Result<(), EncodeError> {
        let count = u32::try_from(batches.len())
            .ok()
            .and_then(|n| n.checked_add(1))
            .ok_or(EncodeError::TooManyStateBatches {
                count: batches.len(),
            })?;
        self.unsigned_varint(count);
        for b in batches {
            self.i64(b.first_offset);
            self.i64(b.last_offset);
            self.i8(b.delivery_state);
            self.i16(b.delivery_count);
            self.unsigned_varint(0); // no tagged fields
        }
        Ok(())
    }

    /// The value's tagged-field section: `DeliveryCompleteCount` unless it is the default.
    fn delivery_complete_count_tag(&mut self, count: i32) {
        if count == UNINITIALIZED_DELIVERY_COMPLETE_COUNT {
            self.unsigned_varint(0);
        } else {
            self.unsigned_varint(1);
            self.unsigned_varint(DELIVERY_COMPLETE_COUNT_TAG);
            self.unsigned_varint(4);
            self.i32(count);
        }
    }
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    fn remaining(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        let remaining = self.remaining();
        let truncated = DecodeError::Truncated {
            at: self.pos,
            needed: n,
            remaining,
        };
        let end = self.pos.checked_add(n).ok_or(truncated.clone())?;
        let out = self.buf.get(self.pos..end).ok_or(truncated)?;
        self.pos = end;
        Ok(out)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    fn i8(&mut self) -> Result<i8, DecodeError> {
        Ok(i8::from_be_bytes(self.array()?))
    }
    fn i16(&mut self) -> Result<i16, DecodeError> {
        Ok(i16::from_be_bytes(self.array()?))
    }
    fn i32(&mut self) -> Result<i32, DecodeError> {
        Ok(i32::from_be_bytes(self.array()?))
    }
    fn i64(&mut self) -> Result<i64, DecodeError> {
        Ok(i64::from_be_bytes(self.array()?))
    }

    /// Kafka's `readUnsignedVarint`: at most 5 bytes, 32 bits.
    fn unsigned_varint(&mut self) -> Result<u32, DecodeError> {
        let at = self.pos;
        let mut value: u32 = 0;
        for i in 0..5u32 {
            let [b] = self.array::<1>()?;
            let bits = u32::from(b & 0x7f);
            if i == 4 && bits > 0x0f {
                return Err(DecodeError::VarintTooLong { at });
            }
            value |= bits << (7 * i);
            if b & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(DecodeError::VarintTooLong { at })
    }

    /// A non-flexible, non-nullable string (`i16` length).
    fn string(&mut self) -> Result<String, DecodeError> {
        let at = self.pos;
        let len = self.i16()?;
        if len == -1 {
            return Err(DecodeError::UnexpectedNull { at });
        }
        let len = usize::try_from(len).map_err(|_| DecodeError::InvalidLength {
            at,
            length: i64::from(len),
        })?;
        let bytes = self.take(len)?;
        std::str::from_utf8(bytes)
            .map(str::to_string)
            .map_err(|_| DecodeError::InvalidUtf8 { at })
    }

    /// A non-nullable compact array count whose elements take at least `min_bytes` each.
    fn compact_count(&mut self, min_bytes: usize) -> Result<usize, DecodeError> {
        let at = self.pos;
        let raw = self.unsigned_varint()?;
        let Some(count) = raw.checked_sub(1) else {
            return Err(DecodeError::UnexpectedNull { at });
        };
        let invalid = DecodeError::InvalidLength {
            at,
            length: i64::from(count),
        };
        let n = usize::try_from(count).map_err(|_| invalid.clone())?;
        if n.saturating_mul(min_bytes) > self.remaining() {
            return Err(invalid);
        }
        Ok(n)
    }

    fn state_batches(&mut self) -> Result<Vec<StateBatch>, DecodeError> {
        let n = self.compact_count(STATE_BATCH_BYTES_MIN)?;
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            let first_offset = self.i64()?;
            let last_offset = self.i64()?;
            let delivery_state = self.i8()?;
            let delivery_count = self.i16()?;
            // StateBatch has no known tagged fields: skip whatever is there.
            self.tagged_fields(|_, _| Ok(()))?;
            out.push(StateBatch {
                first_offset,
                last_offset,
                delivery_state,
                delivery_count,
            });
        }
        Ok(out)
    }

    /// Reads a tagged-field section, handing each field to `known` and skipping its bytes.
    fn tagged_fields(
        &mut self,
        mut known: impl FnMut(u32, &'a [u8]) -> Result<(), DecodeError>,
    ) -> Result<(), DecodeError> {
        let count = self.unsigned_varint()?;
        for _ in 0..count {
            let tag = self.unsigned_varint()?;
            let size = self.unsigned_varint()?;
            let data = self.take(usize::try_from(size).unwrap_or(usize::MAX))?;
            known(tag, data)?;
        }
        Ok(())
    }

    /// The value's tagged fields; returns `DeliveryCompleteCount` (default -1).
    fn value_tagged_fields(&mut self) -> Result<i32, DecodeError> {
        let mut count = UNINITIALIZED_DELIVERY_COMPLETE_COUNT;
        self.tagged_fields(|tag, data| {
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
        match self.remaining() {
            0 => Ok(()),
            count => Err(DecodeError::TrailingBytes { count }),
        }
    }
}
