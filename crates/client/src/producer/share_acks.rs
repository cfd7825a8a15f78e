//! [`Producer::send_share_acknowledgements_to_transaction`] (KIP-1289, spec §3.1 and §4):
//! a share consumer's ACCEPT / REJECT acknowledgements staged in the producer's open
//! transaction, so that they commit or abort with its output.
//!
//! One TxnShareAcknowledge per leader of the acknowledged share partitions, carrying all of
//! that leader's partitions (the broker stages a request all or nothing; the draft client
//! sends one request per partition, which on one broker gives the same outcome with more
//! round trips). Each request is one operation of the transaction manager: it marks the
//! transaction started, so EndTxn is sent even if nothing was produced, and its answer is
//! classified as the draft client does — retriable codes are retried within `max.block.ms`
//! (UNKNOWN_TOPIC_ID and NOT_LEADER_OR_FOLLOWER after a metadata refresh), STALE_MEMBER_EPOCH,
//! INVALID_RECORD_STATE and the other abortable codes make the transaction abortable, and
//! PRODUCER_FENCED, UNSUPPORTED_VERSION and the rest are fatal.
//!
//! Before anything is sent: the transaction must be open with transaction version 2, and
//! every leader must serve TxnShareAcknowledge (api key 95); otherwise the call fails and
//! the transaction is as it was. An answer is untrusted: one that leaves out a partition of
//! the request cannot say whether it was staged, so the transaction must abort.

use std::collections::BTreeMap;
use std::time::Instant;

use kafka_protocol::messages::{GroupId, ProducerId, TransactionalId};
use kafka_protocol::protocol::StrBytes;
use shoal_protocol::share::txn_share_acknowledge::{
    AcknowledgementBatch, TxnShareAcknowledgePartition, TxnShareAcknowledgeRequest,
    TxnShareAcknowledgeResponse, TxnShareAcknowledgeTopic,
};
use shoal_protocol::{ApiKey, ErrorCode};

use super::producer::{txn_error, Producer};
use super::transaction::{Next, Operation};
use crate::error::Error;
use crate::share_consumer::{ShareAcknowledgements, ShareGroupMetadata, TopicIdPartition};

impl Producer {
    /// Stages `acks`, the acknowledgements of records delivered to the share-group member
    /// `metadata` names, in the open transaction: they take effect when it commits and are
    /// undone (the records become available again) when it aborts. Only ACCEPT and REJECT
    /// are transactional ([`ShareAcknowledgements`] holds nothing else). Waits for every
    /// leader's answer; the records must not also be acknowledged through the consumer.
    ///
    /// # Errors
    /// [`Error::Transaction`] outside an open transaction, for a producer that is not
    /// transactional, or without transaction version 2 (nothing sent, nothing changed);
    /// [`Error::UnsupportedVersion`] when a leader lacks TxnShareAcknowledge (nothing sent);
    /// otherwise the broker's error as [`Error::Transaction`], after which the transaction
    /// must be aborted (STALE_MEMBER_EPOCH after a rebalance, INVALID_RECORD_STATE for a
    /// record this member does not hold, ...) or, fatal, the producer closed
    /// (PRODUCER_FENCED).
    pub async fn send_share_acknowledgements_to_transaction(
        &self,
        acks: &ShareAcknowledgements,
        metadata: &ShareGroupMetadata,
    ) -> Result<(), Error> {
        let s = self.shared();
        s.lock()
            .txn
            .check_start(&Operation::ShareAcknowledgements)
            .map_err(txn_error)?;
        if acks.is_empty() {
            return Ok(());
        }
        let deadline = Instant::now() + s.config.max_block();
        let per_leader = self.share_leaders(acks).await?;
        for leader in per_leader.keys() {
            s.cluster
                .api_versions(*leader)
                .await?
                .version(ApiKey::TxnShareAcknowledge)?;
        }
        for partitions in per_leader.into_values() {
            self.stage(acks, metadata, partitions, deadline).await?;
        }
        Ok(())
    }

    /// The acknowledged partitions grouped by leader.
    async fn share_leaders(
        &self,
        acks: &ShareAcknowledgements,
    ) -> Result<BTreeMap<i32, Vec<(String, TopicIdPartition)>>, Error> {
        let cluster = &self.shared().cluster;
        let mut per_leader: BTreeMap<i32, Vec<(String, TopicIdPartition)>> = BTreeMap::new();
        for (topic, key) in acks.partitions() {
            let leader = cluster.leader(topic, key.1).await?;
            per_leader
                .entry(leader)
                .or_default()
                .push((topic.to_owned(), key));
        }
        Ok(per_leader)
    }

