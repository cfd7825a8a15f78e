//! One client connection: frames in, requests handled in order, responses out in order.
//!
//! Requests are taken one at a time, in order, so everything whose order matters (appends,
//! coordinator calls) happens in request order, as when Kafka mutes a channel per request. A
//! produce that only waits for its group-commit fsync does not hold up the next request: its
//! response slot waits in an ordered queue (at most `IN_FLIGHT_REQUESTS_MAX` per connection)
//! while the connection reads and appends the next one, so one client can keep the disk busy.
//! Responses are written strictly in request order.
//!
//! A frame that cannot be handled (oversized, unknown api key, unsupported version other than
//! ApiVersions', undecodable body) closes this connection with one log line and nothing else.
//!
//! On a SASL listener the connection first holds the SASL conversation
//! ([`crate::authenticator`]); a failed authentication waits
//! `connection.failed.authentication.delay.ms` in this connection's own task, reading
//! nothing, before its answer and the close. When the session has a lifetime
//! (`connections.max.reauth.ms`, KIP-368), a SaslHandshake after authentication starts a
//! re-authentication: everything before it is answered first, in order, then the
//! conversation runs again on this connection and, once it succeeds, the session is renewed.
//! Any other request that arrives after the session expired closes the connection unanswered,
//! with the responses still queued, as Kafka's SocketServer does.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use shoal_protocol::frame::FrameDecoder;
use shoal_protocol::messages::ApiKey;
use shoal_protocol::request::peek_header;
use shoal_protocol::{decode_request, encode_response, Response};
use shoal_storage::FileRegion;
use tokio::io::AsyncReadExt;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::{debug, info, warn};

use crate::authenticator::{scram_nonce, Authenticated, Authenticator, Step};
use crate::broker::Broker;
use crate::config::listeners::Listener;
use crate::config::sasl::SaslSettings;
use crate::dispatch::{self, Reply};
use crate::handlers::api_versions;
use crate::handlers::RequestContext;
use crate::outbound::{self, Frame};
use crate::transport::Stream;

const READ_BUFFER_BYTES: usize = 64 * 1024;
/// Largest response buffer kept for reuse. Reusing it spares large fetch responses a fresh
/// allocation (page faults and clearing dominated the fetch path's profile without it).
const SPARE_BUFFER_BYTES_MAX: usize = 64 * 1024 * 1024;
/// Requests of one connection in flight at most (read, not yet answered).
pub const IN_FLIGHT_REQUESTS_MAX: usize = 16;
/// A connection quiet this long gives back its buffers: a large request or response grows
/// them, and without this every connection that once sent a 1 MiB batch or read a large
/// Metadata would hold that memory for as long as it stays open (1 000 such connections
/// held 2.1 GiB). Busy connections never wait this long, so they keep reusing theirs.
const QUIET_BEFORE_TRIM: Duration = Duration::from_secs(1);

/// Where a request's response comes from.
enum Slot {
    /// Encoded and ready to write (empty for "no response").
    Ready(Frame),
    /// Completes later; encoded when it does.
    Waiting {
        task: JoinHandle<Option<Response>>,
        api: ApiKey,
        version: i16,
        correlation_id: i32,
        started: Instant,
    },
}

