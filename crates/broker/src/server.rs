//! The listener: accepts connections within the connection limits ([`crate::conn_limits`]),
//! runs each on its own task, and shuts down cleanly when the future passed to [`run`]
//! completes.
//!
//! Shutdown (mini-redis style): the signal is broadcast through a `watch` channel; every
//! connection finishes the request it is handling and exits; [`run`] waits for all of them, then
//! closes the broker (flushing and closing every log).

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tracing::{info, warn};

use crate::broker::Broker;
use crate::conn_limits::{ConnectionCounts, LimitsCache, Refused};
use crate::connection;

/// Serves `listener` until `shutdown` completes, then closes `broker`.
///
/// # Errors
/// Only when closing the broker's logs fails; accept errors are logged and retried.
pub async fn run(
    broker: Arc<Broker>,
    listener: TcpListener,
    shutdown: impl Future,
) -> anyhow::Result<()> {
    let (stop_tx, stop_rx) = watch::channel(false);
    let counts = ConnectionCounts::new();
    let max_total =
        || usize::try_from(broker.current_config().long("max.connections")).unwrap_or(0);
    let mut limits = LimitsCache::default();
    let mut tasks = JoinSet::new();
    let background = start_background(&broker, stop_rx.clone());
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => {
                let (stream, peer) = match accepted {
                    Ok(pair) => pair,
                    Err(e) => {
                        warn!(error = %e, "accept failed");
                        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                        continue;
                    }
                };
                // Kafka's acceptor: at max.connections it takes no one else until a
                // connection closes; an address over its own limit is closed at once.
                tokio::select! {
                    _ = &mut shutdown => break,
                    () = counts.wait_for_room(max_total) => {}
                }
                let slot = match counts.admit(peer.ip(), limits.get(&broker.current_config())) {
                    Ok(slot) => slot,
                    Err(Refused::PerIp { limit }) => {
                        info!(%peer, limit, "connection refused: address already has max.connections.per.ip");
                        continue;
                    }
                };
                let broker = broker.clone();
                let stop = stop_rx.clone();
                tasks.spawn(async move {
                    connection::serve(broker, stream, peer, stop).await;
                    drop(slot);
                });
            }
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
        }
    }
    info!("shutting down: closing listener and connections");
    drop(listener);
    let _ = stop_tx.send(true);
    while tasks.join_next().await.is_some() {}
    for task in background {
        let _ = task.await;
    }
    broker.close()?;
    info!("shutdown complete");
    Ok(())
}

/// Binds `addr`; a helper so callers get a clear error message.
///
/// # Errors
/// When the address cannot be bound.
pub async fn bind(addr: SocketAddr) -> anyhow::Result<TcpListener> {
    TcpListener::bind(addr)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {addr}: {e}"))
}

/// Starts the background work tied to the server's lifetime: retention and time-based
/// flushing, the log cleaner, the acquisition-lock timer of share partitions, and the
/// takeover of partitions this node comes to own.
fn start_background(
    broker: &Arc<Broker>,
    stop: watch::Receiver<bool>,
) -> Vec<tokio::task::JoinHandle<()>> {
    vec![
        tokio::spawn(crate::retention::run(broker.clone(), stop.clone())),
        tokio::spawn(crate::cleaner::run(broker.clone(), stop.clone())),
        tokio::spawn(crate::share::run_lock_timer(
            Arc::downgrade(&broker.node),
            Arc::downgrade(&broker.share),
            stop.clone(),
        )),
        tokio::spawn(crate::takeover::run(Arc::downgrade(&broker.node), stop)),
    ]
}
