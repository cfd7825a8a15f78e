//! Where a share partition's state is read and written: this node's share-state coordinator
//! when it owns the share partition's `__share_group_state` partition, else that partition's
//! owner, over Kafka's share-state RPCs (InitializeShareGroupState, ReadShareGroupState,
//! WriteShareGroupState, DeleteShareGroupState, ReadShareGroupStateSummary) — the calls a
//! Kafka share-partition leader makes through its persister. The owner serves them in
//! `handlers::share_state`; both sides convert with [`wire`].
//!
//! One node owns every partition, so it always asks itself. In a cluster the owner is looked
//! up for each call: a call racing a move is refused by whichever side no longer owns the
//! partition (NOT_COORDINATOR), and the share-partition leader answers its client with a
//! retriable error, as for a local write that failed.
//!
//! Every failure is one code: the owner's refusal as it answered it, or
//! KAFKA_STORAGE_ERROR when the state could not be reached (the local coordinator is not
//! running or failed its write, the owner is unknown, moving, loading or unreachable), which
//! share clients retry.
//!
//! Not routed: KIP-1289's stagings, which are transactional batches of the producer in the
//! state partition and have no Kafka RPC; `ShareManager::stage` refuses those whose state
//! partition is owned elsewhere (decision 0027).
//!
//! Must not: answer for a partition the other side refused, or trust a peer's response
//! (missing partitions and batches that do not decode are failures).

use shoal_core::share_coordinator::{
    state_partition, InitializeState, ReadState, SharePartitionKey, StateSummary, WriteState,
};
use shoal_protocol::ErrorCode;

use crate::coordinators::log_io::partition_count;
use crate::coordinators::share_coordinator::{ShareStateService, Unavailable, SHARE_GROUP_STATE};
use crate::node::NodeState;
use crate::seams::ownership::Node;

/// The code for state that cannot be reached just now.
pub const UNREACHABLE: ErrorCode = ErrorCode::KAFKA_STORAGE_ERROR;

/// Where the state of one share partition is served.
enum Route {
    Here,
    Peer(Node),
}

/// The `__share_group_state` partition holding `key`.
pub fn state_partition_of(node: &NodeState, key: &SharePartitionKey) -> i32 {
    state_partition(key, partition_count(node, SHARE_GROUP_STATE))
}

fn route(node: &NodeState, key: &SharePartitionKey) -> Result<Route, ErrorCode> {
    if !node.in_cluster() {
        return Ok(Route::Here);
    }
    let index = state_partition_of(node, key);
    let owner = node
        .internal_owner(SHARE_GROUP_STATE, index)
        .map_err(|_| UNREACHABLE)?;
    if owner.node_id != node.node_id {
        return Ok(Route::Peer(owner));
    }
    node.serves_internal(SHARE_GROUP_STATE, index)
        .map_err(|_| UNREACHABLE)?;
    Ok(Route::Here)
}

/// Whether `key`'s state is served by this node's share-state coordinator.
pub fn served_here(node: &NodeState, key: &SharePartitionKey) -> bool {
    matches!(route(node, key), Ok(Route::Here))
}

fn local<T>(
    answer: Result<Result<T, shoal_core::share_coordinator::ShareStateError>, Unavailable>,
) -> Result<T, ErrorCode> {
    match answer {
        Ok(Ok(t)) => Ok(t),
        Ok(Err(e)) => Err(ErrorCode(e.error_code().0)),
        Err(Unavailable) => Err(UNREACHABLE),
    }
}

/// A peer's per-partition code: a move or a load under way means "not reachable now".
fn remote_code(code: i16) -> Result<(), ErrorCode> {
    match ErrorCode(code) {
        ErrorCode::NONE => Ok(()),
        ErrorCode::NOT_COORDINATOR
        | ErrorCode::COORDINATOR_NOT_AVAILABLE
        | ErrorCode::COORDINATOR_LOAD_IN_PROGRESS => Err(UNREACHABLE),
        other => Err(other),
    }
}

