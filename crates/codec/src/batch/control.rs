//! Transaction markers: the control batches that end a transaction on a partition.
//!
//! A marker is a control + transactional batch with the producer's id and epoch, sequence -1 and
//! one record whose key is `[version i16 = 0][type i16: 0 ABORT, 1 COMMIT]` (Kafka's
//! `ControlRecordType`) and whose value is `[version i16 = 0][coordinator epoch i32]` (Kafka's
//! `EndTxnMarker`).
//!
//! Must not: panic on stored bytes (a malformed control record is an error, not an assertion).

use super::error::{BatchError, Result};
use super::records::{decode_records, encode_batch, BatchOptions};

/// Largest decompressed payload read from a control batch (one small record).
const CONTROL_DECOMPRESSED_BYTES_MAX: usize = 64 * 1024;
/// Control record key version written and understood.
const CONTROL_KEY_VERSION: i16 = 0;
/// `EndTxnMarker` value version written.
const END_TXN_MARKER_VERSION: i16 = 0;

/// The type of a control record (Kafka's `ControlRecordType`), as far as transactions go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ControlRecordType {
    Abort,
    Commit,
    /// Another control type (KRaft's leader change, snapshot header, ...).
    Other(i16),
}

impl ControlRecordType {
    fn code(self) -> i16 {
        match self {
            Self::Abort => 0,
            Self::Commit => 1,
            Self::Other(code) => code,
        }
    }

    fn from_code(code: i16) -> Self {
        match code {
            0 => Self::Abort,
            1 => Self::Commit,
            other => Self::Other(other),
        }
    }
}

/// A COMMIT or ABORT marker as stored in a batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EndTxnMarker {
    pub commit: bool,
    pub coordinator_epoch: i32,
}

/// Encodes the marker batch for `producer_id`/`producer_epoch` (base offset 0: the log assigns
/// it on append).
pub fn encode_end_txn_marker(
    producer_id: i64,
    producer_epoch: i16,
    marker: EndTxnMarker,
    timestamp_ms: i64,
) -> Vec<u8> {
    let kind = if marker.commit {
        ControlRecordType::Commit
    } else {
        ControlRecordType::Abort
    };
    let mut key = Vec::with_capacity(4);
    key.extend_from_slice(&CONTROL_KEY_VERSION.to_be_bytes());
    key.extend_from_slice(&kind.code().to_be_bytes());
    let mut value = Vec::with_capacity(6);
    value.extend_from_slice(&END_TXN_MARKER_VERSION.to_be_bytes());
    value.extend_from_slice(&marker.coordinator_epoch.to_be_bytes());
    encode_batch(
        &[(Some(&key), Some(&value))],
        BatchOptions {
            producer_id,
            producer_epoch,
            base_sequence: -1,
            transactional: true,
            control: true,
            timestamp_ms,
            ..BatchOptions::default()
        },
    )
}

fn invalid(reason: &'static str) -> BatchError {
    BatchError::InvalidBatchHeader { reason }
}

/// The type of the first control record of a control batch (`batch` is one whole batch).
///
/// # Errors
/// The batch does not decode, is not a control batch, or its first record has no valid key.
pub fn control_record_type(batch: &[u8]) -> Result<ControlRecordType> {
    let header = super::BatchHeader::parse(batch)?;
    if !header.is_control() {
        return Err(invalid("not a control batch"));
    }
    let records = decode_records(batch, CONTROL_DECOMPRESSED_BYTES_MAX)?;
    let key = records
        .first()
        .and_then(|r| r.key.as_ref())
        .ok_or_else(|| invalid("control batch without a keyed record"))?;
    if key.len() < 4 {
        return Err(invalid("control record key shorter than 4 bytes"));
    }
    let version = i16::from_be_bytes([key[0], key[1]]);
    if version < 0 {
        return Err(invalid("negative control record key version"));
    }
    Ok(ControlRecordType::from_code(i16::from_be_bytes([
        key[2], key[3],
    ])))
}

/// The marker in a control batch, `None` for another control type.
///
/// # Errors
/// As [`control_record_type`], or a COMMIT/ABORT record without a 6-byte value.
pub fn end_txn_marker(batch: &[u8]) -> Result<Option<EndTxnMarker>> {
    let commit = match control_record_type(batch)? {
        ControlRecordType::Commit => true,
        ControlRecordType::Abort => false,
        ControlRecordType::Other(_) => return Ok(None),
    };
    let records = decode_records(batch, CONTROL_DECOMPRESSED_BYTES_MAX)?;
    let value = records
        .first()
        .and_then(|r| r.value.as_ref())
        .filter(|v| v.len() >= 6)
        .ok_or_else(|| invalid("transaction marker without a coordinator epoch"))?;
    Ok(Some(EndTxnMarker {
        commit,
        coordinator_epoch: i32::from_be_bytes([value[2], value[3], value[4], value[5]]),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::{encode_batch, BatchHeader, BatchOptions};

    #[test]
    fn markers_round_trip() {
        for commit in [true, false] {
            let marker = EndTxnMarker {
                commit,
                coordinator_epoch: 7,
            };
            let bytes = encode_end_txn_marker(42, 3, marker, 1000);
            let h = BatchHeader::parse(&bytes).unwrap();
            assert!(h.is_control() && h.is_transactional());
            assert_eq!(
                (h.producer_id(), h.producer_epoch(), h.base_sequence()),
                (42, 3, -1)
            );
            assert_eq!(end_txn_marker(&bytes).unwrap(), Some(marker));
            let expected = if commit {
                ControlRecordType::Commit
            } else {
                ControlRecordType::Abort
            };
            assert_eq!(control_record_type(&bytes).unwrap(), expected);
        }
    }

    #[test]
    fn non_control_and_malformed_batches_are_errors() {
        let plain = encode_batch(&[(None, Some(b"v"))], BatchOptions::default());
        assert!(control_record_type(&plain).is_err());
        let keyless = encode_batch(
            &[(None, Some(b"v"))],
            BatchOptions {
                control: true,
                ..BatchOptions::default()
            },
        );
        assert!(control_record_type(&keyless).is_err());
        let other = encode_batch(
            &[(Some(&[0, 0, 0, 2]), None)],
            BatchOptions {
                control: true,
                ..BatchOptions::default()
            },
        );
        assert_eq!(end_txn_marker(&other).unwrap(), None);
        assert!(control_record_type(&[1, 2, 3]).is_err());
    }
}
