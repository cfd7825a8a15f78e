//! [`BrokerConnection`]: one negotiated connection to one broker.
//!
//! Opening it connects (within `socket.connection.setup.timeout.ms`) and sends ApiVersions
//! first; every later request goes out at the version [`ApiVersions::version`] picks, or not
//! at all. One request is in flight at a time; each waits at most `request.timeout.ms`.
//!
//! Responses are untrusted input. A frame's size prefix above `receive.message.max.bytes` (or
//! negative) is refused before any allocation; below it, the buffer grows with the bytes that
//! actually arrive, never with what the prefix claims. Decoding errors, a wrong correlation id
//! and a panic inside the decoder all become [`Error::MalformedResponse`].
//!
//! After any failure the connection is *broken*: the stream may be out of step with the broker
//! (a timed-out response can still arrive), so the owner drops it and connects again, as
//! Kafka's clients do.
//!
//! Cancellation: [`BrokerConnection::send`] is not cancellation-safe; a dropped future breaks
//! the connection (detected on the next call, which then fails with
//! [`Error::ConnectionClosed`]).

use std::panic::AssertUnwindSafe;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{
    ApiVersionsRequest, ApiVersionsResponse, RequestHeader, ResponseHeader,
};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Request, StrBytes};
use shoal_protocol::ApiKey;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::config::ClientConfig;
use crate::error::Error;
use crate::versions::{client_range, ApiVersions};

/// Initial read buffer; it grows as bytes arrive, up to the frame's size.
const READ_CHUNK_BYTES: usize = 64 * 1024;

/// The client software name and version sent in ApiVersions v3+ (KIP-511).
pub(crate) const SOFTWARE_NAME: &str = "shoal-client";
pub(crate) const SOFTWARE_VERSION: &str = env!("CARGO_PKG_VERSION");

/// One connection, after a successful ApiVersions exchange.
#[derive(Debug)]
pub struct BrokerConnection {
    addr: String,
    stream: TcpStream,
    client_id: StrBytes,
    next_correlation_id: i32,
    versions: ApiVersions,
    request_timeout: Duration,
    frame_bytes_max: usize,
    broken: bool,
}

impl BrokerConnection {
    /// Connects to `addr` (`host:port`) and negotiates versions. `node_id` is the broker's id
    /// (-1 for a bootstrap server not yet known by id).
    ///
    /// # Errors
    /// [`Error::Io`] or [`Error::Timeout`] when the connection or handshake fails;
    /// [`Error::MalformedResponse`] for an ApiVersions answer that does not make sense.
    pub async fn connect(addr: &str, node_id: i32, config: &ClientConfig) -> Result<Self, Error> {
        let setup = config.socket_connection_setup_timeout();
        let what = || format!("connecting to {addr}");
        let stream = tokio::time::timeout(setup, TcpStream::connect(addr))
            .await
            .map_err(|_| Error::Timeout {
                what: what(),
                after: setup,
            })?
            .map_err(|source| Error::Io {
                addr: addr.into(),
                source,
            })?;
        stream.set_nodelay(true).map_err(|source| Error::Io {
            addr: addr.into(),
            source,
        })?;
        let mut conn = BrokerConnection {
            addr: addr.into(),
            stream,
            client_id: StrBytes::from_string(config.client_id().to_owned()),
            next_correlation_id: 0,
            versions: ApiVersions::default(),
            request_timeout: config.request_timeout(),
            frame_bytes_max: config.receive_message_max_bytes(),
            broken: false,
        };
        tokio::time::timeout(setup, conn.negotiate(node_id))
            .await
            .map_err(|_| Error::Timeout {
                what: format!("ApiVersions with {addr}"),
                after: setup,
            })??;
        Ok(conn)
    }

