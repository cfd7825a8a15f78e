//! Records the classic group coordinator writes to `__consumer_offsets`, and their encoding.
//!
//! Framing follows Kafka's coordinator records: key = `[i16 record type][key fields]`,
//! value = `[i16 value version][value fields]`, a tombstone has no value. The field encoding is
//! Shoal's own (big-endian integers; strings and bytes as `i32` length + data, -1 = null), so
//! Kafka tools cannot read these records. Decoding never panics and never allocates more than
//! the input could describe.

use bytes::Bytes;
use shoal_codec::wire::{Reader, Writer};

/// Key type of an offset commit (Kafka uses 0 and 1 for OffsetCommitKey).
pub const RECORD_TYPE_OFFSET_COMMIT: i16 = 1;
/// Key type of group metadata (Kafka's GroupMetadataKey).
pub const RECORD_TYPE_GROUP_METADATA: i16 = 2;
/// Key type of an offset committed inside a transaction, pending its marker (Kafka writes an
/// OffsetCommit record in a transactional batch; Shoal names the producer in the record).
pub const RECORD_TYPE_PENDING_OFFSET_COMMIT: i16 = 3;
/// Current value version of both record types.
pub const VALUE_VERSION: i16 = 0;

/// One member as persisted in a [`GroupMetadataValue`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberMetadataValue {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub rebalance_timeout_ms: i32,
    pub session_timeout_ms: i32,
    /// The member's metadata for the group's chosen protocol.
    pub subscription: Bytes,
    pub assignment: Bytes,
}

/// A group's membership as of its last completed generation (Kafka's GroupMetadataValue).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupMetadataValue {
    pub protocol_type: Option<String>,
    pub generation: i32,
    pub protocol_name: Option<String>,
    pub leader: Option<String>,
    /// When the group entered its current state; offsets of an Empty group expire from here.
    pub current_state_timestamp_ms: i64,
    pub members: Vec<MemberMetadataValue>,
}

/// A committed offset as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommittedOffset {
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: String,
    pub commit_timestamp_ms: i64,
}

/// Every durable change of the classic group coordinator.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum GroupRecord {
    OffsetCommit {
        group_id: String,
        topic: String,
        partition: i32,
        offset: i64,
        leader_epoch: i32,
        metadata: String,
        commit_timestamp_ms: i64,
    },
    OffsetTombstone {
        group_id: String,
        topic: String,
        partition: i32,
    },
    GroupMetadata {
        group_id: String,
        value: GroupMetadataValue,
    },
    GroupTombstone {
        group_id: String,
    },
    /// An offset committed by a transaction (TxnOffsetCommit): visible only once the producer's
    /// COMMIT marker reaches the group's `__consumer_offsets` partition, dropped on ABORT.
    PendingOffsetCommit {
        group_id: String,
        producer_id: i64,
        producer_epoch: i16,
        topic: String,
        partition: i32,
        offset: i64,
        leader_epoch: i32,
        metadata: String,
        commit_timestamp_ms: i64,
    },
}

/// Why a stored record could not be decoded (the one decode error of Kafka-encoded bytes).
pub use shoal_codec::DecodeError;

impl GroupRecord {
    /// The group this record belongs to.
    pub fn group_id(&self) -> &str {
        match self {
            GroupRecord::OffsetCommit { group_id, .. }
            | GroupRecord::OffsetTombstone { group_id, .. }
            | GroupRecord::GroupMetadata { group_id, .. }
            | GroupRecord::GroupTombstone { group_id }
            | GroupRecord::PendingOffsetCommit { group_id, .. } => group_id,
        }
    }

