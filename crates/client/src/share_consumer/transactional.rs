//! What a share consumer hands to a transaction (KIP-1289, spec §4): the member the records
//! were delivered to ([`ShareGroupMetadata`]) and the acknowledgements themselves
//! ([`ShareAcknowledgements`]), which `Producer::send_share_acknowledgements_to_transaction`
//! stages in the producer's open transaction.
//!
//! A [`ShareAcknowledgements`] value is built either by the consumer
//! (`ShareConsumer::acknowledgements_for_transaction`, which drains the explicit-mode ACCEPT /
//! REJECT acknowledgements so that the consumer never sends them itself) or by the
//! application from the records it polled ([`ShareAcknowledgements::from_records`],
//! [`ShareAcknowledgements::add`]) — then those records must not also be acknowledged
//! through the consumer. Only ACCEPT and REJECT are transactional (the broker refuses RELEASE
//! and RENEW in a transaction); GAP comes only from the consumer, for offsets without a
//! record. An offset is in a value at most once.
//!
//! Sans-IO: a value is a set of (partition, offset, type); [`ShareAcknowledgements::batches`]
//! turns a partition's offsets into the wire's batches (runs of consecutive offsets, one type
//! for a run whose types are all equal, else one type per offset).

use std::collections::BTreeMap;

use shoal_protocol::uuid::Uuid;

use super::acknowledgements::{batches, AckBatch, AckError, AcknowledgeType};
use super::records::{ShareRecord, TopicIdPartition};

/// The group and member a consumer's acknowledgements belong to: an immutable snapshot of
/// the member's id and epoch (from `ShareConsumer::share_group_metadata`). The broker stages
/// a transaction's acknowledgements only for records acquired by this member at this epoch;
/// after a rebalance the snapshot is stale (STALE_MEMBER_EPOCH: abort and take a new one).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ShareGroupMetadata {
    pub group_id: String,
    pub member_id: String,
    pub member_epoch: i32,
}

/// Acknowledgements for a transaction, per share partition (see the module docs).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ShareAcknowledgements {
    partitions: BTreeMap<TopicIdPartition, Partition>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Partition {
    /// The topic's name (the producer finds the partition's leader by it).
    topic: String,
    offsets: BTreeMap<i64, AcknowledgeType>,
}

impl ShareAcknowledgements {
    /// No acknowledgements.
    pub fn new() -> ShareAcknowledgements {
        ShareAcknowledgements::default()
    }

