//! FindCoordinator and DescribeCluster: the coordinator of a key is the owner of its internal
//! partition, and the brokers are the live nodes, as `seams::ownership` says.

use shoal_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use shoal_protocol::messages::find_coordinator_response::Coordinator;
use shoal_protocol::messages::{
    BrokerId, DescribeClusterRequest, DescribeClusterResponse, FindCoordinatorRequest,
    FindCoordinatorResponse,
};
use shoal_protocol::ErrorCode;

use super::{str_bytes, RequestContext};
use crate::broker::Broker;
use crate::leadership::CoordinatorKind;
use crate::seams::ownership::Node;

/// Coordinator key types (FindCoordinator `KeyType`).
const KEY_TYPE_GROUP: i8 = 0;
const KEY_TYPE_TRANSACTION: i8 = 1;
const KEY_TYPE_SHARE: i8 = 2;

/// The node coordinating `key`, or the error and message to answer.
fn coordinator(
    broker: &Broker,
    ctx: &RequestContext,
    key_type: i8,
    key: &str,
    version: i16,
) -> Result<Node, (ErrorCode, String)> {
    let owner = |kind| {
        broker
            .coordinator_node(kind, key)
            .map(|node| ctx.endpoint(broker.node_id, node))
            .map_err(|code| (code, "The coordinator is not available.".to_string()))
    };
    match key_type {
        KEY_TYPE_GROUP if key.is_empty() => Err((
            ErrorCode::INVALID_REQUEST,
            "Group id must not be empty".into(),
        )),
        KEY_TYPE_GROUP => owner(CoordinatorKind::Group),
        KEY_TYPE_TRANSACTION if key.is_empty() => Err((
            ErrorCode::INVALID_REQUEST,
            "Transactional id must not be empty".into(),
        )),
        KEY_TYPE_TRANSACTION => owner(CoordinatorKind::Transaction),
        KEY_TYPE_SHARE if version < 6 => Err((
            ErrorCode::INVALID_REQUEST,
            "Share coordinator keys need FindCoordinator v6".into(),
        )),
        KEY_TYPE_SHARE => Err((
            ErrorCode::COORDINATOR_NOT_AVAILABLE,
            "The share coordinator is not available.".into(),
        )),
        other => Err((
            ErrorCode::INVALID_REQUEST,
            format!("Unknown coordinator type {other}"),
        )),
    }
}

pub fn find_coordinator(
    broker: &Broker,
    ctx: &RequestContext,
    version: i16,
    request: &FindCoordinatorRequest,
) -> FindCoordinatorResponse {
    let mut response = FindCoordinatorResponse::default();
    if version < 4 {
        let key = request.key.as_str();
        match coordinator(broker, ctx, request.key_type, key, version) {
            Err((code, message)) => {
                response.error_code = code.code();
                response.error_message = Some(str_bytes(message));
                response.node_id = BrokerId(-1);
                response.host = str_bytes("");
                response.port = -1;
            }
            Ok(node) => {
                response.node_id = BrokerId(node.node_id);
                response.host = str_bytes(node.host);
                response.port = i32::from(node.port);
            }
        }
        return response;
    }
    response.coordinators = request
        .coordinator_keys
        .iter()
        .map(|key| {
            let mut c = Coordinator::default().with_key(key.clone());
            match coordinator(broker, ctx, request.key_type, key.as_str(), version) {
                Err((code, message)) => {
                    c.error_code = code.code();
                    c.error_message = Some(str_bytes(message));
                    c.node_id = BrokerId(-1);
                    c.host = str_bytes("");
                    c.port = -1;
                }
                Ok(node) => {
                    c.node_id = BrokerId(node.node_id);
                    c.host = str_bytes(node.host);
                    c.port = i32::from(node.port);
                }
            }
            c
        })
        .collect();
    response
}

pub fn describe_cluster(
    broker: &Broker,
    ctx: &RequestContext,
    request: &DescribeClusterRequest,
) -> DescribeClusterResponse {
    let mut response = DescribeClusterResponse::default();
    // Endpoint type 1 = brokers, 2 = controllers (KIP-919); this node is both.
    response.endpoint_type = request.endpoint_type.max(1);
    response.cluster_id = str_bytes(broker.cluster_id.clone());
    response.controller_id = BrokerId(broker.node_id);
    response.cluster_authorized_operations = i32::MIN;
    response.brokers = broker
        .ownership
        .nodes()
        .into_iter()
        .map(|n| ctx.endpoint(broker.node_id, n))
        .map(|n| {
            DescribeClusterBroker::default()
                .with_broker_id(BrokerId(n.node_id))
                .with_host(str_bytes(n.host))
                .with_port(i32::from(n.port))
                .with_rack(n.rack.map(str_bytes))
        })
        .collect();
    response
}
