//! SASL authentication of one connection on a SASL listener, before anything else is served:
//! the conversation Kafka's `SaslServerAuthenticator` holds, and again on the same connection
//! when the client re-authenticates (KIP-368).
//!
//! ```text
//! Handshake ──ApiVersions──▶ Handshake (answered normally; not when re-authenticating)
//!     │ SaslHandshake(enabled mechanism)        SaslHandshake(other) ─▶ fail, answered
//!     ▼                                          any other request   ─▶ fail, unanswered
//! Authenticate ──SaslAuthenticate(token)──▶ Authenticate (SCRAM's first round) or Complete
//!     │ wrong credentials / bad token ─▶ fail, answered SASL_AUTHENTICATION_FAILED
//!     ▼ any other request ─▶ fail, unanswered
//! Complete: requests go to the ordinary path.
//! ```
//! "Fail" is Kafka's failed authentication: the connection waits
//! `connection.failed.authentication.delay.ms` (reading nothing, serving nothing), then writes
//! the answer, if there is one, and closes ([`Step::FailAfter`]); it slows down a client that
//! guesses passwords without holding up any other connection. A frame that is not a request
//! at all fails the same way when it is the connection's first (Kafka takes it for a GSSAPI
//! token, and GSSAPI is not served); later, like a request body that does not decode, it
//! closes at once.
//!
//! After a SaslHandshake v0 the tokens come as bare size-prefixed frames, not SaslAuthenticate
//! requests, and the answers go back the same way (Kafka's legacy mode).
//!
//! OAUTHBEARER takes one token: a valid one completes the authentication as `User:<sub>`; an
//! invalid one is answered with an error challenge (`{"status":"invalid_token"}`, not an
//! error code), and the client's `\x01` after it fails the authentication with that
//! challenge as the message, as Kafka's `OAuthBearerSaslServer` does.
//!
//! Sessions (KIP-368): when `connections.max.reauth.ms` is set for the listener and mechanism,
//! [`Authenticated::session_lifetime`] says how long the session lasts, counted from the end
//! of the authentication, and SaslAuthenticate v1+ tells the client (`SessionLifetimeMs`, 0
//! when sessions do not expire). An OAUTHBEARER session lasts the token's remaining life,
//! capped by `connections.max.reauth.ms` when that is set (Kafka's rule: a token's expiry
//! ends the session even without it). The connection closes an expired session at its next
//! request unless that request is a SaslHandshake starting a re-authentication
//! ([`Authenticator::reauthenticate`]): the same conversation again, with the session's
//! mechanism and principal — another mechanism or another user fails it.
//!
//! [`Authenticator::on_frame`] is sans-IO: a frame and the wall-clock time in, a [`Step`] out
//! (bytes to write and what to do next). The connection does the reading, writing, waiting
//! and timekeeping; credentials come through a closure. Nothing here logs a token, a password or a key.

use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use shoal_core::sasl::oauthbearer::{self, OAuthBearerServer};
use shoal_core::sasl::plain;
use shoal_core::sasl::scram::{ScramCredential, ScramMechanism, ScramServer};
use shoal_protocol::messages::{ApiKey, SaslAuthenticateResponse, SaslHandshakeResponse};
use shoal_protocol::request::peek_header;
use shoal_protocol::{decode_request, encode_response, Request, Response, StrBytes};

use crate::config::sasl::{Mechanism, SaslSettings};

/// What the connection does with a frame's outcome.
#[derive(Debug)]
pub enum Step {
    /// Answer the frame through the ordinary path (ApiVersions) and read on.
    Serve,
    /// Write these bytes (a whole frame) and read on; authentication may now be complete.
    Reply(BytesMut),
    /// Failed authentication: wait `delay` without reading, write `reply` if any, then close.
    FailAfter {
        delay: Duration,
        reply: Option<BytesMut>,
        reason: String,
    },
    /// Close at once, answering nothing (a request that does not decode).
    Close(String),
}

/// The authenticated principal's name, the mechanism used and how long the session lasts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authenticated {
    pub user: String,
    pub mechanism: Mechanism,
    /// From the end of the authentication; `None`: the session never expires.
    pub session_lifetime: Option<Duration>,
}

#[derive(Debug)]
enum State {
    /// `first`: no frame has come yet.
    Handshake {
        first: bool,
    },
    Authenticate {
        mechanism: Mechanism,
        /// 0: bare tokens; 1: SaslAuthenticate requests.
        handshake_version: i16,
        ongoing: Option<Ongoing>,
    },
    /// A re-authentication asked for another mechanism than the session's: its first token
    /// fails, unanswered (Kafka's REAUTH_BAD_MECHANISM), with this reason.
    WrongMechanism(String),
    Complete(Authenticated),
    Failed,
}

