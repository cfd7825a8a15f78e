//! FindCoordinator and DescribeCluster: on a single node, this broker is every coordinator.

use shoal_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use shoal_protocol::messages::find_coordinator_response::Coordinator;
use shoal_protocol::messages::{
    BrokerId, DescribeClusterRequest, DescribeClusterResponse, FindCoordinatorRequest,
    FindCoordinatorResponse,
};
use shoal_protocol::ErrorCode;

use super::str_bytes;
use crate::broker::Broker;

/// Coordinator key types (FindCoordinator `KeyType`).
const KEY_TYPE_GROUP: i8 = 0;
const KEY_TYPE_TRANSACTION: i8 = 1;
const KEY_TYPE_SHARE: i8 = 2;

fn coordinator_error(key_type: i8, key: &str, version: i16) -> Option<(ErrorCode, String)> {
    match key_type {
        KEY_TYPE_GROUP if key.is_empty() => Some((
            ErrorCode::INVALID_REQUEST,
            "Group id must not be empty".into(),
        )),
        KEY_TYPE_GROUP => None,
        KEY_TYPE_TRANSACTION if key.is_empty() => Some((
            ErrorCode::INVALID_REQUEST,
            "Transactional id must not be empty".into(),
        )),
        KEY_TYPE_TRANSACTION => None,
        KEY_TYPE_SHARE if version < 6 => Some((
            ErrorCode::INVALID_REQUEST,
            "Share coordinator keys need FindCoordinator v6".into(),
        )),
        KEY_TYPE_SHARE => Some((
            ErrorCode::COORDINATOR_NOT_AVAILABLE,
            "The share coordinator is not available.".into(),
        )),
        other => Some((
            ErrorCode::INVALID_REQUEST,
            format!("Unknown coordinator type {other}"),
        )),
    }
}

pub fn find_coordinator(
    broker: &Broker,
    version: i16,
    request: &FindCoordinatorRequest,
) -> FindCoordinatorResponse {
    let mut response = FindCoordinatorResponse::default();
    let node = BrokerId(broker.node_id);
    let host = str_bytes(broker.advertised_host.clone());
    let port = i32::from(broker.advertised_port);
    if version < 4 {
        let key = request.key.as_str();
        match coordinator_error(request.key_type, key, version) {
            Some((code, message)) => {
                response.error_code = code.code();
                response.error_message = Some(str_bytes(message));
                response.node_id = BrokerId(-1);
                response.host = str_bytes("");
                response.port = -1;
            }
            None => {
                response.node_id = node;
                response.host = host;
                response.port = port;
            }
        }
        return response;
    }
    response.coordinators = request
        .coordinator_keys
        .iter()
        .map(|key| {
            let mut c = Coordinator::default().with_key(key.clone());
            match coordinator_error(request.key_type, key.as_str(), version) {
                Some((code, message)) => {
                    c.error_code = code.code();
                    c.error_message = Some(str_bytes(message));
                    c.node_id = BrokerId(-1);
                    c.host = str_bytes("");
                    c.port = -1;
                }
                None => {
                    c.node_id = node;
                    c.host = host.clone();
                    c.port = port;
                }
            }
            c
        })
        .collect();
    response
}

pub fn describe_cluster(
    broker: &Broker,
    request: &DescribeClusterRequest,
) -> DescribeClusterResponse {
    let mut response = DescribeClusterResponse::default();
    // Endpoint type 1 = brokers, 2 = controllers (KIP-919); this node is both.
    response.endpoint_type = request.endpoint_type.max(1);
    response.cluster_id = str_bytes(broker.cluster_id.clone());
    response.controller_id = BrokerId(broker.node_id);
    response.cluster_authorized_operations = i32::MIN;
    response.brokers = vec![DescribeClusterBroker::default()
        .with_broker_id(BrokerId(broker.node_id))
        .with_host(str_bytes(broker.advertised_host.clone()))
        .with_port(i32::from(broker.advertised_port))];
    response
}
