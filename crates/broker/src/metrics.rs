//! Prometheus metrics: request rate, errors and latency per api, bytes in and out,
//! connections and how often quiet ones gave their buffers back
//! (`shoal_connection_buffer_releases_total`), SASL re-authentications and connections
//! closed because their session expired (Kafka's `successful-reauthentication-total` and
//! `expired-connections-killed-count`), segment files held open
//! (`shoal_open_segment_files`), per-partition log end offset and size, per-share-partition windows and
//! transactional acknowledgements (read at scrape time), and the time records spend
//! TX_PENDING.
//!
//! Counters are atomics indexed by api key, so recording costs no lock on the data path; the
//! per-error-code map takes a short lock only when a response carries an error.
//!
//! Transactional acknowledgements (KIP-1289 §6). Kafka's names, Prometheus-normalised the way
//! the other share-partition series are (`shoal_share_partition_<name>`, labels group, topic,
//! partition; counters end in `_total`):
//!
//! - `shoal_share_partition_txn_pending_records` (gauge): Kafka's `txn-pending-records`,
//!   records TX_PENDING now. From the live machine; for a share partition without one (after a
//!   restart, before its first ShareFetch) from its persisted state, so a transaction left
//!   open across a restart is visible.
//! - `shoal_share_partition_txn_{staged,committed,aborted}_records_total` (counters): records
//!   staged by TxnShareAcknowledge, and TX_PENDING records resolved by a COMMIT or an ABORT
//!   marker. They count since the share partition's machine was built, so they restart at
//!   zero when it is rebuilt (broker restart, reset) — an ordinary counter reset to
//!   `rate()`. Only live machines report them.
//! - `shoal_share_txn_pending_time_seconds` (histogram): how long each resolved record was
//!   TX_PENDING, fed by [`Metrics::tx_pending_resolved`] from the marker path; buckets from
//!   1 ms to `transaction.max.timeout.ms` (900 s). It is **broker-wide**, not per share
//!   partition: a histogram costs 20 series, so per share partition it would multiply the
//!   broker's series by twenty with groups × partitions, while the time is a property of
//!   the producers' transactions (their commit latency), not of the partition; where records
//!   are stuck is what the per-partition gauge already shows. Records whose staging time is
//!   unknown (staged before the machine was rebuilt from persisted state) are not observed,
//!   so its count can be below the committed + aborted counters.
//!
//! Share-group dead-letter queues (KIP-1191), per group, Kafka's `share-group-metrics`
//! names Prometheus-normalised (`shoal_share_group_<name>_total`, label group):
//! `dead_letter_queue_record_count` (records written to the group's dead-letter topic),
//! `dead_letter_queue_total_produce_requests` (writes attempted, each one or more records of a
//! share partition) and `dead_letter_queue_failed_produce_requests` (attempts that failed:
//! retried, or archived without a dead letter). At most [`DLQ_GROUPS_MAX`] groups are tracked.
//!
//! TxnShareAcknowledge's request rate, latency and errors are the generic per-api series
//! (`request="TxnShareAcknowledge"`); [`error_codes`] counts its top-level and per-partition
//! error codes.
//!
//! What a scrape reads besides the registry (the partitions, the share partitions) is handed
//! to [`Metrics::render`] as a [`Scrape`]; the endpoint ([`serve`]) serves whatever is
//! [`Scraped`] (the broker).
//!
//! Must not: import the node's state, the share partitions, a coordinator or the broker (this
//! module is below them: they record into it, and they give it what it renders).

use std::collections::{BTreeMap, HashSet};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use shoal_core::share_coordinator::SharePartitionKey;
use shoal_core::share_partition::TxnStats;
use shoal_protocol::messages::ApiKey;
use shoal_protocol::Response;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tracing::{debug, warn};

use crate::topic_registry::Topic;

/// Highest api key tracked (keys above share one slot).
const API_SLOTS: usize = 128;
/// Latency histogram bucket upper bounds, in seconds.
const LATENCY_BUCKETS_S: [f64; 12] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0,
];
/// Time-in-TX_PENDING histogram bucket upper bounds, in seconds: from one commit round trip
/// (staging, EndTxn, the marker's fsync) up to the client's default `transaction.timeout.ms`
/// (60 s) and the broker's `transaction.max.timeout.ms` (900 s), past which the coordinator
/// aborts.
const TX_PENDING_BUCKETS_S: [f64; 17] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    300.0, 900.0,
];
/// Distinct (api, error) pairs tracked at most.
const ERROR_SERIES_MAX: usize = 4096;
/// Groups whose dead-letter counters are tracked at most.
const DLQ_GROUPS_MAX: usize = 4096;
/// Largest HTTP request header accepted by the metrics endpoint.
const HTTP_REQUEST_BYTES_MAX: usize = 8192;

