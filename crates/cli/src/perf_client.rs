//! `shoal perf produce` and `shoal perf share-consume`: our client, through shoal-client's
//! public API only, measured the way `bench/kbench.py` measures librdkafka and
//! `tests/interop/krafka` measures krafka, so `bench/run.sh --clients` can put the three side
//! by side. Each run prints one JSON line (the schema is shared with those two):
//!
//! * `produce`: N records of S bytes to an existing topic, record `i` to partition `i % P`
//!   (P read from the metadata, fetched before the clock starts), with the given acks,
//!   linger.ms, batch.size, idempotence and compression; unpaced, or paced at `--rate`
//!   records/s (the records whose due time has passed are sent at every wake-up). Latency =
//!   from the `send()` call to its delivery future resolving, per record; the futures are
//!   awaited in send order by one task, so a record whose batch completed before an earlier
//!   one's is counted when the earlier one resolves (one broker: all partitions of a request
//!   complete together). `seconds` = first `send()` to the last delivery.
//! * `share-consume`: one share consumer in explicit mode reads N records already in the
//!   topic, accepting each (the acknowledgements ride on the next ShareFetch, as the consumer
//!   does by default; one `commit_sync` at the end, timed apart). The group is set to
//!   `share.auto.offset.reset=earliest` first. `seconds` = first record returned to the Nth.
//!
//! CPU% is user+sys time over wall time of the timed part (`/proc/<pid>/stat`), this process
//! and, with `--broker-pid`, the broker's; 100 = one core. A measurement, not a test.

use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use bytes::Bytes;
use shoal_client::admin::{AlterConfigOp, ConfigResource, Mode, NewTopic};
use shoal_client::producer::{DeliveryFuture, ProducerRecord};
use shoal_client::share_consumer::{AcknowledgeType, ShareAcknowledgements, ShareConsumerConfig};
use shoal_client::{Admin, ClientConfig, Producer, ProducerConfig, ShareConsumer};
use tokio::sync::mpsc;

/// Bounds, so that a typo cannot fill a disk or the memory.
const RECORDS_MAX: u64 = 100_000_000;
const RECORD_BYTES_MAX: usize = 1024 * 1024;
/// Pre-generated random (incompressible) values, cycled, as kbench.py does.
const VALUES: usize = 16;
/// Delivery futures queued for the collector; above what `buffer.memory` lets the producer
/// hold (32 MiB of 1 KiB records = 32 768), so it does not pace the producer itself.
const COLLECTOR_QUEUE: usize = 65_536;
/// The share consumer gives up when no record came for this long.
const IDLE_MAX: Duration = Duration::from_secs(30);

#[derive(clap::Args, Debug, Clone)]
pub struct ProduceArgs {
    /// An existing topic (its partition count is read from the metadata).
    #[arg(long)]
    pub topic: String,
    /// Records to send.
    #[arg(long, default_value_t = 200_000)]
    pub records: u64,
    /// Bytes of each record's value (null key).
    #[arg(long, default_value_t = 1024)]
    pub record_bytes: usize,
    /// `acks`: 0, 1 or all.
    #[arg(long, default_value = "all")]
    pub acks: String,
    /// `linger.ms`.
    #[arg(long, default_value_t = 5)]
    pub linger_ms: u64,
    /// `batch.size` in bytes.
    #[arg(long, default_value_t = 1_048_576)]
    pub batch_size: usize,
    /// `buffer.memory` in bytes.
    #[arg(long, default_value_t = 33_554_432)]
    pub buffer_memory: usize,
    /// `enable.idempotence`.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub idempotence: bool,
    /// `compression.type`: none, gzip, snappy, lz4 or zstd.
    #[arg(long, default_value = "none")]
    pub compression: String,
    /// Pace at this many records/s (default: as fast as the producer takes them).
    #[arg(long)]
    pub rate: Option<f64>,
    /// Also sample this process's CPU (the broker's).
    #[arg(long)]
    pub broker_pid: Option<u32>,
    /// Give up after this many seconds.
    #[arg(long, default_value_t = 120)]
    pub timeout_secs: u64,
}