    /// `ack_type` (ACCEPT or REJECT) for every record of `records`.
    ///
    /// # Errors
    /// [`AckError::NotTransactional`] for RELEASE or RENEW, [`AckError::Gap`] for GAP,
    /// [`AckError::Duplicate`] for a record given twice. Nothing is built then.
    pub fn from_records<'a, I>(
        records: I,
        ack_type: AcknowledgeType,
    ) -> Result<ShareAcknowledgements, AckError>
    where
        I: IntoIterator<Item = &'a ShareRecord>,
    {
        let mut acks = ShareAcknowledgements::new();
        for record in records {
            acks.add(record, ack_type)?;
        }
        Ok(acks)
    }

    /// Adds `ack_type` (ACCEPT or REJECT) for `record`.
    ///
    /// # Errors
    /// As [`ShareAcknowledgements::from_records`]; nothing changes then.
    pub fn add(&mut self, record: &ShareRecord, ack_type: AcknowledgeType) -> Result<(), AckError> {
        check_type(ack_type)?;
        let key = (record.topic_id, record.partition);
        if self
            .partitions
            .get(&key)
            .is_some_and(|p| p.offsets.contains_key(&record.offset))
        {
            return Err(AckError::Duplicate(record.offset));
        }
        self.partitions
            .entry(key)
            .or_insert_with(|| Partition {
                topic: record.topic.clone(),
                offsets: BTreeMap::new(),
            })
            .offsets
            .insert(record.offset, ack_type);
        Ok(())
    }

    /// Moves every acknowledgement of `other` into this one (a stream processor collecting
    /// several polls' acknowledgements for one checkpoint).
    ///
    /// # Errors
    /// [`AckError::Duplicate`] when both hold an offset; nothing changes then.
    pub fn extend(&mut self, other: ShareAcknowledgements) -> Result<(), AckError> {
        for (key, p) in &other.partitions {
            if let Some(mine) = self.partitions.get(key) {
                if let Some(offset) = p.offsets.keys().find(|o| mine.offsets.contains_key(o)) {
                    return Err(AckError::Duplicate(*offset));
                }
            }
        }
        for (key, p) in other.partitions {
            match self.partitions.get_mut(&key) {
                Some(mine) => mine.offsets.extend(p.offsets),
                None => {
                    self.partitions.insert(key, p);
                }
            }
        }
        Ok(())
    }

    /// The consumer's drained batches (which may hold GAPs); `topic_name` names each topic id.
    pub(crate) fn from_batches(
        batches: BTreeMap<TopicIdPartition, Vec<AckBatch>>,
        topic_name: impl Fn(Uuid) -> Option<String>,
    ) -> ShareAcknowledgements {
        let mut partitions = BTreeMap::new();
        for (key, runs) in batches {
            let mut offsets = BTreeMap::new();
            for run in runs {
                for (i, offset) in (run.first_offset..=run.last_offset).enumerate() {
                    let t = if run.types.len() == 1 {
                        run.types.first()
                    } else {
                        run.types.get(i)
                    };
                    if let Some(t) = t {
                        offsets.insert(offset, *t);
                    }
                }
            }
            if !offsets.is_empty() {
                let topic = topic_name(key.0).unwrap_or_default();
                partitions.insert(key, Partition { topic, offsets });
            }
        }
        ShareAcknowledgements { partitions }
    }

    /// Whether there is nothing to acknowledge.
    pub fn is_empty(&self) -> bool {
        self.partitions.is_empty()
    }

    /// How many offsets are acknowledged.
    pub fn len(&self) -> usize {
        self.partitions.values().map(|p| p.offsets.len()).sum()
    }

    /// The share partitions, each with its topic's name.
    pub fn partitions(&self) -> impl Iterator<Item = (&str, TopicIdPartition)> + '_ {
        self.partitions
            .iter()
            .map(|(key, p)| (p.topic.as_str(), *key))
    }

    /// The acknowledgement type of `offset` of `partition`, if it is in.
    pub fn get(&self, partition: &TopicIdPartition, offset: i64) -> Option<AcknowledgeType> {
        self.partitions
            .get(partition)
            .and_then(|p| p.offsets.get(&offset).copied())
    }

    /// `partition`'s acknowledgements as the wire's batches, in offset order: a run of
    /// consecutive offsets per batch, with one type when the run's types are all equal.
    pub fn batches(&self, partition: &TopicIdPartition) -> Vec<AckBatch> {
        let Some(p) = self.partitions.get(partition) else {
            return Vec::new();
        };
        let acks: Vec<(i64, AcknowledgeType)> = p.offsets.iter().map(|(o, t)| (*o, *t)).collect();
        batches(&acks)
    }
}

fn check_type(t: AcknowledgeType) -> Result<(), AckError> {
    match t {
        AcknowledgeType::Accept | AcknowledgeType::Reject => Ok(()),
        AcknowledgeType::Gap => Err(AckError::Gap),
        other => Err(AckError::NotTransactional(other)),
    }
}

