//! `shoal`: the Shoal command-line tool. `shoal serve` runs one broker node, alone or as a
//! member of a cluster (`--metadata-store`, `--object-store`); `shoal
//! transactions` inspects transactions and aborts a hanging one; `shoal share-groups` lists,
//! describes and resets share groups; `shoal features` shows and changes feature levels;
//! `shoal perf` runs measurement harnesses against a broker; `shoal verify` proves
//! exactly-once queues end to end, with crashes.

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::{Parser, Subcommand};
use shoal_broker::cluster_member::{ClusterMember, ClusterOptions};
use shoal_broker::config::listeners::{self, ListenerConfig};
use shoal_broker::config::{env_key, parse_properties};
use shoal_broker::{Broker, BrokerConfig, BrokerOptions};
use tracing::{info, warn};

mod admin;
mod cluster;
mod features;
mod perf;
mod perf_client;
mod perf_commits;
mod share_groups;
mod transactions;
mod verify;

#[global_allocator]
static ALLOCATOR: shoal_protocol::alloc::ReserveLazily = shoal_protocol::alloc::ReserveLazily;

#[derive(Parser, Debug)]
#[command(
    name = "shoal",
    version,
    about = "Shoal: a Kafka-wire-compatible broker for exactly-once queues"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run one broker node.
    Serve(ServeArgs),
    /// Inspect transactions and abort a hanging one.
    Transactions {
        /// A broker to talk to.
        #[arg(long, env = "SHOAL_BOOTSTRAP", default_value = "127.0.0.1:9092")]
        bootstrap: String,
        #[command(subcommand)]
        command: transactions::TransactionsCommand,
    },
    /// List, describe and reset share groups.
    ShareGroups {
        /// A broker to talk to.
        #[arg(long, env = "SHOAL_BOOTSTRAP", default_value = "127.0.0.1:9092")]
        bootstrap: String,
        #[command(subcommand)]
        command: share_groups::ShareGroupsCommand,
    },
    /// Show feature levels (share.version, transaction.version, metadata.version) and upgrade,
    /// downgrade or disable them.
    Features {
        /// A broker to talk to.
        #[arg(long, env = "SHOAL_BOOTSTRAP", default_value = "127.0.0.1:9092")]
        bootstrap: String,
        #[command(subcommand)]
        command: features::FeaturesCommand,
    },
    /// Measure a running broker (on loopback) over the raw protocol.
    Perf {
        /// A broker to talk to.
        #[arg(long, env = "SHOAL_BOOTSTRAP", default_value = "127.0.0.1:9092")]
        bootstrap: String,
        #[command(subcommand)]
        command: perf::PerfCommand,
    },
    /// Inspect a cluster of brokers through its etcd.
    Cluster {
        /// The cluster's etcd: etcd://HOST:PORT[,HOST:PORT...].
        #[arg(long, env = "SHOAL_METADATA_STORE")]
        metadata_store: String,
        /// The cluster's name (its keys in etcd are under /shoal/NAME/).
        #[arg(long, env = "SHOAL_CLUSTER_NAME", default_value = "shoal")]
        cluster_name: String,
        #[command(subcommand)]
        command: cluster::ClusterCommand,
    },
    /// Prove exactly-once end to end: run exactly_once_pipeline workers on a broker of its
    /// own, SIGKILL workers and the broker at random, and check every output and
    /// acknowledgement.
    Verify(verify::VerifyArgs),
}