    /// One leader's TxnShareAcknowledge, retried as its answers say, as one operation.
    async fn stage(
        &self,
        acks: &ShareAcknowledgements,
        metadata: &ShareGroupMetadata,
        partitions: Vec<(String, TopicIdPartition)>,
        deadline: Instant,
    ) -> Result<(), Error> {
        let s = self.shared();
        let id = s
            .lock()
            .txn
            .start_operation(Operation::ShareAcknowledgements)
            .map_err(txn_error)?;
        let result = loop {
            let (topic, key) = &partitions[0];
            let leader = match s.cluster.leader(topic, key.1).await {
                Ok(leader) => leader,
                Err(e) => break Err(s.lock().txn.fail_operation(id, e.code())),
            };
            let producer = s.lock().txn.producer();
            let Some(producer) = producer else {
                break Err(s
                    .lock()
                    .txn
                    .fail_operation(id, ErrorCode::INVALID_TXN_STATE));
            };
            let request = TxnShareAcknowledgeRequest {
                transactional_id: Some(TransactionalId(StrBytes::from_string(
                    s.config.transactional_id().unwrap_or_default().to_owned(),
                ))),
                group_id: Some(GroupId(StrBytes::from_string(metadata.group_id.clone()))),
                producer_id: ProducerId(producer.id),
                producer_epoch: producer.epoch,
                member_id: Some(StrBytes::from_string(metadata.member_id.clone())),
                member_epoch: metadata.member_epoch,
                topics: request_topics(acks, &partitions),
                unknown_tagged_fields: BTreeMap::new(),
            };
            let code = match s.cluster.send(leader, &request).await {
                Ok(response) => answer_code(&response, &partitions),
                Err(e) => e.code(),
            };
            let out_of_time = Instant::now() >= deadline;
            let next = if out_of_time && !code.is_ok() {
                s.lock().txn.fail_operation(id, code)
            } else {
                s.lock().txn.finish_operation(id, code)
            };
            match next {
                Next::Continue => break Ok(()),
                Next::Failed(e) => break Err(Next::Failed(e)),
                Next::Retry {
                    refresh_metadata, ..
                } => {
                    if refresh_metadata {
                        s.cluster.invalidate_metadata();
                    }
                    tokio::time::sleep(s.config.client().retry_backoff()).await;
                }
            }
        };
        s.wake.notify_one();
        s.progress.notify_waiters();
        match result {
            Ok(()) => Ok(()),
            Err(Next::Failed(e)) => Err(txn_error(e)),
            Err(_) => Err(s
                .lock()
                .txn
                .last_error()
                .cloned()
                .map_or(Error::Closed, txn_error)),
        }
    }
}

/// The request's topics: `partitions` in order, grouped by topic id.
fn request_topics(
    acks: &ShareAcknowledgements,
    partitions: &[(String, TopicIdPartition)],
) -> Vec<TxnShareAcknowledgeTopic> {
    let mut topics: Vec<TxnShareAcknowledgeTopic> = Vec::new();
    for (_, key) in partitions {
        let partition = TxnShareAcknowledgePartition {
            partition_index: key.1,
            acknowledgement_batches: acks
                .batches(key)
                .into_iter()
                .map(|b| AcknowledgementBatch {
                    first_offset: b.first_offset,
                    last_offset: b.last_offset,
                    acknowledge_types: b.types.iter().map(|t| t.code()).collect(),
                    unknown_tagged_fields: BTreeMap::new(),
                })
                .collect(),
            unknown_tagged_fields: BTreeMap::new(),
        };
        match topics.iter_mut().find(|t| t.topic_id == key.0) {
            Some(t) => t.partitions.push(partition),
            None => topics.push(TxnShareAcknowledgeTopic {
                topic_id: key.0,
                partitions: vec![partition],
                unknown_tagged_fields: BTreeMap::new(),
            }),
        }
    }
    topics
}

/// The answer's code, as the draft client reads it: the top-level code, else the first
/// non-zero partition code. An answer that leaves out a partition of the request cannot
/// say what happened to it: TRANSACTION_ABORTABLE (the transaction must abort).
fn answer_code(
    response: &TxnShareAcknowledgeResponse,
    partitions: &[(String, TopicIdPartition)],
) -> ErrorCode {
    let top = ErrorCode(response.error_code);
    if !top.is_ok() {
        return top;
    }
    let mut answered = Vec::new();
    for t in &response.responses {
        for p in &t.partitions {
            let code = ErrorCode(p.error_code);
            if !code.is_ok() {
                return code;
            }
            answered.push((t.topic_id, p.partition_index));
        }
    }
    if partitions.iter().all(|(_, key)| answered.contains(key)) {
        ErrorCode::NONE
    } else {
        ErrorCode::TRANSACTION_ABORTABLE
    }
}