/// Serves one connection until the peer closes it, an error closes it, it stays idle for
/// `connections.max.idle.ms`, or shutdown is signalled.
pub async fn serve(
    broker: Arc<Broker>,
    listener: Arc<Listener>,
    mut stream: Stream,
    peer: SocketAddr,
    principal: String,
    mut stop: watch::Receiver<bool>,
) {
    broker.metrics.connection_opened();
    let decoder = FrameDecoder::new(broker.config.long("socket.request.max.bytes") as usize);
    let idle = Duration::from_millis(broker.config.long("connections.max.idle.ms") as u64);
    let mut buf = BytesMut::with_capacity(READ_BUFFER_BYTES);
    let mut queue: VecDeque<Slot> = VecDeque::new();
    let mut spare = BytesMut::new();
    // Since when nothing has come in or gone out, and whether the buffers were given back
    // since then.
    let mut quiet_since = Instant::now();
    let mut trimmed = false;
    let mut ctx = RequestContext {
        peer,
        listener,
        principal: principal.into(),
    };
    let mut session = None;
    if let Some(settings) = ctx.listener.sasl.clone() {
        let conversation = Conversation {
            settings: settings.clone(),
            first: None,
            previous: None,
        };
        let authenticated = authenticate(
            &broker,
            &ctx,
            conversation,
            &mut stream,
            &mut buf,
            &mut stop,
            idle,
        )
        .await;
        let Some(who) = authenticated else {
            broker.metrics.connection_closed();
            return;
        };
        debug!(%peer, user = %who.user, mechanism = who.mechanism.name(), "authenticated");
        ctx.principal = format!("User:{}", who.user).into();
        session = Some(Session::new(settings, who, Instant::now()));
    }
    'conn: loop {
        // Take every complete frame we have room for, in order.
        while queue.len() < IN_FLIGHT_REQUESTS_MAX && !*stop.borrow() {
            let frame = match decoder.decode(&mut buf) {
                Ok(Some(frame)) => frame,
                Ok(None) => break,
                Err(e) => {
                    warn!(%peer, error = %e, "closing connection: bad frame");
                    break 'conn;
                }
            };
            broker.metrics.bytes_in(frame.len() + 4);
            if let Some(session) = session.as_mut() {
                match session.admit(&frame, Instant::now()) {
                    Admit::Serve => {}
                    Admit::Expired => {
                        info!(%peer, user = %session.who.user, "closing connection: SASL session expired");
                        broker.metrics.expired_connection_killed();
                        break 'conn;
                    }
                    Admit::Reauthenticate => {
                        // Kafka handles one request at a time: whatever came before the
                        // SaslHandshake is answered before the conversation starts.
                        if !drain(&broker, &mut stream, &mut queue).await {
                            break 'conn;
                        }
                        let conversation = Conversation {
                            settings: session.settings.clone(),
                            first: Some(frame),
                            previous: Some(session.who.clone()),
                        };
                        let renewed = authenticate(
                            &broker,
                            &ctx,
                            conversation,
                            &mut stream,
                            &mut buf,
                            &mut stop,
                            idle,
                        )
                        .await;
                        let Some(who) = renewed else {
                            break 'conn;
                        };
                        debug!(%peer, user = %who.user, "re-authenticated");
                        broker.metrics.reauthenticated();
                        session.renew(who, Instant::now());
                        quiet_since = Instant::now();
                        continue;
                    }
                }
            }
            let out = std::mem::take(&mut spare);
            match handle_frame(&broker, &ctx, frame, out).await {
                Ok(slot) => queue.push_back(slot),
                Err(reason) => {
                    warn!(%peer, %reason, "closing connection");
                    // Answer what was already accepted before closing.
                    let _ = drain(&broker, &mut stream, &mut queue).await;
                    break 'conn;
                }
            }
        }
        // Write every response that is ready at the front.
        while let Some(Slot::Ready(_)) = queue.front() {
            let Some(Slot::Ready(out)) = queue.pop_front() else {
                unreachable!("front was just matched as Ready");
            };
            if !write(&broker, &mut stream, &out, peer).await {
                break 'conn;
            }
            keep_spare(&mut spare, out.buf);
        }
        if *stop.borrow() {
            let _ = drain(&broker, &mut stream, &mut queue).await;
            break;
        }
        // A trimmed connection waits with no buffer at all; its next read takes a few bytes
        // and the buffer grows from there.
        if !trimmed && buf.capacity() - buf.len() < READ_BUFFER_BYTES / 4 {
            buf.reserve(READ_BUFFER_BYTES);
        }
        let room = queue.len() < IN_FLIGHT_REQUESTS_MAX;
        if room && decoder.has_frame(&buf) {
            // Frames read while the queue was full: take them before waiting for more bytes,
            // which a client that has sent everything it means to will never send.
            continue;
        }
        let waiting = matches!(queue.front(), Some(Slot::Waiting { .. }));
        let quiet_for = if trimmed {
            idle
        } else {
            idle.min(QUIET_BEFORE_TRIM)
        };
        let wake = quiet_for.saturating_sub(quiet_since.elapsed());
        tokio::select! {
            read = stream.read_buf(&mut buf), if room => match read {
                Ok(0) => {
                    let _ = drain(&broker, &mut stream, &mut queue).await;
                    break;
                }
                Ok(_) => {
                    quiet_since = Instant::now();
                    trimmed = false;
                }
                Err(e) => {
                    debug!(%peer, error = %e, "read failed");
                    break;
                }
            },
            done = wait_front(&mut queue), if waiting => {
                let out = finish(&broker, done, std::mem::take(&mut spare));
                if !write(&broker, &mut stream, &out, peer).await {
                    break;
                }
                keep_spare(&mut spare, out.buf);
                quiet_since = Instant::now();
            }
            _ = stop.changed() => {}
            _ = tokio::time::sleep(wake), if queue.is_empty() => {
                if trimmed {
                    info!(%peer, "closing idle connection");
                    break;
                }
                trim(&mut buf, &mut spare);
                broker.metrics.connection_buffers_released();
                trimmed = true;
            }
        }
    }
    for slot in queue {
        if let Slot::Waiting { task, .. } = slot {
            // The work (an append) is done; only its answer is lost with the connection.
            drop(task);
        }
    }
    broker.metrics.connection_closed();
    // Its share sessions end with it; their members' records go back to the queue.
    broker.share.connection_closed(&broker, peer).await;
}