    async fn negotiate(&mut self, node_id: i32) -> Result<(), Error> {
        let (_, ours) = client_range(ApiKey::ApiVersions).ok_or(Error::Encode {
            api: ApiKey::ApiVersions,
            version: -1,
            reason: "no codec".into(),
        })?;
        // ApiVersions v3+ carries our name; older brokers answer UNSUPPORTED_VERSION in a v0
        // body listing their range, and we ask again once at the highest common version.
        let mut version = ours.min(3);
        for _ in 0..2 {
            let request = ApiVersionsRequest::default()
                .with_client_software_name(StrBytes::from_static_str(SOFTWARE_NAME))
                .with_client_software_version(StrBytes::from_static_str(SOFTWARE_VERSION));
            let (correlation_id, body) = self.exchange(version, &request).await?;
            // A broker that does not serve `version` answers in a v0 body (Kafka's rule).
            let response: ApiVersionsResponse = match decode::<ApiVersionsRequest>(
                &self.addr,
                ApiKey::ApiVersions,
                version,
                correlation_id,
                body.clone(),
            ) {
                Ok(response) => response,
                Err(e) => match decode::<ApiVersionsRequest>(
                    &self.addr,
                    ApiKey::ApiVersions,
                    0,
                    correlation_id,
                    body,
                ) {
                    Ok(v0) if ApiVersions::retry_version(&v0).is_some() => v0,
                    _ => return Err(e),
                },
            };
            self.broken = false;
            if let Some(retry) = ApiVersions::retry_version(&response) {
                if retry < version {
                    version = retry;
                    continue;
                }
            }
            if let Some(e) = Error::from_code(ApiKey::ApiVersions, response.error_code, None) {
                return Err(e);
            }
            self.versions = ApiVersions::from_response(node_id, &response).map_err(|reason| {
                Error::MalformedResponse {
                    addr: self.addr.clone(),
                    api: ApiKey::ApiVersions,
                    version,
                    reason,
                }
            })?;
            return Ok(());
        }
        Err(Error::MalformedResponse {
            addr: self.addr.clone(),
            api: ApiKey::ApiVersions,
            version,
            reason: "UNSUPPORTED_VERSION at the version the broker listed".into(),
        })
    }

    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// The versions negotiated with this broker.
    pub fn versions(&self) -> &ApiVersions {
        &self.versions
    }

    /// Whether a failure left the stream unusable; the owner must drop it.
    pub fn is_broken(&self) -> bool {
        self.broken
    }

    /// Sends `request` at the highest version both sides support and waits for the response
    /// (at most `request.timeout.ms`).
    ///
    /// # Errors
    /// [`Error::UnsupportedVersion`] (nothing sent) when the broker lacks the api at every
    /// version we can send; otherwise the errors of [`Self::send_at`].
    pub async fn send<R>(&mut self, request: &R) -> Result<R::Response, Error>
    where
        R: Request,
    {
        let api = api_key::<R>()?;
        let version = self.versions.version(api)?;
        self.send_at(version, request).await
    }

    /// Sends `request` at `version`, which the caller has chosen from [`Self::versions`].
    ///
    /// # Errors
    /// [`Error::Io`], [`Error::ConnectionClosed`], [`Error::Timeout`],
    /// [`Error::ResponseTooLarge`], [`Error::MalformedResponse`]; each breaks the connection.
    pub async fn send_at<R>(&mut self, version: i16, request: &R) -> Result<R::Response, Error>
    where
        R: Request,
    {
        if self.broken {
            return Err(Error::ConnectionClosed {
                addr: self.addr.clone(),
            });
        }
        let timeout = self.request_timeout;
        match tokio::time::timeout(timeout, self.round_trip(version, request)).await {
            Ok(result) => result,
            Err(_) => {
                self.broken = true;
                Err(Error::Timeout {
                    what: format!("{:?} v{version} to {}", api_key::<R>()?, self.addr),
                    after: timeout,
                })
            }
        }
    }

    /// The version to send `R` at: the negotiated one, or `version_max` when that is lower
    /// (a producer without transaction version 2 must not send Produce v12+ or EndTxn v5+).
    ///
    /// # Errors
    /// [`Error::UnsupportedVersion`] when `version_max` is below what both sides can send.
    pub fn version_at_most<R: Request>(&self, version_max: Option<i16>) -> Result<i16, Error> {
        let api = api_key::<R>()?;
        let negotiated = self.versions.version(api)?;
        let Some(max) = version_max.filter(|max| *max < negotiated) else {
            return Ok(negotiated);
        };
        let (client_min, _) = client_range(api).unwrap_or((0, 0));
        let broker_range = self.versions.broker_range(api);
        let floor = broker_range.map_or(client_min, |(min, _)| min.max(client_min));
        if max >= floor {
            Ok(max)
        } else {
            Err(Error::UnsupportedVersion {
                node_id: self.versions.node_id(),
                api,
                client_min,
                client_max: max,
                broker_range,
            })
        }
    }

