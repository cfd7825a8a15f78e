//! TxnShareAcknowledge (KIP-1289, api key 95): a transactional producer stages a share-group
//! member's acknowledgements in its transaction, so that they commit or abort with the
//! transaction's output.
//!
//! The checks run in the order of the spec (§3.2), each failure answered with the code the
//! draft's Java client classifies (retriable, abortable, fatal), so a wrong code never turns an
//! abortable failure into a dead producer:
//!
//! 1. `share.version` below 3 (or `transaction.version` below 2): UNSUPPORTED_VERSION.
//! 2. Malformed: a null or empty transactional or group id, an empty member id, a partition
//!    named twice, batches not ascending, overlapping, first > last, a negative offset, or
//!    AcknowledgeTypes of a length other than 1 or last - first + 1: INVALID_REQUEST.
//! 3. A RELEASE, RENEW or unknown ack type: INVALID_RECORD_STATE.
//! 4. Authorization (with an authorizer): WRITE on the transactional id
//!    (TRANSACTIONAL_ID_AUTHORIZATION_FAILED), READ on the group (GROUP_AUTHORIZATION_FAILED),
//!    READ on each topic (TOPIC_AUTHORIZATION_FAILED), in that order
//!    ([`crate::authorization::txn_share_ack_refusal`]).
//! 5. The producer: TRANSACTIONAL_ID_NOT_FOUND, INVALID_PRODUCER_ID_MAPPING, PRODUCER_FENCED,
//!    CONCURRENT_TRANSACTIONS while the transaction completes, TRANSACTION_ABORTABLE past the
//!    partitions-per-transaction limit (as the coordinator answers Produce v12+ under KIP-890);
//!    COORDINATOR_NOT_AVAILABLE when the coordinator cannot answer (retriable).
//! 6. The member: GROUP_ID_NOT_FOUND, UNKNOWN_MEMBER_ID, STALE_MEMBER_EPOCH (older than the
//!    member's epoch), FENCED_MEMBER_EPOCH (newer).
//! 7. Per partition: UNKNOWN_TOPIC_ID, UNKNOWN_TOPIC_OR_PARTITION. Then the share-state
//!    partitions `__share_group_state-N` of every share partition are added to the
//!    transaction (transaction-version-2 style: the client sends no AddPartitionsToTxn for
//!    them), so that its markers reach them; with them, for a partition whose REJECTs the
//!    transaction can dead-letter ([`crate::dead_letter::in_transaction`]), its dead-letter
//!    partition.
//! 8. Staging, all or nothing across the request ([`crate::share::ShareManager::stage`]):
//!    INVALID_RECORD_STATE for an offset not ACQUIRED by the member; the dead letters of
//!    REJECTs written into the transaction; persisted (a transactional batch under the
//!    producer's id and epoch, fsynced) before the answer.
//!
//! Errors of steps 1–6 and failures of the whole write are top-level, with every partition
//! carrying the same code — except below `share.version` 3, where the request never reaches
//! this handler: the connection answers every feature-gated API with UNSUPPORTED_VERSION at
//! the top level and no partitions (`api_versions::disabled_by_feature`), which is what the
//! draft client reads first. A partition's own refusal (steps 7–8) is its ErrorCode with a
//! message; since nothing of the request is then staged, the top-level ErrorCode carries the
//! same code and the other partitions carry it too (a client reading any of them sees that
//! nothing was staged).
//!
//! Side effects: only step 7's registration (a transaction that has no other partition
//! becomes Ongoing) and step 8. A request refused before step 7 changes nothing.
//!
//! Steps 5–8 run in the order of `shoal_core::txn_share_ack::TxnShareAck`, a sans-IO machine
//! this handler drives (it makes the calls each step asks for) and the simulator drives too,
//! so the order the simulator checks is this one.

use std::collections::HashSet;
use std::sync::Arc;