    /// Encodes as (key, value); a tombstone has no value.
    ///
    /// # Panics
    /// If a string or byte field is 2 GiB or longer, which request size limits rule out.
    pub fn encode(&self) -> (Vec<u8>, Option<Vec<u8>>) {
        let mut key = Writer::default();
        match self {
            GroupRecord::OffsetCommit {
                group_id,
                topic,
                partition,
                offset,
                leader_epoch,
                metadata,
                commit_timestamp_ms,
            } => {
                offset_key(&mut key, group_id, topic, *partition);
                let mut value = Writer::default();
                value.i16(VALUE_VERSION);
                value.i64(*offset);
                value.i32(*leader_epoch);
                value.string_i32(metadata);
                value.i64(*commit_timestamp_ms);
                (key.into_inner(), Some(value.into_inner()))
            }
            GroupRecord::OffsetTombstone {
                group_id,
                topic,
                partition,
            } => {
                offset_key(&mut key, group_id, topic, *partition);
                (key.into_inner(), None)
            }
            GroupRecord::GroupMetadata { group_id, value: v } => {
                key.i16(RECORD_TYPE_GROUP_METADATA);
                key.string_i32(group_id);
                let mut value = Writer::default();
                value.i16(VALUE_VERSION);
                value.nullable_string_i32(v.protocol_type.as_deref());
                value.i32(v.generation);
                value.nullable_string_i32(v.protocol_name.as_deref());
                value.nullable_string_i32(v.leader.as_deref());
                value.i64(v.current_state_timestamp_ms);
                value.len_i32(v.members.len());
                for m in &v.members {
                    value.string_i32(&m.member_id);
                    value.nullable_string_i32(m.group_instance_id.as_deref());
                    value.string_i32(&m.client_id);
                    value.string_i32(&m.client_host);
                    value.i32(m.rebalance_timeout_ms);
                    value.i32(m.session_timeout_ms);
                    value.bytes_i32(&m.subscription);
                    value.bytes_i32(&m.assignment);
                }
                (key.into_inner(), Some(value.into_inner()))
            }
            GroupRecord::GroupTombstone { group_id } => {
                key.i16(RECORD_TYPE_GROUP_METADATA);
                key.string_i32(group_id);
                (key.into_inner(), None)
            }
            GroupRecord::PendingOffsetCommit {
                group_id,
                producer_id,
                producer_epoch,
                topic,
                partition,
                offset,
                leader_epoch,
                metadata,
                commit_timestamp_ms,
            } => {
                key.i16(RECORD_TYPE_PENDING_OFFSET_COMMIT);
                key.string_i32(group_id);
                key.string_i32(topic);
                key.i32(*partition);
                key.i64(*producer_id);
                let mut value = Writer::default();
                value.i16(VALUE_VERSION);
                value.i16(*producer_epoch);
                value.i64(*offset);
                value.i32(*leader_epoch);
                value.string_i32(metadata);
                value.i64(*commit_timestamp_ms);
                (key.into_inner(), Some(value.into_inner()))
            }
        }
    }