#[derive(clap::Args, Debug)]
struct ServeArgs {
    /// Data directory (Kafka's log.dirs).
    #[arg(long, env = "SHOAL_DATA_DIR", default_value = "./data")]
    data_dir: PathBuf,
    /// Address of the one PLAINTEXT listener for Kafka clients [default: 127.0.0.1:9092];
    /// the `listeners` key configures several listeners instead.
    #[arg(long, env = "SHOAL_LISTEN")]
    listen: Option<String>,
    /// A properties file with Kafka's key names (e.g. num.partitions=3).
    #[arg(long, env = "SHOAL_CONFIG")]
    config: Option<PathBuf>,
    /// Serve Prometheus metrics on this address (e.g. 127.0.0.1:9100).
    #[arg(long, env = "SHOAL_METRICS")]
    metrics: Option<String>,
    /// Set a configuration key, overriding the file and the environment (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
    /// Segment files kept open at most (4096, or half the open-file limit)
    #[arg(long, env = "SHOAL_MAX_OPEN_SEGMENT_FILES", value_name = "N")]
    max_open_segment_files: Option<usize>,
    /// This broker's node id (Kafka's node.id); required in a cluster, unique in it.
    #[arg(long, env = "SHOAL_NODE_ID", value_name = "N")]
    node_id: Option<i32>,
    /// Join a cluster whose metadata is in etcd: etcd://HOST:PORT[,HOST:PORT...]. Without
    /// it, this is a single node with everything in --data-dir.
    #[arg(
        long,
        env = "SHOAL_METADATA_STORE",
        value_name = "URL",
        requires = "object_store"
    )]
    metadata_store: Option<String>,
    /// Where a cluster keeps record bytes: s3://BUCKET?endpoint=URL (credentials from the
    /// AWS_* variables) or file:///DIR (a directory every broker shares).
    #[arg(
        long,
        env = "SHOAL_OBJECT_STORE",
        value_name = "URL",
        requires = "metadata_store"
    )]
    object_store: Option<String>,
    /// The cluster's name: several clusters may share one etcd.
    #[arg(long, env = "SHOAL_CLUSTER_NAME", default_value = "shoal")]
    cluster_name: String,
}

impl ServeArgs {
    /// How to join a cluster, when the cluster flags are given.
    fn cluster(&self, config: &BrokerConfig) -> anyhow::Result<Option<ClusterOptions>> {
        let (Some(metadata_store), Some(object_store)) = (&self.metadata_store, &self.object_store)
        else {
            return Ok(None);
        };
        if self.node_id.is_none() {
            bail!("a cluster member needs --node-id (SHOAL_NODE_ID), unique in the cluster");
        }
        let timeout_ms = config.long("broker.session.timeout.ms").max(2000) as u64;
        Ok(Some(ClusterOptions {
            node_id: config.long("node.id") as i32,
            metadata_store: metadata_store.clone(),
            object_store: object_store.clone(),
            cluster_name: self.cluster_name.clone(),
            session_timeout: Duration::from_millis(timeout_ms),
        }))
    }
}

fn resolve(addr: &str) -> anyhow::Result<SocketAddr> {
    addr.to_socket_addrs()
        .with_context(|| format!("cannot resolve {addr}"))?
        .next()
        .with_context(|| format!("{addr} resolves to no address"))
}

fn load_config(args: &ServeArgs) -> anyhow::Result<BrokerConfig> {
    let mut config = BrokerConfig::default();
    if let Some(path) = &args.config {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read config file {path:?}"))?;
        let pairs = parse_properties(&text);
        let ignored = config.apply(pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())))?;
        for key in ignored {
            warn!(
                key,
                "ignoring unknown configuration key (not a Kafka 4.4 broker key)"
            );
        }
    }
    for (var, value) in std::env::vars() {
        if let Some(key) = env_key(&var) {
            config.set(&key, &value)?;
        }
    }
    for pair in &args.set {
        let (k, v) = pair
            .split_once('=')
            .with_context(|| format!("--set expects KEY=VALUE, got {pair}"))?;
        config.set(k, v)?;
    }
    if let Some(id) = args.node_id {
        config.set("node.id", &id.to_string())?;
    }
    Ok(config)
}

/// The embedded default listener when `serve` is given neither `--listen` nor `listeners`.
const LISTEN_DEFAULT: &str = "127.0.0.1:9092";