/// A delivered record of topic `t{topic_id}` for other modules' tests.
#[cfg(test)]
pub(crate) fn test_record(topic_id: u128, partition: i32, offset: i64) -> ShareRecord {
    ShareRecord {
        topic: format!("t{topic_id}"),
        partition,
        offset,
        key: None,
        value: None,
        headers: Vec::new(),
        timestamp: 0,
        delivery_count: 1,
        acquisition_lock_timeout: std::time::Duration::from_secs(30),
        topic_id: Uuid::from_u128(topic_id),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(partition: i32, offset: i64) -> ShareRecord {
        test_record(7, partition, offset)
    }

    #[test]
    fn runs_of_consecutive_offsets_become_one_batch_each() {
        let records: Vec<_> = [0, 1, 2, 5, 6, 9].map(|o| record(0, o)).to_vec();
        let mut acks =
            ShareAcknowledgements::from_records(&records[..5], AcknowledgeType::Accept).unwrap();
        acks.add(&records[5], AcknowledgeType::Reject).unwrap();
        acks.add(&record(0, 3), AcknowledgeType::Reject).unwrap();
        let key = (Uuid::from_u128(7), 0);
        let batches = acks.batches(&key);
        let shape: Vec<_> = batches
            .iter()
            .map(|b| (b.first_offset, b.last_offset, b.types.clone()))
            .collect();
        use AcknowledgeType::{Accept, Reject};
        assert_eq!(
            shape,
            vec![
                (0, 3, vec![Accept, Accept, Accept, Reject]),
                (5, 6, vec![Accept]),
                (9, 9, vec![Reject]),
            ]
        );
        assert_eq!(acks.len(), 7);
        assert_eq!(acks.partitions().collect::<Vec<_>>(), vec![("t7", key)]);
    }

    #[test]
    fn only_accept_and_reject_go_in_and_an_offset_only_once() {
        let mut acks = ShareAcknowledgements::new();
        for t in [AcknowledgeType::Release, AcknowledgeType::Renew] {
            assert_eq!(
                acks.add(&record(0, 1), t),
                Err(AckError::NotTransactional(t))
            );
        }
        assert_eq!(
            acks.add(&record(0, 1), AcknowledgeType::Gap),
            Err(AckError::Gap)
        );
        assert!(acks.is_empty());
        acks.add(&record(0, 1), AcknowledgeType::Accept).unwrap();
        assert_eq!(
            acks.add(&record(0, 1), AcknowledgeType::Reject),
            Err(AckError::Duplicate(1))
        );
        // Another partition's offset 1 is another record.
        acks.add(&record(1, 1), AcknowledgeType::Reject).unwrap();
        let records = [record(2, 4), record(2, 4)];
        assert_eq!(
            ShareAcknowledgements::from_records(&records, AcknowledgeType::Accept),
            Err(AckError::Duplicate(4))
        );
    }

    #[test]
    fn extend_merges_checkpoints_and_refuses_an_offset_held_twice() {
        let mut a =
            ShareAcknowledgements::from_records(&[record(0, 0)], AcknowledgeType::Accept).unwrap();
        let b = ShareAcknowledgements::from_records(
            &[record(0, 1), record(1, 0)],
            AcknowledgeType::Accept,
        )
        .unwrap();
        a.extend(b.clone()).unwrap();
        assert_eq!(a.len(), 3);
        let before = a.clone();
        assert_eq!(a.extend(b), Err(AckError::Duplicate(1)));
        assert_eq!(a, before, "a refused extend changes nothing");
    }

    #[test]
    fn drained_batches_expand_one_type_or_one_per_offset() {
        use AcknowledgeType::{Accept, Gap, Reject};
        let key = (Uuid::from_u128(7), 3);
        let drained = BTreeMap::from([(
            key,
            vec![
                AckBatch {
                    first_offset: 10,
                    last_offset: 12,
                    types: vec![Accept],
                },
                AckBatch {
                    first_offset: 13,
                    last_offset: 14,
                    types: vec![Gap, Reject],
                },
            ],
        )]);
        let acks = ShareAcknowledgements::from_batches(drained, |_| Some("t7".into()));
        assert_eq!(acks.len(), 5);
        assert_eq!(acks.get(&key, 13), Some(Gap));
        let batches = acks.batches(&key);
        assert_eq!(batches.len(), 1);
        assert_eq!(
            batches[0].types,
            vec![Accept, Accept, Accept, Gap, Reject],
            "{batches:?}"
        );
    }
}