/// ReadShareGroupState: the persisted state of `key`, None when it has none.
///
/// # Errors
/// See the module docs.
pub async fn read(
    node: &NodeState,
    service: &ShareStateService,
    key: &SharePartitionKey,
    leader_epoch: i32,
) -> Result<Option<ReadState>, ErrorCode> {
    match route(node, key)? {
        Route::Here => local(service.read(key, leader_epoch).await),
        Route::Peer(peer) => {
            let request = wire::read_request(key, leader_epoch);
            let response = node
                .peers
                .request(&peer, 0, &request)
                .await
                .map_err(|_| UNREACHABLE)?;
            let (code, read) = wire::read_result(&response, key).ok_or(UNREACHABLE)?;
            remote_code(code)?;
            Ok(read)
        }
    }
}

/// InitializeShareGroupState.
///
/// # Errors
/// See the module docs.
pub async fn initialize(
    node: &NodeState,
    service: &ShareStateService,
    key: &SharePartitionKey,
    state: InitializeState,
) -> Result<(), ErrorCode> {
    match route(node, key)? {
        Route::Here => local(service.initialize(key, state).await),
        Route::Peer(peer) => {
            let request = wire::initialize_request(key, state);
            let response = node
                .peers
                .request(&peer, 0, &request)
                .await
                .map_err(|_| UNREACHABLE)?;
            remote_code(wire::initialize_code(&response, key).ok_or(UNREACHABLE)?)
        }
    }
}

/// WriteShareGroupState.
///
/// # Errors
/// See the module docs.
pub async fn write(
    node: &NodeState,
    service: &ShareStateService,
    key: &SharePartitionKey,
    state: WriteState,
) -> Result<(), ErrorCode> {
    match route(node, key)? {
        Route::Here => local(service.write(key, state).await),
        Route::Peer(peer) => {
            let request = wire::write_request(key, &state);
            let response = node
                .peers
                .request(&peer, 0, &request)
                .await
                .map_err(|_| UNREACHABLE)?;
            remote_code(wire::write_code(&response, key).ok_or(UNREACHABLE)?)
        }
    }
}

/// ReadShareGroupStateSummary: None when `key` has no state.
///
/// # Errors
/// See the module docs.
pub async fn summary(
    node: &NodeState,
    service: &ShareStateService,
    key: &SharePartitionKey,
) -> Result<Option<StateSummary>, ErrorCode> {
    match route(node, key)? {
        Route::Here => service.summary(key).await.map_err(|_| UNREACHABLE),
        Route::Peer(peer) => {
            let request = wire::summary_request(key);
            let response = node
                .peers
                .request(&peer, 0, &request)
                .await
                .map_err(|_| UNREACHABLE)?;
            let (code, summary) = wire::summary_result(&response, key).ok_or(UNREACHABLE)?;
            remote_code(code)?;
            Ok(summary)
        }
    }
}

/// Restarts `key` at `start_offset` under the next state epoch. Here in one step; through a
/// peer as Kafka's admin path does it: the summary's state epoch, then an initialization at
/// the one after (the owner refuses it if another reset won in between: FENCED_STATE_EPOCH).
///
/// # Errors
/// See the module docs.
pub async fn reset(
    node: &NodeState,
    service: &ShareStateService,
    key: &SharePartitionKey,
    start_offset: i64,
) -> Result<(), ErrorCode> {
    match route(node, key)? {
        Route::Here => local(service.reset(key, start_offset).await),
        Route::Peer(_) => {
            let state_epoch = summary(node, service, key)
                .await?
                .map_or(0, |s| s.state_epoch.saturating_add(1));
            let state = InitializeState {
                state_epoch,
                start_offset,
            };
            initialize(node, service, key, state).await
        }
    }
}

/// DeleteShareGroupState for `keys` (one group or many), each at its owner.
///
/// # Errors
/// The first failure; the other keys are still asked.
pub async fn delete(
    node: &NodeState,
    service: &ShareStateService,
    keys: &[SharePartitionKey],
) -> Result<(), ErrorCode> {
    let mut here = Vec::new();
    let mut first_error = None;
    for key in keys {
        let outcome = match route(node, key) {
            Ok(Route::Here) => {
                here.push(key.clone());
                Ok(())
            }
            Ok(Route::Peer(peer)) => {
                let request = wire::delete_request(key);
                match node.peers.request(&peer, 0, &request).await {
                    Ok(response) => wire::delete_code(&response, key)
                        .ok_or(UNREACHABLE)
                        .and_then(remote_code),
                    Err(_) => Err(UNREACHABLE),
                }
            }
            Err(e) => Err(e),
        };
        if let Err(e) = outcome {
            first_error.get_or_insert(e);
        }
    }
    if !here.is_empty() && service.delete(here).await.is_err() {
        first_error.get_or_insert(UNREACHABLE);
    }
    first_error.map_or(Ok(()), Err)
}