/// The listeners to serve: those of the `listeners` key when it is set, else one PLAINTEXT
/// listener on `--listen`. An `advertised.listeners` of a bare `host:port` (accepted before
/// listeners had names) is read as the one listener's.
fn listener_configs(
    args: &ServeArgs,
    config: &BrokerConfig,
) -> anyhow::Result<Vec<ListenerConfig>> {
    let mut config = config.clone();
    if config.is_explicit("listeners") {
        if args.listen.is_some() {
            bail!("give either --listen (SHOAL_LISTEN) or the listeners key, not both");
        }
    } else {
        let listen = args.listen.as_deref().unwrap_or(LISTEN_DEFAULT);
        let addr = resolve(listen)?;
        config.set("listeners", &format!("PLAINTEXT://{addr}"))?;
        let advertised = config.get("advertised.listeners").to_string();
        if !advertised.is_empty() && !advertised.contains("://") {
            config.set("advertised.listeners", &format!("PLAINTEXT://{advertised}"))?;
        }
    }
    Ok(listeners::parse_listeners(&config)?)
}

async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let mut term = match signal(SignalKind::terminate()) {
            Ok(s) => s,
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
                return;
            }
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = tokio::signal::ctrl_c().await;
}

/// Raises the soft open-file limit to the hard one, as the JVM does for Kafka (connections and
/// segment files both need descriptors); returns the soft limit in force.
fn raise_open_file_limit() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit only read and write the struct passed.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return 1024;
        }
        if lim.rlim_cur < lim.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: lim.rlim_max,
                rlim_max: lim.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                lim = raised;
            }
        }
    }
    lim.rlim_cur
}

async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let config = load_config(&args)?;
    let nofile = raise_open_file_limit();
    let segment_files = args.max_open_segment_files.unwrap_or_else(|| {
        usize::try_from(nofile / 2)
            .unwrap_or(usize::MAX)
            .min(shoal_storage::log::OPEN_FILES_LIMIT_DEFAULT)
    });
    shoal_storage::log::set_open_files_limit(segment_files);
    let listeners = listener_configs(&args, &config)?;
    let bound = shoal_broker::server::bind_listeners(&config, &listeners).await?;
    let first = bound[0]
        .listener
        .advertised
        .clone()
        .context("a bound listener advertises an address")?;
    let (host, port) = (first.host, first.port);
    let local = bound[0].local_addr()?;
    let (mut member, seams) = match args.cluster(&config)? {
        Some(options) => {
            let (member, seams) = ClusterMember::join(&options)
                .await
                .context("cannot join the cluster")?;
            (Some(member), seams)
        }
        None => (None, Default::default()),
    };
    let endpoint = format!("{host}:{port}");
    let broker = Broker::open(
        config,
        BrokerOptions {
            data_dir: args.data_dir.clone(),
            advertised_host: host,
            advertised_port: port,
            seams,
        },
    )
    .await?;
    if let Some(member) = &mut member {
        member.start(&broker.node, &endpoint).await?;
    }
    let (metrics_stop, metrics_stop_rx) = tokio::sync::watch::channel(false);
    if let Some(metrics) = &args.metrics {
        let addr = resolve(metrics)?;
        let metrics_listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("cannot listen for metrics on {addr}"))?;
        info!(%addr, "metrics endpoint listening");
        tokio::spawn(shoal_broker::metrics::serve(
            broker.clone(),
            metrics_listener,
            metrics_stop_rx,
        ));
    }
    tokio::spawn(return_released_memory(broker.clone()));
    info!(listen = %local, data_dir = ?args.data_dir, node_id = broker.node_id, open_file_limit = nofile, segment_files, "shoal broker started");
    let lost = async {
        match &member {
            Some(m) => m.lost().await,
            None => std::future::pending().await,
        }
    };
    let stop = async {
        tokio::select! {
            () = shutdown_signal() => false,
            () = lost => true,
        }
    };
    let (lost_tx, lost_rx) = tokio::sync::oneshot::channel();
    let stop = async move {
        let _ = lost_tx.send(stop.await);
    };
    let result = shoal_broker::server::run_listeners(broker, bound, stop).await;
    let _ = metrics_stop.send(true);
    let lease_lost = lost_rx.await.unwrap_or(false);
    if let Some(member) = member {
        if let Err(e) = member.leave().await {
            warn!(error = %e, "could not leave the cluster cleanly; its lease will expire");
        }
    }
    result?;
    if lease_lost {
        bail!("this broker's cluster lease was lost (paused or cut off from etcd past broker.session.timeout.ms): it owns nothing any more; start it again");
    }
    Ok(())
}

