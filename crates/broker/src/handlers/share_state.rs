//! Kafka's share-state RPCs, served by the owner of a `__share_group_state` partition to the
//! share-partition leaders of the cluster (`crate::share_state` is the calling side):
//! InitializeShareGroupState, ReadShareGroupState, WriteShareGroupState,
//! DeleteShareGroupState and ReadShareGroupStateSummary, each answered per partition from this
//! node's share-state coordinator once it is durable. A partition whose state partition this
//! node does not serve gets NOT_COORDINATOR (another node owns it),
//! COORDINATOR_LOAD_IN_PROGRESS (being replayed) or COORDINATOR_NOT_AVAILABLE, as Kafka's
//! share coordinator answers. Only brokers may call them: CLUSTER_ACTION on the cluster
//! (`crate::authorization`).

use shoal_core::share_coordinator::{SharePartitionKey, ShareStateError};
use shoal_protocol::messages as m;
use shoal_protocol::ErrorCode;

use crate::broker::Broker;
use crate::coordinators::share_coordinator::{Unavailable, SHARE_GROUP_STATE};
use crate::share_state::{state_partition_of, wire};

/// A refusal as (code, message).
type Refused = (i16, String);

fn serves(broker: &Broker, key: &SharePartitionKey) -> Result<(), Refused> {
    broker
        .serves_internal(SHARE_GROUP_STATE, state_partition_of(broker, key))
        .map_err(|e| (e.code(), format!("{e:?}")))
}

fn answered<T>(answer: Result<Result<T, ShareStateError>, Unavailable>) -> Result<T, Refused> {
    match answer {
        Ok(Ok(t)) => Ok(t),
        Ok(Err(e)) => Err((e.error_code().0, e.to_string())),
        Err(Unavailable) => Err((
            ErrorCode::COORDINATOR_NOT_AVAILABLE.code(),
            "the share-state coordinator is not available".into(),
        )),
    }
}

fn code_of(outcome: Result<(), Refused>) -> (i16, Option<shoal_protocol::StrBytes>) {
    match outcome {
        Ok(()) => (0, None),
        Err((code, message)) => (code, Some(shoal_protocol::StrBytes::from_string(message))),
    }
}

pub async fn read(
    broker: &Broker,
    r: &m::ReadShareGroupStateRequest,
) -> m::ReadShareGroupStateResponse {
    let mut results = Vec::with_capacity(r.topics.len());
    for t in &r.topics {
        let mut partitions = Vec::with_capacity(t.partitions.len());
        for p in &t.partitions {
            let key = wire::key(&r.group_id, t.topic_id, p.partition);
            let answer = match serves(broker, &key) {
                Ok(()) => answered(broker.share.state.read(&key, p.leader_epoch).await),
                Err(e) => Err(e),
            };
            partitions.push(wire::read_partition(
                p.partition,
                answer.as_ref().map(Option::as_ref).map_err(Clone::clone),
            ));
        }
        results.push(
            wire::ReadStateResult::default()
                .with_topic_id(t.topic_id)
                .with_partitions(partitions),
        );
    }
    m::ReadShareGroupStateResponse::default().with_results(results)
}

pub async fn summary(
    broker: &Broker,
    r: &m::ReadShareGroupStateSummaryRequest,
) -> m::ReadShareGroupStateSummaryResponse {
    let mut results = Vec::with_capacity(r.topics.len());
    for t in &r.topics {
        let mut partitions = Vec::with_capacity(t.partitions.len());
        for p in &t.partitions {
            let key = wire::key(&r.group_id, t.topic_id, p.partition);
            let answer = match serves(broker, &key) {
                Ok(()) => broker.share.state.summary(&key).await.map_err(|_| {
                    (
                        ErrorCode::COORDINATOR_NOT_AVAILABLE.code(),
                        "the share-state coordinator is not available".to_string(),
                    )
                }),
                Err(e) => Err(e),
            };
            partitions.push(wire::summary_partition(
                p.partition,
                answer.as_ref().map(Option::as_ref).map_err(Clone::clone),
            ));
        }
        results.push(
            wire::ReadStateSummaryResult::default()
                .with_topic_id(t.topic_id)
                .with_partitions(partitions),
        );
    }
    m::ReadShareGroupStateSummaryResponse::default().with_results(results)
}