#[derive(clap::Args, Debug, Clone)]
pub struct ShareConsumeArgs {
    /// The topic to read.
    #[arg(long)]
    pub topic: String,
    /// Share group id (a fresh group reads from the earliest offset).
    #[arg(long)]
    pub group: String,
    /// Records to read (all already in the topic).
    #[arg(long)]
    pub records: u64,
    /// Also sample this process's CPU (the broker's).
    #[arg(long)]
    pub broker_pid: Option<u32>,
    /// Give up after this many seconds.
    #[arg(long, default_value_t = 120)]
    pub timeout_secs: u64,
}

/// Runs `shoal perf produce`: prints one JSON line.
///
/// # Errors
/// Bad arguments, a producer that cannot start, a topic without partitions, a timeout.
/// Failed deliveries are counted (`errors`), not returned.
pub async fn produce(bootstrap: &str, args: &ProduceArgs) -> anyhow::Result<()> {
    if args.records == 0 || args.records > RECORDS_MAX {
        bail!("--records must be within 1..={RECORDS_MAX}");
    }
    if args.record_bytes > RECORD_BYTES_MAX {
        bail!("--record-bytes must be at most {RECORD_BYTES_MAX}");
    }
    if let Some(rate) = args.rate {
        if !(rate.is_finite() && rate > 0.0) {
            bail!("--rate must be a positive number of records/s");
        }
    }
    let limit = Duration::from_secs(args.timeout_secs);
    let line = tokio::time::timeout(limit, produce_inner(bootstrap, args))
        .await
        .map_err(|_| anyhow!("gave up after {} s", args.timeout_secs))??;
    println!("{line}");
    Ok(())
}

async fn produce_inner(bootstrap: &str, args: &ProduceArgs) -> anyhow::Result<String> {
    let linger = args.linger_ms.to_string();
    let batch = args.batch_size.to_string();
    let memory = args.buffer_memory.to_string();
    let idempotence = args.idempotence.to_string();
    let config = ProducerConfig::from_properties([
        ("bootstrap.servers", bootstrap),
        ("client.id", "shoal-perf-produce"),
        ("acks", args.acks.as_str()),
        ("linger.ms", linger.as_str()),
        ("batch.size", batch.as_str()),
        ("buffer.memory", memory.as_str()),
        ("enable.idempotence", idempotence.as_str()),
        ("compression.type", args.compression.as_str()),
    ])?;
    let producer = Producer::new(config).await?;
    // Metadata outside the timed part, as the other two clients fetch it first.
    let info = producer.cluster().topic(&args.topic).await?;
    let partitions = i32::try_from(info.partitions.len()).context("partition count")?;
    if partitions == 0 {
        bail!("topic {} has no partitions", args.topic);
    }
    let values = random_values(args.record_bytes);
    let n = args.records;

    let (tx, mut rx) = mpsc::channel::<(Instant, DeliveryFuture)>(COLLECTOR_QUEUE);
    // `n` is bounded by RECORDS_MAX: 4 bytes a record.
    let collector = tokio::spawn(async move {
        let mut latencies_us: Vec<u32> = Vec::with_capacity(n as usize);
        let mut errors = 0u64;
        let mut first_error = None;
        while let Some((sent, delivery)) = rx.recv().await {
            match delivery.await {
                Ok(_) => {
                    let us = sent.elapsed().as_micros();
                    latencies_us.push(u32::try_from(us).unwrap_or(u32::MAX));
                }
                Err(e) => {
                    errors += 1;
                    first_error.get_or_insert_with(|| e.to_string());
                }
            }
        }
        (latencies_us, errors, first_error, Instant::now())
    });

    let cpu = CpuSample::start(args.broker_pid);
    let t0 = Instant::now();
    let mut send_errors = 0u64;
    let mut first_send_error = None;
    for i in 0..n {
        if let Some(rate) = args.rate {
            let due = t0 + Duration::from_secs_f64(i as f64 / rate);
            if due > Instant::now() {
                tokio::time::sleep_until(due.into()).await;
            }
        }
        let partition = (i % partitions as u64) as i32;
        let record = ProducerRecord::new(args.topic.clone(), values[i as usize % VALUES].clone())
            .with_partition(partition);
        let sent = Instant::now();
        match producer.send(record).await {
            Ok(delivery) => {
                if tx.send((sent, delivery)).await.is_err() {
                    bail!("the delivery collector stopped");
                }
            }
            Err(e) => {
                send_errors += 1;
                first_send_error.get_or_insert_with(|| e.to_string());
            }
        }
    }
    let send_seconds = t0.elapsed().as_secs_f64();
    drop(tx);
    let (mut latencies_us, delivery_errors, first_delivery_error, done) =
        collector.await.context("the delivery collector panicked")?;
    let seconds = done.duration_since(t0).as_secs_f64();
    let (client_cpu, broker_cpu) = cpu.finish(seconds);
    producer.close().await;

    latencies_us.sort_unstable();
    let ms = |q: f64| percentile(&latencies_us, q).map(|us| us as f64 / 1000.0);
    let mean = (!latencies_us.is_empty()).then(|| {
        latencies_us.iter().map(|&v| f64::from(v)).sum::<f64>() / latencies_us.len() as f64 / 1e3
    });
    let errors = send_errors + delivery_errors;
    let first_error = first_send_error.or(first_delivery_error);
    let delivered = latencies_us.len() as f64;
    let mut j = Json::new();
    j.str("client", "shoal")
        .str(
            "test",
            if args.rate.is_some() {
                "produce_latency"
            } else {
                "produce"
            },
        )
        .str("topic", &args.topic)
        .num("partitions", f64::from(partitions), 0)
        .num("records", n as f64, 0)
        .num("record_bytes", args.record_bytes as f64, 0)
        .str("acks", &args.acks)
        .num("linger_ms", args.linger_ms as f64, 0)
        .num("batch_size", args.batch_size as f64, 0)
        .num("buffer_memory", args.buffer_memory as f64, 0)
        .bool("idempotence", args.idempotence)
        .str("compression", &args.compression)
        .opt("target_rate", args.rate, 0)
        .num("achieved_rate", n as f64 / send_seconds, 0)
        .num("seconds", seconds, 3)
        .num("send_seconds", send_seconds, 3)
        .num("records_per_s", delivered / seconds, 0)
        .num(
            "mb_per_s",
            delivered * args.record_bytes as f64 / seconds / 1e6,
            1,
        )
        .opt("p50_ms", ms(0.50), 3)
        .opt("p99_ms", ms(0.99), 3)
        .opt("max_ms", ms(1.0), 3)
        .opt("mean_ms", mean, 3)
        .num("errors", errors as f64, 0)
        .opt_str("first_error", first_error.as_deref())
        .opt("client_cpu_pct", client_cpu, 1)
        .opt("broker_cpu_pct", broker_cpu, 1);
    Ok(j.finish())
}