/// Keeps large buffers (fetch responses of tens of MB) in glibc's heap instead of a fresh
/// mmap per allocation: profiling the fetch path showed most broker CPU going to page faults and
/// page clearing on buffers that were mapped, touched once and unmapped per request.
///
/// Free memory at the top of a heap is kept up to [`FREE_HEAP_KEPT_BYTES`] before `free`
/// gives it back. `malloc_trim` ([`return_released_memory`]) returns the free pages inside a
/// heap but never the top of a thread's heap, so this is also what each of those heaps may
/// keep after a burst. It was 256 MiB, as large as the mmap threshold, when fetch responses
/// were built in user space; fetches now send file bytes without copying them, and 32 MiB
/// still holds the largest buffers the broker reuses (requests are capped at
/// `socket.request.max.bytes`, 100 MiB, but clients send 1 MiB batches by default).
fn tune_allocator() {
    const LARGE_BUFFER_BYTES: libc::c_int = 256 << 20;
    // SAFETY: mallopt only adjusts glibc's allocator parameters; called before any thread starts.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, LARGE_BUFFER_BYTES);
        libc::mallopt(libc::M_TRIM_THRESHOLD, FREE_HEAP_KEPT_BYTES);
    }
}

/// See [`tune_allocator`].
const FREE_HEAP_KEPT_BYTES: libc::c_int = 32 << 20;

/// How often freed heap memory may be handed back to the system.
const RETURN_MEMORY_EVERY: Duration = Duration::from_secs(10);

/// Hands freed heap memory back to the system after quiet connections released their
/// buffers. glibc keeps what is freed inside its heaps for reuse, so after a burst of large
/// requests on many connections the process went on holding what they had freed. 1 000
/// connections that each sent and received 1 MiB once (21 MiB resident before) held 2.1 GiB
/// while they kept their buffers, 100–240 MiB once they gave them back, and 41 MiB once
/// trimmed (docs/benchmarks.md, "Connections after a burst").
/// `malloc_trim` runs on a blocking thread, at most every [`RETURN_MEMORY_EVERY`], and only
/// when a connection released something since the last time.
async fn return_released_memory(broker: Arc<Broker>) {
    let mut seen = broker.metrics.connection_buffer_releases();
    let mut tick = tokio::time::interval(RETURN_MEMORY_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let now = broker.metrics.connection_buffer_releases();
        if now == seen {
            continue;
        }
        seen = now;
        // SAFETY: malloc_trim only returns free pages of glibc's heap to the kernel; it takes
        // the allocator's own locks and touches no memory in use.
        let _ = tokio::task::spawn_blocking(|| unsafe { libc::malloc_trim(0) }).await;
    }
}

fn main() -> anyhow::Result<()> {
    tune_allocator();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("SHOAL_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    match cli.command {
        Command::Serve(args) => runtime.block_on(serve(args)),
        Command::Transactions { bootstrap, command } => {
            let addr = resolve(&bootstrap)?;
            runtime.block_on(transactions::run(addr, command))
        }
        Command::ShareGroups { bootstrap, command } => {
            let addr = resolve(&bootstrap)?;
            runtime.block_on(share_groups::run(addr, command))
        }
        Command::Features { bootstrap, command } => {
            let addr = resolve(&bootstrap)?;
            runtime.block_on(features::run(addr, command))
        }
        Command::Perf { bootstrap, command } => {
            let addr = resolve(&bootstrap)?;
            runtime.block_on(perf::run(addr, command))
        }
        Command::Cluster {
            metadata_store,
            cluster_name,
            command,
        } => runtime.block_on(cluster::run(command, &metadata_store, &cluster_name)),
        Command::Verify(args) => verify::run(args, &runtime),
    }
}
