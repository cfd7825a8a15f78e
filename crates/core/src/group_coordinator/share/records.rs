//! The share-group records the group coordinator writes to `__consumer_offsets`, in Kafka's
//! own byte layout.
//!
//! Framing is Kafka's coordinator framing: key = `[i16 record type][key fields]`, value =
//! `[i16 value version][value fields]`, a tombstone has no value. Key fields use the classic
//! (non-flexible) encoding, as Kafka's `*Key.json` schemas say (`"flexibleVersions": "none"`:
//! strings are an `i16` length and UTF-8 bytes). Values are flexible version 0: compact strings
//! and arrays (unsigned-varint length + 1, 0 = null), a 16-byte UUID, big-endian integers, and a
//! tagged-field section (empty when written, skipped when read) closing every struct.
//!
//! The record type numbers and value fields are Kafka 4.2's (`group-coordinator/src/main/
//! resources/common/message/ShareGroup*.json`); Kafka 4.1 dropped type 9
//! (ShareGroupPartitionMetadata) in favour of a metadata hash in type 11, so it is not written
//! and is rejected as unknown here.
//!
//! Decoding never panics and never allocates more than the input could describe: every length
//! and count is checked against the bytes that remain before anything is reserved.

use std::collections::{BTreeMap, BTreeSet};

use shoal_codec::wire::{Reader, Writer};

/// A topic id: Kafka's UUID as its 16 wire bytes (most significant half first).
pub type TopicId = [u8; 16];

/// Partitions per topic id, ordered; the shape of every assignment.
pub type Assignment = BTreeMap<TopicId, BTreeSet<i32>>;

/// Key type of ShareGroupMemberMetadata (member subscription and client facts).
pub const RECORD_TYPE_MEMBER_METADATA: i16 = 10;
/// Key type of ShareGroupMetadata (group epoch and metadata hash).
pub const RECORD_TYPE_GROUP_METADATA: i16 = 11;
/// Key type of ShareGroupTargetAssignmentMetadata (assignment epoch).
pub const RECORD_TYPE_TARGET_ASSIGNMENT_METADATA: i16 = 12;
/// Key type of ShareGroupTargetAssignmentMember (one member's target assignment).
pub const RECORD_TYPE_TARGET_ASSIGNMENT_MEMBER: i16 = 13;
/// Key type of ShareGroupCurrentMemberAssignment (one member's epoch and assignment).
pub const RECORD_TYPE_CURRENT_MEMBER_ASSIGNMENT: i16 = 14;
/// Key type of ShareGroupStatePartitionMetadata (which share partitions have state).
pub const RECORD_TYPE_STATE_PARTITION_METADATA: i16 = 15;
/// The only value version of every share-group record (Kafka 4.2: `"validVersions": "0"`).
pub const VALUE_VERSION: i16 = 0;

/// Kafka's `MemberState.STABLE`: share groups have no revocation, so members are always
/// stable once reconciled.
pub const MEMBER_STATE_STABLE: i8 = 0;

/// ShareGroupMemberMetadataValue v0.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemberMetadataValue {
    pub rack_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    /// Kafka keeps a set; written in name order.
    pub subscribed_topic_names: BTreeSet<String>,
}

/// ShareGroupMetadataValue v0.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GroupMetadataValue {
    /// The group epoch.
    pub epoch: i32,
    /// Hash of the subscribed topics' metadata; 0 when no subscribed topic exists.
    pub metadata_hash: i64,
}

/// ShareGroupCurrentMemberAssignmentValue v0.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CurrentAssignmentValue {
    pub member_epoch: i32,
    /// Accepted in a heartbeat too, in case the response carrying the bump was lost.
    pub previous_member_epoch: i32,
    /// Kafka's `MemberState` byte ([`MEMBER_STATE_STABLE`] for share groups).
    pub state: i8,
    pub assigned_partitions: Assignment,
}

/// One topic's partitions in a ShareGroupStatePartitionMetadataValue (`TopicPartitionsInfo`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TopicPartitionsInfo {
    pub topic_name: String,
    pub partitions: BTreeSet<i32>,
}

