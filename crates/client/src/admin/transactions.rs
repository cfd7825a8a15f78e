//! Transactions: list (ListTransactions on every broker, with Kafka's filters), describe
//! (DescribeTransactions to each transactional id's coordinator), and for hanging
//! transactions what Kafka's `kafka-transactions` tool uses: the producers a partition leader
//! knows (DescribeProducers) and aborting one producer's open transaction on one partition
//! (WriteTxnMarkers to the leader, as Kafka's `Admin.abortTransaction` does); and for a
//! prepared (two-phase-commit) transaction, aborting it at its coordinator
//! (`force_terminate_transaction`, KIP-939).

use std::time::Duration;

use kafka_protocol::messages::describe_producers_request::TopicRequest;
use kafka_protocol::messages::write_txn_markers_request::{
    WritableTxnMarker, WritableTxnMarkerTopic,
};
use kafka_protocol::messages::{
    DescribeProducersRequest, DescribeProducersResponse, DescribeTransactionsRequest,
    DescribeTransactionsResponse, InitProducerIdRequest, ListTransactionsRequest, ProducerId,
    TopicName, TransactionalId, WriteTxnMarkersRequest, WriteTxnMarkersResponse,
};
use shoal_protocol::init_producer_id::{InitProducerIdV6, TWO_PHASE_COMMIT_VERSION};
use shoal_protocol::{ApiKey, ErrorCode};

use super::{check, in_order, s, Admin, ItemResults};
use crate::cluster::CoordinatorType;
use crate::error::Error;

/// Which transactions [`Admin::list_transactions`] lists; the default lists all.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ListTransactionsFilter {
    /// Only these states (`Ongoing`, `PrepareCommit`, `CompleteAbort`...); empty for all.
    pub states: Vec<String>,
    /// Only these producer ids; empty for all.
    pub producer_ids: Vec<i64>,
    /// Only transactions open at least this long (ListTransactions v1+).
    pub running_longer_than: Option<Duration>,
    /// Only transactional ids matching this regular expression (ListTransactions v2+).
    pub transactional_id_pattern: Option<String>,
}

/// A transaction in [`Admin::list_transactions`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransactionListing {
    pub transactional_id: String,
    pub producer_id: i64,
    pub state: String,
}

/// A transaction in [`Admin::describe_transactions`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransactionDescription {
    pub state: String,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub timeout: Duration,
    /// When the open transaction started (ms since the epoch); `None` without one.
    pub start_time_ms: Option<i64>,
    /// The partitions in the transaction, as (topic, partition).
    pub partitions: Vec<(String, i32)>,
    /// The coordinator that answered.
    pub coordinator_id: i32,
}

/// A producer a partition's leader knows, in [`Admin::describe_producers`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerState {
    pub producer_id: i64,
    pub producer_epoch: i32,
    pub last_sequence: i32,
    pub last_timestamp_ms: i64,
    /// The coordinator epoch of the producer's last marker (-1 without one).
    pub coordinator_epoch: i32,
    /// The first offset of the producer's open transaction on the partition, `None` without.
    pub current_txn_start_offset: Option<i64>,
}

/// The open transaction [`Admin::abort_transaction`] aborts: one producer's, on one partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AbortTransaction {
    pub topic: String,
    pub partition: i32,
    pub producer_id: i64,
    pub producer_epoch: i16,
    /// The coordinator epoch of the producer's last marker ([`ProducerState`], -1 without one).
    pub coordinator_epoch: i32,
}