/// Runs `shoal perf share-consume`: prints one JSON line.
///
/// # Errors
/// Bad arguments, a group config that cannot be set, a consumer error, no record for
/// [`IDLE_MAX`], a timeout.
pub async fn share_consume(bootstrap: &str, args: &ShareConsumeArgs) -> anyhow::Result<()> {
    if args.records == 0 || args.records > RECORDS_MAX {
        bail!("--records must be within 1..={RECORDS_MAX}");
    }
    let limit = Duration::from_secs(args.timeout_secs);
    let line = tokio::time::timeout(limit, share_consume_inner(bootstrap, args))
        .await
        .map_err(|_| anyhow!("gave up after {} s", args.timeout_secs))??;
    println!("{line}");
    Ok(())
}

async fn share_consume_inner(bootstrap: &str, args: &ShareConsumeArgs) -> anyhow::Result<String> {
    let admin = Admin::connect(ClientConfig::from_properties([(
        "bootstrap.servers",
        bootstrap,
    )])?)
    .await?;
    set_earliest(&admin, &args.group).await?;
    admin.close().await;

    let config = ShareConsumerConfig::from_properties([
        ("bootstrap.servers", bootstrap),
        ("client.id", "shoal-perf-share-consume"),
        ("group.id", args.group.as_str()),
        ("share.acknowledgement.mode", "explicit"),
    ])?;
    let mut consumer = ShareConsumer::new(config).await?;
    consumer.subscribe([args.topic.clone()]);
    let started = Instant::now();
    let mut first: Option<(Instant, CpuSample)> = None;
    let mut last = Instant::now();
    let mut consumed = 0u64;
    let mut bytes = 0u64;
    let mut redelivered = 0u64;
    while consumed < args.records {
        let records = consumer.poll(Duration::from_millis(500)).await?;
        if records.is_empty() {
            if last.elapsed() > IDLE_MAX {
                bail!(
                    "no record for {IDLE_MAX:?} after {consumed} of {}",
                    args.records
                );
            }
            continue;
        }
        if first.is_none() {
            first = Some((Instant::now(), CpuSample::start(args.broker_pid)));
        }
        for record in &records {
            consumer.acknowledge(record, AcknowledgeType::Accept)?;
            redelivered += u64::from(record.delivery_count > 1);
            bytes += record.value.as_ref().map_or(0, |v| v.len() as u64);
            consumed += 1;
        }
        last = Instant::now();
    }
    let Some((t_first, cpu)) = first else {
        bail!("no record read");
    };
    let seconds = last.duration_since(t_first).as_secs_f64();
    let (client_cpu, broker_cpu) = cpu.finish(seconds);
    let commit_started = Instant::now();
    consumer.commit_sync().await?;
    let commit_ms = commit_started.elapsed().as_secs_f64() * 1000.0;
    consumer.close().await;
    let mut j = Json::new();
    j.str("client", "shoal")
        .str("test", "share_consume")
        .str("topic", &args.topic)
        .str("ack_mode", "explicit")
        .num("records", consumed as f64, 0)
        .num("duplicates", redelivered as f64, 0)
        .num("seconds", seconds, 3)
        .num(
            "seconds_incl_join",
            last.duration_since(started).as_secs_f64(),
            3,
        )
        .num("records_per_s", consumed as f64 / seconds, 0)
        .num("mb_per_s", bytes as f64 / seconds / 1e6, 1)
        .num("commit_ms", commit_ms, 3)
        .num("errors", 0.0, 0)
        .opt("client_cpu_pct", client_cpu, 1)
        .opt("broker_cpu_pct", broker_cpu, 1);
    Ok(j.finish())
}

