//! `shoal perf`: measurement harnesses that drive a running broker over the raw protocol.
//!
//! `shoal perf txn-acks` measures what transactional acknowledgements (KIP-1289) add to a
//! transaction's commit. In one run, alternating in blocks so that the machine's load hits both
//! kinds alike, one transactional producer (transaction version 2: Produce v12 adds the output
//! partition, EndTxn v5 bumps the epoch) runs
//!
//! * kind A: transactions that produce R records to an output topic, and
//! * kind B: transactions that produce R records and stage, with TxnShareAcknowledge (ACCEPT),
//!   the R records a share-group member acquired from an input topic the harness filled first.
//!
//! For each transaction it times the commit (EndTxn request to its final response, retries of
//! CONCURRENT_TRANSACTIONS included), the whole transaction (first Produce to the EndTxn
//! response) and its phases, then prints p50, p90, p99, max and mean per kind and the B/A ratio.
//! Afterwards it checks the outcome and fails if it is wrong: the output topic holds exactly the
//! committed records of every transaction (a `read_committed` fetch) and no open transaction,
//! every input record was staged once and the share group has no lag left
//! (DescribeShareGroupOffsets: every record from its start offset on is acknowledged), and
//! nothing is left to acquire. It is a measurement, not a test: nothing asserts a timing.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use bytes::Bytes;
use clap::Subcommand;
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    ApiVersionsRequest, BrokerId, CreateTopicsRequest, DeleteTopicsRequest, EndTxnRequest,
    FetchRequest, GroupId, IncrementalAlterConfigsRequest, InitProducerIdRequest,
    ListOffsetsRequest, ProduceRequest, ProducerId, ShareGroupHeartbeatRequest, TopicName,
    TransactionalId,
};
use kafka_protocol::protocol::StrBytes;
use shoal_client::Connection;
use shoal_protocol::share::describe_share_group_offsets::{
    DescribeShareGroupOffsetsRequest, DescribeShareGroupOffsetsRequestGroup,
};
use shoal_protocol::share::share_fetch::{self as sf, ShareFetchRequest};
use shoal_protocol::share::txn_share_acknowledge::{
    TxnShareAcknowledgePartition, TxnShareAcknowledgeRequest, TxnShareAcknowledgeTopic,
};
use shoal_protocol::share::AcknowledgementBatch;
use shoal_protocol::ErrorCode;
use shoal_storage::batch::split_batches;
use shoal_storage::{encode_batch, BatchOptions};
use uuid::Uuid;

/// TxnShareAcknowledge's api key (spec §3.1).
const TXN_SHARE_ACKNOWLEDGE_KEY: i16 = shoal_protocol::api_key::TXN_SHARE_ACKNOWLEDGE_KEY;
/// Acknowledge type ACCEPT.
const ACCEPT: i8 = 1;
/// Wait between retries of a request answered CONCURRENT_TRANSACTIONS.
const RETRY_BACKOFF: Duration = Duration::from_millis(2);
/// Retries of one request answered CONCURRENT_TRANSACTIONS before giving up.
const RETRIES_MAX: u32 = 2_000;
/// Bounds on the counts, so that a typo cannot fill a disk.
const TRANSACTIONS_MAX: usize = 1_000_000;
const RECORDS_MAX: usize = 10_000;
const RECORD_BYTES_MAX: usize = 64 * 1024;
/// The transaction timeout the producer asks for.
const TXN_TIMEOUT_MS: i32 = 60_000;

#[derive(Subcommand, Debug)]
pub enum PerfCommand {
    /// Commit latency of transactions that stage share-group acknowledgements (KIP-1289)
    /// beside transactions that only produce, in the same run.
    TxnAcks(TxnAcksArgs),
    /// Our producer's throughput and per-record latency (one JSON line; see perf_client.rs).
    Produce(crate::perf_client::ProduceArgs),
    /// One share consumer of ours reading records already in a topic (one JSON line).
    ShareConsume(crate::perf_client::ShareConsumeArgs),
    /// Leaves `--records` records TX_PENDING in an open transaction (KIP-1289), for
    /// measuring the broker's memory and restart time with them (one JSON line).
    StagePending(crate::perf_client::StagePendingArgs),
    /// Rounds of OffsetCommits pipelined on one connection, as librdkafka sends its
    /// asynchronous commits (one JSON line).
    Commits(crate::perf_commits::CommitsArgs),
}

#[derive(clap::Args, Debug, Clone)]
pub struct TxnAcksArgs {
    /// Measured transactions of each kind.
    #[arg(long, default_value_t = 1000)]
    pub transactions: usize,
    /// Records produced (and, for kind B, acknowledged) per transaction.
    #[arg(long, default_value_t = 100)]
    pub records: usize,
    /// Bytes of each record's value.
    #[arg(long, default_value_t = 100)]
    pub record_bytes: usize,
    /// Transactions of each kind run first and left out of the figures.
    #[arg(long, default_value_t = 10)]
    pub warmup: usize,
    /// Consecutive transactions of one kind before switching to the other.
    #[arg(long, default_value_t = 10)]
    pub block: usize,
    /// Give up after this many seconds in all.
    #[arg(long, default_value_t = 900)]
    pub timeout_secs: u64,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Keep the harness's topics afterwards (they are deleted by default).
    #[arg(long)]
    pub keep_topics: bool,
}