impl Admin {
    /// The transactions of every broker's coordinator that match `filter`, broker by broker in
    /// the order each answered.
    ///
    /// # Errors
    /// A broker that could not be asked or answered with an error; a filter the broker's
    /// version lacks is an encoding error (nothing sent).
    pub async fn list_transactions(
        &self,
        filter: &ListTransactionsFilter,
    ) -> Result<Vec<TransactionListing>, Error> {
        let duration_ms = filter
            .running_longer_than
            .map_or(-1, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
        let request = ListTransactionsRequest::default()
            .with_state_filters(filter.states.iter().map(|st| s(st)).collect())
            .with_producer_id_filters(filter.producer_ids.iter().map(|p| ProducerId(*p)).collect())
            .with_duration_filter(duration_ms)
            .with_transactional_id_pattern(filter.transactional_id_pattern.as_deref().map(s));
        let answers = self
            .on_every_broker(ApiKey::ListTransactions, &request, |r| r.error_code)
            .await?;
        let listed = answers
            .into_iter()
            .flat_map(|r| r.transaction_states)
            .map(|t| TransactionListing {
                transactional_id: t.transactional_id.0.to_string(),
                producer_id: t.producer_id.0,
                state: t.transaction_state.to_string(),
            })
            .collect();
        Ok(listed)
    }

    /// Describes transactions by transactional id, one DescribeTransactions per id to its
    /// coordinator.
    ///
    /// # Errors
    /// Per id: TRANSACTIONAL_ID_NOT_FOUND, TRANSACTIONAL_ID_AUTHORIZATION_FAILED, or the
    /// coordinator not found in time.
    pub async fn describe_transactions<S: AsRef<str>>(
        &self,
        transactional_ids: &[S],
    ) -> Result<ItemResults<String, TransactionDescription>, Error> {
        let mut results = Vec::new();
        for id in transactional_ids {
            let id = id.as_ref();
            let request = DescribeTransactionsRequest::default()
                .with_transactional_ids(vec![TransactionalId(s(id))]);
            let result = async {
                let coordinator = self
                    .cluster
                    .coordinator(CoordinatorType::Transaction, id)
                    .await?;
                self.coordinator_call(CoordinatorType::Transaction, id, &request, |r| {
                    transaction_described(id, coordinator, r)
                })
                .await
            }
            .await;
            results.push((id.to_owned(), result));
        }
        Ok(results)
    }
}

impl Admin {
    /// The producers each of `partitions` of `topic` knows (DescribeProducers to each
    /// partition's leader), one result per partition.
    ///
    /// # Errors
    /// The topic's metadata error or a leader not reached; per partition, the leader's error
    /// (NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION...).
    pub async fn describe_producers(
        &self,
        topic: &str,
        partitions: &[i32],
    ) -> Result<ItemResults<i32, Vec<ProducerState>>, Error> {
        let build = |asked: &[i32]| {
            DescribeProducersRequest::default().with_topics(vec![TopicRequest::default()
                .with_name(TopicName(s(topic)))
                .with_partition_indexes(asked.to_vec())])
        };
        self.per_leader(ApiKey::DescribeProducers, topic, partitions, build, |r| {
            producers_described(topic, r)
        })
        .await
    }

    /// Aborts a producer's open transaction on one partition by writing the abort marker
    /// there (WriteTxnMarkers to the partition's leader): for a transaction its coordinator
    /// will never finish (Kafka's `kafka-transactions abort`).
    ///
    /// # Errors
    /// The partition's error (NOT_LEADER_OR_FOLLOWER after retries, TRANSACTION_COORDINATOR_FENCED
    /// for a stale coordinator epoch, CLUSTER_AUTHORIZATION_FAILED...).
    pub async fn abort_transaction(&self, abort: &AbortTransaction) -> Result<(), Error> {
        let request =
            WriteTxnMarkersRequest::default().with_markers(vec![WritableTxnMarker::default()
                .with_producer_id(ProducerId(abort.producer_id))
                .with_producer_epoch(abort.producer_epoch)
                .with_transaction_result(false)
                .with_coordinator_epoch(abort.coordinator_epoch)
                .with_topics(vec![WritableTxnMarkerTopic::default()
                    .with_name(TopicName(s(&abort.topic)))
                    .with_partition_indexes(vec![abort.partition])])]);
        self.cluster
            .retry(|| async {
                let leader = self
                    .cluster
                    .try_leader(&abort.topic, abort.partition)
                    .await?;
                let response = self.cluster.send(leader, &request).await?;
                marker_written(abort, response)
            })
            .await
    }