/// A connection's authenticated SASL session (KIP-368).
struct Session {
    settings: Arc<SaslSettings>,
    who: Authenticated,
    /// When it ends; `None`: never.
    expires: Option<Instant>,
    /// When the last re-authentication began.
    last_reauthentication: Option<Instant>,
}

/// What a session does with a request.
enum Admit {
    Serve,
    /// A SaslHandshake that starts a re-authentication.
    Reauthenticate,
    /// The session is over: close the connection.
    Expired,
}

/// Kafka lets a connection start a re-authentication once a second at most; a SaslHandshake
/// sooner is an ordinary request (answered ILLEGAL_SASL_STATE).
const REAUTHENTICATION_INTERVAL_MIN: Duration = Duration::from_secs(1);

impl Session {
    fn new(settings: Arc<SaslSettings>, who: Authenticated, now: Instant) -> Self {
        let mut session = Self {
            settings,
            expires: None,
            last_reauthentication: None,
            who,
        };
        session.expires = session.who.session_lifetime.map(|l| now + l);
        session
    }

    /// The session after a successful re-authentication that ended at `now`.
    fn renew(&mut self, who: Authenticated, now: Instant) {
        self.expires = who.session_lifetime.map(|l| now + l);
        self.who = who;
    }

    /// Kafka's SocketServer: a SaslHandshake re-authenticates when the session has a lifetime
    /// (expired or not) and the last re-authentication began a second ago or more; any other
    /// request after expiry ends the connection.
    fn admit(&mut self, frame: &[u8], now: Instant) -> Admit {
        let Some(expires) = self.expires else {
            return Admit::Serve;
        };
        let handshake =
            peek_header(frame).is_some_and(|header| header.api_key == ApiKey::SaslHandshake as i16);
        let too_soon = self
            .last_reauthentication
            .is_some_and(|last| now.duration_since(last) < REAUTHENTICATION_INTERVAL_MIN);
        if handshake && !too_soon {
            self.last_reauthentication = Some(now);
            return Admit::Reauthenticate;
        }
        if now > expires {
            Admit::Expired
        } else {
            Admit::Serve
        }
    }
}

/// One SASL conversation: the first authentication of a connection, or a re-authentication
/// of `previous`'s session starting with the SaslHandshake `first`.
struct Conversation {
    settings: Arc<SaslSettings>,
    first: Option<Bytes>,
    previous: Option<Authenticated>,
}