/// ShareGroupStatePartitionMetadataValue v0: the share partitions of the group whose state
/// the share coordinator holds (initialized), is being asked to create (initializing), or is
/// being asked to delete (deleting; topic id → name).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StatePartitionMetadataValue {
    pub initializing_topics: BTreeMap<TopicId, TopicPartitionsInfo>,
    pub initialized_topics: BTreeMap<TopicId, TopicPartitionsInfo>,
    pub deleting_topics: BTreeMap<TopicId, String>,
}

impl StatePartitionMetadataValue {
    /// True if no topic is listed at all.
    pub fn is_empty(&self) -> bool {
        self.initializing_topics.is_empty()
            && self.initialized_topics.is_empty()
            && self.deleting_topics.is_empty()
    }
}

/// Every durable change of the share-group coordinator. `None` values are tombstones.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ShareGroupRecord {
    MemberMetadata {
        group_id: String,
        member_id: String,
        value: Option<MemberMetadataValue>,
    },
    GroupMetadata {
        group_id: String,
        value: Option<GroupMetadataValue>,
    },
    TargetAssignmentMetadata {
        group_id: String,
        /// The assignment epoch.
        value: Option<i32>,
    },
    TargetAssignmentMember {
        group_id: String,
        member_id: String,
        value: Option<Assignment>,
    },
    CurrentMemberAssignment {
        group_id: String,
        member_id: String,
        value: Option<CurrentAssignmentValue>,
    },
    StatePartitionMetadata {
        group_id: String,
        value: Option<StatePartitionMetadataValue>,
    },
}

/// Why a record could not be encoded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EncodeError {
    /// A key string longer than the classic `i16` length allows.
    #[error("key string of {length} bytes exceeds 32767")]
    KeyStringTooLong { length: usize },
}

/// Why a stored record could not be decoded (the one decode error of Kafka-encoded bytes).
pub use shoal_codec::DecodeError;

/// The record type of a `__consumer_offsets` key, if it has one.
pub fn record_type(key: &[u8]) -> Option<i16> {
    let bytes: [u8; 2] = key.get(..2)?.try_into().ok()?;
    Some(i16::from_be_bytes(bytes))
}

/// True for the record types this module owns (10..=15); the broker dispatches on it.
pub fn is_share_record_type(record_type: i16) -> bool {
    (RECORD_TYPE_MEMBER_METADATA..=RECORD_TYPE_STATE_PARTITION_METADATA).contains(&record_type)
}

impl ShareGroupRecord {
    /// The group this record belongs to.
    pub fn group_id(&self) -> &str {
        match self {
            ShareGroupRecord::MemberMetadata { group_id, .. }
            | ShareGroupRecord::GroupMetadata { group_id, .. }
            | ShareGroupRecord::TargetAssignmentMetadata { group_id, .. }
            | ShareGroupRecord::TargetAssignmentMember { group_id, .. }
            | ShareGroupRecord::CurrentMemberAssignment { group_id, .. }
            | ShareGroupRecord::StatePartitionMetadata { group_id, .. } => group_id,
        }
    }

    /// The Kafka record type (the key's leading `i16`).
    pub fn record_type(&self) -> i16 {
        match self {
            ShareGroupRecord::MemberMetadata { .. } => RECORD_TYPE_MEMBER_METADATA,
            ShareGroupRecord::GroupMetadata { .. } => RECORD_TYPE_GROUP_METADATA,
            ShareGroupRecord::TargetAssignmentMetadata { .. } => {
                RECORD_TYPE_TARGET_ASSIGNMENT_METADATA
            }
            ShareGroupRecord::TargetAssignmentMember { .. } => RECORD_TYPE_TARGET_ASSIGNMENT_MEMBER,
            ShareGroupRecord::CurrentMemberAssignment { .. } => {
                RECORD_TYPE_CURRENT_MEMBER_ASSIGNMENT
            }
            ShareGroupRecord::StatePartitionMetadata { .. } => RECORD_TYPE_STATE_PARTITION_METADATA,
        }
    }

