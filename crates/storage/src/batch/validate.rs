//! Validation of a produced record set before it is appended.
//!
//! Owns: [`ValidationLimits`] and [`validate_record_set`]. A record set that passes has only
//! complete magic-v2 batches with matching CRCs, each within `max_message_bytes`, each with
//! `recordCount > 0`, `lastOffsetDelta == recordCount - 1`, and records that decode (within the
//! decompression budget) to exactly `recordCount` records with `offsetDelta == index`.
//!
//! [`validate_record_set_with`] also applies Kafka's per-record rules for client batches
//! ([`RecordRules`]: keys on compacted topics, the CreateTime timestamp window) in the same pass
//! over the records, and names the records at fault (KIP-467) instead of failing the set.

use shoal_codec::batch::{payload, walk_records, Deltas};

use super::{check_batch, split_batches, BatchHeader, TimestampType};
use crate::error::{Result, StorageError};

/// Kafka's default `max.message.bytes`.
pub const MAX_MESSAGE_BYTES_DEFAULT: usize = 1_048_588;
/// Default budget for one batch's decompressed payload.
pub const DECOMPRESSED_BYTES_MAX_DEFAULT: usize = 64 * 1024 * 1024;

/// Limits applied by [`validate_record_set`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ValidationLimits {
    /// `max.message.bytes`: largest batch (including its 12-byte log overhead).
    pub max_message_bytes: usize,
    /// Largest decompressed payload of one batch.
    pub decompressed_bytes_max: usize,
}

impl Default for ValidationLimits {
    fn default() -> Self {
        ValidationLimits {
            max_message_bytes: MAX_MESSAGE_BYTES_DEFAULT,
            decompressed_bytes_max: DECOMPRESSED_BYTES_MAX_DEFAULT,
        }
    }
}

/// Validates a produce request's record set (one or more concatenated v2 batches) and returns
/// their headers in order.
///
/// # Errors
/// The first problem found: `Truncated`, `UnsupportedMagic`, `InvalidBatchLength`,
/// `CrcMismatch`, `MessageTooLarge`, `UnknownCompression`, `InvalidBatchHeader`,
/// `Decompression`, `DecompressedTooLarge` or `InvalidRecord`. An empty set is `Truncated`.
pub fn validate_record_set(bytes: &[u8], limits: &ValidationLimits) -> Result<Vec<BatchHeader>> {
    validate_record_set_with(bytes, limits, &RecordRules::default()).map(|(headers, _)| headers)
}

/// Kafka's per-record rules for batches from clients (its log validator).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecordRules {
    /// Compacted topic: every record needs a key.
    pub require_key: bool,
    /// CreateTime topic: the window record timestamps must fall in. `None` for LogAppendTime
    /// topics (the broker sets the time) and when no check applies.
    pub timestamps: Option<TimestampWindow>,
}

/// `message.timestamp.before.max.ms` / `after.max.ms` around the broker's clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimestampWindow {
    /// The broker's clock, ms.
    pub now_ms: i64,
    /// How far a timestamp may lie in the past.
    pub before_max_ms: i64,
    /// How far a timestamp may lie in the future.
    pub after_max_ms: i64,
}

impl TimestampWindow {
    /// Whether `timestamp` lies within the window (computed without overflow).
    pub fn contains(&self, timestamp: i64) -> bool {
        let age = i128::from(self.now_ms) - i128::from(timestamp);
        age <= i128::from(self.before_max_ms) && -age <= i128::from(self.after_max_ms)
    }
}

/// Why a record breaks a [`RecordRules`] rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecordFault {
    /// A record without a key for a compacted topic (Kafka: INVALID_RECORD).
    MissingKey,
    /// A CreateTime outside the topic's window (Kafka: INVALID_TIMESTAMP).
    TimestampOutOfRange {
        /// The record's timestamp.
        timestamp: i64,
    },
    /// A client batch claiming LogAppendTime where no window applies (Kafka: INVALID_TIMESTAMP).
    LogAppendTimeFromClient,
}

/// One record refused by [`RecordRules`], by its index within its batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordError {
    /// Index of the record within its batch (Kafka's `batch_index`).
    pub batch_index: i32,
    /// What is wrong with it.
    pub fault: RecordFault,
}

/// [`validate_record_set`] plus the per-record `rules`: returns the batch headers and the
/// records that break a rule, in order (empty when all pass). A record breaking a rule does
/// not make this fail: the caller refuses the set and reports the records, as Kafka does.
///
/// # Errors
/// As [`validate_record_set`].
pub fn validate_record_set_with(
    bytes: &[u8],
    limits: &ValidationLimits,
    rules: &RecordRules,
) -> Result<(Vec<BatchHeader>, Vec<RecordError>)> {
    if bytes.is_empty() {
        return Err(StorageError::Truncated {
            what: "record set",
            needed: super::BATCH_HEADER_BYTES,
            available: 0,
        });
    }
    let mut headers = Vec::new();
    let mut faults = Vec::new();
    for item in split_batches(bytes) {
        let (header, range) = item?;
        if header.size_bytes() > limits.max_message_bytes {
            return Err(StorageError::MessageTooLarge {
                size: header.size_bytes(),
                max: limits.max_message_bytes,
            });
        }
        let (_, batch) = check_batch(&bytes[range])?;
        validate_batch(&header, batch, limits, rules, &mut faults)?;
        headers.push(header);
    }
    Ok((headers, faults))
}