/// The share-state RPCs' messages to and from Shoal's types, for one share partition per
/// request (the persister's calls) and for the owner's answers.
///
/// A TX_PENDING batch carries its staging (`StagedTxn`) in the state batch's tagged field 0,
/// the encoding `__share_group_state`'s records use; Kafka's readers skip it.
/// `DeliveryCompleteCount` (WriteShareGroupState and ReadShareGroupStateSummary version 1,
/// which the codec does not have) travels in the partition's tagged field
/// [`DELIVERY_COMPLETE_COUNT_TAG`] at version 0.
pub mod wire {
    use std::collections::BTreeMap;

    use bytes::Bytes;
    use shoal_core::share_coordinator::{
        InitializeState, ReadState, SharePartitionKey, StagedTxn, StateBatch, StateSummary,
        TopicId, WriteState, STAGED_TXN_TAG,
    };
    use shoal_protocol::messages::{
        delete_share_group_state_request as dreq, delete_share_group_state_response as dres,
        initialize_share_group_state_request as ireq,
        initialize_share_group_state_response as ires, read_share_group_state_request as rreq,
        read_share_group_state_response as rres, read_share_group_state_summary_request as sreq,
        read_share_group_state_summary_response as sres, write_share_group_state_request as wreq,
        write_share_group_state_response as wres, DeleteShareGroupStateRequest,
        DeleteShareGroupStateResponse, InitializeShareGroupStateRequest,
        InitializeShareGroupStateResponse, ReadShareGroupStateRequest, ReadShareGroupStateResponse,
        ReadShareGroupStateSummaryRequest, ReadShareGroupStateSummaryResponse,
        WriteShareGroupStateRequest, WriteShareGroupStateResponse,
    };
    use shoal_protocol::StrBytes;
    use uuid::Uuid;

    /// Shoal's tag for `DeliveryCompleteCount` on a version-0 WriteShareGroupState partition.
    pub const DELIVERY_COMPLETE_COUNT_TAG: i32 = 10_000;

    /// Start offset a read or summary answers for a share partition with no state (Kafka's
    /// uninitialized start offset).
    pub const NO_STATE_START_OFFSET: i64 = -1;

    fn group(key: &SharePartitionKey) -> StrBytes {
        StrBytes::from_string(key.group_id.clone())
    }

    fn topic_uuid(key: &SharePartitionKey) -> Uuid {
        Uuid::from_bytes(key.topic_id.0)
    }

    /// The key of a partition named in a request of `group_id`.
    pub fn key(group_id: &str, topic_id: Uuid, partition: i32) -> SharePartitionKey {
        SharePartitionKey::new(group_id, TopicId(topic_id.into_bytes()), partition)
    }

    /// `DeliveryCompleteCount` as Shoal's tagged field (left out when unknown).
    fn count_tag(count: i32) -> BTreeMap<i32, Bytes> {
        (count != -1)
            .then(|| {
                (
                    DELIVERY_COMPLETE_COUNT_TAG,
                    Bytes::copy_from_slice(&count.to_be_bytes()),
                )
            })
            .into_iter()
            .collect()
    }

    /// [`count_tag`] read back: -1 when absent, None when malformed.
    fn count_of(tags: &BTreeMap<i32, Bytes>) -> Option<i32> {
        match tags.get(&DELIVERY_COMPLETE_COUNT_TAG) {
            None => Some(-1),
            Some(b) => Some(i32::from_be_bytes(b.as_ref().try_into().ok()?)),
        }
    }

    fn staged_tag(staged: Option<StagedTxn>) -> BTreeMap<i32, Bytes> {
        staged
            .map(|t| (STAGED_TXN_TAG as i32, Bytes::copy_from_slice(&t.to_bytes())))
            .into_iter()
            .collect()
    }