    /// Decodes a record read back from `__consumer_offsets`.
    ///
    /// # Errors
    /// [`DecodeError`] for any malformed, truncated or unknown input; never panics.
    pub fn decode(key: &[u8], value: Option<&[u8]>) -> Result<GroupRecord, DecodeError> {
        let mut k = Reader::new(key);
        let record_type = k.i16()?;
        match record_type {
            RECORD_TYPE_OFFSET_COMMIT => {
                let group_id = k.string_i32()?;
                let topic = k.string_i32()?;
                let partition = k.i32()?;
                k.trailing()?;
                let Some(value) = value else {
                    return Ok(GroupRecord::OffsetTombstone {
                        group_id,
                        topic,
                        partition,
                    });
                };
                let mut v = Reader::new(value);
                let version = v.i16()?;
                if version != VALUE_VERSION {
                    return Err(DecodeError::UnsupportedVersion {
                        record_type,
                        version,
                    });
                }
                let offset = v.i64()?;
                let leader_epoch = v.i32()?;
                let metadata = v.string_i32()?;
                let commit_timestamp_ms = v.i64()?;
                v.trailing()?;
                Ok(GroupRecord::OffsetCommit {
                    group_id,
                    topic,
                    partition,
                    offset,
                    leader_epoch,
                    metadata,
                    commit_timestamp_ms,
                })
            }
            RECORD_TYPE_GROUP_METADATA => {
                let group_id = k.string_i32()?;
                k.trailing()?;
                let Some(value) = value else {
                    return Ok(GroupRecord::GroupTombstone { group_id });
                };
                let mut v = Reader::new(value);
                let version = v.i16()?;
                if version != VALUE_VERSION {
                    return Err(DecodeError::UnsupportedVersion {
                        record_type,
                        version,
                    });
                }
                let protocol_type = v.nullable_string_i32()?;
                let generation = v.i32()?;
                let protocol_name = v.nullable_string_i32()?;
                let leader = v.nullable_string_i32()?;
                let current_state_timestamp_ms = v.i64()?;
                // A member needs at least 4 strings + 2 i32 + 2 byte arrays = 32 bytes.
                let count = v.count_i32(32)?;
                let mut members = Vec::with_capacity(count);
                for _ in 0..count {
                    members.push(MemberMetadataValue {
                        member_id: v.string_i32()?,
                        group_instance_id: v.nullable_string_i32()?,
                        client_id: v.string_i32()?,
                        client_host: v.string_i32()?,
                        rebalance_timeout_ms: v.i32()?,
                        session_timeout_ms: v.i32()?,
                        subscription: Bytes::copy_from_slice(v.bytes_i32()?),
                        assignment: Bytes::copy_from_slice(v.bytes_i32()?),
                    });
                }
                v.trailing()?;
                Ok(GroupRecord::GroupMetadata {
                    group_id,
                    value: GroupMetadataValue {
                        protocol_type,
                        generation,
                        protocol_name,
                        leader,
                        current_state_timestamp_ms,
                        members,
                    },
                })
            }
            RECORD_TYPE_PENDING_OFFSET_COMMIT => {
                let group_id = k.string_i32()?;
                let topic = k.string_i32()?;
                let partition = k.i32()?;
                let producer_id = k.i64()?;
                k.trailing()?;
                let Some(value) = value else {
                    return Err(DecodeError::UnexpectedNull { at: 0 });
                };
                let mut v = Reader::new(value);
                let version = v.i16()?;
                if version != VALUE_VERSION {
                    return Err(DecodeError::UnsupportedVersion {
                        record_type,
                        version,
                    });
                }
                let record = GroupRecord::PendingOffsetCommit {
                    group_id,
                    producer_id,
                    producer_epoch: v.i16()?,
                    topic,
                    partition,
                    offset: v.i64()?,
                    leader_epoch: v.i32()?,
                    metadata: v.string_i32()?,
                    commit_timestamp_ms: v.i64()?,
                };
                v.trailing()?;
                Ok(record)
            }
            other => Err(DecodeError::UnknownRecordType(other)),
        }
    }
}