pub async fn initialize(
    broker: &Broker,
    r: &m::InitializeShareGroupStateRequest,
) -> m::InitializeShareGroupStateResponse {
    use shoal_core::share_coordinator::InitializeState;
    let mut results = Vec::with_capacity(r.topics.len());
    for t in &r.topics {
        let mut partitions = Vec::with_capacity(t.partitions.len());
        for p in &t.partitions {
            let key = wire::key(&r.group_id, t.topic_id, p.partition);
            let state = InitializeState {
                state_epoch: p.state_epoch,
                start_offset: p.start_offset,
            };
            let outcome = match serves(broker, &key) {
                Ok(()) => answered(broker.share.state.initialize(&key, state).await),
                Err(e) => Err(e),
            };
            let (code, message) = code_of(outcome);
            partitions.push(
                wire::InitializePartitionResult::default()
                    .with_partition(p.partition)
                    .with_error_code(code)
                    .with_error_message(message),
            );
        }
        results.push(
            wire::InitializeStateResult::default()
                .with_topic_id(t.topic_id)
                .with_partitions(partitions),
        );
    }
    m::InitializeShareGroupStateResponse::default().with_results(results)
}

pub async fn write(
    broker: &Broker,
    r: &m::WriteShareGroupStateRequest,
) -> m::WriteShareGroupStateResponse {
    let mut results = Vec::with_capacity(r.topics.len());
    for t in &r.topics {
        let mut partitions = Vec::with_capacity(t.partitions.len());
        for p in &t.partitions {
            let key = wire::key(&r.group_id, t.topic_id, p.partition);
            let outcome = match (serves(broker, &key), wire::write_state(p)) {
                (Err(e), _) => Err(e),
                (Ok(()), None) => Err((
                    ErrorCode::INVALID_REQUEST.code(),
                    "malformed tagged field".into(),
                )),
                (Ok(()), Some(state)) => answered(broker.share.state.write(&key, state).await),
            };
            let (code, message) = code_of(outcome);
            partitions.push(
                wire::WritePartitionResult::default()
                    .with_partition(p.partition)
                    .with_error_code(code)
                    .with_error_message(message),
            );
        }
        results.push(
            wire::WriteStateResult::default()
                .with_topic_id(t.topic_id)
                .with_partitions(partitions),
        );
    }
    m::WriteShareGroupStateResponse::default().with_results(results)
}

pub async fn delete(
    broker: &Broker,
    r: &m::DeleteShareGroupStateRequest,
) -> m::DeleteShareGroupStateResponse {
    let mut results = Vec::with_capacity(r.topics.len());
    for t in &r.topics {
        let mut partitions = Vec::with_capacity(t.partitions.len());
        for p in &t.partitions {
            let key = wire::key(&r.group_id, t.topic_id, p.partition);
            let outcome = match serves(broker, &key) {
                Ok(()) => broker.share.state.delete(vec![key]).await.map_err(|_| {
                    (
                        ErrorCode::COORDINATOR_NOT_AVAILABLE.code(),
                        "the share-state coordinator is not available".to_string(),
                    )
                }),
                Err(e) => Err(e),
            };
            let (code, message) = code_of(outcome);
            partitions.push(
                wire::DeletePartitionResult::default()
                    .with_partition(p.partition)
                    .with_error_code(code)
                    .with_error_message(message),
            );
        }
        results.push(
            wire::DeleteStateResult::default()
                .with_topic_id(t.topic_id)
                .with_partitions(partitions),
        );
    }
    m::DeleteShareGroupStateResponse::default().with_results(results)
}