    /// A batch's staging from its tagged fields; Err when the tag is there but malformed.
    fn staged_of(tags: &BTreeMap<i32, Bytes>) -> Result<Option<StagedTxn>, ()> {
        match tags.get(&(STAGED_TXN_TAG as i32)) {
            None => Ok(None),
            Some(b) => StagedTxn::from_bytes(b).map(Some).ok_or(()),
        }
    }

    /// Batches on the wire to Shoal's; None when a staging tag is malformed.
    pub fn batches_from<I>(wire: I) -> Option<Vec<StateBatch>>
    where
        I: IntoIterator<Item = (i64, i64, i8, i16, BTreeMap<i32, Bytes>)>,
    {
        wire.into_iter()
            .map(|(first, last, state, count, tags)| {
                let mut b = StateBatch::new(first, last, state, count);
                b.staged_txn = staged_of(&tags).ok()?;
                Some(b)
            })
            .collect()
    }

    pub fn read_request(key: &SharePartitionKey, leader_epoch: i32) -> ReadShareGroupStateRequest {
        ReadShareGroupStateRequest::default()
            .with_group_id(group(key))
            .with_topics(vec![rreq::ReadStateData::default()
                .with_topic_id(topic_uuid(key))
                .with_partitions(vec![rreq::PartitionData::default()
                    .with_partition(key.partition)
                    .with_leader_epoch(leader_epoch)])])
    }

    /// The owner's answer for one partition of a read.
    pub fn read_partition(
        partition: i32,
        answer: Result<Option<&ReadState>, (i16, String)>,
    ) -> rres::PartitionResult {
        let out = rres::PartitionResult::default().with_partition(partition);
        match answer {
            Err((code, message)) => out
                .with_error_code(code)
                .with_error_message(Some(StrBytes::from_string(message)))
                .with_start_offset(NO_STATE_START_OFFSET),
            Ok(None) => out.with_start_offset(NO_STATE_START_OFFSET),
            Ok(Some(read)) => out
                .with_state_epoch(read.state_epoch)
                .with_start_offset(read.start_offset)
                .with_state_batches(
                    read.state_batches
                        .iter()
                        .map(|b| {
                            rres::StateBatch::default()
                                .with_first_offset(b.first_offset)
                                .with_last_offset(b.last_offset)
                                .with_delivery_state(b.delivery_state)
                                .with_delivery_count(b.delivery_count)
                                .with_unknown_tagged_fields(staged_tag(b.staged_txn))
                        })
                        .collect(),
                ),
        }
    }

