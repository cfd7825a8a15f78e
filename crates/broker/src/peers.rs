//! Requests this broker sends to the other brokers of its cluster.
//!
//! Kafka's flows between brokers that Shoal runs: a transaction coordinator sends
//! WriteTxnMarkers to the owner of every partition of a transaction it does not own itself
//! (`coordinators::txn_coordinator`), and the owner writes the markers, hands those on a
//! participant's partition to its coordinator, and answers once they are durable
//! (`handlers::txn::write_txn_markers`), as Kafka's partition leaders do.
//!
//! A peer is reached at the address it registered (the one clients are given), over plain
//! TCP: the brokers of a cluster trust their network, as a Kafka cluster whose inter-broker
//! listener is PLAINTEXT does (decision 0024). One connection per peer, opened on first use,
//! reused, and dropped on any error or timeout — the caller retries, and the next request
//! opens a new one. Responses are checked, never trusted: a frame too large, a correlation id
//! out of step or a body that does not decode fails the request.
//!
//! Must not: hold a peer's connection lock across anything but that peer's request.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Buf, BufMut, BytesMut};
use shoal_protocol::kafka_protocol::messages::{RequestHeader, ResponseHeader};
use shoal_protocol::kafka_protocol::protocol::{
    Decodable, Encodable, HeaderVersion, Request, StrBytes,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::seams::ownership::Node;

/// How long one request to a peer may take, connecting included.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Largest response frame read from a peer.
const RESPONSE_BYTES_MAX: usize = 16 * 1024 * 1024;

/// The client id peers see in this broker's requests.
const CLIENT_ID: &str = "shoal-broker";

/// Open connections to the other brokers, by node id.
#[derive(Debug, Default)]
pub struct Peers {
    connections: Mutex<HashMap<i32, Arc<tokio::sync::Mutex<Option<PeerConnection>>>>>,
}

#[derive(Debug)]
struct PeerConnection {
    /// Where it was opened: a peer that registers a new address gets a new connection.
    address: (String, u16),
    stream: TcpStream,
    next_correlation_id: i32,
}

impl Peers {
    pub fn new() -> Self {
        Self::default()
    }

    /// Sends `request` at `version` to `peer` and returns its response.
    ///
    /// # Errors
    /// The peer cannot be reached, does not answer within the timeout, or answers with a
    /// frame that is not the response to this request. The connection is then dropped.
    pub async fn request<R>(
        &self,
        peer: &Node,
        version: i16,
        request: &R,
    ) -> anyhow::Result<R::Response>
    where
        R: Request + Encodable + HeaderVersion,
        R::Response: Decodable + HeaderVersion,
    {
        let slot = self
            .connections
            .lock()
            .expect("peer table lock poisoned")
            .entry(peer.node_id)
            .or_default()
            .clone();
        let mut connection = slot.lock().await;
        let address = (peer.host.clone(), peer.port);
        let answer = tokio::time::timeout(REQUEST_TIMEOUT, async {
            if connection.as_ref().is_none_or(|c| c.address != address) {
                let stream = TcpStream::connect((address.0.as_str(), address.1)).await?;
                stream.set_nodelay(true)?;
                *connection = Some(PeerConnection {
                    address: address.clone(),
                    stream,
                    next_correlation_id: 1,
                });
            }
            let c = connection.as_mut().expect("connection opened above");
            c.exchange(version, request).await
        })
        .await
        .unwrap_or_else(|_| Err(anyhow::anyhow!("no answer within {REQUEST_TIMEOUT:?}")));
        if answer.is_err() {
            *connection = None;
        }
        answer.map_err(|e| {
            anyhow::anyhow!(
                "broker {} at {}:{}: {e}",
                peer.node_id,
                peer.host,
                peer.port
            )
        })
    }
}

impl PeerConnection {
    async fn exchange<R>(&mut self, version: i16, request: &R) -> anyhow::Result<R::Response>
    where
        R: Request + Encodable + HeaderVersion,
        R::Response: Decodable + HeaderVersion,
    {
        let correlation_id = self.next_correlation_id;
        self.next_correlation_id = self.next_correlation_id.wrapping_add(1);
        let header = RequestHeader::default()
            .with_request_api_key(R::KEY)
            .with_request_api_version(version)
            .with_correlation_id(correlation_id)
            .with_client_id(Some(StrBytes::from_static_str(CLIENT_ID)));
        let mut body = BytesMut::new();
        header.encode(&mut body, R::header_version(version))?;
        request.encode(&mut body, version)?;
        let mut frame = BytesMut::with_capacity(4 + body.len());
        frame.put_i32(i32::try_from(body.len())?);
        frame.extend_from_slice(&body);
        self.stream.write_all(&frame).await?;

        let size = self.stream.read_i32().await?;
        let size = usize::try_from(size)
            .ok()
            .filter(|s| *s <= RESPONSE_BYTES_MAX)
            .ok_or_else(|| anyhow::anyhow!("response frame of {size} bytes"))?;
        let mut response = vec![0; size];
        self.stream.read_exact(&mut response).await?;
        let mut response = bytes::Bytes::from(response);
        let header = ResponseHeader::decode(&mut response, R::Response::header_version(version))?;
        anyhow::ensure!(
            header.correlation_id == correlation_id,
            "response to request {} where {correlation_id} was expected",
            header.correlation_id
        );
        let decoded = R::Response::decode(&mut response, version)?;
        anyhow::ensure!(
            !response.has_remaining(),
            "{} bytes after the response",
            response.remaining()
        );
        Ok(decoded)
    }
}
