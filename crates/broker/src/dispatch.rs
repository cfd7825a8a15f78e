//! Routes a decoded request to its handler.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use shoal_protocol::messages::{SaslAuthenticateResponse, SaslHandshakeResponse};
use shoal_protocol::{ErrorCode, Request, RequestFrame, Response};
use shoal_storage::FileRegion;

use crate::authorization::{self, Patch, Screen};
use crate::broker::Broker;
use crate::handlers::RequestContext;
use crate::handlers::{
    acls, api_versions, cluster, configs, fetch, groups, init_producer_id, list_offsets, log_dirs,
    metadata, produce, scram, share_admin, share_fetch, share_groups, share_state, topics, txn,
    txn_share_ack,
};

/// A response that is ready, or one that completes later (a produce waiting for its fsync).
/// `None` means no response is sent at all (Produce with acks=0).
pub enum Reply {
    Now(Option<Response>),
    Later(Pin<Box<dyn Future<Output = Option<Response>> + Send>>),
    /// Close the connection (with this reason for the log): a Produce with acks=0 that failed
    /// somewhere, as Kafka does, so that the producer notices and refreshes its metadata.
    Close(String),
    /// A response whose record placeholders stand for these file regions, in encoding order
    /// (Fetch, ShareFetch; see [`crate::outbound`]).
    Records(Response, Vec<FileRegion>),
}

/// Handles one request. Work whose order matters (appends) is done before this returns, in
/// request order; only waiting (for an fsync, or for a coordinator's pass that already holds
/// the request) is left to [`Reply::Later`].
pub async fn dispatch(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    mut frame: RequestFrame,
) -> Reply {
    if !broker.authorization_enabled {
        return serve(broker, ctx, frame).await;
    }
    let version = frame.version();
    match authorization::screen(broker, ctx, version, &mut frame.body) {
        Screen::Pass => serve(broker, ctx, frame).await,
        Screen::Refuse(response) => match &frame.body {
            Request::Produce(r) if r.acks == 0 => {
                Reply::Close("produce with acks=0 was refused authorization".into())
            }
            _ => Reply::Now(Some(response)),
        },
        Screen::Patch(patch) => {
            if matches!(&frame.body, Request::Produce(r) if r.acks == 0) {
                return Reply::Close("produce with acks=0 was refused authorization".into());
            }
            patched(broker, ctx, serve(broker, ctx, frame).await, patch)
        }
    }
}

/// Adds the refused parts of a request back into its response ([`authorization::Patch`]).
fn patched(broker: &Arc<Broker>, ctx: &RequestContext, reply: Reply, patch: Patch) -> Reply {
    match reply {
        Reply::Now(Some(mut response)) => {
            patch.apply(&mut response, broker, ctx);
            Reply::Now(Some(response))
        }
        Reply::Later(future) => {
            let (broker, ctx) = (broker.clone(), ctx.clone());
            Reply::Later(Box::pin(async move {
                let mut response = future.await?;
                patch.apply(&mut response, &broker, &ctx);
                Some(response)
            }))
        }
        Reply::Records(mut response, regions) => {
            patch.apply(&mut response, broker, ctx);
            Reply::Records(response, regions)
        }
        other => other,
    }
}

