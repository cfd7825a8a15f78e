//! A broker's session with etcd: one lease, renewed in the background at a third of its TTL.
//!
//! What the broker writes under the lease — its registration, the owner keys of the
//! partitions it owns — is deleted by etcd when the lease expires, which is how a dead or
//! paused broker loses its partitions. A session that could not renew in time is *lost*
//! ([`Session::is_lost`]): the broker must stop acknowledging writes, but correctness does
//! not rest on it noticing — its next commit fails the owner-epoch comparison.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, PutOptions, Txn, TxnOp, TxnOpResponse,
};
use tokio::task::JoinHandle;
use tracing::warn;

use crate::keys::Keys;

/// A broker's lease and the client it talks to etcd with.
pub struct Session {
    client: Client,
    keys: Keys,
    lease: i64,
    ttl_secs: i64,
    lost: Arc<AtomicBool>,
    keeper: JoinHandle<()>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("keys", &self.keys)
            .field("lease", &self.lease)
            .field("lost", &self.is_lost())
            .finish_non_exhaustive()
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.keeper.abort();
    }
}

/// The endpoints an `etcd://HOST:PORT[,HOST:PORT…]` URL names.
///
/// # Errors
/// Another scheme, or no endpoint.
pub fn endpoints_from_url(url: &str) -> crate::Result<Vec<String>> {
    let invalid = |detail: String| crate::Error::Invalid {
        what: "metadata store URL",
        detail,
    };
    let rest = url
        .strip_prefix("etcd://")
        .ok_or_else(|| invalid(format!("{url}: use etcd://HOST:PORT[,HOST:PORT...]")))?;
    let endpoints: Vec<String> = rest
        .trim_end_matches('/')
        .split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .map(str::to_string)
        .collect();
    if endpoints.is_empty() || endpoints.iter().any(|e| !e.contains(':')) {
        return Err(invalid(format!("{url}: each endpoint is HOST:PORT")));
    }
    Ok(endpoints)
}

/// Connects to etcd at `endpoints` (`host:port`), failing after `timeout`.
///
/// # Errors
/// etcd unreachable.
pub async fn connect(endpoints: &[String], timeout: Duration) -> crate::Result<Client> {
    let options = ConnectOptions::new()
        .with_connect_timeout(timeout)
        .with_timeout(timeout);
    Ok(Client::connect(endpoints, Some(options)).await?)
}

impl Session {
    /// Grants a lease of `ttl_secs` (at least 2) and starts renewing it.
    ///
    /// # Errors
    /// etcd refused or is unreachable.
    pub async fn start(client: Client, keys: Keys, ttl_secs: i64) -> crate::Result<Session> {
        let ttl_secs = ttl_secs.max(2);
        let mut c = client.clone();
        let lease = c.lease_grant(ttl_secs, None).await?.id();
        let lost = Arc::new(AtomicBool::new(false));
        let keeper = tokio::spawn(keep_alive(client.clone(), lease, ttl_secs, lost.clone()));
        Ok(Session {
            client,
            keys,
            lease,
            ttl_secs,
            lost,
            keeper,
        })
    }

    pub fn client(&self) -> Client {
        self.client.clone()
    }

    pub fn keys(&self) -> &Keys {
        &self.keys
    }

    pub fn lease(&self) -> i64 {
        self.lease
    }

    pub fn ttl_secs(&self) -> i64 {
        self.ttl_secs
    }

    /// Whether the lease expired (or could not be renewed before it would have).
    pub fn is_lost(&self) -> bool {
        self.lost.load(Ordering::Acquire)
    }

    /// Registers this broker: its endpoint under the lease. A node id registered under
    /// another live lease (another broker, or this broker's previous process whose lease has
    /// not expired yet) is refused.
    ///
    /// # Errors
    /// [`crate::Error::Invalid`] when the node id is taken; etcd refused (the lease is gone) or
    /// is unreachable.
    pub async fn register(&self, node_id: i32, endpoint: &str) -> crate::Result<()> {
        let key = self.keys.broker(node_id);
        let put = TxnOp::put(
            key.clone(),
            endpoint,
            Some(PutOptions::new().with_lease(self.lease)),
        );
        let txn = Txn::new()
            .when([Compare::version(key.clone(), CompareOp::Equal, 0)])
            .and_then([put.clone()])
            .or_else([TxnOp::txn(
                Txn::new()
                    .when([Compare::lease(key, CompareOp::Equal, self.lease)])
                    .and_then([put]),
            )]);
        let response = self.client.clone().txn(txn).await?;
        let nested_succeeded = response.op_responses().iter().any(|op| match op {
            TxnOpResponse::Txn(t) => t.succeeded(),
            _ => false,
        });
        if response.succeeded() || nested_succeeded {
            Ok(())
        } else {
            Err(crate::Error::Invalid {
                what: "node id",
                detail: format!(
                    "{node_id} is registered by another live broker (or by this broker's previous \
                     process, until its lease of {} s expires)",
                    self.ttl_secs
                ),
            })
        }
    }

    /// [`Session::close`] for a session others still hold: stops renewing and revokes the
    /// lease.
    ///
    /// # Errors
    /// etcd unreachable (the lease then expires on its own).
    pub async fn revoke(&self) -> crate::Result<()> {
        self.keeper.abort();
        self.lost.store(true, Ordering::Release);
        let mut c = self.client.clone();
        c.lease_revoke(self.lease).await?;
        Ok(())
    }

    /// Stops renewing and revokes the lease: everything written under it goes at once (a
    /// clean shutdown; a crash waits for the TTL instead).
    ///
    /// # Errors
    /// etcd unreachable (the lease then expires on its own).
    pub async fn close(self) -> crate::Result<()> {
        self.revoke().await
    }
}

/// Renews `lease` every third of its TTL until it is found expired.
async fn keep_alive(mut client: Client, lease: i64, ttl_secs: i64, lost: Arc<AtomicBool>) {
    let period = Duration::from_millis((ttl_secs as u64 * 1000) / 3);
    let mut last_renewed = tokio::time::Instant::now();
    let deadline = Duration::from_secs(ttl_secs as u64);
    loop {
        match renew(&mut client, lease).await {
            Ok(ttl) if ttl > 0 => last_renewed = tokio::time::Instant::now(),
            Ok(_) => {
                warn!(
                    lease,
                    "etcd lease expired: this broker's registration and partitions are gone"
                );
                lost.store(true, Ordering::Release);
                return;
            }
            Err(e) => warn!(lease, error = %e, "etcd lease renewal failed"),
        }
        if last_renewed.elapsed() >= deadline {
            warn!(
                lease,
                "etcd lease not renewed within its TTL: treated as lost"
            );
            lost.store(true, Ordering::Release);
            return;
        }
        tokio::time::sleep(period).await;
    }
}

/// One renewal; the TTL etcd reports left (0: the lease is gone).
async fn renew(client: &mut Client, lease: i64) -> crate::Result<i64> {
    let (mut keeper, mut stream) = client.lease_keep_alive(lease).await?;
    keeper.keep_alive().await?;
    match stream.message().await? {
        Some(response) => Ok(response.ttl()),
        None => Ok(0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn etcd_urls_name_their_endpoints_or_are_refused() {
        assert_eq!(
            endpoints_from_url("etcd://a:2379, b:2379/").unwrap(),
            vec!["a:2379".to_string(), "b:2379".to_string()]
        );
        for bad in ["http://a:2379", "etcd://", "etcd://a", "etcd://a:1,b"] {
            assert!(endpoints_from_url(bad).is_err(), "{bad:?}");
        }
    }
}