    /// True for a tombstone (no value).
    pub fn is_tombstone(&self) -> bool {
        match self {
            ShareGroupRecord::MemberMetadata { value, .. } => value.is_none(),
            ShareGroupRecord::GroupMetadata { value, .. } => value.is_none(),
            ShareGroupRecord::TargetAssignmentMetadata { value, .. } => value.is_none(),
            ShareGroupRecord::TargetAssignmentMember { value, .. } => value.is_none(),
            ShareGroupRecord::CurrentMemberAssignment { value, .. } => value.is_none(),
            ShareGroupRecord::StatePartitionMetadata { value, .. } => value.is_none(),
        }
    }

    /// Encodes as (key, value); a tombstone has no value.
    ///
    /// # Errors
    /// [`EncodeError::KeyStringTooLong`] if a group or member id is longer than 32767 bytes
    /// (the coordinator never produces one: it rejects such requests).
    pub fn encode(&self) -> Result<(Vec<u8>, Option<Vec<u8>>), EncodeError> {
        let mut key = Writer::default();
        key.i16(self.record_type());
        let value = match self {
            ShareGroupRecord::MemberMetadata {
                group_id,
                member_id,
                value,
            } => {
                key.key_str(group_id)?;
                key.key_str(member_id)?;
                value.as_ref().map(encode_member_metadata)
            }
            ShareGroupRecord::GroupMetadata { group_id, value } => {
                key.key_str(group_id)?;
                value.as_ref().map(|v| {
                    let mut w = value_writer();
                    w.i32(v.epoch);
                    w.i64(v.metadata_hash);
                    w.finish_struct()
                })
            }
            ShareGroupRecord::TargetAssignmentMetadata { group_id, value } => {
                key.key_str(group_id)?;
                value.map(|epoch| {
                    let mut w = value_writer();
                    w.i32(epoch);
                    w.finish_struct()
                })
            }
            ShareGroupRecord::TargetAssignmentMember {
                group_id,
                member_id,
                value,
            } => {
                key.key_str(group_id)?;
                key.key_str(member_id)?;
                value.as_ref().map(|assignment| {
                    let mut w = value_writer();
                    w.assignment(assignment);
                    w.finish_struct()
                })
            }
            ShareGroupRecord::CurrentMemberAssignment {
                group_id,
                member_id,
                value,
            } => {
                key.key_str(group_id)?;
                key.key_str(member_id)?;
                value.as_ref().map(|v| {
                    let mut w = value_writer();
                    w.i32(v.member_epoch);
                    w.i32(v.previous_member_epoch);
                    w.i8(v.state);
                    w.assignment(&v.assigned_partitions);
                    w.finish_struct()
                })
            }
            ShareGroupRecord::StatePartitionMetadata { group_id, value } => {
                key.key_str(group_id)?;
                value.as_ref().map(encode_state_partition_metadata)
            }
        };
        Ok((key.into_inner(), value))
    }

