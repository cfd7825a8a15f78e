//! [`BrokerConnection`]: one negotiated, pipelined connection to one broker.
//!
//! Opening it connects (within `socket.connection.setup.timeout.ms`) and sends ApiVersions
//! first; every later request goes out at the version [`ApiVersions::version`] picks, or not
//! at all. Requests are pipelined: any number may be in flight at once (the callers bound
//! how many: the producer's `max.in.flight.requests.per.connection`), each waits at most
//! `request.timeout.ms` for its answer, and one reader task hands each response frame to the
//! request with its correlation id. Kafka brokers answer a connection's requests in the order
//! they were sent, so a partition's Produce requests are written in order.
//!
//! Responses are untrusted input. A frame's size prefix above `receive.message.max.bytes` (or
//! negative) is refused before any allocation; below it, the buffer grows with the bytes that
//! actually arrive, never with what the prefix claims. A frame whose correlation id matches no
//! request in flight, a body that does not decode and a panic inside the decoder all become
//! [`Error::MalformedResponse`].
//!
//! After any failure the connection is *broken*: every request in flight on it fails, and
//! the owner drops it and connects again, as Kafka's clients do. A request that times out
//! breaks it too (its answer could still arrive, out of step).
//!
//! SASL sessions (KIP-368): when the broker gave the session a lifetime, the first write at or
//! after the re-authentication point [`crate::security`] picks runs SaslHandshake and
//! SaslAuthenticate again before its own frame, holding the write lock throughout, so that no
//! other request reaches the broker in the middle of the exchange (Kafka closes a connection
//! that sends one). Requests already in flight are unaffected: the broker answers them first,
//! and the reader hands their answers over as usual. A refused re-authentication breaks the
//! connection. An idle connection re-authenticates at its next write, even past the session's
//! end: the broker takes a SaslHandshake that opens a re-authentication before it looks at
//! the expiry.
//!
//! Cancellation: dropping a request's future once its frame is written is harmless (the
//! answer is read and discarded); dropping it while the frame is being written breaks the
//! connection, since the broker would read half a request.

use std::collections::HashMap;
use std::marker::PhantomData;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use crate::security::{self, ReadHalf, SaslTransport, Security, WriteHalf};
use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{
    ApiVersionsRequest, ApiVersionsResponse, RequestHeader, ResponseHeader,
    SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest, SaslHandshakeResponse,
};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Request, StrBytes};
use shoal_protocol::ApiKey;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::config::ClientConfig;
use crate::error::Error;
use crate::versions::{client_range, ApiVersions};

/// Initial read buffer; it grows as bytes arrive, up to the frame's size.
const READ_CHUNK_BYTES: usize = 64 * 1024;

/// Where the correlation id sits in an encoded request frame: after the size (4 bytes), the
/// api key (2) and the api version (2), in every request header version.
const CORRELATION_ID_AT: usize = 8;

/// The client software name and version sent in ApiVersions v3+ (KIP-511).
pub(crate) const SOFTWARE_NAME: &str = "shoal-client";
pub(crate) const SOFTWARE_VERSION: &str = env!("CARGO_PKG_VERSION");

/// Why a connection broke; every request in flight fails with an error made from it.
#[derive(Debug, Clone)]
enum Broken {
    Closed,
    Io(std::io::ErrorKind, String),
    TooLarge { size: usize, max: usize },
    Malformed(String),
    TimedOut { what: String, after: Duration },
}

impl Broken {
    /// The error a request of `api` at `version` fails with.
    fn error(&self, addr: &str, api: ApiKey, version: i16) -> Error {
        match self {
            Broken::Closed => Error::ConnectionClosed { addr: addr.into() },
            Broken::Io(kind, message) => Error::Io {
                addr: addr.into(),
                source: std::io::Error::new(*kind, message.clone()),
            },
            Broken::TooLarge { size, max } => Error::ResponseTooLarge {
                addr: addr.into(),
                size: *size,
                max: *max,
            },
            Broken::Malformed(reason) => Error::MalformedResponse {
                addr: addr.into(),
                api,
                version,
                reason: reason.clone(),
            },
            Broken::TimedOut { what, after } => Error::Timeout {
                what: what.clone(),
                after: *after,
            },
        }
    }

