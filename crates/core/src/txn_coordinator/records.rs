//! Records the transaction coordinator writes to `__transaction_state`, and their encoding.
//!
//! Framing follows Kafka's TransactionLog: key = `[i16 key version 0][string transactional id]`,
//! value = `[i16 value version][fields]`, a tombstone has no value. The field encoding is
//! Shoal's own (big-endian integers; strings as `i32` length + UTF-8), so Kafka tools cannot
//! read these records. Decoding never panics and never allocates more than the input could
//! describe; it accepts only states that are ever written (not Dead or PrepareEpochFence) and
//! only canonical partition lists (sorted, distinct).
//!
//! Value version 1 is version 0 followed by a tagged-field section (Kafka's encoding: unsigned
//! varint count, then tag, size and bytes per field); unknown tags are skipped, as Kafka skips
//! them. Its one field, tag [`ONGOING_PRODUCER_EPOCH_TAG`], is
//! [`TransactionLogValue::ongoing_producer_epoch`]. A value without it is written as version 0,
//! byte for byte what earlier releases wrote, so only a kept prepared transaction needs a
//! reader that knows version 1.
//!
//! A second key version (1) holds Shoal's own [`TxnRecord::Markers`]: the markers of a
//! transactional id's completed transactions that may not be durable on their partitions yet,
//! with their offsets, so a restart can tell which were lost and write them again.

use std::collections::BTreeSet;

use shoal_codec::wire::{Reader, Writer};

use super::types::{
    ProducerEpoch, ProducerId, TopicPartition, TransactionResult, TransactionState,
    TransactionVersion, NO_PRODUCER_EPOCH,
};

/// Version of the key layout.
pub const KEY_VERSION: i16 = 0;
/// Key version of [`TxnRecord::Markers`] (same layout, another record kind).
pub const MARKERS_KEY_VERSION: i16 = 1;
/// Value version of every record without tagged fields (and of every markers record).
pub const VALUE_VERSION: i16 = 0;
/// Value version of a transaction record that carries tagged fields.
pub const TAGGED_VALUE_VERSION: i16 = 1;
/// Tag of [`TransactionLogValue::ongoing_producer_epoch`] (an `i16`) in a version-1 value.
pub const ONGOING_PRODUCER_EPOCH_TAG: u32 = 0;

/// One transactional id's durable state (Kafka's `TransactionLogValue` plus its key's id).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TransactionLogValue {
    pub producer_id: ProducerId,
    /// The id before the last rotation (epoch exhaustion), -1 if none; lets a retry that
    /// spanned the rotation be recognised.
    pub prev_producer_id: ProducerId,
    /// TV2: the id a PrepareCommit/PrepareAbort at an exhausted epoch switches to on
    /// completion; -1 otherwise.
    pub next_producer_id: ProducerId,
    pub producer_epoch: ProducerEpoch,
    /// The epoch a retrying producer may still present (-1 when none).
    pub last_producer_epoch: ProducerEpoch,
    pub txn_timeout_ms: i32,
    pub state: TransactionState,
    pub partitions: BTreeSet<TopicPartition>,
    /// -1 when no transaction is running.
    pub txn_start_timestamp_ms: i64,
    pub txn_last_update_timestamp_ms: i64,
    pub client_transaction_version: TransactionVersion,
    /// KIP-939: the epoch the Ongoing transaction's records were written with, once an
    /// InitProducerId with `KeepPreparedTxn` has kept it (`producer_epoch` is then the later,
    /// fencing epoch of the incarnation that took it over); -1 otherwise. Every later keep
    /// answers it as OngoingTxnProducerEpoch, so the application's token keeps naming the
    /// transaction. Tagged field [`ONGOING_PRODUCER_EPOCH_TAG`].
    pub ongoing_producer_epoch: ProducerEpoch,
}

impl TransactionLogValue {
    /// Whether this id's transactions are two-phase-commit ones (KIP-939): decided by an
    /// external transaction manager, never timed out.
    pub fn is_two_phase_commit(&self) -> bool {
        self.txn_timeout_ms == super::TWO_PHASE_COMMIT_TIMEOUT_MS
    }