    /// Decodes a record read back from `__consumer_offsets`.
    ///
    /// # Errors
    /// [`DecodeError`] for any malformed, truncated, unknown or unsupported input; never
    /// panics.
    pub fn decode(key: &[u8], value: Option<&[u8]>) -> Result<ShareGroupRecord, DecodeError> {
        let mut k = Reader::new(key);
        let record_type = k.i16()?;
        if !is_share_record_type(record_type) {
            return Err(DecodeError::UnknownRecordType(record_type));
        }
        let group_id = k.key_string()?;
        let member_id = match record_type {
            RECORD_TYPE_MEMBER_METADATA
            | RECORD_TYPE_TARGET_ASSIGNMENT_MEMBER
            | RECORD_TYPE_CURRENT_MEMBER_ASSIGNMENT => k.key_string()?,
            _ => String::new(),
        };
        k.finish()?;
        let mut v = match value {
            None => None,
            Some(bytes) => {
                let mut v = Reader::new(bytes);
                let version = v.i16()?;
                if version != VALUE_VERSION {
                    return Err(DecodeError::UnsupportedVersion {
                        record_type,
                        version,
                    });
                }
                Some(v)
            }
        };
        let record = match record_type {
            RECORD_TYPE_MEMBER_METADATA => ShareGroupRecord::MemberMetadata {
                group_id,
                member_id,
                value: v.as_mut().map(decode_member_metadata).transpose()?,
            },
            RECORD_TYPE_GROUP_METADATA => ShareGroupRecord::GroupMetadata {
                group_id,
                value: v
                    .as_mut()
                    .map(|r| -> Result<_, DecodeError> {
                        Ok(GroupMetadataValue {
                            epoch: r.i32()?,
                            metadata_hash: r.i64()?,
                        })
                    })
                    .transpose()?,
            },
            RECORD_TYPE_TARGET_ASSIGNMENT_METADATA => ShareGroupRecord::TargetAssignmentMetadata {
                group_id,
                value: v.as_mut().map(|r| r.i32()).transpose()?,
            },
            RECORD_TYPE_TARGET_ASSIGNMENT_MEMBER => ShareGroupRecord::TargetAssignmentMember {
                group_id,
                member_id,
                value: v.as_mut().map(|r| r.assignment()).transpose()?,
            },
            RECORD_TYPE_CURRENT_MEMBER_ASSIGNMENT => ShareGroupRecord::CurrentMemberAssignment {
                group_id,
                member_id,
                value: v
                    .as_mut()
                    .map(|r| -> Result<_, DecodeError> {
                        Ok(CurrentAssignmentValue {
                            member_epoch: r.i32()?,
                            previous_member_epoch: r.i32()?,
                            state: r.i8()?,
                            assigned_partitions: r.assignment()?,
                        })
                    })
                    .transpose()?,
            },
            _ => ShareGroupRecord::StatePartitionMetadata {
                group_id,
                value: v
                    .as_mut()
                    .map(decode_state_partition_metadata)
                    .transpose()?,
            },
        };
        if let Some(v) = v.as_mut() {
            v.skip_tagged_fields()?;
            v.finish()?;
        }
        Ok(record)
    }
}

fn encode_member_metadata(v: &MemberMetadataValue) -> Vec<u8> {
    let mut w = value_writer();
    w.compact_nullable_string(v.rack_id.as_deref());
    w.compact_string(&v.client_id);
    w.compact_string(&v.client_host);
    w.array_len(v.subscribed_topic_names.len());
    for name in &v.subscribed_topic_names {
        w.compact_string(name);
    }
    w.finish_struct()
}

fn decode_member_metadata(r: &mut Reader<'_>) -> Result<MemberMetadataValue, DecodeError> {
    let rack_id = r.compact_nullable_string()?;
    let client_id = r.compact_string()?;
    let client_host = r.compact_string()?;
    // A name is at least its 1-byte length.
    let count = r.array_len(1)?;
    let mut subscribed_topic_names = BTreeSet::new();
    for _ in 0..count {
        subscribed_topic_names.insert(r.compact_string()?);
    }
    Ok(MemberMetadataValue {
        rack_id,
        client_id,
        client_host,
        subscribed_topic_names,
    })
}

fn encode_state_partition_metadata(v: &StatePartitionMetadataValue) -> Vec<u8> {
    let mut w = value_writer();
    for topics in [&v.initializing_topics, &v.initialized_topics] {
        w.array_len(topics.len());
        for (topic_id, info) in topics {
            w.uuid(topic_id);
            w.compact_string(&info.topic_name);
            w.i32_array(&info.partitions);
            w.empty_tagged_fields();
        }
    }
    w.array_len(v.deleting_topics.len());
    for (topic_id, name) in &v.deleting_topics {
        w.uuid(topic_id);
        w.compact_string(name);
        w.empty_tagged_fields();
    }
    w.finish_struct()
}

fn decode_state_partition_metadata(
    r: &mut Reader<'_>,
) -> Result<StatePartitionMetadataValue, DecodeError> {
    let initializing_topics = r.topic_partitions_infos()?;
    let initialized_topics = r.topic_partitions_infos()?;
    // uuid + name length + tagged-field count.
    let count = r.array_len(18)?;
    let mut deleting_topics = BTreeMap::new();
    for _ in 0..count {
        let topic_id = r.uuid()?;
        let name = r.compact_string()?;
        r.skip_tagged_fields()?;
        deleting_topics.insert(topic_id, name);
    }
    Ok(StatePartitionMetadataValue {
        initializing_topics,
        initialized_topics,
        deleting_topics,
    })
}

// ---------------------------------------------------------------------------------------------
// Primitive encoding
// ---------------------------------------------------------------------------------------------