    fn from_error(e: &Error) -> Broken {
        match e {
            Error::Io { source, .. } => Broken::Io(source.kind(), source.to_string()),
            Error::ResponseTooLarge { size, max, .. } => Broken::TooLarge {
                size: *size,
                max: *max,
            },
            Error::MalformedResponse { reason, .. } => Broken::Malformed(reason.clone()),
            Error::Timeout { what, after } => Broken::TimedOut {
                what: what.clone(),
                after: *after,
            },
            _ => Broken::Closed,
        }
    }
}

/// A request in flight: where its answer goes, and what it was (for the errors).
#[derive(Debug)]
struct Waiter {
    api: ApiKey,
    version: i16,
    answer: oneshot::Sender<Result<Bytes, Error>>,
}

#[derive(Debug, Default)]
struct State {
    next_correlation_id: i32,
    in_flight: HashMap<i32, Waiter>,
    broken: Option<Broken>,
}

/// The part of a connection its reader task shares.
#[derive(Debug)]
struct Shared {
    addr: String,
    state: Mutex<State>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // Every update is a single insert, remove or assignment: a panic elsewhere leaves a
        // consistent value.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Marks the connection broken (the first reason wins) and fails every request in flight.
    fn break_with(&self, why: Broken) {
        let waiters: Vec<Waiter> = {
            let mut st = self.lock();
            if st.broken.is_none() {
                st.broken = Some(why);
            }
            st.in_flight.drain().map(|(_, w)| w).collect()
        };
        let why = self.lock().broken.clone().unwrap_or(Broken::Closed);
        for w in waiters {
            let _ = w.answer.send(Err(why.error(&self.addr, w.api, w.version)));
        }
    }

    fn broken_error(&self, api: ApiKey, version: i16) -> Option<Error> {
        self.lock()
            .broken
            .as_ref()
            .map(|b| b.error(&self.addr, api, version))
    }
}

/// Breaks the connection when dropped before [`WriteGuard::done`]: a frame written in part.
struct WriteGuard<'a>(Option<&'a Shared>);

impl WriteGuard<'_> {
    fn done(mut self) {
        self.0 = None;
    }
}

impl Drop for WriteGuard<'_> {
    fn drop(&mut self) {
        if let Some(shared) = self.0 {
            shared.break_with(Broken::Closed);
        }
    }
}

/// The writing side of a connection; whoever holds it owns the socket's next frames.
struct Writer {
    half: WriteHalf,
    /// When the SASL session must be renewed (`None`: never).
    reauthenticate_at: Option<Instant>,
}

/// One connection, after a successful ApiVersions exchange (and SASL, when configured).
pub struct BrokerConnection {
    shared: Arc<Shared>,
    writer: tokio::sync::Mutex<Writer>,
    reader: JoinHandle<()>,
    client_id: StrBytes,
    versions: ApiVersions,
    request_timeout: Duration,
    /// For re-authentication.
    security: Security,
}

/// A SASL exchange on a connection whose writer it holds: each request is written and its
/// answer awaited with nothing else written in between.
pub(crate) struct SaslExchange<'a> {
    conn: &'a BrokerConnection,
    writer: &'a mut WriteHalf,
}

impl SaslExchange<'_> {
    /// Sends `request` at the negotiated version and waits for its answer (at most
    /// `request.timeout.ms`).
    ///
    /// # Errors
    /// Those of [`BrokerConnection::send_at`]; [`Error::UnsupportedVersion`] (nothing sent).
    pub(crate) async fn send<R: Request>(&mut self, request: &R) -> Result<R::Response, Error> {
        let conn = self.conn;
        let api = api_key::<R>()?;
        let version = conn.versions.version(api)?;
        let deadline = Instant::now() + conn.request_timeout;
        let (correlation_id, answer) = conn
            .write_locked(self.writer, api, version, request, true, deadline)
            .await?;
        let answer = answer.ok_or(Error::Closed)?;
        let body = wait(
            &conn.shared,
            answer,
            deadline,
            conn.request_timeout,
            api,
            version,
        )
        .await?;
        decode_or_break::<R>(&conn.shared, api, version, correlation_id, body)
    }
}