#[cfg(test)]
mod tests {
    use shoal_protocol::share::txn_share_acknowledge::{
        TxnShareAcknowledgePartitionResponse, TxnShareAcknowledgeTopicResponse,
    };
    use shoal_protocol::uuid::Uuid;

    use super::*;
    use crate::share_consumer::{AcknowledgeType, ShareRecord};

    fn record(topic_id: u128, partition: i32, offset: i64) -> ShareRecord {
        crate::share_consumer::transactional::test_record(topic_id, partition, offset)
    }

    fn response(top: i16, parts: &[(u128, i32, i16)]) -> TxnShareAcknowledgeResponse {
        let mut r = TxnShareAcknowledgeResponse {
            throttle_time_ms: 0,
            error_code: top,
            responses: Vec::new(),
            unknown_tagged_fields: BTreeMap::new(),
        };
        for (t, p, code) in parts {
            r.responses.push(TxnShareAcknowledgeTopicResponse {
                topic_id: Uuid::from_u128(*t),
                partitions: vec![TxnShareAcknowledgePartitionResponse {
                    partition_index: *p,
                    error_code: *code,
                    error_message: None,
                    unknown_tagged_fields: BTreeMap::new(),
                }],
                unknown_tagged_fields: BTreeMap::new(),
            });
        }
        r
    }

    #[test]
    fn a_request_carries_every_partition_of_its_leader_grouped_by_topic() {
        let records = [
            record(1, 0, 5),
            record(1, 0, 6),
            record(1, 2, 0),
            record(2, 0, 9),
        ];
        let mut acks =
            ShareAcknowledgements::from_records(&records[..3], AcknowledgeType::Accept).unwrap();
        acks.add(&records[3], AcknowledgeType::Reject).unwrap();
        let partitions: Vec<_> = acks.partitions().map(|(t, k)| (t.to_owned(), k)).collect();
        let topics = request_topics(&acks, &partitions);
        let shape: Vec<_> = topics
            .iter()
            .map(|t| {
                (
                    t.topic_id,
                    t.partitions
                        .iter()
                        .map(|p| {
                            let b = &p.acknowledgement_batches;
                            (
                                p.partition_index,
                                b.len(),
                                b[0].first_offset,
                                b[0].last_offset,
                            )
                        })
                        .collect::<Vec<_>>(),
                )
            })
            .collect();
        assert_eq!(
            shape,
            vec![
                (Uuid::from_u128(1), vec![(0, 1, 5, 6), (2, 1, 0, 0)]),
                (Uuid::from_u128(2), vec![(0, 1, 9, 9)]),
            ]
        );
        assert_eq!(
            topics[1].partitions[0].acknowledgement_batches[0].acknowledge_types,
            vec![3]
        );
    }

    #[test]
    fn the_answer_code_is_the_top_level_one_then_the_first_partition_error() {
        let partitions = vec![
            ("t1".to_owned(), (Uuid::from_u128(1), 0)),
            ("t1".to_owned(), (Uuid::from_u128(1), 1)),
        ];
        let ok = response(0, &[(1, 0, 0), (1, 1, 0)]);
        assert_eq!(answer_code(&ok, &partitions), ErrorCode::NONE);
        let stale = ErrorCode::STALE_MEMBER_EPOCH.0;
        let fenced = ErrorCode::PRODUCER_FENCED.0;
        assert_eq!(
            answer_code(&response(fenced, &[(1, 0, stale)]), &partitions),
            ErrorCode::PRODUCER_FENCED
        );
        assert_eq!(
            answer_code(&response(0, &[(1, 0, 0), (1, 1, stale)]), &partitions),
            ErrorCode::STALE_MEMBER_EPOCH
        );
        // A partition left out: its staging is unknown, so the transaction must abort.
        assert_eq!(
            answer_code(&response(0, &[(1, 0, 0)]), &partitions),
            ErrorCode::TRANSACTION_ABORTABLE
        );
        assert_eq!(
            answer_code(&response(0, &[(1, 0, 0), (2, 1, 0)]), &partitions),
            ErrorCode::TRANSACTION_ABORTABLE
        );
    }
}
