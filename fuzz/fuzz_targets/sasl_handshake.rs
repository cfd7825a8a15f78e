//! The SASL handshake path on arbitrary bytes: the frame as a request (a SaslHandshake's
//! mechanism name, a SaslAuthenticate's token) and the tokens through the PLAIN check and the
//! SCRAM server's two steps, as the broker's authenticator runs them. Nothing may panic, and no
//! input may authenticate against a credential whose password it does not know.
#![no_main]

use std::sync::OnceLock;

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use shoal_core::sasl::plain;
use shoal_core::sasl::scram::{ScramClient, ScramCredential, ScramMechanism, ScramServer};
use shoal_protocol::Request;

// As in request_decode: the broker's allocator, for kafka-protocol's wire-sized allocations.
#[global_allocator]
static A: shoal_protocol::alloc::ReserveLazily = shoal_protocol::alloc::ReserveLazily;

fn credential() -> ScramCredential {
    static C: OnceLock<ScramCredential> = OnceLock::new();
    C.get_or_init(|| {
        ScramCredential::from_password(ScramMechanism::Sha256, b"unguessable", b"salt", 4096)
    })
    .clone()
}

/// Both SCRAM steps, the input split at the first NUL into client-first and client-final.
fn scram(token: &[u8]) {
    let (first, last) = match token.iter().position(|&b| b == 0) {
        Some(at) => (&token[..at], &token[at + 1..]),
        None => (token, &[][..]),
    };
    let mut server = ScramServer::new(ScramMechanism::Sha256);
    if server.client_first(first, "servernonce", |_| Some(credential())).is_ok() {
        assert!(server.client_final(last).is_err(), "authenticated without the password");
    }
    assert_eq!(server.authenticated_user(), None);
    // The client side parses the server's messages: the same bytes as server-first/-final.
    let mut client = ScramClient::new(ScramMechanism::Sha256, "u", "p", "clientnonce");
    let _ = client.client_first();
    if client.server_first(first).is_ok() {
        let _ = client.server_final(last);
    }
}

fn token(token: &[u8]) {
    let _ = plain::authenticate(token, |user| (user == "alice").then_some("alice-secret"));
    scram(token);
}

fuzz_target!(|data: &[u8]| {
    token(data);
    let Ok(frame) = shoal_protocol::decode_request(Bytes::copy_from_slice(data)) else {
        return;
    };
    match &frame.body {
        Request::SaslHandshake(r) => {
            let _ = r.mechanism.as_str().len();
        }
        Request::SaslAuthenticate(r) => token(&r.auth_bytes),
        _ => {}
    }
});