impl SaslTransport for SaslExchange<'_> {
    async fn handshake(
        &mut self,
        request: &SaslHandshakeRequest,
    ) -> Result<SaslHandshakeResponse, Error> {
        self.send(request).await
    }

    async fn authenticate(
        &mut self,
        request: &SaslAuthenticateRequest,
    ) -> Result<SaslAuthenticateResponse, Error> {
        self.send(request).await
    }
}

impl std::fmt::Debug for BrokerConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BrokerConnection")
            .field("shared", &self.shared)
            .field("client_id", &self.client_id)
            .field("versions", &self.versions)
            .field("request_timeout", &self.request_timeout)
            .finish_non_exhaustive()
    }
}

impl Drop for BrokerConnection {
    fn drop(&mut self) {
        self.reader.abort();
        self.shared.break_with(Broken::Closed);
    }
}

/// A request whose frame is written and whose answer is awaited with
/// [`PendingResponse::response`].
#[derive(Debug)]
#[must_use = "a pending response does nothing unless awaited"]
pub struct PendingResponse<R: Request> {
    shared: Arc<Shared>,
    answer: oneshot::Receiver<Result<Bytes, Error>>,
    correlation_id: i32,
    version: i16,
    deadline: Instant,
    timeout: Duration,
    request: PhantomData<fn() -> R>,
}

impl<R: Request> PendingResponse<R> {
    /// Waits for the answer, until `request.timeout.ms` after the request was written.
    ///
    /// # Errors
    /// [`Error::Timeout`] (which breaks the connection), [`Error::ConnectionClosed`],
    /// [`Error::Io`], [`Error::ResponseTooLarge`], [`Error::MalformedResponse`].
    pub async fn response(self) -> Result<R::Response, Error> {
        let api = api_key::<R>()?;
        let body = wait(
            &self.shared,
            self.answer,
            self.deadline,
            self.timeout,
            api,
            self.version,
        )
        .await?;
        decode_or_break::<R>(&self.shared, api, self.version, self.correlation_id, body)
    }
}

async fn wait(
    shared: &Shared,
    answer: oneshot::Receiver<Result<Bytes, Error>>,
    deadline: Instant,
    timeout: Duration,
    api: ApiKey,
    version: i16,
) -> Result<Bytes, Error> {
    match tokio::time::timeout_at(deadline, answer).await {
        Ok(Ok(answer)) => answer,
        // The reader dropped the waiter without an answer: the connection is gone.
        Ok(Err(_)) => Err(shared
            .broken_error(api, version)
            .unwrap_or(Error::ConnectionClosed {
                addr: shared.addr.clone(),
            })),
        Err(_) => {
            let why = Broken::TimedOut {
                what: format!("{api:?} v{version} to {}", shared.addr),
                after: timeout,
            };
            let e = why.error(&shared.addr, api, version);
            shared.break_with(why);
            Err(e)
        }
    }
}

