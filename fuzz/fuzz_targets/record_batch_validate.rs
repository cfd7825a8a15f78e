//! Arbitrary bytes as a produced record set: validation, record decoding and batch splitting.
//!
//! Every batch carries a CRC-32C over its body, which random mutation almost never gets right,
//! so most inputs would stop at `CrcMismatch`. Each input is therefore run twice: as given, and
//! with the CRC of every batch that `split_batches` finds recomputed, so that the code after the
//! CRC check (decompression, record walking) is reached too.
#![no_main]

use libfuzzer_sys::fuzz_target;
use shoal_storage::batch::{compute_crc, split_batches};
use shoal_storage::{decode_records, validate_record_set, ValidationLimits};

const LIMITS: ValidationLimits = ValidationLimits {
    max_message_bytes: 1 << 20,
    decompressed_bytes_max: 8 << 20,
};
/// Offset of the CRC field in a v2 batch.
const CRC_POS: usize = 17;

fn check(data: &[u8]) {
    let validated = validate_record_set(data, &LIMITS);
    let _ = decode_records(data, 8 << 20);

    let mut end = 0usize;
    for item in split_batches(data) {
        let Ok((header, range)) = item else { break };
        // Ranges lie inside the input, follow each other, and match the header's size.
        assert_eq!(range.start, end);
        assert!(range.end <= data.len());
        assert_eq!(range.len(), header.size_bytes());
        end = range.end;
        let _ = decode_records(&data[range], 8 << 20);
    }

    // A valid record set consists of whole batches only.
    if let Ok(headers) = validated {
        assert!(!headers.is_empty());
        assert_eq!(end, data.len());
        assert_eq!(headers.iter().map(|h| h.size_bytes()).sum::<usize>(), data.len());
    }
}

fn with_fixed_crcs(data: &[u8]) -> Option<Vec<u8>> {
    let ranges: Vec<_> = split_batches(data).map_while(Result::ok).map(|(_, r)| r).collect();
    if ranges.is_empty() {
        return None;
    }
    let mut fixed = data.to_vec();
    for range in ranges {
        let batch = &mut fixed[range];
        let crc = compute_crc(batch).ok()?;
        batch[CRC_POS..CRC_POS + 4].copy_from_slice(&crc.to_be_bytes());
    }
    (fixed != data).then_some(fixed)
}

fuzz_target!(|data: &[u8]| {
    check(data);
    if let Some(fixed) = with_fixed_crcs(data) {
        check(&fixed);
    }
});