    fn single<'a, P>(
        results: impl IntoIterator<Item = (&'a Uuid, &'a Vec<P>)>,
        key: &SharePartitionKey,
        partition_of: impl Fn(&P) -> i32,
    ) -> Option<&'a P>
    where
        P: 'a,
    {
        let topic = topic_uuid(key);
        results
            .into_iter()
            .filter(|(t, _)| **t == topic)
            .flat_map(|(_, ps)| ps.iter())
            .find(|p| partition_of(p) == key.partition)
    }

    /// (error code, state) of `key` in a read's response; None when it is missing or its
    /// batches do not decode.
    pub fn read_result(
        response: &ReadShareGroupStateResponse,
        key: &SharePartitionKey,
    ) -> Option<(i16, Option<ReadState>)> {
        let p = single(
            response
                .results
                .iter()
                .map(|r| (&r.topic_id, &r.partitions)),
            key,
            |p| p.partition,
        )?;
        if p.error_code != 0 || p.start_offset == NO_STATE_START_OFFSET {
            return Some((p.error_code, None));
        }
        let state_batches = batches_from(p.state_batches.iter().map(|b| {
            (
                b.first_offset,
                b.last_offset,
                b.delivery_state,
                b.delivery_count,
                b.unknown_tagged_fields.clone(),
            )
        }))?;
        Some((
            0,
            Some(ReadState {
                state_epoch: p.state_epoch,
                start_offset: p.start_offset,
                state_batches,
            }),
        ))
    }

    pub fn initialize_request(
        key: &SharePartitionKey,
        state: InitializeState,
    ) -> InitializeShareGroupStateRequest {
        InitializeShareGroupStateRequest::default()
            .with_group_id(group(key))
            .with_topics(vec![ireq::InitializeStateData::default()
                .with_topic_id(topic_uuid(key))
                .with_partitions(vec![ireq::PartitionData::default()
                    .with_partition(key.partition)
                    .with_state_epoch(state.state_epoch)
                    .with_start_offset(state.start_offset)])])
    }

    pub fn initialize_code(
        response: &InitializeShareGroupStateResponse,
        key: &SharePartitionKey,
    ) -> Option<i16> {
        single(
            response
                .results
                .iter()
                .map(|r| (&r.topic_id, &r.partitions)),
            key,
            |p| p.partition,
        )
        .map(|p| p.error_code)
    }

    pub fn write_request(
        key: &SharePartitionKey,
        state: &WriteState,
    ) -> WriteShareGroupStateRequest {
        let tags = count_tag(state.delivery_complete_count);
        WriteShareGroupStateRequest::default()
            .with_group_id(group(key))
            .with_topics(vec![wreq::WriteStateData::default()
                .with_topic_id(topic_uuid(key))
                .with_partitions(vec![wreq::PartitionData::default()
                    .with_partition(key.partition)
                    .with_state_epoch(state.state_epoch)
                    .with_leader_epoch(state.leader_epoch)
                    .with_start_offset(state.start_offset)
                    .with_state_batches(
                        state
                            .state_batches
                            .iter()
                            .map(|b| {
                                wreq::StateBatch::default()
                                    .with_first_offset(b.first_offset)
                                    .with_last_offset(b.last_offset)
                                    .with_delivery_state(b.delivery_state)
                                    .with_delivery_count(b.delivery_count)
                                    .with_unknown_tagged_fields(staged_tag(b.staged_txn))
                            })
                            .collect(),
                    )
                    .with_unknown_tagged_fields(tags)])])
    }

    /// A written partition as Shoal's [`WriteState`]; None when a tag is malformed.
    pub fn write_state(p: &wreq::PartitionData) -> Option<WriteState> {
        let delivery_complete_count = count_of(&p.unknown_tagged_fields)?;
        let state_batches = batches_from(p.state_batches.iter().map(|b| {
            (
                b.first_offset,
                b.last_offset,
                b.delivery_state,
                b.delivery_count,
                b.unknown_tagged_fields.clone(),
            )
        }))?;
        Some(WriteState {
            state_epoch: p.state_epoch,
            leader_epoch: p.leader_epoch,
            start_offset: p.start_offset,
            delivery_complete_count,
            state_batches,
        })
    }

    pub fn write_code(
        response: &WriteShareGroupStateResponse,
        key: &SharePartitionKey,
    ) -> Option<i16> {
        single(
            response
                .results
                .iter()
                .map(|r| (&r.topic_id, &r.partitions)),
            key,
            |p| p.partition,
        )
        .map(|p| p.error_code)
    }

    pub fn summary_request(key: &SharePartitionKey) -> ReadShareGroupStateSummaryRequest {
        ReadShareGroupStateSummaryRequest::default()
            .with_group_id(group(key))
            .with_topics(vec![sreq::ReadStateSummaryData::default()
                .with_topic_id(topic_uuid(key))
                .with_partitions(vec![sreq::PartitionData::default()
                    .with_partition(key.partition)
                    .with_leader_epoch(-1)])])
    }

    /// The owner's answer for one partition of a summary.
    pub fn summary_partition(
        partition: i32,
        answer: Result<Option<&StateSummary>, (i16, String)>,
    ) -> sres::PartitionResult {
        let out = sres::PartitionResult::default().with_partition(partition);
        match answer {
            Err((code, message)) => out
                .with_error_code(code)
                .with_error_message(Some(StrBytes::from_string(message)))
                .with_start_offset(NO_STATE_START_OFFSET),
            Ok(None) => out.with_start_offset(NO_STATE_START_OFFSET),
            Ok(Some(s)) => out
                .with_state_epoch(s.state_epoch)
                .with_leader_epoch(s.leader_epoch)
                .with_start_offset(s.start_offset)
                .with_unknown_tagged_fields(count_tag(s.delivery_complete_count)),
        }
    }

    pub fn summary_result(
        response: &ReadShareGroupStateSummaryResponse,
        key: &SharePartitionKey,
    ) -> Option<(i16, Option<StateSummary>)> {
        let p = single(
            response
                .results
                .iter()
                .map(|r| (&r.topic_id, &r.partitions)),
            key,
            |p| p.partition,
        )?;
        if p.error_code != 0 || p.start_offset == NO_STATE_START_OFFSET {
            return Some((p.error_code, None));
        }
        let delivery_complete_count = count_of(&p.unknown_tagged_fields)?;
        Some((
            0,
            Some(StateSummary {
                state_epoch: p.state_epoch,
                leader_epoch: p.leader_epoch,
                start_offset: p.start_offset,
                delivery_complete_count,
            }),
        ))
    }

    pub fn delete_request(key: &SharePartitionKey) -> DeleteShareGroupStateRequest {
        DeleteShareGroupStateRequest::default()
            .with_group_id(group(key))
            .with_topics(vec![dreq::DeleteStateData::default()
                .with_topic_id(topic_uuid(key))
                .with_partitions(vec![
                    dreq::PartitionData::default().with_partition(key.partition)
                ])])
    }

    pub fn delete_code(
        response: &DeleteShareGroupStateResponse,
        key: &SharePartitionKey,
    ) -> Option<i16> {
        single(
            response
                .results
                .iter()
                .map(|r| (&r.topic_id, &r.partitions)),
            key,
            |p| p.partition,
        )
        .map(|p| p.error_code)
    }

    /// The answer to a request refused as a whole (authorization): `code` on every partition
    /// it names.
    pub fn refuse_read(r: &ReadShareGroupStateRequest, code: i16) -> ReadShareGroupStateResponse {
        ReadShareGroupStateResponse::default().with_results(
            r.topics
                .iter()
                .map(|t| {
                    rres::ReadStateResult::default()
                        .with_topic_id(t.topic_id)
                        .with_partitions(
                            t.partitions
                                .iter()
                                .map(|p| read_partition(p.partition, Err((code, String::new()))))
                                .collect(),
                        )
                })
                .collect(),
        )
    }

    /// As [`refuse_read`].
    pub fn refuse_summary(
        r: &ReadShareGroupStateSummaryRequest,
        code: i16,
    ) -> ReadShareGroupStateSummaryResponse {
        ReadShareGroupStateSummaryResponse::default().with_results(
            r.topics
                .iter()
                .map(|t| {
                    sres::ReadStateSummaryResult::default()
                        .with_topic_id(t.topic_id)
                        .with_partitions(
                            t.partitions
                                .iter()
                                .map(|p| summary_partition(p.partition, Err((code, String::new()))))
                                .collect(),
                        )
                })
                .collect(),
        )
    }

    /// As [`refuse_read`].
    pub fn refuse_initialize(
        r: &InitializeShareGroupStateRequest,
        code: i16,
    ) -> InitializeShareGroupStateResponse {
        InitializeShareGroupStateResponse::default().with_results(
            r.topics
                .iter()
                .map(|t| {
                    ires::InitializeStateResult::default()
                        .with_topic_id(t.topic_id)
                        .with_partitions(
                            t.partitions
                                .iter()
                                .map(|p| {
                                    ires::PartitionResult::default()
                                        .with_partition(p.partition)
                                        .with_error_code(code)
                                })
                                .collect(),
                        )
                })
                .collect(),
        )
    }

    /// As [`refuse_read`].
    pub fn refuse_write(
        r: &WriteShareGroupStateRequest,
        code: i16,
    ) -> WriteShareGroupStateResponse {
        WriteShareGroupStateResponse::default().with_results(
            r.topics
                .iter()
                .map(|t| {
                    wres::WriteStateResult::default()
                        .with_topic_id(t.topic_id)
                        .with_partitions(
                            t.partitions
                                .iter()
                                .map(|p| {
                                    wres::PartitionResult::default()
                                        .with_partition(p.partition)
                                        .with_error_code(code)
                                })
                                .collect(),
                        )
                })
                .collect(),
        )
    }

    /// As [`refuse_read`].
    pub fn refuse_delete(
        r: &DeleteShareGroupStateRequest,
        code: i16,
    ) -> DeleteShareGroupStateResponse {
        DeleteShareGroupStateResponse::default().with_results(
            r.topics
                .iter()
                .map(|t| {
                    dres::DeleteStateResult::default()
                        .with_topic_id(t.topic_id)
                        .with_partitions(
                            t.partitions
                                .iter()
                                .map(|p| {
                                    dres::PartitionResult::default()
                                        .with_partition(p.partition)
                                        .with_error_code(code)
                                })
                                .collect(),
                        )
                })
                .collect(),
        )
    }

    // Re-exported so the handler names one module.
    pub use dres::{DeleteStateResult, PartitionResult as DeletePartitionResult};
    pub use ires::{InitializeStateResult, PartitionResult as InitializePartitionResult};
    pub use rres::ReadStateResult;
    pub use sres::ReadStateSummaryResult;
    pub use wres::{PartitionResult as WritePartitionResult, WriteStateResult};
}