/// Sets `group`'s `share.auto.offset.reset` to `earliest` (share groups start at the latest
/// offset by default).
async fn set_earliest(admin: &Admin, group: &str) -> anyhow::Result<()> {
    let set = admin
        .incremental_alter_configs(
            &[(
                ConfigResource::group(group),
                vec![AlterConfigOp::Set {
                    name: "share.auto.offset.reset".into(),
                    value: "earliest".into(),
                }],
            )],
            Mode::Apply,
        )
        .await?;
    for (_, result) in set {
        result.context("share.auto.offset.reset")?;
    }
    Ok(())
}

#[derive(clap::Args, Debug, Clone)]
pub struct StagePendingArgs {
    /// A fresh topic to fill.
    #[arg(long)]
    pub topic: String,
    /// Its partitions, record i to partition i mod P. A share partition holds at most
    /// `group.share.partition.max.record.locks` (default 2000) records in flight, TX_PENDING
    /// ones included, so 10 000 records need 5.
    #[arg(long, default_value_t = 5)]
    pub partitions: i32,
    /// A fresh share group.
    #[arg(long)]
    pub group: String,
    /// Records to write, acquire and stage.
    #[arg(long, default_value_t = 10_000)]
    pub records: u64,
    /// Bytes of each record's value.
    #[arg(long, default_value_t = 1024)]
    pub record_bytes: usize,
    /// The staging producer's transactional id.
    #[arg(long, default_value = "shoal-perf-stage-pending")]
    pub transactional_id: String,
    /// The open transaction's timeout: the records stay TX_PENDING until it passes.
    #[arg(long, default_value_t = 900_000)]
    pub transaction_timeout_ms: u32,
    /// Give up after this many seconds.
    #[arg(long, default_value_t = 300)]
    pub timeout_secs: u64,
}

/// Runs `shoal perf stage-pending` (issue 12, benchmark (c)): fills a topic, has one share
/// consumer acquire and ACCEPT every record, stages the acknowledgements in a transaction
/// (TxnShareAcknowledge) and leaves it open, so that the broker holds `--records` records
/// TX_PENDING until `--transaction-timeout-ms` passes. Prints one JSON line.
///
/// # Errors
/// Bad arguments, a broker without TxnShareAcknowledge, a consumer or producer error, a
/// timeout.
pub async fn stage_pending(bootstrap: &str, args: &StagePendingArgs) -> anyhow::Result<()> {
    if args.records == 0 || args.records > 1_000_000 {
        bail!("--records must be within 1..=1000000");
    }
    let limit = Duration::from_secs(args.timeout_secs);
    let line = tokio::time::timeout(limit, stage_pending_inner(bootstrap, args))
        .await
        .map_err(|_| anyhow!("gave up after {} s", args.timeout_secs))??;
    println!("{line}");
    Ok(())
}