/// One connection's SASL conversation.
#[derive(Debug)]
pub struct Authenticator {
    settings: Arc<SaslSettings>,
    state: State,
    /// The session being renewed, when this is a re-authentication.
    previous: Option<Authenticated>,
}

/// A mechanism's exchange that takes more than one token.
#[derive(Debug)]
enum Ongoing {
    Scram(ScramServer),
    OAuthBearer(OAuthBearerServer),
}

/// The result of one authentication token.
enum Token {
    /// Send this challenge and wait for the next token.
    Continue(Vec<u8>),
    /// Authenticated as this user; send this last message. The session lasts the lifetime.
    Done(Vec<u8>, String, Option<Duration>),
    /// Refused, with the reason for the log.
    Failed(String),
    /// Refused, with a reason the client may read too.
    Refused(String),
}

impl Authenticator {
    pub fn new(settings: Arc<SaslSettings>) -> Self {
        Self {
            settings,
            state: State::Handshake { first: true },
            previous: None,
        }
    }

    /// A re-authentication of `previous`'s session; its first frame is the SaslHandshake.
    pub fn reauthenticate(settings: Arc<SaslSettings>, previous: Authenticated) -> Self {
        Self {
            settings,
            state: State::Handshake { first: false },
            previous: Some(previous),
        }
    }

    /// The principal, once authentication is complete.
    pub fn authenticated(&self) -> Option<&Authenticated> {
        match &self.state {
            State::Complete(who) => Some(who),
            _ => None,
        }
    }

    /// Takes one frame (without its size prefix) at `now_ms` (wall clock, ms since the
    /// epoch: token expiry). `credential` finds a user's SCRAM credential; `nonce` draws a
    /// fresh server nonce.
    pub fn on_frame(
        &mut self,
        frame: Bytes,
        now_ms: i64,
        credential: impl FnOnce(&str, ScramMechanism) -> Option<ScramCredential>,
        nonce: impl FnOnce() -> String,
    ) -> Step {
        match std::mem::replace(&mut self.state, State::Failed) {
            State::Handshake { first } => self.handshake(frame, first),
            State::Authenticate {
                mechanism,
                handshake_version,
                ongoing,
            } => {
                let exchange = Exchange {
                    mechanism,
                    handshake_version,
                    ongoing,
                    now_ms,
                };
                self.authenticate(frame, exchange, credential, nonce)
            }
            State::WrongMechanism(reason) => self.fail(None, reason),
            State::Complete(who) => {
                self.state = State::Complete(who);
                Step::Serve
            }
            State::Failed => Step::Close("authentication already failed".into()),
        }
    }

    /// Kafka's failed authentication: `reply` (if any) and the close after the delay.
    fn fail(&self, reply: Option<BytesMut>, reason: String) -> Step {
        Step::FailAfter {
            delay: self.settings.failed_delay,
            reply,
            reason,
        }
    }