#[cfg(test)]
mod tests {
    use shoal_core::share_coordinator::{StagedTxn, StateBatch, TopicId, TX_PENDING_STATE_ID};
    use shoal_protocol::messages::{
        read_share_group_state_response as rres, ReadShareGroupStateResponse,
    };

    use super::wire;
    use super::*;

    fn key() -> SharePartitionKey {
        SharePartitionKey::new("g", TopicId([7; 16]), 3)
    }

    fn batches() -> Vec<StateBatch> {
        let mut staged = StateBatch::new(10, 12, TX_PENDING_STATE_ID, 1);
        staged.staged_txn = Some(StagedTxn {
            producer_id: 4_000_000_001,
            producer_epoch: 7,
            ack_type: 1,
            dead_lettered: false,
        });
        vec![StateBatch::new(5, 9, 2, 1), staged]
    }

    #[test]
    fn a_write_keeps_its_stagings_and_delivery_complete_count() {
        let state = WriteState {
            state_epoch: 2,
            leader_epoch: 5,
            start_offset: 5,
            delivery_complete_count: 5,
            state_batches: batches(),
        };
        let request = wire::write_request(&key(), &state);
        let p = &request.topics[0].partitions[0];
        assert_eq!(wire::write_state(p), Some(state.clone()));
        // Unknown stays unknown.
        let unknown = WriteState {
            delivery_complete_count: -1,
            ..state
        };
        let request = wire::write_request(&key(), &unknown);
        assert_eq!(
            wire::write_state(&request.topics[0].partitions[0]),
            Some(unknown)
        );
    }