fn validate_batch(
    header: &BatchHeader,
    batch: &[u8],
    limits: &ValidationLimits,
    rules: &RecordRules,
    faults: &mut Vec<RecordError>,
) -> Result<()> {
    if header.record_count() <= 0 {
        return Err(StorageError::InvalidBatchHeader {
            reason: "recordCount must be positive",
        });
    }
    if i64::from(header.last_offset_delta()) != i64::from(header.record_count()) - 1 {
        return Err(StorageError::InvalidBatchHeader {
            reason: "lastOffsetDelta != recordCount - 1",
        });
    }
    let data = payload(header, batch, limits.decompressed_bytes_max)?;
    let log_append_time = header.timestamp_type() == TimestampType::LogAppendTime;
    let walked = walk_records(
        &data,
        header.record_count(),
        false,
        Deltas::Dense,
        |record| {
            let fault = if rules.require_key && record.key.is_none() {
                Some(RecordFault::MissingKey)
            } else {
                // A LogAppendTime batch's records carry the batch's max timestamp.
                let timestamp = if log_append_time {
                    header.max_timestamp()
                } else {
                    header.base_timestamp().wrapping_add(record.timestamp_delta)
                };
                match rules.timestamps {
                    Some(window) if timestamp != -1 => (!window.contains(timestamp))
                        .then_some(RecordFault::TimestampOutOfRange { timestamp }),
                    _ if log_append_time => Some(RecordFault::LogAppendTimeFromClient),
                    _ => None,
                }
            };
            if let Some(fault) = fault {
                faults.push(RecordError {
                    batch_index: record.offset_delta,
                    fault,
                });
            }
        },
    );
    Ok(walked?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::{encode_batch, BatchOptions, KeyValue};

    fn batch(
        records: &[KeyValue<'_>],
        timestamp_ms: i64,
        timestamp_type: TimestampType,
    ) -> Vec<u8> {
        encode_batch(
            records,
            BatchOptions {
                timestamp_ms,
                timestamp_type,
                ..BatchOptions::default()
            },
        )
    }

    fn faults(bytes: &[u8], rules: RecordRules) -> Vec<RecordError> {
        validate_record_set_with(bytes, &ValidationLimits::default(), &rules)
            .expect("valid framing")
            .1
    }

    const WINDOW: TimestampWindow = TimestampWindow {
        now_ms: 1_000_000,
        before_max_ms: 1_000,
        after_max_ms: 500,
    };

    #[test]
    fn compacted_topics_name_every_record_without_a_key() {
        let b = batch(
            &[
                (Some(b"a"), Some(b"1")),
                (None, Some(b"2")),
                (Some(b"c"), None),
                (None, None),
            ],
            0,
            TimestampType::CreateTime,
        );
        let rules = RecordRules {
            require_key: true,
            timestamps: None,
        };
        let found: Vec<_> = faults(&b, rules).iter().map(|e| e.batch_index).collect();
        assert_eq!(found, vec![1, 3]);
        assert!(
            faults(&b, RecordRules::default()).is_empty(),
            "not compacted"
        );
    }

    #[test]
    fn create_time_outside_the_window_is_named() {
        let rules = RecordRules {
            require_key: false,
            timestamps: Some(WINDOW),
        };
        for (ts, ok) in [
            (1_000_000, true),
            (999_000, true),
            (998_999, false),
            (1_000_500, true),
            (1_000_501, false),
            (i64::MIN, false),
            (i64::MAX, false),
            (-1, true), // no timestamp: not checked
        ] {
            let b = batch(&[(Some(b"k"), None)], ts, TimestampType::CreateTime);
            let found = faults(&b, rules);
            assert_eq!(found.is_empty(), ok, "timestamp {ts}: {found:?}");
            if !ok {
                assert_eq!(
                    found[0].fault,
                    RecordFault::TimestampOutOfRange { timestamp: ts }
                );
            }
        }
        let open = TimestampWindow {
            before_max_ms: i64::MAX,
            after_max_ms: i64::MAX,
            ..WINDOW
        };
        let b = batch(&[(Some(b"k"), None)], 0, TimestampType::CreateTime);
        let rules = RecordRules {
            require_key: false,
            timestamps: Some(open),
        };
        assert!(
            faults(&b, rules).is_empty(),
            "Kafka's default: no limit in the past"
        );
    }

    #[test]
    fn the_missing_key_is_reported_before_the_timestamp() {
        let b = batch(&[(None, None)], 0, TimestampType::CreateTime);
        let rules = RecordRules {
            require_key: true,
            timestamps: Some(WINDOW),
        };
        assert_eq!(faults(&b, rules)[0].fault, RecordFault::MissingKey);
    }

    #[test]
    fn log_append_time_from_a_client_is_refused_without_a_window() {
        let b = batch(
            &[(Some(b"k"), None)],
            1_000_000,
            TimestampType::LogAppendTime,
        );
        let found = faults(&b, RecordRules::default());
        assert_eq!(found[0].fault, RecordFault::LogAppendTimeFromClient);
        let rules = RecordRules {
            require_key: false,
            timestamps: Some(WINDOW),
        };
        assert!(
            faults(&b, rules).is_empty(),
            "its max timestamp is in the window"
        );
    }
}
