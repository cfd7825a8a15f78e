//! InitProducerId. Without a transactional id (the idempotent producer): a fresh producer id at
//! epoch 0 — Kafka ignores the request's producer id and epoch then (a KIP-360 "bump" from an
//! idempotent producer also gets a fresh id), and so do we. With a transactional id the request
//! belongs to the transaction coordinator (`handlers::txn`).

use shoal_protocol::messages::{InitProducerIdRequest, InitProducerIdResponse, ProducerId};
use shoal_protocol::ErrorCode;

use crate::broker::Broker;
use crate::producer_state::AllocateError;

fn error(code: ErrorCode) -> InitProducerIdResponse {
    InitProducerIdResponse::default()
        .with_error_code(code.code())
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1)
}

/// Handles InitProducerId (versions 0-6): a transactional id goes to the transaction
/// coordinator. Not cancellation-sensitive: an id allocated for a response that is never sent
/// is simply unused.
pub async fn handle(
    broker: &Broker,
    version: i16,
    request: &InitProducerIdRequest,
) -> InitProducerIdResponse {
    match &request.transactional_id {
        // Kafka: an empty transactional id is INVALID_REQUEST.
        Some(id) if id.0.is_empty() => return error(ErrorCode::INVALID_REQUEST),
        Some(id) => {
            return crate::handlers::txn::init_producer_id(broker, version, request, id.0.as_str())
                .await
        }
        None => {}
    }
    match broker.producer_ids.allocate() {
        Ok(id) => InitProducerIdResponse::default()
            .with_error_code(0)
            .with_producer_id(ProducerId(id))
            .with_producer_epoch(0),
        Err(e) => {
            tracing::error!(error = %e, "cannot allocate a producer id");
            match e {
                // Retriable: the client tries again.
                AllocateError::Io { .. } | AllocateError::Pending => {
                    error(ErrorCode::COORDINATOR_LOAD_IN_PROGRESS)
                }
                _ => error(ErrorCode::UNKNOWN_SERVER_ERROR),
            }
        }
    }
}