    /// The epoch the current transaction's records were written with: the kept one's
    /// ([`ongoing_producer_epoch`](Self::ongoing_producer_epoch)) after a `KeepPreparedTxn`,
    /// else `producer_epoch`.
    pub fn transaction_epoch(&self) -> ProducerEpoch {
        if self.ongoing_producer_epoch.0 == NO_PRODUCER_EPOCH {
            self.producer_epoch
        } else {
            self.ongoing_producer_epoch
        }
    }
}

/// A COMMIT/ABORT marker appended to a data partition, not known to be fsynced yet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingMarker {
    pub partition: TopicPartition,
    /// Where the marker was appended: it survived a crash iff the partition's log end offset
    /// after recovery is past it (recovery keeps a prefix of the log).
    pub offset: i64,
    pub producer_id: ProducerId,
    pub producer_epoch: ProducerEpoch,
    pub result: TransactionResult,
}

/// Every durable change of the transaction coordinator.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum TxnRecord {
    Transaction {
        transactional_id: String,
        value: TransactionLogValue,
    },
    /// The id expired (Kafka writes a tombstone after the in-memory Dead transition).
    Tombstone { transactional_id: String },
    /// Markers of this id's completed transactions that may not be durable yet; replaces the
    /// id's previous such record (an empty list is stored as a tombstone of this key). Written
    /// in the same fsync as, and before, the Complete record it accompanies. Not part of the
    /// machine's state: the broker's driver reads it at load.
    Markers {
        transactional_id: String,
        markers: Vec<PendingMarker>,
    },
}

/// Why a stored record could not be decoded (the one decode error of Kafka-encoded bytes).
pub use shoal_codec::DecodeError;

impl TxnRecord {
    pub fn transactional_id(&self) -> &str {
        match self {
            TxnRecord::Transaction {
                transactional_id, ..
            }
            | TxnRecord::Tombstone { transactional_id }
            | TxnRecord::Markers {
                transactional_id, ..
            } => transactional_id,
        }
    }

    /// Encodes as (key, value); a tombstone has no value.
    ///
    /// # Panics
    /// If a string is 2 GiB or longer or a partition set has more than `i32::MAX` entries,
    /// which request size limits rule out; or (debug) on a state that is never stored.
    pub fn encode(&self) -> (Vec<u8>, Option<Vec<u8>>) {
        let mut key = Writer::default();
        key.i16(match self {
            TxnRecord::Markers { .. } => MARKERS_KEY_VERSION,
            _ => KEY_VERSION,
        });
        key.string_i32(self.transactional_id());
        match self {
            TxnRecord::Tombstone { .. } => (key.into_inner(), None),
            TxnRecord::Markers { markers, .. } if markers.is_empty() => (key.into_inner(), None),
            TxnRecord::Markers { markers, .. } => {
                let mut w = Writer::default();
                w.i16(VALUE_VERSION);
                w.len_i32(markers.len());
                for m in markers {
                    w.string_i32(&m.partition.topic);
                    w.i32(m.partition.partition);
                    w.i64(m.offset);
                    w.i64(m.producer_id.0);
                    w.i16(m.producer_epoch.0);
                    w.i8(i8::from(m.result.is_commit()));
                }
                (key.into_inner(), Some(w.into_inner()))
            }
            TxnRecord::Transaction { value: v, .. } => {
                debug_assert!(
                    !matches!(
                        v.state,
                        TransactionState::Dead | TransactionState::PrepareEpochFence
                    ),
                    "state {:?} is never stored",
                    v.state
                );
                let tagged = v.ongoing_producer_epoch.0 != NO_PRODUCER_EPOCH;
                let mut w = Writer::default();
                w.i16(if tagged {
                    TAGGED_VALUE_VERSION
                } else {
                    VALUE_VERSION
                });
                w.i64(v.producer_id.0);
                w.i64(v.prev_producer_id.0);
                w.i64(v.next_producer_id.0);
                w.i16(v.producer_epoch.0);
                w.i16(v.last_producer_epoch.0);
                w.i32(v.txn_timeout_ms);
                w.i8(v.state.id());
                // Grouped by topic, as Kafka's value is; the set is already sorted.
                let mut topics: Vec<(&str, Vec<i32>)> = Vec::new();
                for tp in &v.partitions {
                    match topics.last_mut() {
                        Some((t, ps)) if *t == tp.topic => ps.push(tp.partition),
                        _ => topics.push((&tp.topic, vec![tp.partition])),
                    }
                }
                w.len_i32(topics.len());
                for (topic, ps) in topics {
                    w.string_i32(topic);
                    w.len_i32(ps.len());
                    for p in ps {
                        w.i32(p);
                    }
                }
                w.i64(v.txn_last_update_timestamp_ms);
                w.i64(v.txn_start_timestamp_ms);
                w.i8(v.client_transaction_version.level());
                if tagged {
                    w.unsigned_varint(1);
                    w.unsigned_varint(u64::from(ONGOING_PRODUCER_EPOCH_TAG));
                    w.unsigned_varint(2);
                    w.i16(v.ongoing_producer_epoch.0);
                }
                (key.into_inner(), Some(w.into_inner()))
            }
        }
    }