    #[test]
    fn a_read_answer_round_trips_and_no_state_is_none() {
        let read = ReadState {
            state_epoch: 3,
            start_offset: 5,
            state_batches: batches(),
        };
        let response = |p: rres::PartitionResult| {
            ReadShareGroupStateResponse::default().with_results(vec![
                rres::ReadStateResult::default()
                    .with_topic_id(uuid::Uuid::from_bytes([7; 16]))
                    .with_partitions(vec![p]),
            ])
        };
        let answered = response(wire::read_partition(3, Ok(Some(&read))));
        assert_eq!(wire::read_result(&answered, &key()), Some((0, Some(read))));
        let none = response(wire::read_partition(3, Ok(None)));
        assert_eq!(wire::read_result(&none, &key()), Some((0, None)));
        let refused = response(wire::read_partition(3, Err((42, "no".into()))));
        assert_eq!(wire::read_result(&refused, &key()), Some((42, None)));
        // Another partition's answer is not this one's.
        let other = SharePartitionKey::new("g", TopicId([7; 16]), 4);
        assert_eq!(wire::read_result(&answered, &other), None);
    }

    #[test]
    fn a_malformed_staging_is_refused_not_guessed() {
        let mut p = wire::read_partition(
            3,
            Ok(Some(&ReadState {
                state_epoch: 0,
                start_offset: 5,
                state_batches: batches(),
            })),
        );
        let tags = &mut p.state_batches[1].unknown_tagged_fields;
        let tag = *tags.keys().next().expect("the staging travels as a tag");
        tags.insert(tag, bytes::Bytes::from_static(&[1, 2, 3]));
        let response = ReadShareGroupStateResponse::default().with_results(vec![
            rres::ReadStateResult::default()
                .with_topic_id(uuid::Uuid::from_bytes([7; 16]))
                .with_partitions(vec![p]),
        ]);
        assert_eq!(wire::read_result(&response, &key()), None);
    }
}