async fn stage_pending_inner(bootstrap: &str, args: &StagePendingArgs) -> anyhow::Result<String> {
    let client = ClientConfig::from_properties([("bootstrap.servers", bootstrap)])?;
    let admin = Admin::connect(client.clone()).await?;
    let created = admin
        .create_topics(
            &[NewTopic::new(args.topic.clone()).partitions(args.partitions.max(1))],
            Mode::Apply,
        )
        .await?;
    for (_, result) in created {
        result.context("creating the topic")?;
    }
    set_earliest(&admin, &args.group).await?;
    admin.close().await;

    let started = Instant::now();
    let producer = Producer::new(ProducerConfig::from_properties([
        ("bootstrap.servers", bootstrap),
        ("linger.ms", "5"),
        ("batch.size", "1048576"),
    ])?)
    .await?;
    let value = Bytes::from(vec![b'p'; args.record_bytes]);
    let mut deliveries = Vec::new();
    for i in 0..args.records {
        let partition = (i % args.partitions.max(1) as u64) as i32;
        let record =
            ProducerRecord::new(args.topic.clone(), value.clone()).with_partition(partition);
        deliveries.push(producer.send(record).await?);
    }
    for d in deliveries {
        d.await?;
    }
    producer.close().await;
    let written = started.elapsed().as_secs_f64();

    let mut consumer = ShareConsumer::new(ShareConsumerConfig::from_properties([
        ("bootstrap.servers", bootstrap),
        ("client.id", "shoal-perf-stage-pending"),
        ("group.id", args.group.as_str()),
        ("share.acknowledgement.mode", "explicit"),
    ])?)
    .await?;
    consumer.subscribe([args.topic.clone()]);
    let mut acks = ShareAcknowledgements::new();
    let mut last = Instant::now();
    while (acks.len() as u64) < args.records {
        let records = consumer.poll(Duration::from_millis(500)).await?;
        if records.is_empty() {
            if last.elapsed() > IDLE_MAX {
                bail!("no record for {IDLE_MAX:?} after {} acquired", acks.len());
            }
            continue;
        }
        last = Instant::now();
        for r in &records {
            consumer.acknowledge(r, AcknowledgeType::Accept)?;
        }
        // Drained before the next poll, which would otherwise carry them.
        acks.extend(consumer.acknowledgements_for_transaction()?)
            .map_err(|e| anyhow!("{e}"))?;
    }
    let acquired = started.elapsed().as_secs_f64();

    let timeout = args.transaction_timeout_ms.to_string();
    let txn = Producer::new(ProducerConfig::from_properties([
        ("bootstrap.servers", bootstrap),
        ("transactional.id", args.transactional_id.as_str()),
        ("transaction.timeout.ms", timeout.as_str()),
    ])?)
    .await?;
    txn.init_transactions().await?;
    txn.begin_transaction()?;
    let staging = Instant::now();
    txn.send_share_acknowledgements_to_transaction(&acks, &consumer.share_group_metadata())
        .await?;
    let stage_ms = staging.elapsed().as_secs_f64() * 1000.0;
    // Left open on purpose: closing the connections neither commits nor aborts.
    txn.close().await;
    consumer.close().await;
    let mut j = Json::new();
    j.str("client", "shoal")
        .str("test", "stage_pending")
        .str("topic", &args.topic)
        .num("records", acks.len() as f64, 0)
        .num("partitions", f64::from(args.partitions), 0)
        .num("record_bytes", args.record_bytes as f64, 0)
        .num("write_seconds", written, 3)
        .num("acquire_seconds", acquired - written, 3)
        .num("stage_ms", stage_ms, 1)
        .num(
            "transaction_timeout_ms",
            f64::from(args.transaction_timeout_ms),
            0,
        );
    Ok(j.finish())
}

/// [`VALUES`] buffers of `size` pseudo-random bytes (xorshift64*: incompressible enough, no
/// dependency).
fn random_values(size: usize) -> Vec<Bytes> {
    let mut state = 0x9E37_79B9_7F4A_7C15u64
        ^ std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
    (0..VALUES)
        .map(|_| {
            let mut v = Vec::with_capacity(size + 8);
            while v.len() < size {
                state ^= state >> 12;
                state ^= state << 25;
                state ^= state >> 27;
                v.extend_from_slice(&state.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes());
            }
            v.truncate(size);
            Bytes::from(v)
        })
        .collect()
}