async fn serve(broker: &Arc<Broker>, ctx: &RequestContext, frame: RequestFrame) -> Reply {
    if let Request::Produce(r) = &frame.body {
        let appended = produce::append(broker, frame.version(), r).await;
        if r.acks == 0 {
            if let Some(failure) = appended.failure() {
                return Reply::Close(format!("produce with acks=0 failed: {failure}"));
            }
        }
        if appended.waits() {
            let broker = broker.clone();
            return Reply::Later(Box::pin(async move {
                appended.finish(broker).await.map(Response::from)
            }));
        }
        return Reply::Now(appended.finish(broker.clone()).await.map(Response::from));
    }
    // Queued on the group coordinator now, in request order; answered once durable.
    if let Request::OffsetCommit(r) = &frame.body {
        let answer = groups::offset_commit(broker, frame.version(), r).await;
        return Reply::Later(Box::pin(async move { Some(answer.await.into()) }));
    }
    // Responses carrying records: those go from the segment files to the socket. (Neither API
    // is behind the feature gate of `respond`.)
    match &frame.body {
        Request::Fetch(r) => {
            let (response, regions) = fetch::handle(broker, frame.version(), r).await;
            return Reply::Records(response.into(), regions);
        }
        Request::ShareFetch(r) => {
            let (response, regions) =
                share_fetch::share_fetch(broker, ctx, frame.version(), r).await;
            return Reply::Records(response.into(), regions);
        }
        _ => {}
    }
    Reply::Now(respond(broker, ctx, frame).await)
}