fn decode_or_break<R: Request>(
    shared: &Shared,
    api: ApiKey,
    version: i16,
    correlation_id: i32,
    body: Bytes,
) -> Result<R::Response, Error> {
    decode::<R>(&shared.addr, api, version, correlation_id, body).inspect_err(|e| {
        // The frame was read whole, but a peer that sends what we cannot decode is not to
        // be trusted with the next one either.
        shared.break_with(Broken::from_error(e));
    })
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
        let security = config.security();
        let (read, write) = tokio::time::timeout(setup, security.open(addr, stream))
            .await
            .map_err(|_| Error::Timeout {
                what: format!("TLS handshake with {addr}"),
                after: setup,
            })??;
        let shared = Arc::new(Shared {
            addr: addr.into(),
            state: Mutex::new(State::default()),
        });
        let reader = tokio::spawn(read_loop(
            read,
            shared.clone(),
            config.receive_message_max_bytes(),
        ));
        let mut conn = BrokerConnection {
            shared,
            writer: tokio::sync::Mutex::new(Writer {
                half: write,
                reauthenticate_at: None,
            }),
            reader,
            client_id: StrBytes::from_string(config.client_id().to_owned()),
            versions: ApiVersions::default(),
            request_timeout: config.request_timeout(),
            security: security.clone(),
        };
        let versions = tokio::time::timeout(setup, conn.negotiate(node_id))
            .await
            .map_err(|_| Error::Timeout {
                what: format!("ApiVersions with {addr}"),
                after: setup,
            })??;
        conn.versions = versions;
        tokio::time::timeout(setup, conn.authenticate())
            .await
            .map_err(|_| Error::Timeout {
                what: format!("SASL authentication with {addr}"),
                after: setup,
            })??;
        Ok(conn)
    }

    /// Authenticates a new connection (SASL, when configured) and notes when its session
    /// must be renewed.
    async fn authenticate(&self) -> Result<(), Error> {
        if !self.security.uses_sasl() {
            return Ok(());
        }
        let mut writer = self.writer.lock().await;
        self.sasl_exchange(&mut writer).await
    }

    /// Runs the SASL exchange on the locked writer and sets the next renewal from the
    /// session lifetime the broker gave. A failure breaks the connection, and so does
    /// dropping this future midway (the broker would wait for the rest of the exchange).
    async fn sasl_exchange(&self, writer: &mut Writer) -> Result<(), Error> {
        let guard = WriteGuard(Some(&self.shared));
        let mut exchange = SaslExchange {
            conn: self,
            writer: &mut writer.half,
        };
        let outcome = self.security.authenticate(&mut exchange).await;
        guard.done();
        match outcome {
            Ok(lifetime) => {
                writer.reauthenticate_at = lifetime.map(|lifetime| {
                    let delay = security::reauthentication_delay(lifetime, security::random_u32());
                    Instant::now() + delay
                });
                Ok(())
            }
            Err(e) => {
                self.shared.break_with(Broken::from_error(&e));
                Err(e)
            }
        }
    }

    async fn negotiate(&self, node_id: i32) -> Result<ApiVersions, Error> {
        let (_, ours) = client_range(ApiKey::ApiVersions).ok_or(Error::Encode {
            api: ApiKey::ApiVersions,
            version: -1,
            reason: "no codec".into(),
        })?;
        let api = ApiKey::ApiVersions;
        // ApiVersions v3+ carries our name; older brokers answer UNSUPPORTED_VERSION in a v0
        // body listing their range, and we ask again once at the highest common version.
        let mut version = ours.min(3);
        for _ in 0..2 {
            let request = ApiVersionsRequest::default()
                .with_client_software_name(StrBytes::from_static_str(SOFTWARE_NAME))
                .with_client_software_version(StrBytes::from_static_str(SOFTWARE_VERSION));
            let (correlation_id, answer) = self.write(api, version, &request, true).await?;
            let deadline = Instant::now() + self.request_timeout;
            let answer = answer.ok_or(Error::Closed)?;
            let body = wait(
                &self.shared,
                answer,
                deadline,
                self.request_timeout,
                api,
                version,
            )
            .await?;
            // A broker that does not serve `version` answers in a v0 body (Kafka's rule).
            let addr = &self.shared.addr;
            let response: ApiVersionsResponse = match decode::<ApiVersionsRequest>(
                addr,
                api,
                version,
                correlation_id,
                body.clone(),
            ) {
                Ok(response) => response,
                Err(e) => match decode::<ApiVersionsRequest>(addr, api, 0, correlation_id, body) {
                    Ok(v0) if ApiVersions::retry_version(&v0).is_some() => v0,
                    _ => {
                        self.shared.break_with(Broken::from_error(&e));
                        return Err(e);
                    }
                },
            };
            if let Some(retry) = ApiVersions::retry_version(&response) {
                if retry < version {
                    version = retry;
                    continue;
                }
            }
            if let Some(e) = Error::from_code(api, response.error_code, None) {
                return Err(e);
            }
            return ApiVersions::from_response(node_id, &response).map_err(|reason| {
                Error::MalformedResponse {
                    addr: addr.clone(),
                    api,
                    version,
                    reason,
                }
            });
        }
        Err(Error::MalformedResponse {
            addr: self.shared.addr.clone(),
            api,
            version,
            reason: "UNSUPPORTED_VERSION at the version the broker listed".into(),
        })
    }

    pub fn addr(&self) -> &str {
        &self.shared.addr
    }

    /// The versions negotiated with this broker.
    pub fn versions(&self) -> &ApiVersions {
        &self.versions
    }

    /// Whether a failure left the stream unusable; the owner must drop it.
    pub fn is_broken(&self) -> bool {
        self.shared.lock().broken.is_some() || self.reader.is_finished()
    }

    /// Sends `request` at the highest version both sides support and waits for the response
    /// (at most `request.timeout.ms`).
    ///
    /// # Errors
    /// [`Error::UnsupportedVersion`] (nothing sent) when the broker lacks the api at every
    /// version we can send; otherwise the errors of [`Self::send_at`].
    pub async fn send<R>(&self, request: &R) -> Result<R::Response, Error>
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
    pub async fn send_at<R>(&self, version: i16, request: &R) -> Result<R::Response, Error>
    where
        R: Request,
    {
        self.submit_at(version, request).await?.response().await
    }

    /// Writes `request` at `version` and returns once it is written, without waiting for the
    /// answer: the way to keep several requests in flight on this connection.
    ///
    /// # Errors
    /// [`Error::Io`], [`Error::ConnectionClosed`], [`Error::Timeout`] (the write); each
    /// breaks the connection.
    pub async fn submit_at<R: Request>(
        &self,
        version: i16,
        request: &R,
    ) -> Result<PendingResponse<R>, Error> {
        let api = api_key::<R>()?;
        let (correlation_id, answer) = self.write(api, version, request, true).await?;
        Ok(PendingResponse {
            shared: self.shared.clone(),
            answer: answer.ok_or(Error::Closed)?,
            correlation_id,
            version,
            deadline: Instant::now() + self.request_timeout,
            timeout: self.request_timeout,
            request: PhantomData,
        })
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
        &self,
        version: i16,
        request: &R,
    ) -> Result<(), Error> {
        let api = api_key::<R>()?;
        self.write(api, version, request, false).await.map(|_| ())
    }

    /// Encodes and writes one request frame; with `answered`, registers it as in flight
    /// (before the write, so the reader can never see its answer first). Renews the SASL
    /// session first when it is due.
    async fn write<R: Request>(
        &self,
        api: ApiKey,
        version: i16,
        request: &R,
        answered: bool,
    ) -> Result<(i32, Option<oneshot::Receiver<Result<Bytes, Error>>>), Error> {
        let mut deadline = Instant::now() + self.request_timeout;
        let mut writer = tokio::time::timeout_at(deadline, self.writer.lock())
            .await
            .map_err(|_| Error::Timeout {
                what: format!("writing {api:?} v{version} to {}", self.shared.addr),
                after: self.request_timeout,
            })?;
        if writer
            .reauthenticate_at
            .is_some_and(|at| Instant::now() >= at)
            && self.shared.lock().broken.is_none()
        {
            self.sasl_exchange(&mut writer).await?;
            // The request's own write gets its whole timeout after the exchange.
            deadline = Instant::now() + self.request_timeout;
        }
        self.write_locked(&mut writer.half, api, version, request, answered, deadline)
            .await
    }

    /// [`Self::write`] with the writer held, by `deadline`.
    async fn write_locked<R: Request>(
        &self,
        writer: &mut WriteHalf,
        api: ApiKey,
        version: i16,
        request: &R,
        answered: bool,
        deadline: Instant,
    ) -> Result<(i32, Option<oneshot::Receiver<Result<Bytes, Error>>>), Error> {
        let mut frame = encode::<R>(api, version, 0, &self.client_id, request)?;
        let what = || format!("writing {api:?} v{version} to {}", self.shared.addr);
        let (correlation_id, answer) = {
            let mut st = self.shared.lock();
            if let Some(b) = &st.broken {
                return Err(b.error(&self.shared.addr, api, version));
            }
            let id = st.next_correlation_id;
            st.next_correlation_id = id.wrapping_add(1) & i32::MAX;
            let answer = answered.then(|| {
                let (tx, rx) = oneshot::channel();
                st.in_flight.insert(
                    id,
                    Waiter {
                        api,
                        version,
                        answer: tx,
                    },
                );
                rx
            });
            (id, answer)
        };
        frame[CORRELATION_ID_AT..CORRELATION_ID_AT + 4]
            .copy_from_slice(&correlation_id.to_be_bytes());
        let guard = WriteGuard(Some(&self.shared));
        // The flush matters under TLS, whose writer holds records back until flushed.
        let written = async {
            writer.write_all(&frame).await?;
            writer.flush().await
        };
        match tokio::time::timeout_at(deadline, written).await {
            Ok(Ok(())) => {
                guard.done();
                Ok((correlation_id, answer))
            }
            Ok(Err(source)) => {
                guard.done();
                let e = Error::Io {
                    addr: self.shared.addr.clone(),
                    source,
                };
                self.shared.break_with(Broken::from_error(&e));
                Err(e)
            }
            Err(_) => {
                guard.done();
                let why = Broken::TimedOut {
                    what: what(),
                    after: self.request_timeout,
                };
                let e = why.error(&self.shared.addr, api, version);
                self.shared.break_with(why);
                Err(e)
            }
        }
    }
}