    /// Writes `request` at `version` and does not wait for an answer: for the requests the
    /// broker never answers (Produce with `acks=0`). Bounded by `request.timeout.ms`.
    ///
    /// # Errors
    /// [`Error::Io`], [`Error::ConnectionClosed`], [`Error::Timeout`]; each breaks the
    /// connection.
    pub async fn send_without_response_at<R: Request>(
        &mut self,
        version: i16,
        request: &R,
    ) -> Result<(), Error> {
        if self.broken {
            return Err(Error::ConnectionClosed {
                addr: self.addr.clone(),
            });
        }
        let api = api_key::<R>()?;
        let correlation_id = self.next_correlation_id;
        self.next_correlation_id = self.next_correlation_id.wrapping_add(1) & i32::MAX;
        let frame = encode::<R>(api, version, correlation_id, &self.client_id, request)?;
        self.broken = true;
        let timeout = self.request_timeout;
        match tokio::time::timeout(timeout, self.stream.write_all(&frame)).await {
            Ok(Ok(())) => {
                self.broken = false;
                Ok(())
            }
            Ok(Err(source)) => Err(Error::Io {
                addr: self.addr.clone(),
                source,
            }),
            Err(_) => Err(Error::Timeout {
                what: format!("{api:?} v{version} to {}", self.addr),
                after: timeout,
            }),
        }
    }

    async fn round_trip<R: Request>(
        &mut self,
        version: i16,
        request: &R,
    ) -> Result<R::Response, Error> {
        let (correlation_id, body) = self.exchange(version, request).await?;
        let response = decode::<R>(&self.addr, api_key::<R>()?, version, correlation_id, body)?;
        self.broken = false;
        Ok(response)
    }

    /// Writes the request and reads its response frame. The connection stays marked broken
    /// until the caller has decoded the response: an early return or a dropped future leaves
    /// it so.
    async fn exchange<R: Request>(
        &mut self,
        version: i16,
        request: &R,
    ) -> Result<(i32, Bytes), Error> {
        self.broken = true;
        let api = api_key::<R>()?;
        let correlation_id = self.next_correlation_id;
        self.next_correlation_id = self.next_correlation_id.wrapping_add(1) & i32::MAX;
        let frame = encode::<R>(api, version, correlation_id, &self.client_id, request)?;
        self.stream
            .write_all(&frame)
            .await
            .map_err(|source| Error::Io {
                addr: self.addr.clone(),
                source,
            })?;
        let body = read_frame(
            &mut self.stream,
            &self.addr,
            self.frame_bytes_max,
            api,
            version,
        )
        .await?;
        Ok((correlation_id, body))
    }
}

pub(crate) fn api_key<R: Request>() -> Result<ApiKey, Error> {
    ApiKey::try_from(R::KEY).map_err(|_| Error::Encode {
        api: ApiKey::ApiVersions,
        version: -1,
        reason: format!("unknown api key {}", R::KEY),
    })
}

fn encode<R: Request>(
    api: ApiKey,
    version: i16,
    correlation_id: i32,
    client_id: &StrBytes,
    request: &R,
) -> Result<Bytes, Error> {
    let bad = |reason: String| Error::Encode {
        api,
        version,
        reason,
    };
    let header = RequestHeader::default()
        .with_request_api_key(R::KEY)
        .with_request_api_version(version)
        .with_correlation_id(correlation_id)
        .with_client_id(Some(client_id.clone()));
    let mut buf = BytesMut::with_capacity(256);
    buf.put_i32(0); // size, filled in below
    header
        .encode(&mut buf, R::header_version(version))
        .map_err(|e| bad(e.to_string()))?;
    request
        .encode(&mut buf, version)
        .map_err(|e| bad(e.to_string()))?;
    let size = i32::try_from(buf.len() - 4).map_err(|_| bad("request over 2 GiB".into()))?;
    buf[..4].copy_from_slice(&size.to_be_bytes());
    Ok(buf.freeze())
}

/// Reads one frame, refusing sizes above `max` and growing the buffer only as bytes arrive.
async fn read_frame(
    stream: &mut TcpStream,
    addr: &str,
    max: usize,
    api: ApiKey,
    version: i16,
) -> Result<Bytes, Error> {
    let io = |source: std::io::Error| {
        if source.kind() == std::io::ErrorKind::UnexpectedEof {
            Error::ConnectionClosed { addr: addr.into() }
        } else {
            Error::Io {
                addr: addr.into(),
                source,
            }
        }
    };
    let mut prefix = [0u8; 4];
    stream.read_exact(&mut prefix).await.map_err(io)?;
    let size = i32::from_be_bytes(prefix);
    let size = usize::try_from(size).map_err(|_| Error::MalformedResponse {
        addr: addr.into(),
        api,
        version,
        reason: format!("negative frame size {size}"),
    })?;
    if size > max {
        return Err(Error::ResponseTooLarge {
            addr: addr.into(),
            size,
            max,
        });
    }
    let mut buf = Vec::with_capacity(size.min(READ_CHUNK_BYTES));
    let mut limited = (&mut *stream).take(size as u64);
    while buf.len() < size {
        buf.reserve((size - buf.len()).min(READ_CHUNK_BYTES.max(buf.len())));
        let n = limited.read_buf(&mut buf).await.map_err(io)?;
        if n == 0 {
            return Err(Error::ConnectionClosed { addr: addr.into() });
        }
    }
    Ok(Bytes::from(buf))
}

