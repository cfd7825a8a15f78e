//! What the admin commands (`features`, `share-groups`, `transactions`) share: an
//! [`Admin`] client on the bootstrap address, and the error lines they print for a broker's
//! error code.

use std::net::SocketAddr;

use anyhow::Context;
use shoal_client::{Admin, ClientConfig, Error};

/// How long a command retries (connecting, a coordinator loading) before it gives up: long
/// enough to ride out a broker restart, shorter than the client's 60 s default, which would
/// leave someone typing a wrong address waiting a minute.
const API_TIMEOUT_MS: &str = "15000";

/// An admin client on `bootstrap` (its metadata fetched).
///
/// # Errors
/// When `bootstrap` does not answer within [`API_TIMEOUT_MS`].
pub async fn connect(bootstrap: SocketAddr) -> anyhow::Result<Admin> {
    let address = bootstrap.to_string();
    let config = ClientConfig::from_properties([
        ("bootstrap.servers", address.as_str()),
        ("default.api.timeout.ms", API_TIMEOUT_MS),
    ])?;
    Admin::connect(config)
        .await
        .with_context(|| format!("cannot connect to {bootstrap}"))
}

/// `what: CODE` for a broker's error, the line these commands have always printed; any other
/// failure as it is.
pub fn failed(what: &str, e: Error) -> anyhow::Error {
    match e {
        Error::Kafka { code, .. } => anyhow::anyhow!("{what}: {code}"),
        other => other.into(),
    }
}