fn offset_key(w: &mut Writer, group_id: &str, topic: &str, partition: i32) {
    w.i16(RECORD_TYPE_OFFSET_COMMIT);
    w.string_i32(group_id);
    w.string_i32(topic);
    w.i32(partition);
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn opt_string() -> impl Strategy<Value = Option<String>> {
        proptest::option::of(".{0,8}")
    }

    fn bytes() -> impl Strategy<Value = Bytes> {
        proptest::collection::vec(any::<u8>(), 0..16).prop_map(Bytes::from)
    }

    fn member() -> impl Strategy<Value = MemberMetadataValue> {
        (
            ".{0,8}",
            opt_string(),
            ".{0,8}",
            ".{0,8}",
            any::<i32>(),
            any::<i32>(),
            bytes(),
            bytes(),
        )
            .prop_map(|(m, i, c, h, r, s, sub, a)| MemberMetadataValue {
                member_id: m,
                group_instance_id: i,
                client_id: c,
                client_host: h,
                rebalance_timeout_ms: r,
                session_timeout_ms: s,
                subscription: sub,
                assignment: a,
            })
    }

    fn record() -> impl Strategy<Value = GroupRecord> {
        prop_oneof![
            (
                ".{0,8}",
                ".{0,8}",
                any::<i32>(),
                any::<i64>(),
                any::<i32>(),
                ".{0,8}",
                any::<i64>()
            )
                .prop_map(|(g, t, p, o, e, m, ts)| GroupRecord::OffsetCommit {
                    group_id: g,
                    topic: t,
                    partition: p,
                    offset: o,
                    leader_epoch: e,
                    metadata: m,
                    commit_timestamp_ms: ts,
                }),
            (".{0,8}", ".{0,8}", any::<i32>()).prop_map(|(g, t, p)| {
                GroupRecord::OffsetTombstone {
                    group_id: g,
                    topic: t,
                    partition: p,
                }
            }),
            (
                ".{0,8}",
                opt_string(),
                any::<i32>(),
                opt_string(),
                opt_string(),
                any::<i64>(),
                proptest::collection::vec(member(), 0..4)
            )
                .prop_map(|(g, pt, gen, pn, l, ts, members)| {
                    GroupRecord::GroupMetadata {
                        group_id: g,
                        value: GroupMetadataValue {
                            protocol_type: pt,
                            generation: gen,
                            protocol_name: pn,
                            leader: l,
                            current_state_timestamp_ms: ts,
                            members,
                        },
                    }
                }),
            ".{0,8}".prop_map(|g| GroupRecord::GroupTombstone { group_id: g }),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig {
            failure_persistence: None,
            ..ProptestConfig::default()
        })]

        #[test]
        fn records_round_trip(rec in record()) {
            let (key, value) = rec.encode();
            let back = GroupRecord::decode(&key, value.as_deref());
            prop_assert_eq!(back, Ok(rec));
        }

        #[test]
        fn decode_arbitrary_bytes_never_panics(
            key in proptest::collection::vec(any::<u8>(), 0..64),
            value in proptest::option::of(proptest::collection::vec(any::<u8>(), 0..128)),
        ) {
            let _ = GroupRecord::decode(&key, value.as_deref());
        }

        #[test]
        fn decode_mutated_records_never_panics(
            rec in record(),
            flip in any::<usize>(),
            byte in any::<u8>(),
            cut in any::<usize>(),
        ) {
            let (key, value) = rec.encode();
            if let Some(mut value) = value {
                if !value.is_empty() {
                    let i = flip % value.len();
                    value[i] = byte;
                    value.truncate(cut % (value.len() + 1));
                }
                let _ = GroupRecord::decode(&key, Some(&value));
            }
            let mut key = key;
            let i = flip % key.len();
            key[i] = byte;
            let _ = GroupRecord::decode(&key, None);
        }
    }

    #[test]
    fn key_shape_follows_kafka() {
        let rec = GroupRecord::GroupTombstone {
            group_id: "g".into(),
        };
        let (key, value) = rec.encode();
        assert_eq!(&key[..2], &RECORD_TYPE_GROUP_METADATA.to_be_bytes());
        assert!(value.is_none());
        assert_eq!(
            GroupRecord::decode(&[0, 9], None),
            Err(DecodeError::UnknownRecordType(9))
        );
        let (key, value) = GroupRecord::OffsetCommit {
            group_id: "g".into(),
            topic: "t".into(),
            partition: 0,
            offset: 1,
            leader_epoch: -1,
            metadata: String::new(),
            commit_timestamp_ms: 0,
        }
        .encode();
        let mut value = value.expect("offset commit has a value");
        value[..2].copy_from_slice(&7i16.to_be_bytes());
        assert_eq!(
            GroupRecord::decode(&key, Some(&value)),
            Err(DecodeError::UnsupportedVersion {
                record_type: RECORD_TYPE_OFFSET_COMMIT,
                version: 7
            })
        );
    }
}
