//! SASL mechanisms as pure functions and state machines: [`plain`] (RFC 4616), [`scram`]
//! (SCRAM-SHA-256/512, RFC 5802 and 7677), for the broker's authenticator and for Shoal's
//! client, and [`oauthbearer`] (RFC 7628 with signed JWTs checked against a JSON Web Key
//! Set), server side; [`jaas`], the JAAS entries Kafka's `sasl.jaas.config` holds. No I/O, no clock, no randomness: nonces and the time come in as
//! arguments.
//!
//! Must not: log or format a password, a salted password, a stored key or a bearer token
//! (the credential types print nothing secret in `Debug`).

pub mod jaas;
pub mod oauthbearer;
pub mod plain;
pub mod scram;

/// The SASL mechanisms Shoal serves, by their SASL names.
pub const MECHANISMS: [&str; 4] = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"];