    /// Aborts the transaction of `transactional_id` at its coordinator, prepared
    /// (two-phase-commit, KIP-939) or not, and fences its producer: an InitProducerId with
    /// `Enable2Pc` and without `KeepPreparedTxn`, as Kafka's `forceTerminateTransaction`
    /// sends. For a prepared transaction no one will complete, which would otherwise hold
    /// the last stable offset (and its share acknowledgements TX_PENDING) for ever.
    ///
    /// # Errors
    /// [`Error::Kafka`]: TRANSACTIONAL_ID_AUTHORIZATION_FAILED when the broker does not allow
    /// two-phase commit; UNSUPPORTED_VERSION from a coordinator without InitProducerId v6.
    pub async fn force_terminate_transaction(&self, transactional_id: &str) -> Result<(), Error> {
        let node = self
            .cluster
            .coordinator(CoordinatorType::Transaction, transactional_id)
            .await?;
        let version = self
            .cluster
            .api_versions(node)
            .await?
            .version(ApiKey::InitProducerId)?;
        if version < TWO_PHASE_COMMIT_VERSION {
            // Below v6 the flag would be dropped: refuse, as the broker would.
            return check(
                ApiKey::InitProducerId,
                ErrorCode::UNSUPPORTED_VERSION.code(),
                None,
            );
        }
        let request = InitProducerIdV6(
            InitProducerIdRequest::default()
                .with_transactional_id(Some(TransactionalId(s(transactional_id))))
                // Ignored for a two-phase-commit producer; valid for any broker.
                .with_transaction_timeout_ms(60_000)
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1)
                .with_enable_2_pc(true)
                .with_keep_prepared_txn(false),
        );
        self.coordinator_call(
            CoordinatorType::Transaction,
            transactional_id,
            &request,
            |r| check(ApiKey::InitProducerId, r.error_code, None),
        )
        .await
    }
}

fn producers_described(
    topic: &str,
    response: DescribeProducersResponse,
) -> Vec<(i32, Result<Vec<ProducerState>, Error>)> {
    response
        .topics
        .into_iter()
        .filter(|t| t.name.0.as_str() == topic)
        .flat_map(|t| t.partitions)
        .map(|p| {
            let result = check(
                ApiKey::DescribeProducers,
                p.error_code,
                p.error_message.as_ref(),
            )
            .map(|()| {
                p.active_producers
                    .into_iter()
                    .map(|a| ProducerState {
                        producer_id: a.producer_id.0,
                        producer_epoch: a.producer_epoch,
                        last_sequence: a.last_sequence,
                        last_timestamp_ms: a.last_timestamp,
                        coordinator_epoch: a.coordinator_epoch,
                        current_txn_start_offset: (a.current_txn_start_offset >= 0)
                            .then_some(a.current_txn_start_offset),
                    })
                    .collect()
            });
            (p.partition_index, result)
        })
        .collect()
}

/// The partition's result in a WriteTxnMarkers answer; a leader error that says metadata is
/// stale is retriable, and [`crate::Cluster::retry`] refreshes metadata before trying again.
fn marker_written(
    abort: &AbortTransaction,
    response: WriteTxnMarkersResponse,
) -> Result<(), Error> {
    let code = response
        .markers
        .into_iter()
        .filter(|m| m.producer_id.0 == abort.producer_id)
        .flat_map(|m| m.topics)
        .filter(|t| t.name.0.as_str() == abort.topic)
        .flat_map(|t| t.partitions)
        .find(|p| p.partition_index == abort.partition)
        .map(|p| p.error_code)
        .ok_or_else(|| Error::IncompleteResponse {
            api: ApiKey::WriteTxnMarkers,
            item: format!("{}-{}", abort.topic, abort.partition),
        })?;
    check(ApiKey::WriteTxnMarkers, code, None)
}