use shoal_core::share_coordinator::{SharePartitionKey, TopicId};
use shoal_core::share_partition::{validate_acknowledge_batches, AckBatch, AcknowledgeType};
use shoal_core::txn_coordinator as tc;
use shoal_core::txn_share_ack::{Refusal, Step, TxnShareAck};
use shoal_protocol::share::txn_share_acknowledge::{
    TxnShareAcknowledgePartitionResponse, TxnShareAcknowledgeRequest,
    TxnShareAcknowledgeTopicResponse,
};
use shoal_protocol::share::TxnShareAcknowledgeResponse;
use shoal_protocol::ErrorCode;
use uuid::Uuid;

use super::{str_bytes, RequestContext};
use crate::broker::Broker;
use crate::dead_letter::InTransaction;
use crate::share::SHARE_GROUP_STATE;
use crate::share::{has_reject, StagePart, TxnProducer};
use shoal_core::group_coordinator::{ShareCall, ShareReply};

/// A refusal of the whole request.
fn refuse(code: ErrorCode, message: &'static str) -> Refusal {
    Refusal::request(code, message)
}

/// One share partition of the request, validated.
struct Part {
    topic_id: Uuid,
    partition: i32,
    batches: Vec<AckBatch>,
}

/// Handles one TxnShareAcknowledge.
pub async fn txn_share_acknowledge(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    r: &TxnShareAcknowledgeRequest,
) -> TxnShareAcknowledgeResponse {
    match handle(broker, ctx, r).await {
        Ok(()) => respond(r, ErrorCode::NONE, |_, _| None),
        Err(Failure::Request(f)) => {
            respond(r, f.code, |_, _| Some((f.code, f.message.to_string())))
        }
        Err(Failure::Partition {
            topic_id,
            partition,
            code,
            message,
        }) => respond(r, code, |t, p| {
            if t == topic_id && p == partition {
                Some((code, message.clone()))
            } else {
                Some((
                    code,
                    "not staged: another partition of the request was refused".into(),
                ))
            }
        }),
    }
}

enum Failure {
    Request(Refusal),
    Partition {
        topic_id: Uuid,
        partition: i32,
        code: ErrorCode,
        message: String,
    },
}

impl From<Refusal> for Failure {
    fn from(r: Refusal) -> Self {
        Failure::Request(r)
    }
}

