//! The id types the machines share, in one place: producer ids and epochs, reply tokens, topic
//! ids and transaction partitions. Each is also re-exported from the module that used to
//! define it (`producer_state::ProducerId`, `group_coordinator::ReplyToken`,
//! `share_coordinator::TopicId`, `txn_coordinator::TopicPartition` ...), so those paths keep
//! working.

/// `producerId` of a batch written without idempotence.
pub const NO_PRODUCER_ID: i64 = -1;
/// `producerEpoch` of a batch without one.
pub const NO_PRODUCER_EPOCH: i16 = -1;

/// A producer id, as handed out by InitProducerId.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProducerId(pub i64);

/// A producer epoch; a higher epoch fences the older ones.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProducerEpoch(pub i16);

/// Caller-chosen handle that pairs a (possibly deferred) reply with its request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ReplyToken(pub u64);

/// A topic id (Kafka's `Uuid`), 16 bytes as on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct TopicId(pub [u8; 16]);

const BASE64_URL: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

impl TopicId {
    /// Kafka's `Uuid.toString()`: URL-safe base64 without padding (22 characters), the form
    /// that goes into coordinator keys.
    pub fn to_kafka_string(&self) -> String {
        let mut out = String::with_capacity(22);
        for chunk in self.0.chunks(3) {
            let b = |i: usize| u32::from(chunk.get(i).copied().unwrap_or(0));
            let n = (b(0) << 16) | (b(1) << 8) | b(2);
            let chars = chunk.len() + 1; // 3 bytes -> 4 chars, 1 byte -> 2 chars
            for k in 0..chars {
                let index = ((n >> (18 - 6 * k)) & 0x3f) as usize;
                if let Some(&c) = BASE64_URL.get(index) {
                    out.push(char::from(c));
                }
            }
        }
        out
    }

    /// Parses [`TopicId::to_kafka_string`]'s form; `None` unless it is exactly 22 valid
    /// characters encoding 16 bytes.
    pub fn from_kafka_string(s: &str) -> Option<TopicId> {
        let bytes = s.as_bytes();
        if bytes.len() != 22 {
            return None;
        }
        let mut out = [0u8; 16];
        let mut filled = 0usize;
        for chunk in bytes.chunks(4) {
            let mut n: u32 = 0;
            for (k, c) in chunk.iter().enumerate() {
                let v = BASE64_URL.iter().position(|x| x == c)?;
                n |= (v as u32) << (18 - 6 * k);
            }
            // 4 chars -> 3 bytes, 2 chars -> 1 byte (the final chunk).
            for k in 0..chunk.len() - 1 {
                let slot = out.get_mut(filled)?;
                *slot = (n >> (16 - 8 * k)) as u8;
                filled += 1;
            }
        }
        let id = TopicId(out);
        // Reject non-canonical spellings (stray low bits in the last character).
        (id.to_kafka_string() == s).then_some(id)
    }
}

/// One partition of a transaction.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopicPartition {
    pub topic: String,
    pub partition: i32,
}

impl TopicPartition {
    pub fn new(topic: impl Into<String>, partition: i32) -> Self {
        TopicPartition {
            topic: topic.into(),
            partition,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_ids_print_as_kafka_uuids() {
        assert_eq!(TopicId([0; 16]).to_kafka_string(), "AAAAAAAAAAAAAAAAAAAAAA");
        let mut one = [0u8; 16];
        one[15] = 1;
        // Kafka's METADATA_TOPIC_ID (Uuid(0, 1)).
        assert_eq!(TopicId(one).to_kafka_string(), "AAAAAAAAAAAAAAAAAAAAAQ");
        let id = TopicId([0xfb, 0xef, 0xff, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 0xfe]);
        let s = id.to_kafka_string();
        assert_eq!(s.len(), 22);
        assert!(s.starts_with("--__"));
        assert_eq!(TopicId::from_kafka_string(&s), Some(id));
        assert_eq!(
            TopicId::from_kafka_string("AAAAAAAAAAAAAAAAAAAAAR"),
            None,
            "non-canonical"
        );
        assert_eq!(TopicId::from_kafka_string("AAAA"), None);
        assert_eq!(TopicId::from_kafka_string("AAAAAAAAAAAAAAAAAAAAA="), None);
    }
}