/// A value buffer, starting with the value version.
fn value_writer() -> Writer {
    let mut w = Writer::default();
    w.i16(VALUE_VERSION);
    w
}

/// The share-group structures on top of Kafka's encoding.
trait WriterExt {
    fn finish_struct(self) -> Vec<u8>;
    fn key_str(&mut self, s: &str) -> Result<(), EncodeError>;
    fn array_len(&mut self, n: usize);
    fn i32_array(&mut self, values: &BTreeSet<i32>);
    fn assignment(&mut self, assignment: &Assignment);
}

impl WriterExt for Writer {
    /// Closes the top-level struct with its (empty) tagged-field section.
    fn finish_struct(mut self) -> Vec<u8> {
        self.empty_tagged_fields();
        self.into_inner()
    }

    fn key_str(&mut self, s: &str) -> Result<(), EncodeError> {
        self.key_string(s)
            .map_err(|length| EncodeError::KeyStringTooLong { length })
    }

    fn array_len(&mut self, n: usize) {
        self.compact_len(n);
    }

    fn i32_array(&mut self, values: &BTreeSet<i32>) {
        self.array_len(values.len());
        for v in values {
            self.i32(*v);
        }
    }

    /// `[]TopicPartitions { TopicId uuid; Partitions []int32 }`, each closed by its tags.
    fn assignment(&mut self, assignment: &Assignment) {
        self.array_len(assignment.len());
        for (topic_id, partitions) in assignment {
            self.uuid(topic_id);
            self.i32_array(partitions);
            self.empty_tagged_fields();
        }
    }
}

trait ReaderExt {
    fn array_len(&mut self, min_element_bytes: usize) -> Result<usize, DecodeError>;
    fn i32_set(&mut self) -> Result<BTreeSet<i32>, DecodeError>;
    fn skip_tagged_fields(&mut self) -> Result<(), DecodeError>;
    fn assignment(&mut self) -> Result<Assignment, DecodeError>;
    fn topic_partitions_infos(
        &mut self,
    ) -> Result<BTreeMap<TopicId, TopicPartitionsInfo>, DecodeError>;
    fn finish(&self) -> Result<(), DecodeError>;
}

impl ReaderExt for Reader<'_> {
    /// A non-null compact array count whose elements take at least `min_element_bytes`.
    fn array_len(&mut self, min_element_bytes: usize) -> Result<usize, DecodeError> {
        self.compact_count(min_element_bytes)
    }

    fn i32_set(&mut self) -> Result<BTreeSet<i32>, DecodeError> {
        let count = self.array_len(4)?;
        let mut out = BTreeSet::new();
        for _ in 0..count {
            out.insert(self.i32()?);
        }
        Ok(out)
    }

    /// Skips a tagged-field section: no share-group record defines tags, unknown ones are
    /// ignored as Kafka does.
    fn skip_tagged_fields(&mut self) -> Result<(), DecodeError> {
        self.tagged_fields::<DecodeError>(|_, _| Ok(()))
    }

    fn assignment(&mut self) -> Result<Assignment, DecodeError> {
        // uuid + partition count + tagged-field count.
        let count = self.array_len(18)?;
        let mut out = Assignment::new();
        for _ in 0..count {
            let topic_id = self.uuid()?;
            let partitions = self.i32_set()?;
            self.skip_tagged_fields()?;
            out.entry(topic_id).or_default().extend(partitions);
        }
        Ok(out)
    }

    fn topic_partitions_infos(
        &mut self,
    ) -> Result<BTreeMap<TopicId, TopicPartitionsInfo>, DecodeError> {
        // uuid + name length + partition count + tagged-field count.
        let count = self.array_len(19)?;
        let mut out: BTreeMap<TopicId, TopicPartitionsInfo> = BTreeMap::new();
        for _ in 0..count {
            let topic_id = self.uuid()?;
            let topic_name = self.compact_string()?;
            let partitions = self.i32_set()?;
            self.skip_tagged_fields()?;
            let info = out.entry(topic_id).or_default();
            info.topic_name = topic_name;
            info.partitions.extend(partitions);
        }
        Ok(out)
    }

    fn finish(&self) -> Result<(), DecodeError> {
        self.trailing()
    }
}