/// Holds a SASL conversation until the connection is authenticated
/// ([`crate::authenticator`]); returns who it is, or `None` when the connection must close.
/// Frames read past the last authentication frame stay in `buf` for the ordinary path.
async fn authenticate(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    conversation: Conversation,
    stream: &mut Stream,
    buf: &mut BytesMut,
    stop: &mut watch::Receiver<bool>,
    idle: Duration,
) -> Option<Authenticated> {
    let peer = ctx.peer;
    let Conversation {
        settings,
        mut first,
        previous,
    } = conversation;
    let decoder = FrameDecoder::new(settings.receive_bytes_max);
    let delay = settings.failed_delay;
    let mut auth = match previous {
        Some(previous) => Authenticator::reauthenticate(settings, previous),
        None => Authenticator::new(settings),
    };
    loop {
        loop {
            let frame = match first.take() {
                Some(frame) => frame,
                None => match decoder.decode(buf) {
                    Ok(Some(frame)) => {
                        broker.metrics.bytes_in(frame.len() + 4);
                        frame
                    }
                    Ok(None) => break,
                    Err(e) => {
                        // Kafka fails the authentication ("invalid receive size"), delay included.
                        let reason = format!("bad frame during authentication: {e}");
                        fail_after(broker, stream, peer, delay, None, reason, stop).await;
                        return None;
                    }
                },
            };
            let step = auth.on_frame(
                frame.clone(),
                broker.now_ms(),
                |user, mechanism| broker.scram_credential(user, mechanism),
                scram_nonce,
            );
            let out = match step {
                Step::Serve => match handle_frame(broker, ctx, frame, BytesMut::new()).await {
                    Ok(Slot::Ready(out)) => out,
                    Ok(Slot::Waiting { .. }) | Err(_) => return None,
                },
                Step::Reply(out) => Frame::new(out),
                Step::FailAfter {
                    delay,
                    reply,
                    reason,
                } => {
                    fail_after(broker, stream, peer, delay, reply, reason, stop).await;
                    return None;
                }
                Step::Close(reason) => {
                    warn!(%peer, %reason, "closing connection");
                    return None;
                }
            };
            if !write(broker, stream, &out, peer).await {
                return None;
            }
            if let Some(who) = auth.authenticated() {
                return Some(who.clone());
            }
        }
        if buf.capacity() - buf.len() < READ_BUFFER_BYTES / 4 {
            buf.reserve(READ_BUFFER_BYTES);
        }
        tokio::select! {
            read = stream.read_buf(buf) => match read {
                Ok(0) => return None,
                Ok(_) => {}
                Err(e) => {
                    debug!(%peer, error = %e, "read failed");
                    return None;
                }
            },
            _ = stop.changed() => return None,
            () = tokio::time::sleep(idle) => {
                info!(%peer, "closing connection idle during authentication");
                return None;
            }
        }
    }
}

/// A failed authentication, as Kafka ends it: nothing is read or served for `delay`, then
/// `reply` (if any) is written and the caller closes. The wait is this connection's own;
/// shutdown cuts it short.
async fn fail_after(
    broker: &Broker,
    stream: &mut Stream,
    peer: SocketAddr,
    delay: Duration,
    reply: Option<BytesMut>,
    reason: String,
    stop: &mut watch::Receiver<bool>,
) {
    info!(%peer, %reason, "authentication failed");
    if *stop.borrow() {
        return;
    }
    tokio::select! {
        () = tokio::time::sleep(delay) => {}
        _ = stop.changed() => return,
    }
    if let Some(out) = reply {
        write(broker, stream, &Frame::new(out), peer).await;
    }
}

type Finished = (
    Result<Option<Response>, tokio::task::JoinError>,
    ApiKey,
    i16,
    i32,
    Instant,
);

/// Waits for the front slot, which must be `Waiting`, and removes it.
async fn wait_front(queue: &mut VecDeque<Slot>) -> Finished {
    let Some(Slot::Waiting { task, .. }) = queue.front_mut() else {
        return std::future::pending().await;
    };
    let result = task.await;
    let Some(Slot::Waiting {
        api,
        version,
        correlation_id,
        started,
        ..
    }) = queue.pop_front()
    else {
        unreachable!("front was Waiting");
    };
    (result, api, version, correlation_id, started)
}

/// Gives back what a quiet connection's buffers hold: the spare response buffer, and the
/// read buffer unless it holds the start of a frame.
fn trim(buf: &mut BytesMut, spare: &mut BytesMut) {
    *spare = BytesMut::new();
    if buf.is_empty() {
        *buf = BytesMut::new();
    }
}

/// Keeps a written buffer's memory for the next response.
fn keep_spare(spare: &mut BytesMut, mut out: BytesMut) {
    if out.capacity() <= SPARE_BUFFER_BYTES_MAX && out.capacity() > spare.capacity() {
        out.clear();
        *spare = out;
    }
}

/// Encodes a completed deferred response into `out`.
fn finish(
    broker: &Broker,
    (result, api, version, correlation_id, started): Finished,
    mut out: BytesMut,
) -> Frame {
    broker.metrics.request(api, started.elapsed());
    out.clear();
    let mut frame = Frame::new(out);
    match result {
        Ok(Some(response)) => encode(
            broker,
            &mut frame,
            (api, version, correlation_id),
            &response,
            Vec::new(),
        ),
        Ok(None) => {}
        Err(e) => warn!(error = %e, ?api, "request task failed"),
    }
    frame
}