/// Runs one `shoal perf` command against `bootstrap`, printing to stdout.
///
/// # Errors
/// A broker that is not on loopback or lacks what the harness needs (UNSUPPORTED), an
/// unexpected error code, a timeout, or a wrong outcome in the final check.
pub async fn run(bootstrap: SocketAddr, command: PerfCommand) -> anyhow::Result<()> {
    match command {
        PerfCommand::TxnAcks(args) => {
            if !bootstrap.ip().is_loopback() {
                bail!("shoal perf runs against a broker on loopback only, not {bootstrap}");
            }
            check_bounds(&args)?;
            let limit = Duration::from_secs(args.timeout_secs);
            let report = tokio::time::timeout(limit, txn_acks(bootstrap, &args))
                .await
                .map_err(|_| anyhow!("gave up after {} s", args.timeout_secs))??;
            if args.json {
                println!("{}", report.json());
            } else {
                print!("{}", report.table());
            }
            Ok(())
        }
        PerfCommand::Produce(args) => {
            crate::perf_client::produce(&bootstrap.to_string(), &args).await
        }
        PerfCommand::ShareConsume(args) => {
            crate::perf_client::share_consume(&bootstrap.to_string(), &args).await
        }
        PerfCommand::StagePending(args) => {
            crate::perf_client::stage_pending(&bootstrap.to_string(), &args).await
        }
        PerfCommand::Commits(args) => crate::perf_commits::commits(bootstrap, &args).await,
    }
}

fn check_bounds(a: &TxnAcksArgs) -> anyhow::Result<()> {
    if a.transactions == 0 || a.transactions > TRANSACTIONS_MAX {
        bail!("--transactions must be within 1..={TRANSACTIONS_MAX}");
    }
    if a.records == 0 || a.records > RECORDS_MAX {
        bail!("--records must be within 1..={RECORDS_MAX}");
    }
    if a.record_bytes > RECORD_BYTES_MAX {
        bail!("--record-bytes must be at most {RECORD_BYTES_MAX}");
    }
    if a.block == 0 {
        bail!("--block must be at least 1");
    }
    if a.warmup > TRANSACTIONS_MAX {
        bail!("--warmup must be at most {TRANSACTIONS_MAX}");
    }
    Ok(())
}

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

fn check(code: i16, what: &str) -> anyhow::Result<()> {
    if code != 0 {
        bail!("{what}: {}", ErrorCode(code));
    }
    Ok(())
}

fn unsupported(why: &str) -> anyhow::Error {
    anyhow!("UNSUPPORTED: {why}")
}

/// The two kinds of transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Produce only.
    A,
    /// Produce and stage acknowledgements.
    B,
}

/// Timings of one transaction, in milliseconds.
#[derive(Debug, Clone, Copy, Default)]
struct Sample {
    /// First Produce request to its successful response (retries included).
    produce: f64,
    /// TxnShareAcknowledge request to its successful response (kind B).
    stage: f64,
    /// EndTxn request to its final response (retries included).
    commit: f64,
    /// First Produce request to the EndTxn response.
    txn: f64,
    /// ShareFetch time spent acquiring this transaction's records, before it began (kind B).
    acquire: f64,
}

/// CONCURRENT_TRANSACTIONS answers per request type and kind.
#[derive(Debug, Clone, Copy, Default)]
struct Retries {
    produce: u64,
    stage: u64,
    commit: u64,
}

/// p50, p90, p99, max and mean of a set of milliseconds.
#[derive(Debug, Clone, Copy)]
struct Stats {
    p50: f64,
    p90: f64,
    p99: f64,
    max: f64,
    mean: f64,
}

impl Stats {
    /// Nearest-rank percentiles. `values` is not empty.
    fn of(values: &[f64]) -> Stats {
        let mut v = values.to_vec();
        v.sort_by(f64::total_cmp);
        let rank = |q: f64| {
            let i = (q * v.len() as f64).ceil() as usize;
            v[i.clamp(1, v.len()) - 1]
        };
        Stats {
            p50: rank(0.50),
            p90: rank(0.90),
            p99: rank(0.99),
            max: v[v.len() - 1],
            mean: v.iter().sum::<f64>() / v.len() as f64,
        }
    }

    fn ratio(b: &Stats, a: &Stats) -> Stats {
        let r = |x: f64, y: f64| if y > 0.0 { x / y } else { f64::NAN };
        Stats {
            p50: r(b.p50, a.p50),
            p90: r(b.p90, a.p90),
            p99: r(b.p99, a.p99),
            max: r(b.max, a.max),
            mean: r(b.mean, a.mean),
        }
    }

    fn json(&self) -> String {
        format!(
            "{{\"p50\":{},\"p90\":{},\"p99\":{},\"max\":{},\"mean\":{}}}",
            num(self.p50),
            num(self.p90),
            num(self.p99),
            num(self.max),
            num(self.mean)
        )
    }
}

fn num(x: f64) -> String {
    if x.is_finite() {
        format!("{x:.4}")
    } else {
        "null".to_string()
    }
}

/// What the final check saw.
#[derive(Debug, Clone, Default)]
struct Verified {
    committed_output_records: u64,
    output_end_offset: i64,
    input_records: u64,
    acknowledged_records: u64,
    share_start_offset: i64,
    share_lag: i64,
}

struct Report {
    args: TxnAcksArgs,
    bootstrap: SocketAddr,
    a: Vec<Sample>,
    b: Vec<Sample>,
    retries_a: Retries,
    retries_b: Retries,
    verified: Verified,
    wall: Duration,
}