/// The reader task: one response frame at a time, to the request with its correlation id.
/// Ends at the first failure, which breaks the connection.
async fn read_loop(mut read: ReadHalf, shared: Arc<Shared>, frame_bytes_max: usize) {
    loop {
        let body = match read_frame(&mut read, frame_bytes_max).await {
            Ok(body) => body,
            Err(why) => {
                shared.break_with(why);
                return;
            }
        };
        let Some(id) = body
            .get(..4)
            .map(|b| i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
        else {
            shared.break_with(Broken::Malformed(format!(
                "a {}-byte response frame",
                body.len()
            )));
            return;
        };
        let waiter = shared.lock().in_flight.remove(&id);
        match waiter {
            // A dropped receiver (a caller that gave up) just discards the answer.
            Some(w) => {
                let _ = w.answer.send(Ok(body));
            }
            None => {
                shared.break_with(Broken::Malformed(format!(
                    "correlation id {id} matches no request in flight"
                )));
                return;
            }
        }
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
) -> Result<BytesMut, Error> {
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
    Ok(buf)
}

/// Reads one frame, refusing sizes above `max` and growing the buffer only as bytes arrive.
async fn read_frame<S: AsyncRead + Unpin>(stream: &mut S, max: usize) -> Result<Bytes, Broken> {
    let io = |source: std::io::Error| {
        if source.kind() == std::io::ErrorKind::UnexpectedEof {
            Broken::Closed
        } else {
            Broken::Io(source.kind(), source.to_string())
        }
    };
    let mut prefix = [0u8; 4];
    stream.read_exact(&mut prefix).await.map_err(io)?;
    let size = i32::from_be_bytes(prefix);
    let size = usize::try_from(size)
        .map_err(|_| Broken::Malformed(format!("negative frame size {size}")))?;
    if size > max {
        return Err(Broken::TooLarge { size, max });
    }
    let mut buf = Vec::with_capacity(size.min(READ_CHUNK_BYTES));
    let mut limited = (&mut *stream).take(size as u64);
    while buf.len() < size {
        buf.reserve((size - buf.len()).min(READ_CHUNK_BYTES.max(buf.len())));
        let n = limited.read_buf(&mut buf).await.map_err(io)?;
        if n == 0 {
            return Err(Broken::Closed);
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