    /// Decodes a (key, value) pair read from `__transaction_state`.
    ///
    /// # Errors
    /// Any malformed, truncated or over-long input, unknown versions, states that are never
    /// stored and non-canonical partition lists.
    pub fn decode(key: &[u8], value: Option<&[u8]>) -> Result<TxnRecord, DecodeError> {
        let mut k = Reader::new(key);
        let key_version = k.i16()?;
        if key_version != KEY_VERSION && key_version != MARKERS_KEY_VERSION {
            return Err(DecodeError::UnsupportedKeyVersion(key_version));
        }
        let transactional_id = k.string_i32()?;
        k.trailing()?;
        if key_version == MARKERS_KEY_VERSION {
            let markers = match value {
                None => Vec::new(),
                Some(value) => decode_markers(value)?,
            };
            return Ok(TxnRecord::Markers {
                transactional_id,
                markers,
            });
        }
        let Some(value) = value else {
            return Ok(TxnRecord::Tombstone { transactional_id });
        };
        let mut r = Reader::new(value);
        let version = r.i16()?;
        if version != VALUE_VERSION && version != TAGGED_VALUE_VERSION {
            return Err(DecodeError::UnsupportedVersion {
                record_type: KEY_VERSION,
                version,
            });
        }
        let producer_id = ProducerId(r.i64()?);
        let prev_producer_id = ProducerId(r.i64()?);
        let next_producer_id = ProducerId(r.i64()?);
        let producer_epoch = ProducerEpoch(r.i16()?);
        let last_producer_epoch = ProducerEpoch(r.i16()?);
        let txn_timeout_ms = r.i32()?;
        let state_id = r.i8()?;
        let state = match TransactionState::from_id(state_id) {
            Some(TransactionState::Dead | TransactionState::PrepareEpochFence) | None => {
                return Err(DecodeError::InvalidValue {
                    what: "stored transaction state",
                    value: i64::from(state_id),
                })
            }
            Some(s) => s,
        };
        let mut partitions = BTreeSet::new();
        // A topic takes at least 8 bytes (empty name, zero partitions).
        let topics = r.count_i32(8)?;
        for _ in 0..topics {
            let at = r.position();
            let topic = r.string_i32()?;
            let count = r.count_i32(4)?;
            for _ in 0..count {
                let tp = TopicPartition {
                    topic: topic.clone(),
                    partition: r.i32()?,
                };
                if partitions.last().is_some_and(|last| *last >= tp) {
                    return Err(DecodeError::NonCanonical {
                        at,
                        what: "partitions",
                    });
                }
                partitions.insert(tp);
            }
            if count == 0 {
                return Err(DecodeError::NonCanonical {
                    at,
                    what: "partitions",
                });
            }
        }
        let txn_last_update_timestamp_ms = r.i64()?;
        let txn_start_timestamp_ms = r.i64()?;
        let level = r.i8()?;
        let client_transaction_version =
            TransactionVersion::from_level(level).ok_or(DecodeError::InvalidValue {
                what: "transaction version",
                value: i64::from(level),
            })?;
        let mut ongoing_producer_epoch = ProducerEpoch(NO_PRODUCER_EPOCH);
        if version == TAGGED_VALUE_VERSION {
            r.tagged_fields(|tag, data: &[u8]| {
                if tag == ONGOING_PRODUCER_EPOCH_TAG {
                    let bytes: [u8; 2] =
                        data.try_into()
                            .map_err(|_| DecodeError::InvalidTaggedFieldSize {
                                tag,
                                size: data.len(),
                                expected: 2,
                            })?;
                    ongoing_producer_epoch = ProducerEpoch(i16::from_be_bytes(bytes));
                }
                Ok::<(), DecodeError>(())
            })?;
        }
        r.trailing()?;
        Ok(TxnRecord::Transaction {
            transactional_id,
            value: TransactionLogValue {
                producer_id,
                prev_producer_id,
                next_producer_id,
                producer_epoch,
                last_producer_epoch,
                txn_timeout_ms,
                state,
                partitions,
                txn_start_timestamp_ms,
                txn_last_update_timestamp_ms,
                client_transaction_version,
                ongoing_producer_epoch,
            },
        })
    }
}

