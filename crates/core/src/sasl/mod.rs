//! SASL mechanisms as pure functions and state machines: [`plain`] (RFC 4616) and [`scram`]
//! (SCRAM-SHA-256/512, RFC 5802 and 7677), for the broker's authenticator and for Shoal's
//! client. No I/O, no clock, no randomness: nonces come in as arguments.
//!
//! Must not: log or format a password, a salted password or a stored key (the credential
//! types print nothing secret in `Debug`).

pub mod plain;
pub mod scram;

/// The SASL mechanisms Shoal serves, by their SASL names.
pub const MECHANISMS: [&str; 3] = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"];
