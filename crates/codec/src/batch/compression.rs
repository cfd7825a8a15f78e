//! Decompression of v2 batch payloads under a size budget.
//!
//! Owns: [`Compression`], [`decompress`] and [`compress`] (the one implementation of Kafka's
//! codecs in Shoal). Invariant: decompressed output never exceeds the caller's budget;
//! a payload that would is rejected with `DecompressedTooLarge` before (snappy) or while (stream
//! codecs) it is produced, so a small batch cannot make the broker allocate gigabytes.

use std::io::Read;

use super::error::{BatchError, Result};

/// Compression codec of a batch (attributes bits 0-2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Compression {
    /// 0
    #[default]
    None,
    /// 1
    Gzip,
    /// 2
    Snappy,
    /// 3
    Lz4,
    /// 4
    Zstd,
}

impl Compression {
    /// Codec for an attributes id, or `None` if unknown.
    pub fn from_id(id: u8) -> Option<Compression> {
        Some(match id {
            0 => Compression::None,
            1 => Compression::Gzip,
            2 => Compression::Snappy,
            3 => Compression::Lz4,
            4 => Compression::Zstd,
            _ => return None,
        })
    }
    /// The attributes id.
    pub fn id(self) -> u8 {
        match self {
            Compression::None => 0,
            Compression::Gzip => 1,
            Compression::Snappy => 2,
            Compression::Lz4 => 3,
            Compression::Zstd => 4,
        }
    }
    /// Kafka's name (`compression.type` value).
    pub fn name(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Gzip => "gzip",
            Compression::Snappy => "snappy",
            Compression::Lz4 => "lz4",
            Compression::Zstd => "zstd",
        }
    }
}

/// Header of the xerial snappy-java stream format used by the Java client.
const XERIAL_MAGIC: [u8; 8] = [0x82, b'S', b'N', b'A', b'P', b'P', b'Y', 0];
/// Magic + version i32 + compatible-version i32.
const XERIAL_HEADER_BYTES: usize = 16;

fn failed(codec: Compression, e: impl std::fmt::Display) -> BatchError {
    BatchError::Decompression {
        codec: codec.name(),
        reason: e.to_string(),
    }
}

/// Decompresses `input` (a compressed batch payload) into at most `budget` bytes.
///
/// # Errors
/// `DecompressedTooLarge` if the output would exceed `budget`; `Decompression` if `input` is not
/// valid for the codec.
pub fn decompress(codec: Compression, input: &[u8], budget: usize) -> Result<Vec<u8>> {
    match codec {
        Compression::None => {
            if input.len() > budget {
                return Err(BatchError::DecompressedTooLarge { max: budget });
            }
            Ok(input.to_vec())
        }
        Compression::Gzip => read_bounded(codec, flate2::read::MultiGzDecoder::new(input), budget),
        Compression::Lz4 => read_bounded(codec, lz4_flex::frame::FrameDecoder::new(input), budget),
        Compression::Zstd => {
            let decoder =
                zstd::stream::read::Decoder::with_buffer(input).map_err(|e| failed(codec, e))?;
            read_bounded(codec, decoder, budget)
        }
        Compression::Snappy => {
            if input.starts_with(&XERIAL_MAGIC) {
                xerial_snappy(input, budget)
            } else {
                let mut out = Vec::new();
                snappy_block(input, budget, &mut out)?;
                Ok(out)
            }
        }
    }
}

fn read_bounded(codec: Compression, reader: impl Read, budget: usize) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    let limit = u64::try_from(budget).unwrap_or(u64::MAX).saturating_add(1);
    reader
        .take(limit)
        .read_to_end(&mut out)
        .map_err(|e| failed(codec, e))?;
    if out.len() > budget {
        return Err(BatchError::DecompressedTooLarge { max: budget });
    }
    Ok(out)
}