async fn handle(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    r: &TxnShareAcknowledgeRequest,
) -> Result<(), Failure> {
    // Held until the staging is written, so that a downgrade below share.version 3 either
    // comes first (and this request is refused) or counts what this request staged.
    let _gate = broker.feature_gate.read().await;
    // 1. Feature levels.
    if !broker.txn_share_acks_enabled() {
        return Err(refuse(
            ErrorCode::UNSUPPORTED_VERSION,
            "transactional acknowledgements need share.version 3",
        )
        .into());
    }
    if broker
        .feature_level(crate::feature_levels::TRANSACTION_VERSION)
        .await
        < 2
    {
        return Err(refuse(
            ErrorCode::UNSUPPORTED_VERSION,
            "transactional acknowledgements need transaction.version 2",
        )
        .into());
    }
    // 2–3. The request's shape, then its ack types.
    let (transactional_id, group_id, member_id) = identify(r)?;
    let parts = parts(r)?;
    // 4. Authorization.
    let topics = parts.iter().map(|p| p.topic_id);
    if let Some(code) = crate::authorization::txn_share_ack_refusal(
        broker,
        ctx,
        &transactional_id,
        &group_id,
        topics,
    ) {
        return Err(refuse(code, "authorization failed").into());
    }
    if parts.is_empty() {
        return Ok(());
    }
    let producer = TxnProducer {
        producer_id: r.producer_id.0,
        producer_epoch: r.producer_epoch,
    };
    // 5–8 in the order of `shoal_core::txn_share_ack`, which the simulator drives too.
    let (keys, mut batches): (Vec<SharePartitionKey>, Vec<Vec<AckBatch>>) = parts
        .into_iter()
        .map(|p| {
            let key =
                SharePartitionKey::new(&group_id, TopicId(*p.topic_id.as_bytes()), p.partition);
            (key, p.batches)
        })
        .unzip();
    let state_partitions = crate::coordinators::log_io::partition_count(broker, SHARE_GROUP_STATE);
    // Where the transaction carries the dead letters of each partition's REJECTs (looked up
    // at step 7, registered with the state partitions).
    let mut dead_letters: Vec<Option<InTransaction>> = vec![None; keys.len()];
    let (mut flow, mut step) = TxnShareAck::start(
        producer.producer_id,
        producer.producer_epoch,
        r.member_epoch,
        &keys,
        state_partitions,
    );
    loop {
        step = match step {
            Step::MemberEpoch => {
                let call = ShareCall::MemberEpoch {
                    group_id: group_id.clone(),
                    member_id: member_id.clone(),
                };
                let current = match broker.groups.call_share(call).await {
                    Ok(ShareReply::MemberEpoch(current)) => current,
                    _ => Err(ErrorCode::COORDINATOR_NOT_AVAILABLE),
                };
                flow.member(current)
            }
            Step::DescribeProducer => {
                let described = broker.txn.describe(vec![transactional_id.clone()]).await;
                flow.described(described.ok().as_ref().and_then(|d| d.first()))
            }
            // 7. Each topic and partition, led here.
            Step::CheckPartitions => flow.partitions_checked(check_partitions(broker, &keys)),
            Step::Register(state_partitions) => {
                for ((key, b), slot) in keys.iter().zip(&batches).zip(dead_letters.iter_mut()) {
                    let queues = crate::share::partition_config(broker, &key.group_id).dead_letter;
                    if queues && has_reject(b) {
                        *slot = crate::dead_letter::in_transaction(broker, key).await;
                    }
                }
                let mut partitions: Vec<tc::TopicPartition> = state_partitions
                    .into_iter()
                    .map(|p| tc::TopicPartition::new(SHARE_GROUP_STATE, p))
                    .collect();
                for to in dead_letters.iter().flatten() {
                    let p = tc::TopicPartition::new(&to.topic, to.index);
                    if !partitions.contains(&p) {
                        partitions.push(p);
                    }
                }
                let request =
                    tc::TxnRequest::AddPartitionsImplicit(tc::AddPartitionsImplicitRequest {
                        transactional_id: transactional_id.clone(),
                        producer_id: tc::ProducerId(producer.producer_id),
                        producer_epoch: tc::ProducerEpoch(producer.producer_epoch),
                        partitions,
                    });
                let code = match broker.txn.call(request).await {
                    Ok(response) => response.error_code(),
                    Err(_) => ErrorCode::COORDINATOR_NOT_AVAILABLE,
                };
                flow.registered(code)
            }
            // 8. Stage, all or nothing.
            Step::Stage => {
                let parts = keys
                    .iter()
                    .cloned()
                    .zip(std::mem::take(&mut batches))
                    .zip(std::mem::take(&mut dead_letters))
                    .map(|((key, batches), dead_letters)| StagePart {
                        key,
                        batches,
                        dead_letters,
                    })
                    .collect();
                let staged = broker
                    .share
                    .stage(broker, producer, &member_id, parts)
                    .await;
                if let Err(refusal) = &staged {
                    tracing::debug!(group_id, member_id, code = ?refusal.code,
                        message = %refusal.message, "transactional acknowledgements refused");
                }
                flow.staged(staged)
            }
            Step::Answer(Ok(())) => return Ok(()),
            Step::Answer(Err(refusal)) => {
                return Err(match refusal.key {
                    Some(key) => Failure::Partition {
                        topic_id: Uuid::from_bytes(key.topic_id.0),
                        partition: key.partition,
                        code: refusal.code,
                        message: refusal.message,
                    },
                    None => Failure::Request(refusal),
                })
            }
        };
    }
}

/// Step 7's lookups: each share partition's topic exists and this broker leads the partition.
fn check_partitions(broker: &Broker, keys: &[SharePartitionKey]) -> Result<(), Refusal> {
    for key in keys {
        let Some(topic) = broker.topic_by_id(Uuid::from_bytes(key.topic_id.0)) else {
            return Err(Refusal::partition(
                ErrorCode::UNKNOWN_TOPIC_ID,
                key.clone(),
                "unknown topic id",
            ));
        };
        if let Err(code) = broker.led_partition(&topic, key.partition) {
            let message = if code == ErrorCode::UNKNOWN_TOPIC_OR_PARTITION {
                "unknown partition"
            } else {
                "this broker does not lead the partition"
            };
            return Err(Refusal::partition(code, key.clone(), message));
        }
    }
    Ok(())
}