async fn respond(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    frame: RequestFrame,
) -> Option<Response> {
    let version = frame.version();
    let client_id = frame
        .header
        .client_id
        .as_ref()
        .map(|c| c.to_string())
        .unwrap_or_default();
    // The feature gate: an API a feature level has turned off is decoded (so the client gets
    // an answer, not a closed connection) and answered UNSUPPORTED_VERSION here.
    if let Some(response) = api_versions::disabled_by_feature(broker, frame.body.api_key()) {
        return Some(response);
    }
    let response: Response = match &frame.body {
        Request::ApiVersions(r) => {
            let (finalized, epoch) = broker.features().await;
            api_versions::handle(&broker.api_table(), version, r, &finalized, epoch).into()
        }
        Request::UpdateFeatures(r) => {
            crate::handlers::features::update_features(broker, version, r)
                .await
                .into()
        }
        Request::Metadata(r) => metadata::handle(broker, ctx, version, r).await.into(),
        Request::ListOffsets(r) => list_offsets::handle(broker, version, r).into(),
        Request::DeleteRecords(r) => list_offsets::delete_records(broker, r).await.into(),
        Request::CreateTopics(r) => topics::create_topics(broker, version, r).await.into(),
        Request::DeleteTopics(r) => topics::delete_topics(broker, version, r).await.into(),
        Request::CreatePartitions(r) => topics::create_partitions(broker, r).await.into(),
        Request::DescribeConfigs(r) => configs::describe(broker, r).into(),
        Request::DescribeLogDirs(r) => log_dirs::describe_log_dirs(broker, r).into(),
        Request::AlterReplicaLogDirs(r) => log_dirs::alter_replica_log_dirs(broker, r).into(),
        Request::AlterConfigs(r) => configs::alter(broker, r).await.into(),
        Request::IncrementalAlterConfigs(r) => configs::incremental_alter(broker, r).await.into(),
        Request::InitProducerId(r) => init_producer_id::handle(broker, version, r).await.into(),
        Request::AddPartitionsToTxn(r) => {
            txn::add_partitions_to_txn(broker, version, r).await.into()
        }
        Request::AddOffsetsToTxn(r) => txn::add_offsets_to_txn(broker, version, r).await.into(),
        Request::EndTxn(r) => txn::end_txn(broker, version, r).await.into(),
        Request::TxnOffsetCommit(r) => groups::txn_offset_commit(broker, version, r).await.into(),
        Request::DescribeTransactions(r) => txn::describe_transactions(broker, r).await.into(),
        Request::ListTransactions(r) => txn::list_transactions(broker, r).await.into(),
        Request::WriteTxnMarkers(r) => txn::write_txn_markers(broker, r).await.into(),
        Request::InitializeShareGroupState(r) => share_state::initialize(broker, r).await.into(),
        Request::ReadShareGroupState(r) => share_state::read(broker, r).await.into(),
        Request::WriteShareGroupState(r) => share_state::write(broker, r).await.into(),
        Request::DeleteShareGroupState(r) => share_state::delete(broker, r).await.into(),
        Request::ReadShareGroupStateSummary(r) => share_state::summary(broker, r).await.into(),
        Request::DescribeProducers(r) => {
            crate::handlers::producers::describe_producers(broker, r).into()
        }
        Request::FindCoordinator(r) => cluster::find_coordinator(broker, ctx, version, r).into(),
        Request::DescribeCluster(r) => cluster::describe_cluster(broker, ctx, r).into(),
        Request::JoinGroup(r) => groups::join_group(broker, ctx, &client_id, version, r)
            .await
            .into(),
        Request::SyncGroup(r) => groups::sync_group(broker, version, r).await.into(),
        Request::Heartbeat(r) => groups::heartbeat(broker, r).await.into(),
        Request::LeaveGroup(r) => groups::leave_group(broker, version, r).await.into(),
        Request::OffsetFetch(r) => groups::offset_fetch(broker, version, r).await.into(),
        Request::DescribeGroups(r) => groups::describe_groups(broker, version, r).await.into(),
        Request::ListGroups(r) => groups::list_groups(broker, r).await.into(),
        Request::DeleteGroups(r) => groups::delete_groups(broker, r).await.into(),
        Request::OffsetDelete(r) => groups::offset_delete(broker, r).await.into(),
        Request::ShareGroupHeartbeat(r) => {
            share_groups::share_group_heartbeat(broker, ctx, &client_id, r)
                .await
                .into()
        }
        Request::ShareGroupDescribe(r) => {
            share_groups::share_group_describe(broker, r).await.into()
        }
        Request::ShareAcknowledge(r) => share_fetch::share_acknowledge(broker, version, r)
            .await
            .into(),
        Request::DescribeShareGroupOffsets(r) => {
            share_admin::describe_share_group_offsets(broker, version, r)
                .await
                .into()
        }
        Request::AlterShareGroupOffsets(r) => share_admin::alter_share_group_offsets(broker, r)
            .await
            .into(),
        Request::DeleteShareGroupOffsets(r) => share_admin::delete_share_group_offsets(broker, r)
            .await
            .into(),
        Request::DescribeUserScramCredentials(r) => scram::describe(broker, r).into(),
        Request::AlterUserScramCredentials(r) => scram::alter(broker, r).await.into(),
        // Outside a SASL listener's authentication (a PLAINTEXT listener, or after
        // authenticating), as Kafka's KafkaApis answers them.
        Request::SaslHandshake(_) => SaslHandshakeResponse::default()
            .with_error_code(ErrorCode::ILLEGAL_SASL_STATE.code())
            .into(),
        Request::SaslAuthenticate(_) => SaslAuthenticateResponse::default()
            .with_error_code(ErrorCode::ILLEGAL_SASL_STATE.code())
            .with_error_message(Some(shoal_protocol::StrBytes::from_static_str(
                "SaslAuthenticate request received after successful authentication",
            )))
            .into(),
        Request::TxnShareAcknowledge(r) => txn_share_ack::txn_share_acknowledge(broker, ctx, r)
            .await
            .into(),
        Request::CreateAcls(r) if broker.authorization_enabled => {
            acls::create(broker, r).await.into()
        }
        Request::DescribeAcls(r) if broker.authorization_enabled => {
            acls::describe(broker, r).into()
        }
        Request::DeleteAcls(r) if broker.authorization_enabled => {
            acls::delete(broker, r).await.into()
        }
        Request::CreateAcls(_) | Request::DescribeAcls(_) | Request::DeleteAcls(_) => {
            acls::security_disabled(&frame.body)
        }
        // The connection only decodes what the ApiVersions table serves, so the remaining
        // variants cannot reach here; answering nothing would hang the client, so close instead.
        other => {
            tracing::error!(api = ?other.api_key(), "request reached dispatch without a handler");
            return None;
        }
    };
    Some(response)
}