/// Appends one raw snappy block to `out`, keeping `out.len() <= budget`.
fn snappy_block(block: &[u8], budget: usize, out: &mut Vec<u8>) -> Result<()> {
    let codec = Compression::Snappy;
    let len = snap::raw::decompress_len(block).map_err(|e| failed(codec, e))?;
    let start = out.len();
    if len > budget.saturating_sub(start) {
        return Err(BatchError::DecompressedTooLarge { max: budget });
    }
    out.resize(start + len, 0);
    let written = snap::raw::Decoder::new()
        .decompress(block, &mut out[start..])
        .map_err(|e| failed(codec, e))?;
    out.truncate(start + written);
    Ok(())
}

/// xerial framing: header, then blocks of `[length i32 BE][raw snappy block]`.
fn xerial_snappy(input: &[u8], budget: usize) -> Result<Vec<u8>> {
    let codec = Compression::Snappy;
    let mut rest = input
        .get(XERIAL_HEADER_BYTES..)
        .ok_or_else(|| failed(codec, "truncated xerial header"))?;
    let mut out = Vec::new();
    while !rest.is_empty() {
        let len_bytes: [u8; 4] = rest
            .get(..4)
            .and_then(|b| b.try_into().ok())
            .ok_or_else(|| failed(codec, "truncated xerial block length"))?;
        let len = usize::try_from(i32::from_be_bytes(len_bytes))
            .map_err(|_| failed(codec, "negative xerial block length"))?;
        let block = rest
            .get(4..4 + len)
            .ok_or_else(|| failed(codec, "truncated xerial block"))?;
        snappy_block(block, budget, &mut out)?;
        rest = &rest[4 + len..];
    }
    Ok(out)
}

/// Largest uncompressed block of one xerial snappy chunk (snappy-java's default block size).
const XERIAL_BLOCK_BYTES: usize = 32 * 1024;

/// Compresses `input` with `codec` (used when compaction rewrites a batch: its retained records
/// keep the producer's codec, as Kafka's cleaner does). Snappy output uses the xerial framing
/// the Java client writes, which every client reads.
///
/// # Errors
/// `Decompression` (naming the codec) if the encoder fails.
pub fn compress(codec: Compression, input: &[u8]) -> Result<Vec<u8>> {
    use std::io::Write;
    match codec {
        Compression::None => Ok(input.to_vec()),
        Compression::Gzip => {
            let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
            enc.write_all(input).map_err(|e| failed(codec, e))?;
            enc.finish().map_err(|e| failed(codec, e))
        }
        Compression::Lz4 => {
            let mut enc = lz4_flex::frame::FrameEncoder::new(Vec::new());
            enc.write_all(input).map_err(|e| failed(codec, e))?;
            enc.finish().map_err(|e| failed(codec, e))
        }
        Compression::Zstd => zstd::stream::encode_all(input, 3).map_err(|e| failed(codec, e)),
        Compression::Snappy => {
            let mut out = Vec::with_capacity(XERIAL_HEADER_BYTES + input.len());
            out.extend_from_slice(&XERIAL_MAGIC);
            out.extend_from_slice(&1i32.to_be_bytes());
            out.extend_from_slice(&1i32.to_be_bytes());
            let mut enc = snap::raw::Encoder::new();
            for chunk in input.chunks(XERIAL_BLOCK_BYTES) {
                let block = enc.compress_vec(chunk).map_err(|e| failed(codec, e))?;
                let len = i32::try_from(block.len()).map_err(|e| failed(codec, e))?;
                out.extend_from_slice(&len.to_be_bytes());
                out.extend_from_slice(&block);
            }
            Ok(out)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compress_round_trips_every_codec() {
        let input: Vec<u8> = (0..100_000u32)
            .flat_map(|i| (i % 251).to_le_bytes())
            .collect();
        for codec in [
            Compression::None,
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
            Compression::Zstd,
        ] {
            let packed = compress(codec, &input).unwrap();
            assert_eq!(
                decompress(codec, &packed, input.len()).unwrap(),
                input,
                "{codec:?}"
            );
        }
    }
}