fn transaction_described(
    id: &str,
    coordinator_id: i32,
    response: DescribeTransactionsResponse,
) -> Result<TransactionDescription, Error> {
    let answers = response.transaction_states.into_iter().map(|t| {
        let result = check(ApiKey::DescribeTransactions, t.error_code, None).map(|()| {
            TransactionDescription {
                state: t.transaction_state.to_string(),
                producer_id: t.producer_id.0,
                producer_epoch: t.producer_epoch,
                timeout: Duration::from_millis(
                    u64::try_from(t.transaction_timeout_ms).unwrap_or(0),
                ),
                start_time_ms: (t.transaction_start_time_ms >= 0)
                    .then_some(t.transaction_start_time_ms),
                partitions: t
                    .topics
                    .into_iter()
                    .flat_map(|tp| {
                        let topic = tp.topic.0.to_string();
                        tp.partitions.into_iter().map(move |p| (topic.clone(), p))
                    })
                    .collect(),
                coordinator_id,
            }
        });
        (t.transactional_id.0.to_string(), result)
    });
    let mut one = in_order(ApiKey::DescribeTransactions, &[id.to_owned()], answers);
    one.pop().map_or_else(
        || {
            Err(Error::IncompleteResponse {
                api: ApiKey::DescribeTransactions,
                item: id.to_owned(),
            })
        },
        |(_, r)| r,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::describe_producers_response::{
        PartitionResponse, ProducerState as WireProducer, TopicResponse,
    };
    use kafka_protocol::messages::write_txn_markers_response::{
        WritableTxnMarkerPartitionResult, WritableTxnMarkerResult, WritableTxnMarkerTopicResult,
    };

    #[test]
    fn producers_read_no_open_transaction_as_none_and_keep_partition_errors() {
        let response =
            DescribeProducersResponse::default().with_topics(vec![TopicResponse::default()
                .with_name(TopicName(s("t")))
                .with_partitions(vec![
                    PartitionResponse::default()
                        .with_partition_index(0)
                        .with_active_producers(vec![
                            WireProducer::default()
                                .with_producer_id(ProducerId(7))
                                .with_current_txn_start_offset(-1),
                            WireProducer::default()
                                .with_producer_id(ProducerId(8))
                                .with_current_txn_start_offset(42),
                        ]),
                    PartitionResponse::default()
                        .with_partition_index(1)
                        .with_error_code(ErrorCode::NOT_LEADER_OR_FOLLOWER.0),
                ])]);
        let results = in_order(
            ApiKey::DescribeProducers,
            &[0, 1, 2],
            producers_described("t", response),
        );
        let producers = results[0].1.as_ref().unwrap();
        assert_eq!(producers[0].current_txn_start_offset, None);
        assert_eq!(producers[1].current_txn_start_offset, Some(42));
        assert!(results[1]
            .1
            .as_ref()
            .unwrap_err()
            .requires_metadata_refresh());
        assert!(matches!(
            results[2].1,
            Err(Error::IncompleteResponse { .. })
        ));
    }

    #[test]
    fn an_abort_reads_its_own_partition_s_result() {
        let abort = AbortTransaction {
            topic: "t".into(),
            partition: 1,
            producer_id: 7,
            producer_epoch: 0,
            coordinator_epoch: -1,
        };
        let answer = |pid: i64, partition: i32, code: i16| {
            WriteTxnMarkersResponse::default().with_markers(vec![WritableTxnMarkerResult::default(
            )
            .with_producer_id(ProducerId(pid))
            .with_topics(vec![WritableTxnMarkerTopicResult::default()
                .with_name(TopicName(s("t")))
                .with_partitions(vec![WritableTxnMarkerPartitionResult::default()
                    .with_partition_index(partition)
                    .with_error_code(code)])])])
        };
        assert!(marker_written(&abort, answer(7, 1, 0)).is_ok());
        let e = marker_written(
            &abort,
            answer(7, 1, ErrorCode::TRANSACTION_COORDINATOR_FENCED.0),
        );
        assert_eq!(
            e.unwrap_err().code(),
            ErrorCode::TRANSACTION_COORDINATOR_FENCED
        );
        for other in [answer(8, 1, 0), answer(7, 0, 0)] {
            assert!(matches!(
                marker_written(&abort, other),
                Err(Error::IncompleteResponse { .. })
            ));
        }
    }
    use kafka_protocol::messages::describe_transactions_response::{TopicData, TransactionState};
    use shoal_protocol::ErrorCode;

    #[test]
    fn a_described_transaction_flattens_partitions_and_maps_errors() {
        let response = DescribeTransactionsResponse::default().with_transaction_states(vec![
            TransactionState::default()
                .with_transactional_id(TransactionalId(s("t")))
                .with_transaction_state(s("Ongoing"))
                .with_producer_id(ProducerId(5))
                .with_transaction_timeout_ms(60_000)
                .with_transaction_start_time_ms(-1)
                .with_topics(vec![TopicData::default()
                    .with_topic(TopicName(s("a")))
                    .with_partitions(vec![0, 2])]),
        ]);
        let d = transaction_described("t", 1, response).unwrap();
        assert_eq!(
            d.partitions,
            vec![("a".to_string(), 0), ("a".to_string(), 2)]
        );
        assert_eq!(d.timeout, Duration::from_secs(60));
        assert_eq!(d.start_time_ms, None);
        let unknown = DescribeTransactionsResponse::default().with_transaction_states(vec![
            TransactionState::default()
                .with_transactional_id(TransactionalId(s("t")))
                .with_error_code(ErrorCode::TRANSACTIONAL_ID_NOT_FOUND.0),
        ]);
        let e = transaction_described("t", 1, unknown).unwrap_err();
        assert_eq!(e.code(), ErrorCode::TRANSACTIONAL_ID_NOT_FOUND);
        let e = transaction_described("t", 1, DescribeTransactionsResponse::default()).unwrap_err();
        assert!(matches!(e, Error::IncompleteResponse { .. }));
    }
}
