//! The listeners: accept connections within the connection limits ([`crate::conn_limits`]),
//! run each on its own task, and shut down cleanly when the future passed to [`run`] or
//! [`run_listeners`] completes.
//!
//! One accept loop serves every listener (`listeners=A://…,B://…`), so the connection limits
//! count all of them together, as Kafka's do; each connection knows the listener it came in on
//! ([`Listener`]) for its protocol and the address Metadata gives its clients.
//!
//! Shutdown (mini-redis style): the signal is broadcast through a `watch` channel; every
//! connection finishes the request it is handling and exits; [`run`] waits for all of them, then
//! closes the broker (flushing and closing every log).

use std::future::Future;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::task::Poll;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tracing::{info, warn};

use crate::broker::Broker;
use crate::config::listeners::{HostPort, Listener, ListenerConfig, SecurityProtocol};
use crate::config::BrokerConfig;
use crate::conn_limits::{ConnectionCounts, LimitsCache, Refused};
use crate::connection;
use crate::tls;
use crate::transport::Stream;

/// A bound socket and the listener it serves.
pub struct BoundListener {
    pub listener: Arc<Listener>,
    pub socket: TcpListener,
    /// For SSL and SASL_SSL listeners: the TLS handshake every connection starts with, and
    /// its principal rules (reloaded by dynamic updates of the stores).
    pub tls: Option<Arc<tls::ListenerTls>>,
}

impl std::fmt::Debug for BoundListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BoundListener")
            .field("listener", &self.listener)
            .field("socket", &self.socket)
            .field("tls", &self.tls.is_some())
            .finish()
    }
}

impl BoundListener {
    /// `socket` as the one PLAINTEXT listener, its clients sent wherever the broker's
    /// ownership seam says (the embedding `run` serves).
    pub fn plaintext(socket: TcpListener) -> Self {
        Self {
            listener: Arc::new(Listener {
                name: "PLAINTEXT".to_string(),
                protocol: SecurityProtocol::Plaintext,
                advertised: None,
                sasl: None,
            }),
            socket,
            tls: None,
        }
    }

    /// The address the socket is bound to.
    ///
    /// # Errors
    /// When the socket cannot tell (it always can once bound).
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.socket.local_addr()
    }
}

/// Serves `listener` (one PLAINTEXT listener) until `shutdown` completes, then closes `broker`.
///
/// # Errors
/// Only when closing the broker's logs fails; accept errors are logged and retried.
pub async fn run(
    broker: Arc<Broker>,
    listener: TcpListener,
    shutdown: impl Future,
) -> anyhow::Result<()> {
    run_listeners(broker, vec![BoundListener::plaintext(listener)], shutdown).await
}

/// Serves every listener until `shutdown` completes, then closes `broker`.
///
/// # Errors
/// Only when closing the broker's logs fails; accept errors are logged and retried.
///
/// # Panics
/// When `listeners` is empty (a caller's bug: there would be nothing to serve).
pub async fn run_listeners(
    broker: Arc<Broker>,
    listeners: Vec<BoundListener>,
    shutdown: impl Future,
) -> anyhow::Result<()> {
    assert!(!listeners.is_empty(), "run_listeners needs a listener");
    let (stop_tx, stop_rx) = watch::channel(false);
    let counts = ConnectionCounts::new();
    let max_total =
        || usize::try_from(broker.current_config().long("max.connections")).unwrap_or(0);
    let mut limits = LimitsCache::default();
    let mut tasks = JoinSet::new();
    let mut turn = 0;
    let background = start_background(&broker, stop_rx.clone());
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            (which, accepted) = accept_any(&listeners, &mut turn) => {
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
                let listener = listeners[which].listener.clone();
                let tls = listeners[which]
                    .tls
                    .as_ref()
                    .map(|tls| tls.current(&broker.current_config()));
                tasks.spawn(async move {
                    let _ = stream.set_nodelay(true);
                    if let Some((stream, principal)) = secure(stream, tls, peer).await {
                        connection::serve(broker, listener, stream, peer, principal, stop).await;
                    }
                    drop(slot);
                });
            }
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
        }
    }
    info!("shutting down: closing listeners and connections");
    drop(listeners);
    let _ = stop_tx.send(true);
    while tasks.join_next().await.is_some() {}
    for task in background {
        let _ = task.await;
    }
    broker.close()?;
    info!("shutdown complete");
    Ok(())
}

/// The connection's stream and principal: plain and `User:ANONYMOUS`, or after a TLS
/// handshake that completed within [`tls::HANDSHAKE_TIMEOUT`], with the principal the
/// listener's mapping rules give the client certificate's subject when one was given
/// ([`tls::Built::principal`]). `None` (logged) when the handshake fails — a plaintext client
/// on a TLS port, a certificate refused, garbage — or when no mapping rule applies.
async fn secure(
    stream: TcpStream,
    tls: Option<Arc<tls::Built>>,
    peer: SocketAddr,
) -> Option<(Stream, String)> {
    let Some(tls) = tls else {
        return Some((Stream::Plain(stream), tls::ANONYMOUS.to_string()));
    };
    match tokio::time::timeout(tls::HANDSHAKE_TIMEOUT, tls.acceptor().accept(stream)).await {
        Ok(Ok(stream)) => {
            let Some(principal) = tls.principal(stream.get_ref().1.peer_certificates()) else {
                info!(%peer, "no ssl.principal.mapping.rules rule applies to the client certificate's subject");
                return None;
            };
            Some((Stream::Tls(Box::new(stream)), principal))
        }
        Ok(Err(e)) => {
            info!(%peer, error = %e, "TLS handshake failed");
            None
        }
        Err(_) => {
            info!(%peer, "TLS handshake timed out");
            None
        }
    }
}