/// Encodes `response` into `frame`, its placeholders standing for `regions`.
fn encode(
    broker: &Broker,
    frame: &mut Frame,
    (api, version, correlation_id): (ApiKey, i16, i32),
    response: &Response,
    regions: Vec<FileRegion>,
) {
    for code in crate::metrics::error_codes(response) {
        broker
            .metrics
            .request_error(crate::metrics::api_name(api), code);
    }
    if let Err(e) = outbound::encode(frame, correlation_id, version, response, regions) {
        // A response this version cannot carry is a bug of ours; the client times out.
        warn!(error = %e, ?api, version, "cannot encode response");
    }
}

/// Writes `frame`; false when the connection is gone (or must go).
async fn write(broker: &Broker, stream: &mut Stream, frame: &Frame, peer: SocketAddr) -> bool {
    if frame.is_empty() {
        return true;
    }
    broker.metrics.bytes_out(frame.len());
    match outbound::write(stream, frame).await {
        Ok(()) => true,
        Err(e) => {
            debug!(%peer, error = %e, "write failed");
            false
        }
    }
}

/// Answers every queued request, in order (before closing the connection).
async fn drain(broker: &Broker, stream: &mut Stream, queue: &mut VecDeque<Slot>) -> bool {
    while let Some(slot) = queue.front() {
        let out = match slot {
            Slot::Ready(_) => match queue.pop_front() {
                Some(Slot::Ready(out)) => out,
                _ => unreachable!("front was Ready"),
            },
            Slot::Waiting { .. } => finish(broker, wait_front(queue).await, BytesMut::new()),
        };
        if outbound::write(stream, &out).await.is_err() {
            return false;
        }
    }
    true
}

/// Handles one frame up to its response slot.
///
/// # Errors
/// A reason to close the connection.
async fn handle_frame(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    frame: bytes::Bytes,
    mut out: BytesMut,
) -> Result<Slot, String> {
    out.clear();
    let Some(peeked) = peek_header(&frame) else {
        return Err(format!("request of {} bytes has no header", frame.len()));
    };
    let table = broker.api_table();
    if !table.serves(peeked.api_key, peeked.api_version)
        && !broker
            .feature_gated_apis()
            .serves(peeked.api_key, peeked.api_version)
    {
        if peeked.api_key == api_versions::API_KEY {
            // Kafka answers an ApiVersions it cannot parse at v0 so the client can retry.
            let response = api_versions::unsupported_version_response(&table);
            broker.metrics.request_error("ApiVersions", 35);
            encode_response(&mut out, peeked.correlation_id, 0, &response.into())
                .map_err(|e| format!("encoding ApiVersions fallback: {e}"))?;
            return Ok(Slot::Ready(Frame::new(out)));
        }
        broker.metrics.request_rejected();
        return Err(format!(
            "api key {} version {} is not supported",
            peeked.api_key, peeked.api_version
        ));
    }
    let request = decode_request(frame).map_err(|e| {
        broker.metrics.request_rejected();
        e.to_string()
    })?;
    let api = request.api_key;
    let version = request.version();
    let correlation_id = request.correlation_id();
    let started = Instant::now();
    let at = (api, version, correlation_id);
    match dispatch::dispatch(broker, ctx, request).await {
        Reply::Now(response) => {
            broker.metrics.request(api, started.elapsed());
            let mut frame = Frame::new(out);
            if let Some(response) = response {
                encode(broker, &mut frame, at, &response, Vec::new());
            }
            Ok(Slot::Ready(frame))
        }
        Reply::Records(response, regions) => {
            broker.metrics.request(api, started.elapsed());
            let mut frame = Frame::new(out);
            encode(broker, &mut frame, at, &response, regions);
            Ok(Slot::Ready(frame))
        }
        Reply::Close(reason) => {
            broker.metrics.request(api, started.elapsed());
            Err(reason)
        }
        Reply::Later(future) => Ok(Slot::Waiting {
            task: tokio::spawn(future),
            api,
            version,
            correlation_id,
            started,
        }),
    }
}