fn decode<R: Request>(
    addr: &str,
    api: ApiKey,
    version: i16,
    correlation_id: i32,
    mut body: Bytes,
) -> Result<R::Response, Error> {
    let bad = |reason: String| Error::MalformedResponse {
        addr: addr.into(),
        api,
        version,
        reason,
    };
    // The generated decoders return errors for short input, but they may also panic (a
    // capacity overflow from a hostile array length): contain it to this response.
    let decoded = std::panic::catch_unwind(AssertUnwindSafe(|| {
        let header = ResponseHeader::decode(&mut body, R::Response::header_version(version))?;
        let response = R::Response::decode(&mut body, version)?;
        anyhow::Ok((header, response))
    }));
    let (header, response) = match decoded {
        Ok(Ok(decoded)) => decoded,
        Ok(Err(e)) => return Err(bad(e.to_string())),
        Err(_) => return Err(bad("the decoder panicked".into())),
    };
    if header.correlation_id != correlation_id {
        return Err(bad(format!(
            "correlation id {} for request {correlation_id}",
            header.correlation_id
        )));
    }
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::{FindCoordinatorRequest, MetadataRequest};
    use proptest::prelude::*;

    fn versions<R: Request>() -> std::ops::RangeInclusive<i16> {
        let (min, max) = client_range(ApiKey::try_from(R::KEY).unwrap()).unwrap();
        min..=max
    }

    fn decodes_or_errs<R: Request>(version: i16, body: &[u8]) -> Result<(), TestCaseError> {
        match decode::<R>(
            "test",
            ApiKey::try_from(R::KEY).unwrap(),
            version,
            7,
            Bytes::copy_from_slice(body),
        ) {
            Ok(_) | Err(Error::MalformedResponse { .. }) => Ok(()),
            Err(other) => Err(TestCaseError::fail(format!("{other:?}"))),
        }
    }

    proptest! {
        /// Arbitrary response bodies of the apis the cluster layer decodes itself are a
        /// response or a MalformedResponse, never a panic (the lib's tests install
        /// ReserveLazily, so wire array lengths cannot abort them).
        #[test]
        fn arbitrary_responses_never_panic(
            body in proptest::collection::vec(any::<u8>(), 0..256),
            pick in 0u8..3,
            v in any::<proptest::sample::Index>(),
        ) {
            let mut framed = 7i32.to_be_bytes().to_vec();
            framed.extend_from_slice(&body);
            match pick {
                0 => {
                    let r: Vec<i16> = versions::<ApiVersionsRequest>().collect();
                    decodes_or_errs::<ApiVersionsRequest>(*v.get(&r), &framed)?
                }
                1 => {
                    let r: Vec<i16> = versions::<MetadataRequest>().collect();
                    decodes_or_errs::<MetadataRequest>(*v.get(&r), &framed)?
                }
                _ => {
                    let r: Vec<i16> = versions::<FindCoordinatorRequest>().collect();
                    decodes_or_errs::<FindCoordinatorRequest>(*v.get(&r), &framed)?
                }
            }
        }
    }

    #[test]
    fn a_wrong_correlation_id_is_malformed() {
        let mut buf = BytesMut::new();
        shoal_protocol::response::encode_response(
            &mut buf,
            8,
            0,
            &shoal_protocol::Response::ApiVersions(ApiVersionsResponse::default()),
        )
        .unwrap();
        let body = buf.freeze().slice(4..);
        let err = decode::<ApiVersionsRequest>("test", ApiKey::ApiVersions, 0, 7, body.clone())
            .unwrap_err();
        assert!(
            matches!(err, Error::MalformedResponse { reason, .. } if reason.contains("correlation"))
        );
        assert!(decode::<ApiVersionsRequest>("test", ApiKey::ApiVersions, 0, 8, body).is_ok());
    }
}