/// Reads one timing from a sample.
type Metric = fn(&Sample) -> f64;

/// The metrics reported, by name.
const METRICS: &[(&str, Metric)] = &[
    ("commit", |x| x.commit),
    ("txn", |x| x.txn),
    ("produce", |x| x.produce),
    ("stage", |x| x.stage),
    ("acquire", |x| x.acquire),
];

impl Report {
    fn stats(samples: &[Sample], metric: Metric) -> Stats {
        Stats::of(&samples.iter().map(metric).collect::<Vec<_>>())
    }

    fn table(&self) -> String {
        let a = &self.args;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "shoal perf txn-acks against {}: {} transactions of each kind (after {} warm-up), \
             {} records of {} B each, alternating blocks of {}",
            self.bootstrap, a.transactions, a.warmup, a.records, a.record_bytes, a.block
        );
        let _ = writeln!(
            out,
            "A = produce {r} records; B = produce {r} records + TxnShareAcknowledge of {r} \
             acquired records",
            r = a.records
        );
        let _ = writeln!(
            out,
            "{:<9} {:<5} {:>9} {:>9} {:>9} {:>9} {:>9}",
            "ms", "kind", "p50", "p90", "p99", "max", "mean"
        );
        let row = |out: &mut String, name: &str, kind: &str, st: &Stats, ratio: bool| {
            let f = |x: f64| {
                if ratio {
                    format!("{x:.2}")
                } else {
                    format!("{x:.3}")
                }
            };
            let _ = writeln!(
                out,
                "{:<9} {:<5} {:>9} {:>9} {:>9} {:>9} {:>9}",
                name,
                kind,
                f(st.p50),
                f(st.p90),
                f(st.p99),
                f(st.max),
                f(st.mean)
            );
        };
        for (name, metric) in METRICS {
            let sb = Self::stats(&self.b, *metric);
            match *name {
                "stage" | "acquire" => row(&mut out, name, "B", &sb, false),
                _ => {
                    let sa = Self::stats(&self.a, *metric);
                    row(&mut out, name, "A", &sa, false);
                    row(&mut out, name, "B", &sb, false);
                    row(&mut out, name, "B/A", &Stats::ratio(&sb, &sa), true);
                }
            }
        }
        let _ = writeln!(
            out,
            "commit = EndTxn request to final response (CONCURRENT_TRANSACTIONS retries \
             included); txn = first Produce to EndTxn response; acquire = ShareFetch before the \
             transaction (not in txn)"
        );
        let _ = writeln!(
            out,
            "CONCURRENT_TRANSACTIONS retries: A produce {} commit {}; B produce {} stage {} \
             commit {}",
            self.retries_a.produce,
            self.retries_a.commit,
            self.retries_b.produce,
            self.retries_b.stage,
            self.retries_b.commit
        );
        let v = &self.verified;
        let _ = writeln!(
            out,
            "verified: {} committed output records (read_committed fetch, end offset {}, no open \
             transaction); {} of {} input records acknowledged (share group lag {}, persisted \
             start offset {}), nothing left to acquire",
            v.committed_output_records,
            v.output_end_offset,
            v.acknowledged_records,
            v.input_records,
            v.share_lag,
            v.share_start_offset
        );
        let _ = writeln!(out, "wall time {:.1} s", self.wall.as_secs_f64());
        out
    }

    fn json(&self) -> String {
        let a = &self.args;
        let mut kinds = Vec::new();
        for (kind, samples) in [("A", &self.a), ("B", &self.b)] {
            let fields: Vec<String> = METRICS
                .iter()
                .filter(|(name, _)| kind == "B" || !matches!(*name, "stage" | "acquire"))
                .map(|(name, m)| format!("\"{name}\":{}", Self::stats(samples, *m).json()))
                .collect();
            kinds.push(format!("\"{kind}\":{{{}}}", fields.join(",")));
        }
        let ratios: Vec<String> = METRICS
            .iter()
            .filter(|(name, _)| !matches!(*name, "stage" | "acquire"))
            .map(|(name, m)| {
                let r = Stats::ratio(&Self::stats(&self.b, *m), &Self::stats(&self.a, *m));
                format!("\"{name}\":{}", r.json())
            })
            .collect();
        let v = &self.verified;
        format!(
            "{{\"bootstrap\":\"{}\",\"transactions\":{},\"records\":{},\"record_bytes\":{},\
             \"warmup\":{},\"block\":{},\"unit\":\"ms\",{},\"B/A\":{{{}}},\
             \"retries\":{{\"A\":{{\"produce\":{},\"commit\":{}}},\
             \"B\":{{\"produce\":{},\"stage\":{},\"commit\":{}}}}},\
             \"verified\":{{\"committed_output_records\":{},\"output_end_offset\":{},\
             \"input_records\":{},\"acknowledged_records\":{},\"share_lag\":{},\"share_start_offset\":{}}},\
             \"wall_s\":{:.3}}}",
            self.bootstrap,
            a.transactions,
            a.records,
            a.record_bytes,
            a.warmup,
            a.block,
            kinds.join(","),
            ratios.join(","),
            self.retries_a.produce,
            self.retries_a.commit,
            self.retries_b.produce,
            self.retries_b.stage,
            self.retries_b.commit,
            v.committed_output_records,
            v.output_end_offset,
            v.input_records,
            v.acknowledged_records,
            v.share_lag,
            v.share_start_offset,
            self.wall.as_secs_f64()
        )
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Checks that the broker advertises what the harness uses; UNSUPPORTED otherwise.
async fn check_broker(conn: &mut Connection) -> anyhow::Result<()> {
    let r = conn
        .request(
            3,
            &ApiVersionsRequest::default()
                .with_client_software_name(s("shoal-perf"))
                .with_client_software_version(s(env!("CARGO_PKG_VERSION"))),
        )
        .await
        .context("ApiVersions")?;
    check(r.error_code, "ApiVersions")?;
    let max = |key: i16| {
        r.api_keys
            .iter()
            .find(|k| k.api_key == key)
            .map(|k| k.max_version)
    };
    if max(TXN_SHARE_ACKNOWLEDGE_KEY).is_none() {
        return Err(unsupported(
            "the broker does not advertise TxnShareAcknowledge (api key 95): transactional \
             acknowledgements need share.version 3",
        ));
    }
    let finalized = |name: &str| {
        r.finalized_features
            .iter()
            .find(|f| f.name.as_str() == name)
            .map_or(0, |f| f.max_version_level)
    };
    if finalized("transaction.version") < 2 {
        return Err(unsupported(
            "transaction.version is below 2: the harness uses transaction version 2",
        ));
    }
    let needs: [(i16, i16, &str); 5] = [
        (0, 12, "Produce"),
        (22, 5, "InitProducerId"),
        (26, 5, "EndTxn"),
        (76, 1, "ShareGroupHeartbeat"),
        (78, 1, "ShareFetch"),
    ];
    for (key, version, name) in needs {
        if max(key).is_none_or(|m| m < version) {
            return Err(unsupported(&format!(
                "the broker does not serve {name} v{version}"
            )));
        }
    }
    Ok(())
}

/// Creates a one-partition topic; returns its id.
async fn create_topic(conn: &mut Connection, name: &str) -> anyhow::Result<Uuid> {
    let r = conn
        .request(
            7,
            &CreateTopicsRequest::default()
                .with_timeout_ms(30_000)
                .with_topics(vec![CreatableTopic::default()
                    .with_name(TopicName(s(name)))
                    .with_num_partitions(1)
                    .with_replication_factor(-1)]),
        )
        .await?;
    let t = r.topics.first().context("empty CreateTopics response")?;
    check(t.error_code, &format!("creating {name}"))?;
    Ok(t.topic_id)
}

fn value_records(count: usize, bytes: usize) -> Vec<u8> {
    // One value, cycled: the content does not matter, only its size.
    let value: Vec<u8> = (0..bytes).map(|i| b'a' + (i % 26) as u8).collect();
    let records: Vec<shoal_storage::batch::KeyValue<'_>> =
        (0..count).map(|_| (None, Some(value.as_slice()))).collect();
    encode_batch(
        &records,
        BatchOptions {
            timestamp_ms: shoal_broker::seams::clock::Clock::now_ms(
                &shoal_broker::seams::clock::SystemClock,
            ),
            ..BatchOptions::default()
        },
    )
}

/// Produces `batches` batches of `records` records each to `topic` (not transactional).
async fn fill(
    conn: &mut Connection,
    topic: &str,
    batches: usize,
    records: usize,
    bytes: usize,
) -> anyhow::Result<()> {
    let batch = Bytes::from(value_records(records, bytes));
    for _ in 0..batches {
        let r = conn
            .request(
                12,
                &ProduceRequest::default()
                    .with_acks(-1)
                    .with_timeout_ms(30_000)
                    .with_topic_data(vec![TopicProduceData::default()
                        .with_name(TopicName(s(topic)))
                        .with_partition_data(vec![PartitionProduceData::default()
                            .with_index(0)
                            .with_records(Some(batch.clone()))])]),
            )
            .await?;
        let p = r
            .responses
            .first()
            .and_then(|t| t.partition_responses.first())
            .context("empty Produce response")?;
        check(p.error_code, &format!("filling {topic}"))?;
    }
    Ok(())
}

/// The share-group member: its connection (its share session), id and epoch.
struct Member {
    conn: Connection,
    group: String,
    id: String,
    epoch: i32,
    heartbeat_every: Duration,
    last_heartbeat: Instant,
    session_epoch: i32,
    topic: String,
    topic_id: Uuid,
    /// Offsets acquired and not yet handed to a transaction, in order.
    held: VecDeque<i64>,
}

impl Member {
    async fn heartbeat(&mut self, join: bool) -> anyhow::Result<()> {
        let r = self
            .conn
            .request(
                1,
                &ShareGroupHeartbeatRequest::default()
                    .with_group_id(GroupId(s(&self.group)))
                    .with_member_id(s(&self.id))
                    .with_member_epoch(if join { 0 } else { self.epoch })
                    .with_subscribed_topic_names(join.then(|| vec![TopicName(s(&self.topic))])),
            )
            .await?;
        check(r.error_code, "ShareGroupHeartbeat")?;
        self.epoch = r.member_epoch;
        self.heartbeat_every = Duration::from_millis(r.heartbeat_interval_ms.max(100) as u64);
        self.last_heartbeat = Instant::now();
        Ok(())
    }

    /// Heartbeats when its interval has passed (between transactions, never inside one).
    async fn keep_alive(&mut self) -> anyhow::Result<()> {
        if self.last_heartbeat.elapsed() >= self.heartbeat_every {
            self.heartbeat(false).await?;
        }
        Ok(())
    }

    /// One ShareFetch of the member's session; the acquired offsets are appended to `held`.
    async fn fetch(&mut self, max_wait_ms: i32, max_records: i32) -> anyhow::Result<usize> {
        let opening = self.session_epoch == 0;
        let r = self
            .conn
            .request(
                1,
                &ShareFetchRequest {
                    group_id: Some(GroupId(s(&self.group))),
                    member_id: Some(s(&self.id)),
                    share_session_epoch: self.session_epoch,
                    max_wait_ms,
                    min_bytes: 1,
                    max_bytes: 8 << 20,
                    max_records,
                    batch_size: max_records,
                    topics: if opening {
                        vec![sf::FetchTopic {
                            topic_id: self.topic_id,
                            partitions: vec![sf::FetchPartition {
                                partition_index: 0,
                                ..Default::default()
                            }],
                            ..Default::default()
                        }]
                    } else {
                        Vec::new()
                    },
                    ..Default::default()
                },
            )
            .await?;
        check(r.error_code, "ShareFetch")?;
        self.session_epoch = self.session_epoch.wrapping_add(1).max(1);
        let mut acquired = 0;
        for t in &r.responses {
            for p in &t.partitions {
                check(p.error_code, "ShareFetch partition")?;
                for range in &p.acquired_records {
                    for offset in range.first_offset..=range.last_offset {
                        self.held.push_back(offset);
                        acquired += 1;
                    }
                }
            }
        }
        Ok(acquired)
    }

    /// Takes `count` acquired offsets, fetching until it holds them (bounded); returns them as
    /// ascending ranges.
    async fn take(&mut self, count: usize) -> anyhow::Result<Vec<(i64, i64)>> {
        let mut empty_fetches = 0;
        while self.held.len() < count {
            let want = i32::try_from(count - self.held.len()).unwrap_or(i32::MAX);
            if self.fetch(1000, want).await? == 0 {
                empty_fetches += 1;
                if empty_fetches >= 10 {
                    bail!(
                        "the share group stopped delivering: {} of {count} records acquired",
                        self.held.len()
                    );
                }
            }
        }
        let mut ranges: Vec<(i64, i64)> = Vec::new();
        for offset in self.held.drain(..count) {
            match ranges.last_mut() {
                Some((_, last)) if *last + 1 == offset => *last = offset,
                _ => ranges.push((offset, offset)),
            }
        }
        Ok(ranges)
    }
}

/// The transactional producer.
struct Producer {
    conn: Connection,
    transactional_id: String,
    pid: i64,
    epoch: i16,
    /// The next sequence number on the output partition (0 after every epoch bump).
    sequence: i32,
}

impl Producer {
    /// Sends `request` until it is answered with something other than CONCURRENT_TRANSACTIONS;
    /// returns the answer and the number of retries.
    async fn retrying<R>(
        conn: &mut Connection,
        version: i16,
        request: &R,
        code: impl Fn(&R::Response) -> i16,
        what: &str,
    ) -> anyhow::Result<(R::Response, u64)>
    where
        R: kafka_protocol::protocol::Request
            + kafka_protocol::protocol::Encodable
            + kafka_protocol::protocol::HeaderVersion,
        R::Response: kafka_protocol::protocol::Decodable + kafka_protocol::protocol::HeaderVersion,
    {
        let mut retries = 0u64;
        loop {
            let r = conn.request(version, request).await?;
            if code(&r) != ErrorCode::CONCURRENT_TRANSACTIONS.code() {
                return Ok((r, retries));
            }
            retries += 1;
            if retries > u64::from(RETRIES_MAX) {
                bail!("{what}: still CONCURRENT_TRANSACTIONS after {RETRIES_MAX} retries");
            }
            tokio::time::sleep(RETRY_BACKOFF).await;
        }
    }

    async fn produce(&mut self, topic: &str, records: Bytes) -> anyhow::Result<u64> {
        let request = ProduceRequest::default()
            .with_transactional_id(Some(TransactionalId(s(&self.transactional_id))))
            .with_acks(-1)
            .with_timeout_ms(30_000)
            .with_topic_data(vec![TopicProduceData::default()
                .with_name(TopicName(s(topic)))
                .with_partition_data(vec![PartitionProduceData::default()
                    .with_index(0)
                    .with_records(Some(records))])]);
        let first = |r: &kafka_protocol::messages::ProduceResponse| {
            r.responses
                .first()
                .and_then(|t| t.partition_responses.first())
                .map_or(-1, |p| p.error_code)
        };
        let (r, retries) = Self::retrying(&mut self.conn, 12, &request, first, "Produce").await?;
        check(first(&r), "transactional Produce")?;
        Ok(retries)
    }

    async fn stage(
        &mut self,
        member: &Member,
        ranges: &[(i64, i64)],
    ) -> anyhow::Result<(u64, u64)> {
        let request = TxnShareAcknowledgeRequest {
            transactional_id: Some(TransactionalId(s(&self.transactional_id))),
            group_id: Some(GroupId(s(&member.group))),
            producer_id: ProducerId(self.pid),
            producer_epoch: self.epoch,
            member_id: Some(s(&member.id)),
            member_epoch: member.epoch,
            topics: vec![TxnShareAcknowledgeTopic {
                topic_id: member.topic_id,
                partitions: vec![TxnShareAcknowledgePartition {
                    partition_index: 0,
                    acknowledgement_batches: ranges
                        .iter()
                        .map(|&(first, last)| AcknowledgementBatch {
                            first_offset: first,
                            last_offset: last,
                            acknowledge_types: vec![ACCEPT],
                            ..Default::default()
                        })
                        .collect(),
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        };
        // The top-level code, else the first partition's (as the draft's client reads it).
        let code = |r: &shoal_protocol::share::TxnShareAcknowledgeResponse| {
            if r.error_code != 0 {
                return r.error_code;
            }
            r.responses
                .iter()
                .flat_map(|t| t.partitions.iter().map(|p| p.error_code))
                .find(|c| *c != 0)
                .unwrap_or(0)
        };
        let (r, retries) =
            Self::retrying(&mut self.conn, 0, &request, code, "TxnShareAcknowledge").await?;
        let c = code(&r);
        if c == ErrorCode::UNSUPPORTED_VERSION.code() {
            return Err(unsupported(
                "TxnShareAcknowledge answered UNSUPPORTED_VERSION: transactional \
                 acknowledgements need share.version 3",
            ));
        }
        check(c, "TxnShareAcknowledge")?;
        let staged = ranges.iter().map(|(f, l)| (l - f + 1) as u64).sum();
        Ok((retries, staged))
    }

    async fn commit(&mut self) -> anyhow::Result<u64> {
        let request = EndTxnRequest::default()
            .with_transactional_id(TransactionalId(s(&self.transactional_id)))
            .with_producer_id(ProducerId(self.pid))
            .with_producer_epoch(self.epoch)
            .with_committed(true);
        let (r, retries) =
            Self::retrying(&mut self.conn, 5, &request, |r| r.error_code, "EndTxn").await?;
        check(r.error_code, "EndTxn")?;
        // Transaction version 2: the coordinator bumped the epoch (and may have moved to a new
        // producer id); the next transaction uses them, with sequences from 0.
        if r.producer_id.0 >= 0 {
            self.pid = r.producer_id.0;
        }
        self.epoch = r.producer_epoch;
        self.sequence = 0;
        Ok(retries)
    }
}

/// Output of one transaction's records with the producer's current id, epoch and sequence.
fn txn_records(p: &Producer, template: &[shoal_storage::batch::KeyValue<'_>]) -> Vec<u8> {
    encode_batch(
        template,
        BatchOptions {
            producer_id: p.pid,
            producer_epoch: p.epoch,
            base_sequence: p.sequence,
            transactional: true,
            timestamp_ms: shoal_broker::seams::clock::Clock::now_ms(
                &shoal_broker::seams::clock::SystemClock,
            ),
            ..BatchOptions::default()
        },
    )
}

async fn txn_acks(bootstrap: SocketAddr, args: &TxnAcksArgs) -> anyhow::Result<Report> {
    let started = Instant::now();
    let mut admin = Connection::connect(bootstrap)
        .await
        .with_context(|| format!("cannot connect to {bootstrap}"))?;
    check_broker(&mut admin).await?;

    let run_id = format!(
        "{}-{}",
        std::process::id(),
        shoal_broker::seams::clock::Clock::now_ms(&shoal_broker::seams::clock::SystemClock)
    );
    let input = format!("perf-txn-acks-in-{run_id}");
    let output = format!("perf-txn-acks-out-{run_id}");
    let group = format!("perf-txn-acks-{run_id}");
    let per_kind = args.warmup + args.transactions;
    let input_topic_id = create_topic(&mut admin, &input).await?;
    create_topic(&mut admin, &output).await?;
    // One batch of R records per B transaction: a ShareFetch acquires whole batches.
    fill(
        &mut admin,
        &input,
        per_kind,
        args.records,
        args.record_bytes,
    )
    .await?;
    let configs = [("share.auto.offset.reset", "earliest")];
    let r = admin
        .request(
            1,
            &IncrementalAlterConfigsRequest::default().with_resources(vec![
                AlterConfigsResource::default()
                    .with_resource_type(32)
                    .with_resource_name(s(&group))
                    .with_configs(
                        configs
                            .iter()
                            .map(|(k, v)| {
                                AlterableConfig::default()
                                    .with_name(s(k))
                                    .with_config_operation(0)
                                    .with_value(Some(s(v)))
                            })
                            .collect(),
                    ),
            ]),
        )
        .await?;
    for res in &r.responses {
        check(res.error_code, "configuring the share group")?;
    }

    let mut member = Member {
        conn: Connection::connect(bootstrap).await?,
        group: group.clone(),
        id: format!("perf-member-{run_id}"),
        epoch: 0,
        heartbeat_every: Duration::from_secs(5),
        last_heartbeat: Instant::now(),
        session_epoch: 0,
        topic: input.clone(),
        topic_id: input_topic_id,
        held: VecDeque::new(),
    };
    member.heartbeat(true).await?;

    let mut producer = Producer {
        conn: Connection::connect(bootstrap).await?,
        transactional_id: format!("perf-txn-acks-{run_id}"),
        pid: -1,
        epoch: -1,
        sequence: 0,
    };
    let init = producer
        .conn
        .request(
            5,
            &InitProducerIdRequest::default()
                .with_transactional_id(Some(TransactionalId(s(&producer.transactional_id))))
                .with_transaction_timeout_ms(TXN_TIMEOUT_MS)
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1),
        )
        .await?;
    check(init.error_code, "InitProducerId")?;
    producer.pid = init.producer_id.0;
    producer.epoch = init.producer_epoch;

    let value: Vec<u8> = (0..args.record_bytes)
        .map(|i| b'a' + (i % 26) as u8)
        .collect();
    let template: Vec<shoal_storage::batch::KeyValue<'_>> = (0..args.records)
        .map(|_| (None, Some(value.as_slice())))
        .collect();

    let (mut a, mut b) = (Vec::new(), Vec::new());
    let (mut retries_a, mut retries_b) = (Retries::default(), Retries::default());
    let (mut done_a, mut done_b) = (0usize, 0usize);
    let mut staged_total = 0u64;
    let mut kind = Kind::A;
    while done_a < per_kind || done_b < per_kind {
        // The next block: of `kind` unless that kind is done.
        if (kind == Kind::A && done_a >= per_kind) || (kind == Kind::B && done_b >= per_kind) {
            kind = if kind == Kind::A { Kind::B } else { Kind::A };
        }
        let done = if kind == Kind::A { done_a } else { done_b };
        let count = args.block.min(per_kind - done);
        for _ in 0..count {
            member.keep_alive().await?;
            let mut sample = Sample::default();
            let ranges = if kind == Kind::B {
                let t = Instant::now();
                let ranges = member.take(args.records).await?;
                sample.acquire = ms(t.elapsed());
                ranges
            } else {
                Vec::new()
            };
            let records = Bytes::from(txn_records(&producer, &template));
            let retries = if kind == Kind::A {
                &mut retries_a
            } else {
                &mut retries_b
            };

            let begin = Instant::now();
            retries.produce += producer.produce(&output, records).await?;
            producer.sequence = producer
                .sequence
                .wrapping_add(i32::try_from(args.records).expect("bounded"));
            sample.produce = ms(begin.elapsed());
            if kind == Kind::B {
                let t = Instant::now();
                let (r, staged) = producer.stage(&member, &ranges).await?;
                sample.stage = ms(t.elapsed());
                retries.stage += r;
                staged_total += staged;
            }
            let t = Instant::now();
            retries.commit += producer.commit().await?;
            sample.commit = ms(t.elapsed());
            sample.txn = ms(begin.elapsed());

            let measured = if kind == Kind::A {
                done_a += 1;
                done_a > args.warmup
            } else {
                done_b += 1;
                done_b > args.warmup
            };
            if measured {
                if kind == Kind::A {
                    a.push(sample);
                } else {
                    b.push(sample);
                }
            }
        }
        kind = if kind == Kind::A { Kind::B } else { Kind::A };
    }

    let verified = verify(
        &mut admin,
        &mut member,
        &output,
        args,
        per_kind,
        staged_total,
    )
    .await?;

    // Leave the group; the member's session ends with its connection.
    let _ = member
        .conn
        .request(
            1,
            &ShareGroupHeartbeatRequest::default()
                .with_group_id(GroupId(s(&group)))
                .with_member_id(s(&member.id))
                .with_member_epoch(-1),
        )
        .await;
    drop(member);
    drop(producer);
    if !args.keep_topics {
        let r = admin
            .request(
                6,
                &DeleteTopicsRequest::default()
                    .with_timeout_ms(30_000)
                    .with_topics(
                        [&input, &output]
                            .iter()
                            .map(|n| {
                                kafka_protocol::messages::delete_topics_request::DeleteTopicState::default()
                                    .with_name(Some(TopicName(s(n))))
                            })
                            .collect(),
                    ),
            )
            .await?;
        for t in &r.responses {
            check(t.error_code, "deleting the harness's topics")?;
        }
    }
    Ok(Report {
        args: args.clone(),
        bootstrap,
        a,
        b,
        retries_a,
        retries_b,
        verified,
        wall: started.elapsed(),
    })
}

/// ListOffsets of partition 0 of `topic` at `isolation` (0 uncommitted, 1 committed).
async fn latest_offset(conn: &mut Connection, topic: &str, isolation: i8) -> anyhow::Result<i64> {
    let r = conn
        .request(
            7,
            &ListOffsetsRequest::default()
                .with_replica_id(BrokerId(-1))
                .with_isolation_level(isolation)
                .with_topics(vec![ListOffsetsTopic::default()
                    .with_name(TopicName(s(topic)))
                    .with_partitions(vec![ListOffsetsPartition::default()
                        .with_partition_index(0)
                        .with_timestamp(-1)])]),
        )
        .await?;
    let p = r
        .topics
        .first()
        .and_then(|t| t.partitions.first())
        .context("empty ListOffsets response")?;
    check(p.error_code, &format!("ListOffsets {topic}"))?;
    Ok(p.offset)
}

/// Counts the committed data records of partition 0 of `topic` up to `end` with
/// `read_committed` fetches; fails on any aborted transaction in the range.
async fn committed_records(conn: &mut Connection, topic: &str, end: i64) -> anyhow::Result<u64> {
    let mut offset = 0i64;
    let mut records = 0u64;
    let mut empty = 0;
    while offset < end {
        let r = conn
            .request(
                12,
                &FetchRequest::default()
                    .with_replica_id(BrokerId(-1))
                    .with_max_wait_ms(500)
                    .with_min_bytes(1)
                    .with_max_bytes(16 << 20)
                    .with_isolation_level(1)
                    .with_session_epoch(-1)
                    .with_topics(vec![FetchTopic::default()
                        .with_topic(TopicName(s(topic)))
                        .with_partitions(vec![FetchPartition::default()
                            .with_partition(0)
                            .with_fetch_offset(offset)
                            .with_partition_max_bytes(16 << 20)])]),
            )
            .await?;
        check(r.error_code, "Fetch")?;
        let p = r
            .responses
            .first()
            .and_then(|t| t.partitions.first())
            .context("empty Fetch response")?;
        check(p.error_code, &format!("Fetch {topic}"))?;
        if p.aborted_transactions
            .as_ref()
            .is_some_and(|a| !a.is_empty())
        {
            bail!("{topic} holds aborted transactions: every transaction should have committed");
        }
        let bytes = p.records.clone().unwrap_or_default();
        let before = offset;
        for batch in split_batches(&bytes) {
            // A fetch may end inside a batch: the next fetch starts at it again.
            let Ok((header, _)) = batch else { break };
            if header.next_offset() <= offset {
                continue;
            }
            if !header.is_control() {
                if !header.is_transactional() {
                    bail!("{topic} holds a batch outside any transaction");
                }
                records += header.record_count() as u64;
            }
            offset = header.next_offset();
        }
        if offset == before {
            empty += 1;
            if empty >= 10 {
                bail!("reading {topic} back stopped at offset {offset} of {end}");
            }
        }
    }
    Ok(records)
}

/// The final check: fails unless every transaction's output is committed and every input
/// record acknowledged.
async fn verify(
    admin: &mut Connection,
    member: &mut Member,
    output: &str,
    args: &TxnAcksArgs,
    per_kind: usize,
    staged_total: u64,
) -> anyhow::Result<Verified> {
    let input_records = (per_kind * args.records) as u64;
    let expected_output = 2 * input_records;
    if staged_total != input_records {
        bail!("staged {staged_total} acknowledgements, expected {input_records}");
    }
    // EndTxn answers once the commit is decided; the markers follow (bounded wait).
    let deadline = Instant::now() + Duration::from_secs(30);
    let (stable, high) = loop {
        let stable = latest_offset(admin, output, 1).await?;
        let high = latest_offset(admin, output, 0).await?;
        if stable == high {
            break (stable, high);
        }
        if Instant::now() >= deadline {
            bail!(
                "{output}: last stable offset {stable} below high watermark {high}: a \
                 transaction is still open"
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let committed = committed_records(admin, output, stable).await?;
    if committed != expected_output {
        bail!("{output}: {committed} committed records, expected {expected_output}");
    }

    // The COMMIT markers resolve the staged acknowledgements. DescribeShareGroupOffsets
    // answers from the persisted share state, whose start offset a marker moves past the
    // acknowledged records: every input record acknowledged is start offset = input records
    // (the input topic starts at 0) and lag 0 (TX_PENDING is not delivery complete). Bounded
    // wait.
    let deadline = Instant::now() + Duration::from_secs(30);
    let (start_offset, lag) = loop {
        let r = admin
            .request(
                1,
                &DescribeShareGroupOffsetsRequest {
                    groups: vec![DescribeShareGroupOffsetsRequestGroup {
                        group_id: GroupId(s(&member.group)),
                        topics: None,
                        ..Default::default()
                    }],
                    ..Default::default()
                },
            )
            .await?;
        let g = r
            .groups
            .first()
            .context("empty DescribeShareGroupOffsets response")?;
        check(g.error_code, "DescribeShareGroupOffsets")?;
        let found = g
            .topics
            .iter()
            .filter(|t| t.topic_id == member.topic_id || t.topic_name.0.as_str() == member.topic)
            .flat_map(|t| t.partitions.iter())
            .find(|p| p.partition_index == 0);
        let (start, lag) = match found {
            Some(p) => {
                check(p.error_code, "DescribeShareGroupOffsets partition")?;
                (p.start_offset, p.lag)
            }
            None => (-1, -1),
        };
        if start == input_records as i64 && lag == 0 {
            break (start, lag);
        }
        if Instant::now() >= deadline {
            bail!(
                "share group start offset {start}, lag {lag} (expected {input_records} and 0): \
                 not every staged acknowledgement was committed"
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    if !member.held.is_empty() {
        bail!(
            "{} input records acquired and never staged",
            member.held.len()
        );
    }
    let left = member.fetch(200, 500).await?;
    if left != 0 {
        bail!("{left} input records still delivered after every acknowledgement committed");
    }
    Ok(Verified {
        committed_output_records: committed,
        output_end_offset: high,
        input_records,
        acknowledged_records: staged_total,
        share_start_offset: start_offset,
        share_lag: lag,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        let st = Stats::of(&v);
        assert_eq!(
            (st.p50, st.p90, st.p99, st.max, st.mean),
            (50.0, 90.0, 99.0, 100.0, 50.5)
        );
        let one = Stats::of(&[3.0]);
        assert_eq!((one.p50, one.p99, one.max), (3.0, 3.0, 3.0));
        let r = Stats::ratio(&Stats::of(&[4.0]), &Stats::of(&[2.0]));
        assert_eq!(r.p50, 2.0);
        assert_eq!(
            Stats::ratio(&one, &Stats::of(&[0.0]))
                .json()
                .matches("null")
                .count(),
            5
        );
    }
}
