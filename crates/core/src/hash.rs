//! Java-compatible hashing used to place keys exactly where Kafka places them.
//!
//! Kafka maps a group id to a `__consumer_offsets` partition with
//! `Utils.abs(groupId.hashCode()) % partitions`; matching it bit for bit keeps Shoal's coordinator
//! placement identical to Kafka's. Pure functions, no allocation.

/// Java's `String.hashCode()`: `h = 31 * h + c` over the UTF-16 code units, wrapping in `i32`.
pub fn java_string_hash(s: &str) -> i32 {
    s.encode_utf16().fold(0i32, |h, unit| {
        h.wrapping_mul(31).wrapping_add(i32::from(unit))
    })
}

/// Kafka's `Utils.abs`: the absolute value, except that `i32::MIN` (which has none) maps to 0.
pub fn kafka_abs(n: i32) -> i32 {
    if n == i32::MIN {
        0
    } else {
        n.abs()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn java_hash_matches_known_values() {
        assert_eq!(java_string_hash(""), 0);
        assert_eq!(java_string_hash("hello"), 99_162_322);
        assert_eq!(java_string_hash("polygenelubricants"), i32::MIN);
        // Outside the BMP: Java hashes the two surrogate units.
        assert_eq!(java_string_hash("\u{1F600}"), 0xD83D_i32 * 31 + 0xDE00_i32);
    }

    #[test]
    fn kafka_abs_maps_min_to_zero() {
        assert_eq!(kafka_abs(i32::MIN), 0);
        assert_eq!(kafka_abs(-5), 5);
        assert_eq!(kafka_abs(7), 7);
        assert_eq!(kafka_abs(java_string_hash("polygenelubricants")), 0);
    }
}
