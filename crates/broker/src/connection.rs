//! One client connection: frames in, requests handled one at a time, responses out in order.
//!
//! Kafka processes one request per connection at a time (it mutes the channel until the
//! response is sent), which keeps responses in request order for pipelining clients; so do we.
//! A frame that cannot be handled (oversized, unknown api key, unsupported version other than
//! ApiVersions', undecodable body) closes this connection with one log line and nothing else.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use shoal_protocol::frame::FrameDecoder;
use shoal_protocol::request::peek_header;
use shoal_protocol::{decode_request, encode_response, RequestError};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tracing::{debug, info, warn};

use crate::broker::Broker;
use crate::dispatch::{self, RequestContext};
use crate::handlers::api_versions;

const READ_BUFFER_BYTES: usize = 64 * 1024;

/// Serves one connection until the peer closes it, an error closes it, it stays idle for
/// `connections.max.idle.ms`, or shutdown is signalled.
pub async fn serve(
    broker: Arc<Broker>,
    mut stream: TcpStream,
    peer: SocketAddr,
    mut stop: watch::Receiver<bool>,
) {
    let _ = stream.set_nodelay(true);
    broker.metrics.connection_opened();
    let decoder = FrameDecoder::new(broker.config.long("socket.request.max.bytes") as usize);
    let idle = Duration::from_millis(broker.config.long("connections.max.idle.ms") as u64);
    let mut buf = BytesMut::with_capacity(READ_BUFFER_BYTES);
    let mut out = BytesMut::new();
    let ctx = RequestContext { peer };
    'conn: loop {
        loop {
            let frame = match decoder.decode(&mut buf) {
                Ok(Some(frame)) => frame,
                Ok(None) => break,
                Err(e) => {
                    warn!(%peer, error = %e, "closing connection: bad frame");
                    break 'conn;
                }
            };
            broker.metrics.bytes_in(frame.len() + 4);
            let started = Instant::now();
            out.clear();
            match handle_frame(&broker, &ctx, frame, &mut out).await {
                Ok(()) => {}
                Err(reason) => {
                    warn!(%peer, %reason, "closing connection");
                    break 'conn;
                }
            }
            if !out.is_empty() {
                broker.metrics.bytes_out(out.len());
                if let Err(e) = stream.write_all(&out).await {
                    debug!(%peer, error = %e, "write failed");
                    break 'conn;
                }
            }
            let _ = started;
            if *stop.borrow() {
                break 'conn;
            }
        }
        if buf.capacity() - buf.len() < READ_BUFFER_BYTES / 4 {
            buf.reserve(READ_BUFFER_BYTES);
        }
        tokio::select! {
            read = stream.read_buf(&mut buf) => match read {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) => {
                    debug!(%peer, error = %e, "read failed");
                    break;
                }
            },
            _ = stop.changed() => break,
            _ = tokio::time::sleep(idle) => {
                info!(%peer, "closing idle connection");
                break;
            }
        }
    }
    broker.metrics.connection_closed();
}

/// Handles one frame, appending the response frame (if any) to `out`.
///
/// # Errors
/// A reason to close the connection.
async fn handle_frame(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    frame: bytes::Bytes,
    out: &mut BytesMut,
) -> Result<(), String> {
    let Some(peeked) = peek_header(&frame) else {
        return Err(format!("request of {} bytes has no header", frame.len()));
    };
    let table = broker.api_table();
    if !table.serves(peeked.api_key, peeked.api_version) {
        if peeked.api_key == api_versions::API_KEY {
            // Kafka answers an ApiVersions it cannot parse at v0 so the client can retry.
            let response = api_versions::unsupported_version_response(&table);
            broker.metrics.request_error("ApiVersions", 35);
            return encode_response(out, peeked.correlation_id, 0, &response.into())
                .map_err(|e| format!("encoding ApiVersions fallback: {e}"));
        }
        broker.metrics.request_rejected();
        return Err(format!(
            "api key {} version {} is not supported",
            peeked.api_key, peeked.api_version
        ));
    }
    let request = decode_request(frame).map_err(|e| {
        broker.metrics.request_rejected();
        match e {
            RequestError::Malformed { .. } => e.to_string(),
            other => other.to_string(),
        }
    })?;
    let api = request.api_key;
    let version = request.version();
    let correlation_id = request.correlation_id();
    let started = Instant::now();
    let response = dispatch::dispatch(broker, ctx, request).await;
    let elapsed = started.elapsed();
    broker.metrics.request(api, elapsed);
    if let Some(response) = response {
        for code in dispatch::error_codes(&response) {
            broker.metrics.request_error(api_name(api), code);
        }
        encode_response(out, correlation_id, version, &response)
            .map_err(|e| format!("encoding {api:?} v{version} response: {e}"))?;
    }
    Ok(())
}

pub fn api_name(api: shoal_protocol::messages::ApiKey) -> &'static str {
    crate::metrics::api_name(api)
}
