//! Where a record goes: keyed records to the partition Java's client picks (murmur2 of the
//! key, made positive, modulo the partition count — so a Shoal producer and a Java, librdkafka
//! `murmur2_random` or kafka-python producer put one key in one partition), records without a
//! key to a *sticky* partition that changes only when its batch is closed (KIP-480), so that
//! unkeyed records fill batches instead of spreading one record per partition.
//!
//! Sans-IO: the randomness of the sticky choice comes from a seeded generator, so a test (or
//! a simulation) replays the same choices.

use std::collections::BTreeMap;

/// Kafka's murmur2 (`org.apache.kafka.common.utils.Utils.murmur2`): seed `0x9747b28c`,
/// 4-byte little-endian blocks, the tail, then the final mix; as a signed 32-bit value.
pub fn murmur2(data: &[u8]) -> i32 {
    const SEED: u32 = 0x9747_b28c;
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    let len = data.len();
    let mut h: u32 = SEED ^ (len as u32);
    let mut blocks = data.chunks_exact(4);
    for b in &mut blocks {
        let mut k = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    let tail = blocks.remainder();
    if !tail.is_empty() {
        if tail.len() >= 3 {
            h ^= u32::from(tail[2]) << 16;
        }
        if tail.len() >= 2 {
            h ^= u32::from(tail[1]) << 8;
        }
        h ^= u32::from(tail[0]);
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

/// Java's `Utils.toPositive`: the sign bit cleared (not the absolute value).
pub fn to_positive(n: i32) -> i32 {
    n & 0x7fff_ffff
}

/// The partition Java's default partitioner gives `key` among `partitions` (> 0).
pub fn partition_for_key(key: &[u8], partitions: i32) -> i32 {
    to_positive(murmur2(key)) % partitions.max(1)
}

/// Keyed records by murmur2; unkeyed records stick to one partition per topic until
/// [`StickyPartitioner::batch_closed`] says its batch was closed.
#[derive(Clone, Debug)]
pub struct StickyPartitioner {
    sticky: BTreeMap<String, i32>,
    rng: u64,
}

impl StickyPartitioner {
    /// `seed` drives the sticky choices (any value; 0 is mapped to a fixed non-zero one).
    pub fn new(seed: u64) -> StickyPartitioner {
        StickyPartitioner {
            sticky: BTreeMap::new(),
            rng: if seed == 0 {
                0x9E37_79B9_7F4A_7C15
            } else {
                seed
            },
        }
    }

    /// The partition of a record of `topic` with `key`. `partitions` is the topic's count
    /// (> 0); `available` the partitions with a leader now (the sticky choice prefers them;
    /// empty: all). A keyed record ignores availability, as in Java: its partition is fixed.
    pub fn partition(
        &mut self,
        topic: &str,
        key: Option<&[u8]>,
        partitions: i32,
        available: &[i32],
    ) -> i32 {
        let partitions = partitions.max(1);
        if let Some(key) = key {
            return partition_for_key(key, partitions);
        }
        match self.sticky.get(topic) {
            Some(&p) if p < partitions && (available.is_empty() || available.contains(&p)) => p,
            _ => {
                let p = self.choose(partitions, available, None);
                self.sticky.insert(topic.to_string(), p);
                p
            }
        }
    }

    /// The sticky partition's batch for `topic` was closed (full, or sent after linger):
    /// unkeyed records move to another partition (a different one when there is a choice).
    pub fn batch_closed(
        &mut self,
        topic: &str,
        partition: i32,
        partitions: i32,
        available: &[i32],
    ) {
        if self.sticky.get(topic) != Some(&partition) {
            return;
        }
        let p = self.choose(partitions.max(1), available, Some(partition));
        self.sticky.insert(topic.to_string(), p);
    }

    fn choose(&mut self, partitions: i32, available: &[i32], not: Option<i32>) -> i32 {
        let usable: Vec<i32> = available
            .iter()
            .copied()
            .filter(|p| (0..partitions).contains(p))
            .collect();
        let pool: Vec<i32> = if usable.is_empty() {
            (0..partitions).collect()
        } else {
            usable
        };
        let choices: Vec<i32> = match not {
            Some(n) if pool.len() > 1 => pool.iter().copied().filter(|p| *p != n).collect(),
            _ => pool,
        };
        let i = (self.next_random() % choices.len() as u64) as usize;
        choices[i]
    }

    /// xorshift64*.
    fn next_random(&mut self) -> u64 {
        let mut x = self.rng;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Java's `UtilsTest.testMurmur2` values (also what kafka-python 3.0.12's `murmur2`
    /// gives, as a signed int).
    #[test]
    fn murmur2_matches_javas_values() {
        for (key, hash) in [
            (&b"21"[..], -973_932_308),
            (b"foobar", -790_332_482),
            (b"a-little-bit-long-string", -985_981_536),
            (b"a-little-bit-longer-string", -1_486_304_829),
            (
                b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8",
                -58_897_971,
            ),
            (b"abc", 479_470_107),
            (b"", 275_646_681),
        ] {
            assert_eq!(murmur2(key), hash, "{:?}", String::from_utf8_lossy(key));
        }
    }

    /// kafka-python 3.0.12's `DefaultPartitioner` (Java's rule) for these keys.
    #[test]
    fn keys_land_where_javas_partitioner_puts_them() {
        for (key, seven, hundred) in [
            (&b"a"[..], 5, 24),
            (b"ab", 0, 34),
            (b"abcd", 5, 0),
            (b"hello world", 2, 59),
            (b"key-42", 3, 27),
            ("κλειδί".as_bytes(), 3, 63),
        ] {
            assert_eq!(partition_for_key(key, 7), seven);
            assert_eq!(partition_for_key(key, 100), hundred);
        }
        assert_eq!(to_positive(i32::MIN), 0);
        assert_eq!(to_positive(-1), i32::MAX);
    }

    #[test]
    fn unkeyed_records_stick_until_the_batch_closes() {
        let mut p = StickyPartitioner::new(7);
        let first = p.partition("t", None, 6, &[]);
        for _ in 0..100 {
            assert_eq!(p.partition("t", None, 6, &[]), first);
        }
        // A keyed record does not move the sticky partition.
        p.partition("t", Some(b"k"), 6, &[]);
        assert_eq!(p.partition("t", None, 6, &[]), first);
        p.batch_closed("t", first, 6, &[]);
        let second = p.partition("t", None, 6, &[]);
        assert_ne!(second, first, "a closed batch moves the sticky partition");
        // Another partition's batch closing changes nothing.
        p.batch_closed("t", (second + 1) % 6, 6, &[]);
        assert_eq!(p.partition("t", None, 6, &[]), second);
        // Over many batches every partition gets used.
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..200 {
            let now = p.partition("t", None, 6, &[]);
            seen.insert(now);
            p.batch_closed("t", now, 6, &[]);
        }
        assert_eq!(seen.len(), 6);
    }

    #[test]
    fn the_sticky_choice_prefers_available_partitions_and_follows_a_shrunk_count() {
        let mut p = StickyPartitioner::new(1);
        for _ in 0..50 {
            let now = p.partition("t", None, 8, &[2, 5]);
            assert!(now == 2 || now == 5);
            p.batch_closed("t", now, 8, &[2, 5]);
        }
        // A single available partition: it stays, even after its batch closes.
        let only = p.partition("u", None, 4, &[3]);
        assert_eq!(only, 3);
        p.batch_closed("u", 3, 4, &[3]);
        assert_eq!(p.partition("u", None, 4, &[3]), 3);
        // The sticky partition is no longer available, or no longer exists: choose again.
        assert_eq!(p.partition("u", None, 4, &[1]), 1);
        assert!(p.partition("u", None, 1, &[]) == 0);
        // Availability outside the topic is ignored.
        assert!((0..4).contains(&p.partition("v", None, 4, &[9])));
    }
}