/// The value of a [`TxnRecord::Markers`] record (never empty: that is a tombstone).
fn decode_markers(value: &[u8]) -> Result<Vec<PendingMarker>, DecodeError> {
    let mut r = Reader::new(value);
    let version = r.i16()?;
    if version != VALUE_VERSION {
        return Err(DecodeError::UnsupportedVersion {
            record_type: MARKERS_KEY_VERSION,
            version,
        });
    }
    // topic length, partition, offset, producer id, epoch, result.
    let at = r.position();
    let count = r.count_i32(4 + 4 + 8 + 8 + 2 + 1)?;
    if count == 0 {
        return Err(DecodeError::InvalidLength { at, length: 0 });
    }
    let mut markers = Vec::with_capacity(count);
    for _ in 0..count {
        let topic = r.string_i32()?;
        let partition = TopicPartition {
            topic,
            partition: r.i32()?,
        };
        let offset = r.i64()?;
        let producer_id = ProducerId(r.i64()?);
        let producer_epoch = ProducerEpoch(r.i16()?);
        let result = match r.i8()? {
            0 => TransactionResult::Abort,
            1 => TransactionResult::Commit,
            other => {
                return Err(DecodeError::InvalidValue {
                    what: "transaction result",
                    value: i64::from(other),
                })
            }
        };
        markers.push(PendingMarker {
            partition,
            offset,
            producer_id,
            producer_epoch,
            result,
        });
    }
    r.trailing()?;
    Ok(markers)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn value() -> impl Strategy<Value = TransactionLogValue> {
        let state = prop_oneof![
            Just(TransactionState::Empty),
            Just(TransactionState::Ongoing),
            Just(TransactionState::PrepareCommit),
            Just(TransactionState::PrepareAbort),
            Just(TransactionState::CompleteCommit),
            Just(TransactionState::CompleteAbort),
        ];
        let tv = prop_oneof![
            Just(TransactionVersion::Tv0),
            Just(TransactionVersion::Tv1),
            Just(TransactionVersion::Tv2),
        ];
        let partitions = proptest::collection::btree_set(
            ("[a-c_]{0,3}", -2..5i32).prop_map(|(t, p)| TopicPartition::new(t, p)),
            0..6,
        );
        (
            (any::<i64>(), any::<i64>(), any::<i64>()),
            (any::<i16>(), any::<i16>(), any::<i32>()),
            state,
            partitions,
            (any::<i64>(), any::<i64>()),
            (tv, prop_oneof![Just(NO_PRODUCER_EPOCH), any::<i16>()]),
        )
            .prop_map(
                |(
                    (pid, prev, next),
                    (ep, last, timeout),
                    state,
                    partitions,
                    (start, upd),
                    (tv, ongoing),
                )| {
                    TransactionLogValue {
                        producer_id: ProducerId(pid),
                        prev_producer_id: ProducerId(prev),
                        next_producer_id: ProducerId(next),
                        producer_epoch: ProducerEpoch(ep),
                        last_producer_epoch: ProducerEpoch(last),
                        txn_timeout_ms: timeout,
                        state,
                        partitions,
                        txn_start_timestamp_ms: start,
                        txn_last_update_timestamp_ms: upd,
                        client_transaction_version: tv,
                        ongoing_producer_epoch: ProducerEpoch(ongoing),
                    }
                },
            )
    }

    fn record() -> impl Strategy<Value = TxnRecord> {
        prop_oneof![
            (".{0,8}", value()).prop_map(|(id, value)| TxnRecord::Transaction {
                transactional_id: id,
                value
            }),
            ".{0,8}".prop_map(|id| TxnRecord::Tombstone {
                transactional_id: id
            }),
            (".{0,8}", proptest::collection::vec(pending_marker(), 0..4)).prop_map(
                |(id, markers)| TxnRecord::Markers {
                    transactional_id: id,
                    markers
                }
            ),
        ]
    }

    fn pending_marker() -> impl Strategy<Value = PendingMarker> {
        (
            ("[a-c_]{0,3}", any::<i32>()),
            any::<i64>(),
            any::<i64>(),
            any::<i16>(),
            any::<bool>(),
        )
            .prop_map(|((t, p), offset, pid, epoch, commit)| PendingMarker {
                partition: TopicPartition::new(t, p),
                offset,
                producer_id: ProducerId(pid),
                producer_epoch: ProducerEpoch(epoch),
                result: TransactionResult::from_committed(commit),
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig {
            failure_persistence: None,
            ..ProptestConfig::default()
        })]

        #[test]
        fn records_round_trip(rec in record()) {
            let (key, value) = rec.encode();
            prop_assert_eq!(TxnRecord::decode(&key, value.as_deref()), Ok(rec));
        }

        #[test]
        fn decode_arbitrary_bytes_never_panics(
            key in proptest::collection::vec(any::<u8>(), 0..32),
            value in proptest::option::of(proptest::collection::vec(any::<u8>(), 0..128)),
        ) {
            let _ = TxnRecord::decode(&key, value.as_deref());
        }

        #[test]
        fn decode_mutated_records_never_panics(
            rec in record(),
            flip in any::<usize>(),
            byte in any::<u8>(),
            cut in any::<usize>(),
        ) {
            let (mut key, value) = rec.encode();
            if let Some(mut value) = value {
                let i = flip % value.len();
                value[i] = byte;
                value.truncate(cut % (value.len() + 1));
                let _ = TxnRecord::decode(&key, Some(&value));
            }
            let i = flip % key.len();
            key[i] = byte;
            let _ = TxnRecord::decode(&key, None);
        }
    }

    #[test]
    fn rejects_states_never_stored_and_bad_versions() {
        let v = TransactionLogValue {
            producer_id: ProducerId(1),
            prev_producer_id: ProducerId(-1),
            next_producer_id: ProducerId(-1),
            producer_epoch: ProducerEpoch(0),
            last_producer_epoch: ProducerEpoch(-1),
            txn_timeout_ms: 1000,
            state: TransactionState::Ongoing,
            partitions: [TopicPartition::new("t", 0), TopicPartition::new("t", 1)]
                .into_iter()
                .collect(),
            txn_start_timestamp_ms: 5,
            txn_last_update_timestamp_ms: 6,
            client_transaction_version: TransactionVersion::Tv2,
            ongoing_producer_epoch: ProducerEpoch(NO_PRODUCER_EPOCH),
        };
        let rec = TxnRecord::Transaction {
            transactional_id: "x".into(),
            value: v,
        };
        let (key, value) = rec.encode();
        assert_eq!(&key[..2], &KEY_VERSION.to_be_bytes());
        let mut value = value.expect("value");
        // state byte sits after version, 3 ids, 2 epochs and the timeout.
        let state_at = 2 + 24 + 4 + 4;
        assert_eq!(value[state_at], 1);
        value[state_at] = 7;
        assert_eq!(
            TxnRecord::decode(&key, Some(&value)),
            Err(DecodeError::InvalidValue {
                what: "stored transaction state",
                value: 7
            })
        );
        value[..2].copy_from_slice(&3i16.to_be_bytes());
        assert_eq!(
            TxnRecord::decode(&key, Some(&value)),
            Err(DecodeError::UnsupportedVersion {
                record_type: KEY_VERSION,
                version: 3
            })
        );
        assert_eq!(
            TxnRecord::decode(&[0, 2, 0, 0, 0, 0], None),
            Err(DecodeError::UnsupportedKeyVersion(2))
        );
    }

    /// The ongoing epoch of a kept prepared transaction is a tagged field of value version 1;
    /// without it the value is version 0, as earlier releases wrote it.
    #[test]
    fn the_ongoing_epoch_is_a_tagged_field_of_version_1() {
        let mut v = TransactionLogValue {
            producer_id: ProducerId(1),
            prev_producer_id: ProducerId(-1),
            next_producer_id: ProducerId(-1),
            producer_epoch: ProducerEpoch(4),
            last_producer_epoch: ProducerEpoch(-1),
            txn_timeout_ms: super::super::TWO_PHASE_COMMIT_TIMEOUT_MS,
            state: TransactionState::Ongoing,
            partitions: [TopicPartition::new("t", 0)].into_iter().collect(),
            txn_start_timestamp_ms: 5,
            txn_last_update_timestamp_ms: 6,
            client_transaction_version: TransactionVersion::Tv2,
            ongoing_producer_epoch: ProducerEpoch(NO_PRODUCER_EPOCH),
        };
        let rec = |v: &TransactionLogValue| TxnRecord::Transaction {
            transactional_id: "x".into(),
            value: v.clone(),
        };
        let (key, plain) = rec(&v).encode();
        let plain = plain.expect("value");
        assert_eq!(&plain[..2], &VALUE_VERSION.to_be_bytes());

        v.ongoing_producer_epoch = ProducerEpoch(2);
        let (_, tagged) = rec(&v).encode();
        let tagged = tagged.expect("value");
        assert_eq!(&tagged[..2], &TAGGED_VALUE_VERSION.to_be_bytes());
        // Version 0's fields, then one tagged field: tag 0, size 2, the epoch.
        assert_eq!(&tagged[2..plain.len()], &plain[2..]);
        assert_eq!(&tagged[plain.len()..], &[1, 0, 2, 0, 2]);
        assert_eq!(TxnRecord::decode(&key, Some(&tagged)), Ok(rec(&v)));

        // An unknown tag is skipped, as Kafka skips it.
        let mut unknown = tagged[..plain.len()].to_vec();
        unknown.extend_from_slice(&[2, 0, 2, 0, 2, 9, 1, 7]);
        assert_eq!(TxnRecord::decode(&key, Some(&unknown)), Ok(rec(&v)));

        // The known tag with another size is refused.
        let mut wrong = tagged[..plain.len()].to_vec();
        wrong.extend_from_slice(&[1, 0, 1, 2]);
        assert_eq!(
            TxnRecord::decode(&key, Some(&wrong)),
            Err(DecodeError::InvalidTaggedFieldSize {
                tag: 0,
                size: 1,
                expected: 2
            })
        );
    }

    #[test]
    fn markers_records_store_an_empty_list_as_a_tombstone_and_check_the_result() {
        let empty = TxnRecord::Markers {
            transactional_id: "x".into(),
            markers: vec![],
        };
        let (key, value) = empty.encode();
        assert_eq!(&key[..2], &MARKERS_KEY_VERSION.to_be_bytes());
        assert_eq!(value, None);
        assert_eq!(TxnRecord::decode(&key, None), Ok(empty));

        let one = TxnRecord::Markers {
            transactional_id: "x".into(),
            markers: vec![PendingMarker {
                partition: TopicPartition::new("t", 3),
                offset: 41,
                producer_id: ProducerId(7),
                producer_epoch: ProducerEpoch(2),
                result: TransactionResult::Commit,
            }],
        };
        let (key, value) = one.encode();
        let mut value = value.expect("a non-empty list has a value");
        assert_eq!(TxnRecord::decode(&key, Some(&value)), Ok(one));
        let last = value.len() - 1;
        value[last] = 2;
        assert_eq!(
            TxnRecord::decode(&key, Some(&value)),
            Err(DecodeError::InvalidValue {
                what: "transaction result",
                value: 2
            })
        );
        // A stored empty list is not canonical (it is a tombstone).
        let mut zero = VALUE_VERSION.to_be_bytes().to_vec();
        zero.extend_from_slice(&0i32.to_be_bytes());
        assert!(matches!(
            TxnRecord::decode(&key, Some(&zero)),
            Err(DecodeError::InvalidLength { .. })
        ));
    }
}
