//! Transaction APIs: InitProducerId with a transactional id, AddPartitionsToTxn,
//! AddOffsetsToTxn, EndTxn, DescribeTransactions and ListTransactions — wire messages to and
//! from the core transaction coordinator's types. Modern error codes are downgraded for old
//! request versions as Kafka does (PRODUCER_FENCED → INVALID_PRODUCER_EPOCH).

use std::collections::BTreeMap;

use shoal_core::group_coordinator::partition_for as group_partition_for;
use shoal_core::txn_coordinator::{
    self as tc, downgrade_error, ProducerEpoch, ProducerId, TopicPartition, TxnApi, TxnRequest,
    TxnResponse,
};
use shoal_protocol::messages::{
    self as m, add_partitions_to_txn_response as apr, describe_transactions_response as dtr,
    list_transactions_response as ltr,
};
use shoal_protocol::ErrorCode;

use super::{str_bytes, topic_name};
use crate::broker::{Broker, CONSUMER_OFFSETS};
use crate::leadership::CoordinatorKind;
use crate::participants::MarkerWritten;

const UNAVAILABLE: ErrorCode = ErrorCode::COORDINATOR_NOT_AVAILABLE;

fn code(api: TxnApi, version: i16, c: shoal_core::group_coordinator::ErrorCode) -> i16 {
    downgrade_error(api, version, c).code()
}

/// Sends a client's request to the transaction coordinator, once this node is found to
/// coordinate its transactional id. Err: the code to answer (NOT_COORDINATOR,
/// COORDINATOR_NOT_AVAILABLE).
async fn call(broker: &Broker, request: TxnRequest) -> Result<TxnResponse, ErrorCode> {
    broker.coordinates(CoordinatorKind::Transaction, request.transactional_id())?;
    broker.txn.call(request).await.map_err(|_| UNAVAILABLE)
}

/// The code to answer for a call that failed or answered with another response type.
fn failed<T>(answer: Result<T, ErrorCode>) -> i16 {
    answer.err().unwrap_or(UNAVAILABLE).code()
}

/// InitProducerId with a transactional id. Version 6 carries KIP-939's `Enable2Pc` and
/// `KeepPreparedTxn`; `KeepPreparedTxn` without `Enable2Pc` is INVALID_REQUEST. WRITE and,
/// with `Enable2Pc`, TWO_PHASE_COMMIT on the transactional id were checked before (see
/// [`crate::authorization`]).
pub async fn init_producer_id(
    broker: &Broker,
    version: i16,
    r: &m::InitProducerIdRequest,
    transactional_id: &str,
) -> m::InitProducerIdResponse {
    let mut out = m::InitProducerIdResponse::default()
        .with_producer_id(m::ProducerId(-1))
        .with_producer_epoch(-1);
    let Some(two_phase_commit) = tc::TwoPhaseCommit::from_flags(r.enable_2_pc, r.keep_prepared_txn)
    else {
        out.error_code = ErrorCode::INVALID_REQUEST.code();
        return out;
    };
    let request = TxnRequest::InitProducerId(tc::InitProducerIdRequest {
        transactional_id: transactional_id.to_string(),
        txn_timeout_ms: r.transaction_timeout_ms,
        producer_id: ProducerId(r.producer_id.0),
        producer_epoch: ProducerEpoch(r.producer_epoch),
        transaction_version_supported: broker
            .feature_level(crate::feature_levels::TRANSACTION_VERSION)
            .await
            >= 2,
        fresh_producer_id: None,
        two_phase_commit,
    });
    match call(broker, request).await {
        Ok(TxnResponse::InitProducerId(i)) => {
            out.error_code = code(TxnApi::InitProducerId, version, i.error_code);
            if i.error_code.is_none() {
                out.producer_id = m::ProducerId(i.producer_id.0);
                out.producer_epoch = i.producer_epoch.0;
                out.ongoing_txn_producer_id = m::ProducerId(i.ongoing_txn_producer_id.0);
                out.ongoing_txn_producer_epoch = i.ongoing_txn_producer_epoch.0;
            }
        }
        other => out.error_code = failed(other),
    }
    out
}