/// Waits for a connection on any of `listeners`; returns which one took it. The listener
/// asked first moves on with each call (`turn`), so a busy listener cannot starve the others.
async fn accept_any(
    listeners: &[BoundListener],
    turn: &mut usize,
) -> (usize, std::io::Result<(TcpStream, SocketAddr)>) {
    if let [only] = listeners {
        return (0, only.socket.accept().await);
    }
    let start = *turn;
    *turn = turn.wrapping_add(1);
    std::future::poll_fn(|cx| {
        for i in 0..listeners.len() {
            let which = (start + i) % listeners.len();
            if let Poll::Ready(accepted) = listeners[which].socket.poll_accept(cx) {
                return Poll::Ready((which, accepted));
            }
        }
        Poll::Pending
    })
    .await
}

/// Binds every listener of `configs`, in order, and settles the address each advertises: the
/// configured one, else the bound address (this machine's name when bound to every
/// interface), with the bound port where the configured one is 0.
///
/// # Errors
/// A host that does not resolve, an address that cannot be bound, or for SSL and SASL_SSL a
/// TLS key or trust store that cannot be used ([`tls::build`]); each message names the
/// listener.
pub async fn bind_listeners(
    broker_config: &BrokerConfig,
    configs: &[ListenerConfig],
) -> anyhow::Result<Vec<BoundListener>> {
    let mut bound = Vec::with_capacity(configs.len());
    for config in configs {
        let tls = if config.protocol.uses_tls() {
            Some(Arc::new(tls::ListenerTls::new(
                broker_config,
                &config.name,
            )?))
        } else {
            None
        };
        let addr = resolve_bind(&config.bind)
            .map_err(|e| anyhow::anyhow!("listener {}: {e}", config.name))?;
        let socket = bind(addr)
            .await
            .map_err(|e| anyhow::anyhow!("listener {}: {e}", config.name))?;
        let local = socket.local_addr()?;
        let advertised = match &config.advertised {
            Some(a) => HostPort {
                host: if a.host.is_empty() {
                    advertised_host(local.ip())
                } else {
                    a.host.clone()
                },
                port: if a.port == 0 { local.port() } else { a.port },
            },
            None => HostPort {
                host: advertised_host(local.ip()),
                port: local.port(),
            },
        };
        info!(listener = %config.name, protocol = config.protocol.name(), %local,
              advertised = %format!("{}:{}", advertised.host, advertised.port), "listening");
        bound.push(BoundListener {
            listener: Arc::new(Listener {
                name: config.name.clone(),
                protocol: config.protocol,
                advertised: Some(advertised),
                sasl: config.sasl.clone().map(Arc::new),
            }),
            socket,
            tls,
        });
    }
    Ok(bound)
}

/// The socket address of a listener's `host:port`; an empty host is every IPv4 interface.
fn resolve_bind(at: &HostPort) -> anyhow::Result<SocketAddr> {
    let host = if at.host.is_empty() {
        "0.0.0.0"
    } else {
        &at.host
    };
    (host, at.port)
        .to_socket_addrs()
        .map_err(|e| anyhow::anyhow!("cannot resolve {host}: {e}"))?
        .next()
        .ok_or_else(|| anyhow::anyhow!("{host} resolves to no address"))
}

/// The host to advertise for a socket bound to `ip`: the address itself, or this machine's
/// name when bound to every interface (Kafka advertises its canonical host name then).
fn advertised_host(ip: IpAddr) -> String {
    if !ip.is_unspecified() {
        return ip.to_string();
    }
    let mut name = [0u8; 256];
    // SAFETY: gethostname writes at most `name.len()` bytes into the buffer passed.
    let ok = unsafe { libc::gethostname(name.as_mut_ptr().cast(), name.len()) } == 0;
    let end = name.iter().position(|&b| b == 0).unwrap_or(0);
    match std::str::from_utf8(&name[..end]) {
        Ok(host) if ok && !host.is_empty() => host.to_string(),
        _ => ip.to_string(),
    }
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
/// flushing, the log cleaner, the acquisition-lock timer of share partitions, and, in a
/// cluster, following the metadata other brokers change and taking over the partitions this
/// node comes to own.
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
        tokio::spawn(crate::archiving::run_dead_letters(
            Arc::downgrade(&broker.node),
            Arc::downgrade(&broker.share),
            stop.clone(),
        )),
        tokio::spawn(crate::metadata_follower::run(
            Arc::downgrade(&broker.node),
            stop.clone(),
        )),
        tokio::spawn(crate::takeover::run(Arc::downgrade(&broker.node), stop)),
    ]
}