struct ApiStats {
    count: AtomicU64,
    latency_us: AtomicU64,
    buckets: [AtomicU64; LATENCY_BUCKETS_S.len()],
}

impl ApiStats {
    fn new() -> Self {
        Self {
            count: AtomicU64::new(0),
            latency_us: AtomicU64::new(0),
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

/// How long records stayed TX_PENDING, broker-wide, one observation per record.
struct TxPendingTime {
    count: AtomicU64,
    sum_ms: AtomicU64,
    buckets: [AtomicU64; TX_PENDING_BUCKETS_S.len()],
}

impl TxPendingTime {
    fn new() -> Self {
        Self {
            count: AtomicU64::new(0),
            sum_ms: AtomicU64::new(0),
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

/// One live share partition's window and transactional-acknowledgement counters, as
/// [`crate::share::ShareManager::in_flight`] reads them from its machine.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ShareWindow {
    /// The share-partition start offset (SPSO).
    pub start_offset: i64,
    /// The share-partition end offset (SPEO).
    pub end_offset: i64,
    /// Records between SPSO and SPEO that are not yet terminal.
    pub in_flight: i64,
    pub acquired: i64,
    pub available: i64,
    /// Records TX_PENDING (Kafka's `txn-pending-records`).
    pub tx_pending: i64,
    /// Records staged, committed and aborted since the machine was built.
    pub txn: TxnStats,
}

/// What a scrape renders besides the registry, read at scrape time by whoever holds it.
pub struct Scrape {
    /// Every topic (their partitions' log end offsets and sizes are read while rendering).
    pub topics: Vec<Arc<Topic>>,
    /// The live share partitions' windows ([`crate::share::ShareManager::in_flight`]).
    pub share_live: Vec<(SharePartitionKey, ShareWindow)>,
    /// The TX_PENDING counts of the share partitions' persisted state, read after
    /// `share_live` (those without a live machine are rendered from it).
    pub share_persisted: Vec<(SharePartitionKey, i64)>,
}

/// What the metrics endpoint serves: the metrics in Prometheus text format.
pub trait Scraped: Send + Sync + 'static {
    fn render_metrics(&self) -> String;
}

/// The broker's metrics registry.
pub struct Metrics {
    apis: Vec<ApiStats>,
    errors: Mutex<BTreeMap<(&'static str, i16), u64>>,
    rejected: AtomicU64,
    connections: AtomicI64,
    connections_total: AtomicU64,
    bytes_in: AtomicU64,
    bytes_out: AtomicU64,
    buffer_releases: AtomicU64,
    reauthentications: AtomicU64,
    expired_connections_killed: AtomicU64,
    tx_pending_time: TxPendingTime,
    /// Per group: (records written, produce requests, failed produce requests).
    dead_letters: Mutex<BTreeMap<String, [u64; 3]>>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self {
            apis: (0..API_SLOTS).map(|_| ApiStats::new()).collect(),
            errors: Mutex::new(BTreeMap::new()),
            rejected: AtomicU64::new(0),
            connections: AtomicI64::new(0),
            connections_total: AtomicU64::new(0),
            bytes_in: AtomicU64::new(0),
            bytes_out: AtomicU64::new(0),
            buffer_releases: AtomicU64::new(0),
            reauthentications: AtomicU64::new(0),
            expired_connections_killed: AtomicU64::new(0),
            tx_pending_time: TxPendingTime::new(),
            dead_letters: Mutex::new(BTreeMap::new()),
        }
    }
}

fn slot(api: ApiKey) -> usize {
    (api as i16 as usize).min(API_SLOTS - 1)
}

/// Kafka's name of an api (as in its `request` metric tag).
pub fn api_name(api: ApiKey) -> &'static str {
    macro_rules! names {
        ($($v:ident),*) => { match api { $(ApiKey::$v => stringify!($v),)* _ => "Other" } };
    }
    names!(
        Produce,
        Fetch,
        ListOffsets,
        Metadata,
        OffsetCommit,
        OffsetFetch,
        FindCoordinator,
        JoinGroup,
        Heartbeat,
        LeaveGroup,
        SyncGroup,
        DescribeGroups,
        ListGroups,
        ApiVersions,
        CreateTopics,
        DeleteTopics,
        DeleteRecords,
        InitProducerId,
        AddPartitionsToTxn,
        AddOffsetsToTxn,
        EndTxn,
        TxnOffsetCommit,
        DescribeConfigs,
        AlterConfigs,
        CreatePartitions,
        DeleteGroups,
        IncrementalAlterConfigs,
        OffsetDelete,
        UpdateFeatures,
        DescribeCluster,
        DescribeProducers,
        DescribeTransactions,
        ListTransactions,
        ShareGroupHeartbeat,
        ShareGroupDescribe,
        ShareFetch,
        ShareAcknowledge,
        TxnShareAcknowledge
    )
}

/// The error codes a response carries, for `shoal_request_errors_total`: the top-level code
/// and, for the data-path APIs and TxnShareAcknowledge (KIP-1289), every per-partition code,
/// so a partition refused inside a successful request is counted too. Zero codes are left out.
pub fn error_codes(response: &Response) -> Vec<i16> {
    let mut codes = Vec::new();
    match response {
        Response::Produce(r) => {
            for t in &r.responses {
                codes.extend(t.partition_responses.iter().map(|p| p.error_code));
            }
        }
        Response::Fetch(r) => {
            codes.push(r.error_code);
            for t in &r.responses {
                codes.extend(t.partitions.iter().map(|p| p.error_code));
            }
        }
        Response::TxnShareAcknowledge(r) => {
            codes.push(r.error_code);
            for t in &r.responses {
                codes.extend(t.partitions.iter().map(|p| p.error_code));
            }
        }
        Response::Metadata(r) => codes.extend(r.topics.iter().map(|t| t.error_code)),
        Response::CreateTopics(r) => codes.extend(r.topics.iter().map(|t| t.error_code)),
        Response::DeleteTopics(r) => codes.extend(r.responses.iter().map(|t| t.error_code)),
        Response::JoinGroup(r) => codes.push(r.error_code),
        Response::SyncGroup(r) => codes.push(r.error_code),
        Response::Heartbeat(r) => codes.push(r.error_code),
        _ => {}
    }
    codes.retain(|&c| c != 0);
    codes
}

impl Metrics {
    pub fn request(&self, api: ApiKey, elapsed: Duration) {
        let stats = &self.apis[slot(api)];
        stats.count.fetch_add(1, Ordering::Relaxed);
        stats
            .latency_us
            .fetch_add(elapsed.as_micros() as u64, Ordering::Relaxed);
        let secs = elapsed.as_secs_f64();
        if let Some(i) = LATENCY_BUCKETS_S.iter().position(|&b| secs <= b) {
            stats.buckets[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    pub fn request_error(&self, api: &'static str, code: i16) {
        let mut errors = self.errors.lock().expect("metrics lock poisoned");
        if errors.len() < ERROR_SERIES_MAX || errors.contains_key(&(api, code)) {
            *errors.entry((api, code)).or_insert(0) += 1;
        }
    }

    pub fn request_rejected(&self) {
        self.rejected.fetch_add(1, Ordering::Relaxed);
    }

    pub fn connection_opened(&self) {
        self.connections.fetch_add(1, Ordering::Relaxed);
        self.connections_total.fetch_add(1, Ordering::Relaxed);
    }

    pub fn connection_closed(&self) {
        self.connections.fetch_sub(1, Ordering::Relaxed);
    }

    /// A quiet connection gave its buffers back to the allocator.
    pub fn connection_buffers_released(&self) {
        self.buffer_releases.fetch_add(1, Ordering::Relaxed);
    }

    /// How many times quiet connections gave their buffers back: a process that can return
    /// freed memory to the system (glibc's `malloc_trim`) does so when this moves.
    pub fn connection_buffer_releases(&self) -> u64 {
        self.buffer_releases.load(Ordering::Relaxed)
    }

    /// A connection renewed its SASL session (KIP-368).
    pub fn reauthenticated(&self) {
        self.reauthentications.fetch_add(1, Ordering::Relaxed);
    }

    /// A connection was closed because its SASL session had expired.
    pub fn expired_connection_killed(&self) {
        self.expired_connections_killed
            .fetch_add(1, Ordering::Relaxed);
    }

    pub fn bytes_in(&self, n: usize) {
        self.bytes_in.fetch_add(n as u64, Ordering::Relaxed);
    }

    pub fn bytes_out(&self, n: usize) {
        self.bytes_out.fetch_add(n as u64, Ordering::Relaxed);
    }

    /// Records how long resolved TX_PENDING records were staged: call after each
    /// `SharePartition::apply_marker` with its `MarkerOutcome::staged_at_ms` — (records,
    /// staging time when known) per resolved run — and the marker's time. Each record is one
    /// observation of `now_ms - staged_at`; runs whose staging time is unknown (staged before
    /// the machine was rebuilt from persisted state) are skipped, and a clock that went
    /// backwards counts as zero.
    pub fn tx_pending_resolved(&self, staged_at_ms: &[(i64, Option<i64>)], now_ms: i64) {
        let h = &self.tx_pending_time;
        for &(records, staged_at) in staged_at_ms {
            let (Some(at), Ok(n @ 1..)) = (staged_at, u64::try_from(records)) else {
                continue;
            };
            let ms = u64::try_from(now_ms.saturating_sub(at)).unwrap_or(0);
            h.count.fetch_add(n, Ordering::Relaxed);
            h.sum_ms.fetch_add(ms.saturating_mul(n), Ordering::Relaxed);
            let secs = ms as f64 / 1000.0;
            if let Some(i) = TX_PENDING_BUCKETS_S.iter().position(|&b| secs <= b) {
                h.buckets[i].fetch_add(n, Ordering::Relaxed);
            }
        }
    }

    fn dead_letter_counters(&self, group: &str, add: [u64; 3]) {
        let mut map = self.dead_letters.lock().expect("metrics lock poisoned");
        if !map.contains_key(group) && map.len() >= DLQ_GROUPS_MAX {
            return;
        }
        let c = map.entry(group.to_string()).or_default();
        for (slot, n) in c.iter_mut().zip(add) {
            *slot += n;
        }
    }

    /// A write of `records` dead letters of `group` succeeded (0: all already written).
    pub fn dead_letters_written(&self, group: &str, records: i64) {
        let records = u64::try_from(records).unwrap_or(0);
        self.dead_letter_counters(group, [records, u64::from(records > 0), 0]);
    }

    /// A write of dead letters of `group` failed.
    pub fn dead_letter_failed(&self, group: &str) {
        self.dead_letter_counters(group, [0, 1, 1]);
    }

    /// Renders the registry and the broker's partitions in Prometheus text format.
    pub fn render(&self, scrape: &Scrape) -> String {
        let mut out = String::new();
        self.render_registry(&mut out);
        render_partitions(&mut out, scrape);
        out
    }

    /// The registry's own series: per-api requests, latency and errors, connections, bytes.
    fn render_registry(&self, out: &mut String) {
        let _ = writeln!(out, "# TYPE shoal_requests_total counter");
        let _ = writeln!(out, "# TYPE shoal_request_latency_seconds histogram");
        for api in ApiKey::iter() {
            let stats = &self.apis[slot(api)];
            let count = stats.count.load(Ordering::Relaxed);
            if count == 0 {
                continue;
            }
            let name = api_name(api);
            let _ = writeln!(out, "shoal_requests_total{{request=\"{name}\"}} {count}");
            let mut cumulative = 0;
            for (i, bound) in LATENCY_BUCKETS_S.iter().enumerate() {
                cumulative += stats.buckets[i].load(Ordering::Relaxed);
                let _ = writeln!(
                    out,
                    "shoal_request_latency_seconds_bucket{{request=\"{name}\",le=\"{bound}\"}} {cumulative}"
                );
            }
            let _ = writeln!(
                out,
                "shoal_request_latency_seconds_bucket{{request=\"{name}\",le=\"+Inf\"}} {count}"
            );
            let sum = stats.latency_us.load(Ordering::Relaxed) as f64 / 1e6;
            let _ = writeln!(
                out,
                "shoal_request_latency_seconds_sum{{request=\"{name}\"}} {sum}"
            );
            let _ = writeln!(
                out,
                "shoal_request_latency_seconds_count{{request=\"{name}\"}} {count}"
            );
        }
        let _ = writeln!(out, "# TYPE shoal_request_errors_total counter");
        for ((api, code), n) in self.errors.lock().expect("metrics lock poisoned").iter() {
            let error = shoal_protocol::ErrorCode(*code).name().unwrap_or("UNKNOWN");
            let _ = writeln!(
                out,
                "shoal_request_errors_total{{request=\"{api}\",error=\"{error}\"}} {n}"
            );
        }
        let gauges = [
            (
                "shoal_requests_rejected_total",
                "counter",
                self.rejected.load(Ordering::Relaxed) as i64,
            ),
            (
                "shoal_connections",
                "gauge",
                self.connections.load(Ordering::Relaxed),
            ),
            (
                "shoal_connections_created_total",
                "counter",
                self.connections_total.load(Ordering::Relaxed) as i64,
            ),
            (
                "shoal_connection_buffer_releases_total",
                "counter",
                self.buffer_releases.load(Ordering::Relaxed) as i64,
            ),
            (
                "shoal_successful_reauthentication_total",
                "counter",
                self.reauthentications.load(Ordering::Relaxed) as i64,
            ),
            (
                "shoal_expired_connections_killed_total",
                "counter",
                self.expired_connections_killed.load(Ordering::Relaxed) as i64,
            ),
            (
                "shoal_bytes_in_total",
                "counter",
                self.bytes_in.load(Ordering::Relaxed) as i64,
            ),
            (
                "shoal_bytes_out_total",
                "counter",
                self.bytes_out.load(Ordering::Relaxed) as i64,
            ),
            (
                "shoal_open_segment_files",
                "gauge",
                shoal_storage::log::open_files() as i64,
            ),
        ];
        for (name, kind, value) in gauges {
            let _ = writeln!(out, "# TYPE {name} {kind}\n{name} {value}");
        }
        // Broker-wide, always present (zero until a marker resolves staged records).
        let name = "shoal_share_txn_pending_time_seconds";
        let h = &self.tx_pending_time;
        let count = h.count.load(Ordering::Relaxed);
        let _ = writeln!(out, "# TYPE {name} histogram");
        let mut cumulative = 0;
        for (i, bound) in TX_PENDING_BUCKETS_S.iter().enumerate() {
            cumulative += h.buckets[i].load(Ordering::Relaxed);
            let _ = writeln!(out, "{name}_bucket{{le=\"{bound}\"}} {cumulative}");
        }
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {count}");
        let sum = h.sum_ms.load(Ordering::Relaxed) as f64 / 1e3;
        let _ = writeln!(out, "{name}_sum {sum}\n{name}_count {count}");
        let names = [
            "shoal_share_group_dead_letter_queue_record_count_total",
            "shoal_share_group_dead_letter_queue_total_produce_requests_total",
            "shoal_share_group_dead_letter_queue_failed_produce_requests_total",
        ];
        let groups = self.dead_letters.lock().expect("metrics lock poisoned");
        for (i, name) in names.iter().enumerate() {
            let _ = writeln!(out, "# TYPE {name} counter");
            for (group, c) in groups.iter() {
                let group = label_value(group);
                let _ = writeln!(out, "{name}{{group=\"{group}\"}} {}", c[i]);
            }
        }
    }
}

/// The broker's partitions and share partitions, read at scrape time.
fn render_partitions(out: &mut String, scrape: &Scrape) {
    let _ = writeln!(out, "# TYPE shoal_log_end_offset gauge");
    let _ = writeln!(out, "# TYPE shoal_log_size_bytes gauge");
    for topic in &scrape.topics {
        for p in topic.partitions() {
            let (leo, size) = {
                let log = p.lock();
                (log.log_end_offset(), log.size_bytes())
            };
            let labels = format!("topic=\"{}\",partition=\"{}\"", topic.name, p.index);
            let _ = writeln!(out, "shoal_log_end_offset{{{labels}}} {leo}");
            let _ = writeln!(out, "shoal_log_size_bytes{{{labels}}} {size}");
        }
    }
    let share = &scrape.share_live;
    let live: HashSet<&SharePartitionKey> = share.iter().map(|(k, _)| k).collect();
    // Share partitions with persisted state but no live machine (after a restart, before their
    // first ShareFetch) still show what is TX_PENDING in them.
    let persisted: Vec<&(SharePartitionKey, i64)> = scrape
        .share_persisted
        .iter()
        .filter(|(k, _)| !live.contains(k))
        .collect();
    let row = |key: &SharePartitionKey, series| ShareRow {
        group: key.group_id.clone(),
        topic: scrape
            .topics
            .iter()
            .find(|t| t.id.as_bytes() == &key.topic_id.0)
            .map_or_else(|| key.topic_id.to_kafka_string(), |t| t.name.clone()),
        partition: key.partition,
        series,
    };
    let mut rows: Vec<ShareRow> = share
        .iter()
        .map(|(key, window)| row(key, ShareSeries::Live(*window)))
        .chain(
            persisted
                .iter()
                .map(|(key, n)| row(key, ShareSeries::Persisted { tx_pending: *n })),
        )
        .collect();
    rows.sort_by(|a, b| (&a.group, &a.topic, a.partition).cmp(&(&b.group, &b.topic, b.partition)));
    render_share(out, &rows);
}

/// What one share partition exposes: its live machine's window and counters, or, when it has
/// no live machine, only the TX_PENDING count of its persisted state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ShareSeries {
    Live(ShareWindow),
    Persisted { tx_pending: i64 },
}

struct ShareRow {
    group: String,
    topic: String,
    partition: i32,
    series: ShareSeries,
}

/// The per-share-partition families, each under its TYPE line (Prometheus wants a family's
/// samples together): the in-flight window (SPSO..=SPEO) and its acquired and available
/// records, bounded by share.partition.max.record.locks; Kafka's `txn-pending-records`; the
/// staged / committed / aborted transactional acknowledgement counters.
fn render_share(out: &mut String, rows: &[ShareRow]) {
    type Read = fn(&ShareSeries) -> Option<i64>;
    fn live(series: &ShareSeries) -> Option<&ShareWindow> {
        match series {
            ShareSeries::Live(w) => Some(w),
            ShareSeries::Persisted { .. } => None,
        }
    }
    let families: [(&str, &str, Read); 9] = [
        ("shoal_share_partition_start_offset", "gauge", |s| {
            live(s).map(|w| w.start_offset)
        }),
        ("shoal_share_partition_end_offset", "gauge", |s| {
            live(s).map(|w| w.end_offset)
        }),
        ("shoal_share_partition_in_flight_records", "gauge", |s| {
            live(s).map(|w| w.in_flight)
        }),
        ("shoal_share_partition_acquired_records", "gauge", |s| {
            live(s).map(|w| w.acquired)
        }),
        ("shoal_share_partition_available_records", "gauge", |s| {
            live(s).map(|w| w.available)
        }),
        ("shoal_share_partition_txn_pending_records", "gauge", |s| {
            Some(match s {
                ShareSeries::Live(w) => w.tx_pending,
                ShareSeries::Persisted { tx_pending } => *tx_pending,
            })
        }),
        (
            "shoal_share_partition_txn_staged_records_total",
            "counter",
            |s| live(s).map(|w| w.txn.staged),
        ),
        (
            "shoal_share_partition_txn_committed_records_total",
            "counter",
            |s| live(s).map(|w| w.txn.committed),
        ),
        (
            "shoal_share_partition_txn_aborted_records_total",
            "counter",
            |s| live(s).map(|w| w.txn.aborted),
        ),
    ];
    for (name, kind, read) in families {
        let _ = writeln!(out, "# TYPE {name} {kind}");
        for r in rows {
            let Some(value) = read(&r.series) else {
                continue;
            };
            let _ = writeln!(
                out,
                "{name}{{group=\"{}\",topic=\"{}\",partition=\"{}\"}} {value}",
                label_value(&r.group),
                label_value(&r.topic),
                r.partition,
            );
        }
    }
}

/// A label value with the characters Prometheus text would need escaped replaced.
fn label_value(v: &str) -> String {
    v.replace(['\\', '"', '\n'], "_")
}

/// Serves `GET /metrics` (any path, in fact) on `listener` until `stop` is set: what `source`
/// renders.
pub async fn serve<S: Scraped>(
    source: Arc<S>,
    listener: TcpListener,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        let (mut stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(pair) => pair,
                Err(e) => {
                    warn!(error = %e, "metrics accept failed");
                    continue;
                }
            },
            _ = stop.changed() => return,
        };
        let source = source.clone();
        tokio::spawn(async move {
            let mut request = Vec::with_capacity(1024);
            let mut chunk = [0u8; 1024];
            let read = tokio::time::timeout(Duration::from_secs(5), async {
                while !request.windows(4).any(|w| w == b"\r\n\r\n")
                    && request.len() < HTTP_REQUEST_BYTES_MAX
                {
                    match stream.read(&mut chunk).await {
                        Ok(0) | Err(_) => return false,
                        Ok(n) => request.extend_from_slice(&chunk[..n]),
                    }
                }
                true
            })
            .await;
            if !matches!(read, Ok(true)) {
                debug!(%peer, "metrics request incomplete");
                return;
            }
            let body = source.render_metrics();
            let response = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(response.as_bytes()).await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn txn_share_acknowledge_has_its_kafka_name() {
        assert_eq!(api_name(ApiKey::TxnShareAcknowledge), "TxnShareAcknowledge");
        assert_eq!(slot(ApiKey::TxnShareAcknowledge), 95);
    }

    fn txn_share_acknowledge_response(top: i16, partitions: &[&[i16]]) -> Response {
        use shoal_protocol::share::txn_share_acknowledge::{
            TxnShareAcknowledgePartitionResponse, TxnShareAcknowledgeTopicResponse,
        };
        Response::TxnShareAcknowledge(shoal_protocol::share::TxnShareAcknowledgeResponse {
            error_code: top,
            responses: partitions
                .iter()
                .map(|codes| TxnShareAcknowledgeTopicResponse {
                    topic_id: uuid::Uuid::new_v4(),
                    partitions: codes
                        .iter()
                        .enumerate()
                        .map(|(i, code)| TxnShareAcknowledgePartitionResponse {
                            partition_index: i as i32,
                            error_code: *code,
                            ..Default::default()
                        })
                        .collect(),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        })
    }

    #[test]
    fn txn_share_acknowledge_errors_are_extracted_top_level_and_per_partition() {
        use shoal_protocol::ErrorCode;
        let invalid = ErrorCode::INVALID_RECORD_STATE.code();
        let unknown = ErrorCode::UNKNOWN_TOPIC_ID.code();
        // A successful request whose partitions failed: each failed partition counts once.
        let r = txn_share_acknowledge_response(0, &[&[0, invalid], &[unknown, invalid]]);
        assert_eq!(error_codes(&r), vec![invalid, unknown, invalid]);
        // A refused request: its top-level code.
        let fenced = ErrorCode::PRODUCER_FENCED.code();
        assert_eq!(
            error_codes(&txn_share_acknowledge_response(fenced, &[])),
            vec![fenced]
        );
        assert!(error_codes(&txn_share_acknowledge_response(0, &[&[0]])).is_empty());
    }

    #[test]
    fn txn_share_acknowledge_rate_latency_and_errors_are_rendered() {
        let metrics = Metrics::default();
        metrics.request(ApiKey::TxnShareAcknowledge, Duration::from_micros(1500));
        metrics.request(ApiKey::TxnShareAcknowledge, Duration::from_millis(30));
        let r = txn_share_acknowledge_response(0, &[&[121, 0, 121]]);
        for code in error_codes(&r) {
            metrics.request_error(api_name(ApiKey::TxnShareAcknowledge), code);
        }
        let mut out = String::new();
        metrics.render_registry(&mut out);
        let lines: Vec<&str> = out.lines().collect();
        let has = |line: &str| lines.contains(&line);
        assert!(
            has("shoal_requests_total{request=\"TxnShareAcknowledge\"} 2"),
            "{out}"
        );
        assert!(
            has("shoal_request_latency_seconds_bucket{request=\"TxnShareAcknowledge\",le=\"0.0025\"} 1"),
            "{out}"
        );
        assert!(
            has("shoal_request_latency_seconds_bucket{request=\"TxnShareAcknowledge\",le=\"0.05\"} 2"),
            "{out}"
        );
        assert!(
            has("shoal_request_latency_seconds_count{request=\"TxnShareAcknowledge\"} 2"),
            "{out}"
        );
        assert!(
            has("shoal_request_errors_total{request=\"TxnShareAcknowledge\",error=\"INVALID_RECORD_STATE\"} 2"),
            "{out}"
        );
    }

    fn share_row(group: &str, partition: i32, series: ShareSeries) -> ShareRow {
        ShareRow {
            group: group.to_string(),
            topic: "jobs".to_string(),
            partition,
            series,
        }
    }

    /// The value of `name{group=..,topic="jobs",partition=..}`, if rendered.
    fn sample(out: &str, name: &str, group: &str, partition: i32) -> Option<String> {
        let prefix =
            format!("{name}{{group=\"{group}\",topic=\"jobs\",partition=\"{partition}\"}} ");
        out.lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .map(str::to_string)
    }

    #[test]
    fn share_partitions_render_tx_pending_and_transactional_counters() {
        let live = ShareWindow {
            start_offset: 10,
            end_offset: 29,
            in_flight: 20,
            acquired: 5,
            available: 3,
            tx_pending: 12,
            txn: TxnStats {
                staged: 40,
                committed: 20,
                aborted: 8,
            },
        };
        let rows = [
            share_row("workers", 0, ShareSeries::Live(live)),
            share_row("workers", 1, ShareSeries::Persisted { tx_pending: 7 }),
        ];
        let mut out = String::new();
        render_share(&mut out, &rows);
        let get = |name: &str, p: i32| sample(&out, name, "workers", p);
        let v = |n: i64| Some(n.to_string());
        assert_eq!(get("shoal_share_partition_txn_pending_records", 0), v(12));
        assert_eq!(
            get("shoal_share_partition_txn_staged_records_total", 0),
            v(40)
        );
        assert_eq!(
            get("shoal_share_partition_txn_committed_records_total", 0),
            v(20)
        );
        assert_eq!(
            get("shoal_share_partition_txn_aborted_records_total", 0),
            v(8)
        );
        assert_eq!(get("shoal_share_partition_start_offset", 0), v(10));
        assert_eq!(get("shoal_share_partition_end_offset", 0), v(29));
        assert_eq!(get("shoal_share_partition_in_flight_records", 0), v(20));
        assert_eq!(get("shoal_share_partition_acquired_records", 0), v(5));
        assert_eq!(get("shoal_share_partition_available_records", 0), v(3));
        // Without a live machine: the persisted TX_PENDING count, and no counters or window
        // (zero would be a lie: nothing counted them).
        assert_eq!(get("shoal_share_partition_txn_pending_records", 1), v(7));
        assert_eq!(
            get("shoal_share_partition_txn_staged_records_total", 1),
            None
        );
        assert_eq!(get("shoal_share_partition_in_flight_records", 1), None);
        assert!(out.contains("# TYPE shoal_share_partition_txn_pending_records gauge\n"));
        assert!(out.contains("# TYPE shoal_share_partition_txn_aborted_records_total counter\n"));
    }

    #[test]
    fn each_share_family_is_contiguous_under_its_type_line() {
        let rows = [
            share_row("a", 0, ShareSeries::Live(ShareWindow::default())),
            share_row("b", 0, ShareSeries::Persisted { tx_pending: 0 }),
            share_row("b", 1, ShareSeries::Live(ShareWindow::default())),
        ];
        let mut out = String::new();
        render_share(&mut out, &rows);
        let mut seen: Vec<&str> = Vec::new();
        let mut current = "";
        for line in out.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                current = rest.split(' ').next().unwrap();
                assert!(!seen.contains(&current), "{current} typed twice:\n{out}");
                seen.push(current);
                continue;
            }
            let name = line.split('{').next().unwrap();
            assert_eq!(name, current, "sample outside its family:\n{out}");
        }
        assert_eq!(seen.len(), 9, "{out}");
        assert_eq!(
            out.matches("shoal_share_partition_txn_pending_records{")
                .count(),
            3,
            "{out}"
        );
        assert_eq!(
            out.matches("shoal_share_partition_txn_staged_records_total{")
                .count(),
            2,
            "{out}"
        );
    }

    #[test]
    fn time_in_tx_pending_is_observed_once_per_record() {
        let metrics = Metrics::default();
        let mut out = String::new();
        metrics.render_registry(&mut out);
        assert!(
            out.contains("shoal_share_txn_pending_time_seconds_count 0\n"),
            "present before any marker: {out}"
        );
        // A marker at t = 10 s resolving three runs: 4 records staged at 9.998 s (2 ms),
        // 1 staged at 7 s (3 s), and 5 staged before a restart (time unknown: skipped).
        metrics.tx_pending_resolved(&[(4, Some(9_998)), (1, Some(7_000)), (5, None)], 10_000);
        // A run staged "after" the marker (the clock went back) counts as zero; empty runs
        // count nothing.
        metrics.tx_pending_resolved(&[(2, Some(10_500)), (0, Some(1))], 10_000);
        let mut out = String::new();
        metrics.render_registry(&mut out);
        let get = |suffix: &str| {
            let prefix = format!("shoal_share_txn_pending_time_seconds{suffix} ");
            out.lines()
                .find_map(|l| l.strip_prefix(&prefix))
                .unwrap_or_else(|| panic!("no {prefix} in {out}"))
                .to_string()
        };
        assert_eq!(get("_bucket{le=\"0.001\"}"), "2");
        assert_eq!(get("_bucket{le=\"0.0025\"}"), "6");
        assert_eq!(get("_bucket{le=\"2.5\"}"), "6");
        assert_eq!(get("_bucket{le=\"5\"}"), "7");
        assert_eq!(get("_bucket{le=\"900\"}"), "7");
        assert_eq!(get("_bucket{le=\"+Inf\"}"), "7");
        assert_eq!(get("_count"), "7");
        // 4 × 2 ms + 3 s + 2 × 0.
        assert_eq!(get("_sum"), "3.008");
        assert!(out.contains("# TYPE shoal_share_txn_pending_time_seconds histogram\n"));
    }

    #[test]
    fn time_beyond_the_last_bucket_is_counted_only_in_inf() {
        let metrics = Metrics::default();
        metrics.tx_pending_resolved(&[(3, Some(0))], 1_000_000);
        let mut out = String::new();
        metrics.render_registry(&mut out);
        assert!(out.contains("shoal_share_txn_pending_time_seconds_bucket{le=\"900\"} 0\n"));
        assert!(out.contains("shoal_share_txn_pending_time_seconds_bucket{le=\"+Inf\"} 3\n"));
        assert!(out.contains("shoal_share_txn_pending_time_seconds_sum 3000\n"));
    }
}
