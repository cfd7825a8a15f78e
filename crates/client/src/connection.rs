//! [`Connection`]: one raw TCP connection to a broker that sends typed requests at the version
//! the caller names and reads the responses in order. No negotiation, no retries: the broker's
//! integration tests use it to send exactly the bytes they mean, malformed ones included. Use
//! [`crate::Cluster`] for anything else.
//!
//! Cancellation: [`Connection::request`] is not cancellation-safe — dropping its future midway
//! leaves the connection out of step with the broker; drop the connection too.

use std::net::SocketAddr;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Request, StrBytes};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Largest response frame accepted.
pub const RESPONSE_BYTES_MAX: usize = 256 * 1024 * 1024;

/// Why a request failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    #[error("encoding the request: {0}")]
    Encode(String),
    #[error("decoding the response: {0}")]
    Decode(String),
    #[error("response of {size} bytes exceeds {max}")]
    ResponseTooLarge { size: usize, max: usize },
    #[error("response correlation id {got} does not match request {expected}")]
    CorrelationMismatch { expected: i32, got: i32 },
    #[error("the broker closed the connection")]
    Closed,
}

/// One connection to a broker.
#[derive(Debug)]
pub struct Connection {
    stream: TcpStream,
    next_correlation_id: i32,
    client_id: String,
}

impl Connection {
    /// Connects to `addr`.
    ///
    /// # Errors
    /// When the TCP connection cannot be opened.
    pub async fn connect(addr: SocketAddr) -> Result<Connection, ClientError> {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        Ok(Connection {
            stream,
            next_correlation_id: 1,
            client_id: "shoal-client".to_string(),
        })
    }

    /// Sends `request` at `version` and waits for its response.
    ///
    /// # Errors
    /// I/O failures, a closed connection, or a response that does not decode.
    pub async fn request<R>(
        &mut self,
        version: i16,
        request: &R,
    ) -> Result<R::Response, ClientError>
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
            .with_client_id(Some(StrBytes::from_string(self.client_id.clone())));
        let mut body = BytesMut::new();
        header
            .encode(&mut body, R::header_version(version))
            .map_err(|e| ClientError::Encode(e.to_string()))?;
        request
            .encode(&mut body, version)
            .map_err(|e| ClientError::Encode(e.to_string()))?;
        self.send_frame(&body).await?;
        let mut frame = self.read_frame().await?;
        let header = ResponseHeader::decode(&mut frame, R::Response::header_version(version))
            .map_err(|e| ClientError::Decode(e.to_string()))?;
        if header.correlation_id != correlation_id {
            return Err(ClientError::CorrelationMismatch {
                expected: correlation_id,
                got: header.correlation_id,
            });
        }
        R::Response::decode(&mut frame, version).map_err(|e| ClientError::Decode(e.to_string()))
    }

    /// Writes one frame: a size prefix and `payload` (for tests of malformed input).
    ///
    /// # Errors
    /// I/O failures.
    pub async fn send_frame(&mut self, payload: &[u8]) -> Result<(), ClientError> {
        let mut buf = BytesMut::with_capacity(payload.len() + 4);
        buf.put_i32(
            i32::try_from(payload.len())
                .map_err(|_| ClientError::Encode("frame over 2 GiB".into()))?,
        );
        buf.put_slice(payload);
        self.stream.write_all(&buf).await?;
        Ok(())
    }

    /// Writes raw bytes with no framing (for tests of malformed input).
    ///
    /// # Errors
    /// I/O failures.
    pub async fn send_raw(&mut self, bytes: &[u8]) -> Result<(), ClientError> {
        self.stream.write_all(bytes).await?;
        Ok(())
    }

    /// Reads one response frame (without its size prefix).
    ///
    /// # Errors
    /// I/O failures, [`ClientError::Closed`] at end of stream, or an oversized frame.
    pub async fn read_frame(&mut self) -> Result<Bytes, ClientError> {
        let mut size = [0u8; 4];
        match self.stream.read_exact(&mut size).await {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                return Err(ClientError::Closed)
            }
            Err(e) => return Err(e.into()),
        }
        let size = i32::from_be_bytes(size);
        let size = usize::try_from(size)
            .map_err(|_| ClientError::Decode(format!("negative frame size {size}")))?;
        if size > RESPONSE_BYTES_MAX {
            return Err(ClientError::ResponseTooLarge {
                size,
                max: RESPONSE_BYTES_MAX,
            });
        }
        let mut buf = vec![0u8; size];
        match self.stream.read_exact(&mut buf).await {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                return Err(ClientError::Closed)
            }
            Err(e) => return Err(e.into()),
        }
        Ok(Bytes::from(buf))
    }

    /// True once the broker has closed the connection (reads end of stream).
    pub async fn is_closed_by_peer(&mut self) -> bool {
        let mut byte = [0u8; 1];
        matches!(self.stream.read(&mut byte).await, Ok(0) | Err(_))
    }
}

/// Reads the correlation id at the front of a response frame.
pub fn correlation_id(frame: &[u8]) -> Option<i32> {
    let mut b = frame.get(..4)?;
    Some(b.get_i32())
}