    /// "authentication" or "re-authentication", as Kafka's messages say.
    fn what(&self) -> &'static str {
        if self.previous.is_some() {
            "re-authentication"
        } else {
            "authentication"
        }
    }

    fn handshake(&mut self, frame: Bytes, first: bool) -> Step {
        let Some(header) = peek_header(&frame) else {
            let reason = format!("{} bytes are not a Kafka request", frame.len());
            return if first {
                self.fail(None, reason)
            } else {
                Step::Close(reason)
            };
        };
        if header.api_key == ApiKey::ApiVersions as i16 && self.previous.is_none() {
            self.state = State::Handshake { first: false };
            return Step::Serve;
        }
        if header.api_key != ApiKey::SaslHandshake as i16 {
            return self.fail(
                None,
                format!(
                    "unexpected request (api key {}) during SASL handshake",
                    header.api_key
                ),
            );
        }
        let request = match decode_request(frame) {
            Ok(request) => request,
            Err(e) => return Step::Close(format!("bad SaslHandshake: {e}")),
        };
        let Request::SaslHandshake(body) = &request.body else {
            return Step::Close("bad SaslHandshake".into());
        };
        let version = request.version();
        let offered = body.mechanism.as_str();
        let mechanisms: Vec<StrBytes> = self
            .settings
            .mechanism_names()
            .into_iter()
            .map(StrBytes::from_static_str)
            .collect();
        let enabled = Mechanism::parse(offered).filter(|m| self.settings.mechanisms.contains(m));
        let code = if enabled.is_some() { 0 } else { 33 };
        let response = SaslHandshakeResponse::default()
            .with_error_code(code)
            .with_mechanisms(mechanisms);
        let Some(out) = encode(request.correlation_id(), version, response.into()) else {
            return Step::Close("cannot encode SaslHandshake response".into());
        };
        let Some(mechanism) = enabled else {
            return self.fail(Some(out), format!("unsupported SASL mechanism {offered:?}"));
        };
        self.state = match &self.previous {
            Some(previous) if previous.mechanism != mechanism => State::WrongMechanism(format!(
                "SASL mechanism '{}' requested by client is not supported for \
                 re-authentication of mechanism '{}'",
                mechanism.name(),
                previous.mechanism.name()
            )),
            _ => State::Authenticate {
                mechanism,
                handshake_version: version,
                ongoing: None,
            },
        };
        Step::Reply(out)
    }

    fn authenticate(
        &mut self,
        frame: Bytes,
        exchange: Exchange,
        credential: impl FnOnce(&str, ScramMechanism) -> Option<ScramCredential>,
        nonce: impl FnOnce() -> String,
    ) -> Step {
        let Exchange {
            mechanism,
            handshake_version,
            ongoing,
            now_ms,
        } = exchange;
        if handshake_version == 0 {
            // Legacy mode: the frame is the token, the answer a bare frame.
            let (token, ongoing) =
                self.evaluate(&frame, mechanism, ongoing, now_ms, credential, nonce);
            return match self.same_principal(token) {
                Token::Continue(challenge) => {
                    self.state = State::Authenticate {
                        mechanism,
                        handshake_version,
                        ongoing,
                    };
                    Step::Reply(bare_frame(&challenge))
                }
                Token::Done(last, user, lifetime) => {
                    self.complete(user, mechanism, lifetime);
                    Step::Reply(bare_frame(&last))
                }
                Token::Failed(reason) | Token::Refused(reason) => self.fail(None, reason),
            };
        }
        let Some(header) = peek_header(&frame) else {
            return Step::Close(format!("{} bytes are not a Kafka request", frame.len()));
        };
        if header.api_key != ApiKey::SaslAuthenticate as i16 {
            return self.fail(
                None,
                format!(
                    "unexpected request (api key {}) during SASL {}",
                    header.api_key,
                    self.what()
                ),
            );
        }
        let request = match decode_request(frame) {
            Ok(request) => request,
            Err(e) => return Step::Close(format!("bad SaslAuthenticate: {e}")),
        };
        let Request::SaslAuthenticate(body) = &request.body else {
            return Step::Close("bad SaslAuthenticate".into());
        };
        let (token, ongoing) = self.evaluate(
            &body.auth_bytes,
            mechanism,
            ongoing,
            now_ms,
            credential,
            nonce,
        );
        let token = self.same_principal(token);
        let (correlation_id, version) = (request.correlation_id(), request.version());
        let response = match &token {
            Token::Continue(bytes) => {
                SaslAuthenticateResponse::default().with_auth_bytes(Bytes::copy_from_slice(bytes))
            }
            Token::Done(bytes, _, lifetime) => {
                let response = SaslAuthenticateResponse::default()
                    .with_auth_bytes(Bytes::copy_from_slice(bytes));
                match lifetime {
                    // Version 0 has no field for it; the session still expires.
                    Some(lifetime) if version >= 1 => response.with_session_lifetime_ms(
                        i64::try_from(lifetime.as_millis()).unwrap_or(i64::MAX),
                    ),
                    _ => response,
                }
            }
            // The reason stays in the log: it could tell whether a user exists.
            Token::Failed(_) => SaslAuthenticateResponse::default()
                .with_error_code(58)
                .with_error_message(Some(StrBytes::from_string(format!(
                    "Authentication failed during {} due to invalid credentials with SASL \
                     mechanism {}",
                    self.what(),
                    mechanism.name()
                )))),
            Token::Refused(message) => SaslAuthenticateResponse::default()
                .with_error_code(58)
                .with_error_message(Some(StrBytes::from_string(message.clone()))),
        };
        let Some(out) = encode(correlation_id, version, response.into()) else {
            return Step::Close("cannot encode SaslAuthenticate response".into());
        };
        match token {
            Token::Continue(_) => {
                self.state = State::Authenticate {
                    mechanism,
                    handshake_version,
                    ongoing,
                };
                Step::Reply(out)
            }
            Token::Done(_, user, lifetime) => {
                self.complete(user, mechanism, lifetime);
                Step::Reply(out)
            }
            Token::Failed(reason) | Token::Refused(reason) => self.fail(Some(out), reason),
        }
    }

    /// A re-authentication must end as the session's principal (Kafka compares
    /// `KafkaPrincipal`s: `User:` and the name).
    fn same_principal(&self, token: Token) -> Token {
        match (&self.previous, token) {
            (Some(previous), Token::Done(_, user, _)) if previous.user != user => {
                Token::Refused(format!(
                    "Cannot change principals during re-authentication from User.{}: User.{user}",
                    previous.user
                ))
            }
            (_, token) => token,
        }
    }

    fn complete(&mut self, user: String, mechanism: Mechanism, lifetime: Option<Duration>) {
        self.state = State::Complete(Authenticated {
            user,
            mechanism,
            session_lifetime: lifetime,
        });
    }

    /// Runs one token through the mechanism.
    fn evaluate(
        &self,
        token: &[u8],
        mechanism: Mechanism,
        ongoing: Option<Ongoing>,
        now_ms: i64,
        credential: impl FnOnce(&str, ScramMechanism) -> Option<ScramCredential>,
        nonce: impl FnOnce() -> String,
    ) -> (Token, Option<Ongoing>) {
        let lifetime = self.settings.session_lifetime(mechanism);
        match (mechanism, ongoing) {
            (Mechanism::Plain, _) => {
                let result = plain::authenticate(token, |user| self.settings.plain_password(user));
                let token = match result {
                    Ok(user) => Token::Done(Vec::new(), user, lifetime),
                    Err(e) => Token::Failed(e.to_string()),
                };
                (token, None)
            }
            (Mechanism::Scram(_), Some(Ongoing::Scram(mut server))) => {
                match server.client_final(token) {
                    Ok(last) => {
                        let user = server.authenticated_user().unwrap_or_default().to_string();
                        (Token::Done(last, user, lifetime), None)
                    }
                    Err(e) => (Token::Failed(e.to_string()), None),
                }
            }
            (Mechanism::Scram(m), _) => {
                let mut server = ScramServer::new(m);
                match server.client_first(token, &nonce(), |user| credential(user, m)) {
                    Ok(challenge) => (Token::Continue(challenge), Some(Ongoing::Scram(server))),
                    Err(e) => (Token::Failed(e.to_string()), None),
                }
            }
            (Mechanism::OAuthBearer, ongoing) => {
                let mut server = match ongoing {
                    Some(Ongoing::OAuthBearer(server)) => server,
                    _ => OAuthBearerServer::new(),
                };
                let Some(validator) = &self.settings.oauth else {
                    // SaslSettings builds a validator whenever OAUTHBEARER is enabled.
                    return (Token::Failed("no OAUTHBEARER validator".into()), None);
                };
                match server.evaluate(token, validator, now_ms) {
                    Ok(oauthbearer::Outcome::Done(valid)) => {
                        let max_reauth_ms =
                            lifetime.map(|l| i64::try_from(l.as_millis()).unwrap_or(i64::MAX));
                        let ms = valid.session_lifetime_ms(now_ms, max_reauth_ms);
                        let lifetime = Some(Duration::from_millis(ms.unsigned_abs()));
                        (Token::Done(Vec::new(), valid.principal, lifetime), None)
                    }
                    Ok(oauthbearer::Outcome::Challenge(challenge, reason)) => {
                        // The client sees only the challenge; the log says why.
                        tracing::info!(%reason, "OAUTHBEARER token refused");
                        (
                            Token::Continue(challenge.into_bytes()),
                            Some(Ongoing::OAuthBearer(server)),
                        )
                    }
                    Err(oauthbearer::Failure::Acknowledged(challenge)) => {
                        (Token::Refused(challenge), None)
                    }
                    Err(oauthbearer::Failure::Refused(
                        e @ oauthbearer::OAuthError::AuthzidMismatch { .. },
                    )) => (Token::Refused(e.to_string()), None),
                    Err(oauthbearer::Failure::Refused(e)) => (Token::Failed(e.to_string()), None),
                }
            }
        }
    }
}

/// One SaslAuthenticate's inputs beside the frame.
struct Exchange {
    mechanism: Mechanism,
    handshake_version: i16,
    ongoing: Option<Ongoing>,
    now_ms: i64,
}

/// A response frame, or `None` when it cannot be encoded (a bug of ours; the caller closes).
fn encode(correlation_id: i32, version: i16, response: Response) -> Option<BytesMut> {
    let mut out = BytesMut::new();
    encode_response(&mut out, correlation_id, version, &response).ok()?;
    Some(out)
}

/// `bytes` as a size-prefixed frame (legacy SASL tokens).
fn bare_frame(bytes: &[u8]) -> BytesMut {
    let mut out = BytesMut::with_capacity(4 + bytes.len());
    out.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
    out.extend_from_slice(bytes);
    out
}

/// A fresh SCRAM server nonce: 18 random bytes from the OS, base64 (printable, no ',').
///
/// # Panics
/// When the OS has no randomness to give (nothing secure can be done then).
pub fn scram_nonce() -> String {
    use base64::Engine as _;
    let mut bytes = [0u8; 18];
    getrandom::fill(&mut bytes).expect("the OS gives random bytes");
    base64::engine::general_purpose::STANDARD.encode(bytes)
}