/// Step 2: the ids. Returns (transactional id, group id, member id).
fn identify(r: &TxnShareAcknowledgeRequest) -> Result<(String, String, String), Refusal> {
    let transactional_id = r
        .transactional_id
        .as_ref()
        .map(|t| t.0.to_string())
        .filter(|t| !t.is_empty())
        .ok_or(refuse(
            ErrorCode::INVALID_REQUEST,
            "TransactionalId is required",
        ))?;
    let group_id = r
        .group_id
        .as_ref()
        .map(|g| g.0.to_string())
        .filter(|g| !g.is_empty())
        .ok_or(refuse(ErrorCode::INVALID_REQUEST, "GroupId is required"))?;
    let member_id = r
        .member_id
        .as_ref()
        .map(|m| m.to_string())
        .filter(|m| !m.is_empty() && m.chars().count() <= 36)
        .ok_or(refuse(ErrorCode::INVALID_REQUEST, "invalid MemberId"))?;
    Ok((transactional_id, group_id, member_id))
}

/// Steps 2 and 3 for the partitions: every partition's batches well formed (and no partition
/// twice), then every ack type transactional.
fn parts(r: &TxnShareAcknowledgeRequest) -> Result<Vec<Part>, Refusal> {
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for t in &r.topics {
        for p in &t.partitions {
            if !seen.insert((t.topic_id, p.partition_index)) {
                return Err(refuse(
                    ErrorCode::INVALID_REQUEST,
                    "a partition is named twice",
                ));
            }
            let batches: Vec<AckBatch> = p
                .acknowledgement_batches
                .iter()
                .map(|b| AckBatch::new(b.first_offset, b.last_offset, b.acknowledge_types.clone()))
                .collect();
            if batches.is_empty() {
                return Err(refuse(
                    ErrorCode::INVALID_REQUEST,
                    "a partition has no acknowledgement batches",
                ));
            }
            // The structure alone: types are step 3, after every partition's structure.
            let structural: Vec<AckBatch> = batches
                .iter()
                .map(|b| {
                    let ones = vec![AcknowledgeType::Accept.id(); b.ack_types.len()];
                    AckBatch::new(b.first_offset, b.last_offset, ones)
                })
                .collect();
            if validate_acknowledge_batches(&structural, false).is_err()
                || batches.iter().any(|b| b.first_offset < 0)
            {
                return Err(refuse(
                    ErrorCode::INVALID_REQUEST,
                    "malformed acknowledgement batches",
                ));
            }
            out.push(Part {
                topic_id: t.topic_id,
                partition: p.partition_index,
                batches,
            });
        }
    }
    let transactional = |id: i8| AcknowledgeType::from_id(id).is_some_and(|t| t.is_transactional());
    if out
        .iter()
        .flat_map(|p| &p.batches)
        .flat_map(|b| &b.ack_types)
        .any(|&id| !transactional(id))
    {
        return Err(refuse(
            ErrorCode::INVALID_RECORD_STATE,
            "only ACCEPT, REJECT and GAP can be acknowledged in a transaction",
        ));
    }
    Ok(out)
}

/// The response: per partition of the request, `partition_error(topic, partition)`'s code and
/// message (None: no error).
fn respond(
    r: &TxnShareAcknowledgeRequest,
    top: ErrorCode,
    partition_error: impl Fn(Uuid, i32) -> Option<(ErrorCode, String)>,
) -> TxnShareAcknowledgeResponse {
    TxnShareAcknowledgeResponse {
        error_code: top.code(),
        responses: r
            .topics
            .iter()
            .map(|t| TxnShareAcknowledgeTopicResponse {
                topic_id: t.topic_id,
                partitions: t
                    .partitions
                    .iter()
                    .map(|p| {
                        let error = partition_error(t.topic_id, p.partition_index);
                        TxnShareAcknowledgePartitionResponse {
                            partition_index: p.partition_index,
                            error_code: error.as_ref().map_or(0, |(c, _)| c.code()),
                            error_message: error.map(|(_, m)| str_bytes(m)),
                            ..Default::default()
                        }
                    })
                    .collect(),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}