/// The partitions of one transaction, checked to exist; unknown ones get
/// UNKNOWN_TOPIC_OR_PARTITION and the rest OPERATION_NOT_ATTEMPTED, as Kafka answers.
fn check_partitions(
    broker: &Broker,
    topics: &[m::add_partitions_to_txn_request::AddPartitionsToTxnTopic],
) -> Result<Vec<TopicPartition>, BTreeMap<(String, i32), ErrorCode>> {
    let mut ok = Vec::new();
    let mut unknown = BTreeMap::new();
    for t in topics {
        let name = t.name.0.to_string();
        let topic = broker.topic(&name);
        for &p in &t.partitions {
            if topic.as_ref().is_some_and(|tp| tp.partition(p).is_some()) {
                ok.push(TopicPartition {
                    topic: name.clone(),
                    partition: p,
                });
            } else {
                unknown.insert((name.clone(), p), ErrorCode::UNKNOWN_TOPIC_OR_PARTITION);
            }
        }
    }
    if unknown.is_empty() {
        return Ok(ok);
    }
    for tp in ok {
        unknown.insert((tp.topic, tp.partition), ErrorCode::OPERATION_NOT_ATTEMPTED);
    }
    Err(unknown)
}

async fn add_one(
    broker: &Broker,
    version: i16,
    transactional_id: &str,
    producer_id: i64,
    producer_epoch: i16,
    verify_only: bool,
    topics: &[m::add_partitions_to_txn_request::AddPartitionsToTxnTopic],
) -> Vec<apr::AddPartitionsToTxnTopicResult> {
    let results: BTreeMap<(String, i32), i16> = match check_partitions(broker, topics) {
        Err(errors) => errors.into_iter().map(|(k, c)| (k, c.code())).collect(),
        Ok(partitions) => {
            // From v5, a broker asking for the partitions of a transaction version 2
            // producer's Produce to be added (not only verified) adds them implicitly, as
            // the coordinator does for its own Produce (`handlers::produce`).
            let request = if version >= 5 && !verify_only {
                TxnRequest::AddPartitionsImplicit(tc::AddPartitionsImplicitRequest {
                    transactional_id: transactional_id.to_string(),
                    producer_id: ProducerId(producer_id),
                    producer_epoch: ProducerEpoch(producer_epoch),
                    partitions,
                })
            } else {
                TxnRequest::AddPartitions(tc::AddPartitionsRequest {
                    transactional_id: transactional_id.to_string(),
                    producer_id: ProducerId(producer_id),
                    producer_epoch: ProducerEpoch(producer_epoch),
                    partitions,
                    verify_only,
                })
            };
            match call(broker, request).await {
                Ok(TxnResponse::AddPartitions(a)) | Ok(TxnResponse::AddPartitionsImplicit(a)) => a
                    .results
                    .into_iter()
                    .map(|p| {
                        (
                            (p.topic, p.partition),
                            code(TxnApi::AddPartitionsToTxn, version, p.error_code),
                        )
                    })
                    .collect(),
                other => {
                    let code = failed(other);
                    topics
                        .iter()
                        .flat_map(|t| {
                            t.partitions
                                .iter()
                                .map(|&p| ((t.name.0.to_string(), p), code))
                        })
                        .collect()
                }
            }
        }
    };
    topics
        .iter()
        .map(|t| {
            apr::AddPartitionsToTxnTopicResult::default()
                .with_name(t.name.clone())
                .with_results_by_partition(
                    t.partitions
                        .iter()
                        .map(|&p| {
                            apr::AddPartitionsToTxnPartitionResult::default()
                                .with_partition_index(p)
                                .with_partition_error_code(
                                    *results
                                        .get(&(t.name.0.to_string(), p))
                                        .unwrap_or(&UNAVAILABLE.code()),
                                )
                        })
                        .collect(),
                )
        })
        .collect()
}