/// Nearest-rank on the sorted values, as kbench.py's `percentile`.
fn percentile(sorted: &[u32], q: f64) -> Option<u32> {
    let last = sorted.len().checked_sub(1)?;
    let k = ((q * last as f64).round() as usize).min(last);
    Some(sorted[k])
}

/// CPU time of this process and optionally another one, from a start point.
struct CpuSample {
    me: Option<u64>,
    broker_pid: Option<u32>,
    broker: Option<u64>,
}

impl CpuSample {
    fn start(broker_pid: Option<u32>) -> CpuSample {
        CpuSample {
            me: cpu_ticks("self"),
            broker_pid,
            broker: broker_pid.and_then(|p| cpu_ticks(&p.to_string())),
        }
    }

    /// (this process, the broker) CPU% over `wall` seconds.
    fn finish(self, wall: f64) -> (Option<f64>, Option<f64>) {
        // SAFETY: sysconf reads a constant of the system; no memory is touched.
        let tck = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
        let pct = |a: Option<u64>, b: Option<u64>| match (a, b) {
            (Some(a), Some(b)) if wall > 0.0 && tck > 0.0 => {
                Some(100.0 * b.saturating_sub(a) as f64 / tck / wall)
            }
            _ => None,
        };
        let broker_now = self.broker_pid.and_then(|p| cpu_ticks(&p.to_string()));
        (
            pct(self.me, cpu_ticks("self")),
            pct(self.broker, broker_now),
        )
    }
}

/// utime + stime of `/proc/<pid>/stat` (fields 14 and 15), in clock ticks.
fn cpu_ticks(pid: &str) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = stat.rsplit_once(')')?.1;
    let mut fields = rest.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

/// A one-line JSON object built field by field (the values here are numbers, booleans and
/// plain strings).
struct Json(String);

impl Json {
    fn new() -> Json {
        Json(String::from("{"))
    }
    fn key(&mut self, k: &str) {
        if self.0.len() > 1 {
            self.0.push_str(", ");
        }
        self.0.push('"');
        self.0.push_str(k);
        self.0.push_str("\": ");
    }
    fn str(&mut self, k: &str, v: &str) -> &mut Json {
        self.key(k);
        self.0.push('"');
        for c in v.chars() {
            match c {
                '"' => self.0.push_str("\\\""),
                '\\' => self.0.push_str("\\\\"),
                c if c.is_control() => self.0.push_str(&format!("\\u{:04x}", c as u32)),
                c => self.0.push(c),
            }
        }
        self.0.push('"');
        self
    }
    fn opt_str(&mut self, k: &str, v: Option<&str>) -> &mut Json {
        match v {
            Some(v) => self.str(k, v),
            None => {
                self.key(k);
                self.0.push_str("null");
                self
            }
        }
    }
    fn num(&mut self, k: &str, v: f64, decimals: usize) -> &mut Json {
        self.opt(k, Some(v), decimals)
    }
    fn opt(&mut self, k: &str, v: Option<f64>, decimals: usize) -> &mut Json {
        self.key(k);
        match v {
            Some(v) if v.is_finite() => self.0.push_str(&format!("{v:.decimals$}")),
            _ => self.0.push_str("null"),
        }
        self
    }
    fn bool(&mut self, k: &str, v: bool) -> &mut Json {
        self.key(k);
        self.0.push_str(if v { "true" } else { "false" });
        self
    }
    fn finish(&mut self) -> String {
        self.0.push('}');
        std::mem::take(&mut self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentile_is_nearest_rank() {
        let v: Vec<u32> = (1..=100).collect();
        assert_eq!(percentile(&v, 0.5), Some(51));
        assert_eq!(percentile(&v, 0.99), Some(99));
        assert_eq!(percentile(&v, 1.0), Some(100));
        assert_eq!(percentile(&[], 0.5), None);
    }

    #[test]
    fn json_line_escapes_and_nulls() {
        let line = Json::new()
            .str("a", "x\"y")
            .num("n", 1.26, 1)
            .opt("none", None, 0)
            .bool("b", true)
            .finish();
        assert_eq!(line, r#"{"a": "x\"y", "n": 1.3, "none": null, "b": true}"#);
    }
}