pub async fn add_partitions_to_txn(
    broker: &Broker,
    version: i16,
    r: &m::AddPartitionsToTxnRequest,
) -> m::AddPartitionsToTxnResponse {
    let mut out = m::AddPartitionsToTxnResponse::default();
    if version <= 3 {
        out.results_by_topic_v3_and_below = add_one(
            broker,
            version,
            r.v3_and_below_transactional_id.0.as_str(),
            r.v3_and_below_producer_id.0,
            r.v3_and_below_producer_epoch,
            false,
            &r.v3_and_below_topics,
        )
        .await;
        return out;
    }
    for t in &r.transactions {
        let topic_results = add_one(
            broker,
            version,
            t.transactional_id.0.as_str(),
            t.producer_id.0,
            t.producer_epoch,
            t.verify_only,
            &t.topics,
        )
        .await;
        out.results_by_transaction.push(
            apr::AddPartitionsToTxnResult::default()
                .with_transactional_id(t.transactional_id.clone())
                .with_topic_results(topic_results),
        );
    }
    out
}

pub async fn add_offsets_to_txn(
    broker: &Broker,
    version: i16,
    r: &m::AddOffsetsToTxnRequest,
) -> m::AddOffsetsToTxnResponse {
    let partitions = crate::coordinators::log_io::partition_count(broker, CONSUMER_OFFSETS);
    let request = TxnRequest::AddOffsets(tc::AddOffsetsRequest {
        transactional_id: r.transactional_id.0.to_string(),
        producer_id: ProducerId(r.producer_id.0),
        producer_epoch: ProducerEpoch(r.producer_epoch),
        group_id: r.group_id.0.to_string(),
        offsets_partition: group_partition_for(r.group_id.0.as_str(), partitions) as i32,
    });
    let error = match call(broker, request).await {
        Ok(TxnResponse::AddOffsets(a)) => code(TxnApi::AddOffsetsToTxn, version, a.error_code),
        other => failed(other),
    };
    m::AddOffsetsToTxnResponse::default().with_error_code(error)
}

pub async fn end_txn(broker: &Broker, version: i16, r: &m::EndTxnRequest) -> m::EndTxnResponse {
    let request = TxnRequest::EndTxn(tc::EndTxnRequest {
        transactional_id: r.transactional_id.0.to_string(),
        producer_id: ProducerId(r.producer_id.0),
        producer_epoch: ProducerEpoch(r.producer_epoch),
        committed: r.committed,
        version,
        fresh_producer_id: None,
    });
    let mut out = m::EndTxnResponse::default()
        .with_producer_id(m::ProducerId(-1))
        .with_producer_epoch(-1);
    match call(broker, request).await {
        Ok(TxnResponse::EndTxn(e)) => {
            out.error_code = code(TxnApi::EndTxn, version, e.error_code);
            out.producer_id = m::ProducerId(e.producer_id.0);
            out.producer_epoch = e.producer_epoch.0;
        }
        other => out.error_code = failed(other),
    }
    out
}

pub async fn describe_transactions(
    broker: &Broker,
    r: &m::DescribeTransactionsRequest,
) -> m::DescribeTransactionsResponse {
    let not_here = |id: String, code: ErrorCode| {
        dtr::TransactionState::default()
            .with_error_code(code.code())
            .with_transactional_id(m::TransactionalId(str_bytes(id)))
    };
    let mut ids = Vec::new();
    let mut elsewhere = Vec::new();
    for id in r.transactional_ids.iter().map(|t| t.0.to_string()) {
        match broker.coordinates(CoordinatorKind::Transaction, &id) {
            Ok(()) => ids.push(id),
            Err(code) => elsewhere.push(not_here(id, code)),
        }
    }
    let states: Vec<_> = match broker.txn.describe(ids.clone()).await {
        Ok(list) => list
            .into_iter()
            .map(|d| {
                let mut by_topic: BTreeMap<String, Vec<i32>> = BTreeMap::new();
                for tp in d.partitions {
                    by_topic.entry(tp.topic).or_default().push(tp.partition);
                }
                dtr::TransactionState::default()
                    .with_error_code(d.error_code.code())
                    .with_transactional_id(m::TransactionalId(str_bytes(d.transactional_id)))
                    .with_transaction_state(str_bytes(d.state))
                    .with_transaction_timeout_ms(d.transaction_timeout_ms)
                    .with_transaction_start_time_ms(d.transaction_start_time_ms)
                    .with_producer_id(m::ProducerId(d.producer_id))
                    .with_producer_epoch(d.producer_epoch)
                    .with_topics(
                        by_topic
                            .into_iter()
                            .map(|(t, p)| {
                                dtr::TopicData::default()
                                    .with_topic(topic_name(t))
                                    .with_partitions(p)
                            })
                            .collect(),
                    )
            })
            .collect(),
        Err(_) => ids
            .into_iter()
            .map(|id| not_here(id, UNAVAILABLE))
            .collect(),
    };
    m::DescribeTransactionsResponse::default()
        .with_transaction_states(elsewhere.into_iter().chain(states).collect())
}

pub async fn list_transactions(
    broker: &Broker,
    r: &m::ListTransactionsRequest,
) -> m::ListTransactionsResponse {
    let request = tc::ListTransactionsRequest {
        state_filters: r.state_filters.iter().map(|s| s.to_string()).collect(),
        producer_id_filters: r.producer_id_filters.iter().map(|p| p.0).collect(),
        duration_filter_ms: r.duration_filter,
    };
    let mut out = m::ListTransactionsResponse::default();
    match broker.txn.list(request).await {
        Ok(list) => {
            out.unknown_state_filters = list
                .unknown_state_filters
                .into_iter()
                .map(str_bytes)
                .collect();
            out.transaction_states = list
                .transactions
                .into_iter()
                .map(|t| {
                    ltr::TransactionState::default()
                        .with_transactional_id(m::TransactionalId(str_bytes(t.transactional_id)))
                        .with_producer_id(m::ProducerId(t.producer_id))
                        .with_transaction_state(str_bytes(t.transaction_state))
                })
                .collect();
        }
        Err(_) => out.error_code = UNAVAILABLE.code(),
    }
    out
}

/// WriteTxnMarkers: markers written on request, as Kafka serves them to its coordinators and to
/// the admin client's abortTransaction (`kafka-transactions abort` for a hanging transaction).
/// Markers reaching a transactional participant's partition (`__consumer_offsets`,
/// `__share_group_state`) are also handed to it (`crate::participants`).
pub async fn write_txn_markers(
    broker: &std::sync::Arc<Broker>,
    r: &m::WriteTxnMarkersRequest,
) -> m::WriteTxnMarkersResponse {
    use m::write_txn_markers_response as wr;
    let mut markers = Vec::with_capacity(r.markers.len());
    for marker in &r.markers {
        let mut topics = Vec::with_capacity(marker.topics.len());
        for t in &marker.topics {
            let mut partitions = Vec::with_capacity(t.partition_indexes.len());
            for &index in &t.partition_indexes {
                let code = match crate::markers::partition(broker, t.name.0.as_str(), index) {
                    Err(code) => code,
                    Ok(partition) => {
                        let written = crate::participants::write_marker(
                            broker,
                            broker.as_ref(),
                            &partition,
                            crate::participants::TxnMarker {
                                partition: index,
                                producer_id: marker.producer_id.0,
                                producer_epoch: marker.producer_epoch,
                                commit: marker.transaction_result,
                            },
                            marker.coordinator_epoch,
                        )
                        .await;
                        match written {
                            Ok(MarkerWritten::Durable) => ErrorCode::NONE,
                            // Answered once durable, as Kafka answers WriteTxnMarkers.
                            Ok(MarkerWritten::At(_)) => {
                                match broker.durability.commit(vec![partition]).await {
                                    Ok(()) => ErrorCode::NONE,
                                    Err(e) => {
                                        tracing::error!(error = %e, "cannot flush transaction marker");
                                        e.error_code()
                                    }
                                }
                            }
                            Err(code) => code,
                        }
                    }
                };
                partitions.push(
                    wr::WritableTxnMarkerPartitionResult::default()
                        .with_partition_index(index)
                        .with_error_code(code.code()),
                );
            }
            topics.push(
                wr::WritableTxnMarkerTopicResult::default()
                    .with_name(t.name.clone())
                    .with_partitions(partitions),
            );
        }
        markers.push(
            wr::WritableTxnMarkerResult::default()
                .with_producer_id(marker.producer_id)
                .with_topics(topics),
        );
    }
    m::WriteTxnMarkersResponse::default().with_markers(markers)
}
