//! `bench-produce` and `bench-share-consume`: krafka measured as `shoal perf produce` /
//! `shoal perf share-consume` (crates/cli/src/perf_client.rs) measure Shoal's client, with
//! the same JSON line, for `bench/run.sh --clients`. Not part of the interop suite.
//!
//! ```text
//! shoal-krafka-interop BOOTSTRAP bench-produce --topic T [--records N] [--record-bytes S]
//!     [--linger-ms 5] [--batch-size 1048576] [--buffer-memory 33554432] [--idempotence true]
//!     [--compression none] [--rate RECORDS_PER_S] [--broker-pid PID]
//! shoal-krafka-interop BOOTSTRAP bench-share-consume --topic T --group G --records N
//!     [--broker-pid PID]
//! ```
//!
//! produce: record `i` to partition `i % P` (P from the metadata, fetched before the clock
//! starts), acks=all; latency = `enqueue()` call to its delivery handle resolving, the handles
//! awaited in enqueue order by one task. share-consume: explicit mode, `ack()` per record (sent
//! with the next poll's ShareFetch), one `commit()` at the end, timed apart; `seconds` = first
//! record returned to the Nth. CPU% from `/proc/<pid>/stat` over the timed part.

use std::time::{Duration, Instant};

use krafka::admin::{ConfigOp, ConfigResource, IncrementalAlterConfigsOptions};
use krafka::producer::{Acks, DeliveryHandle};
use krafka::share_consumer::AcknowledgementMode;
use krafka::{Kafka, Record};
use tokio::sync::mpsc;

use crate::{Args, BoxResult, codec};

/// Pre-generated random values, cycled (as kbench.py and `shoal perf produce`).
const VALUES: usize = 16;
/// Delivery handles queued for the collector: more than 32 MiB of 1 KiB records.
const COLLECTOR_QUEUE: usize = 65_536;
/// Linux reports /proc times in USER_HZ, 100 on x86 and arm (no libc here for sysconf).
const USER_HZ: f64 = 100.0;
/// The share consumer gives up when no record came for this long.
const IDLE_MAX: Duration = Duration::from_secs(30);

pub async fn produce(kafka: &Kafka, args: &Args) -> BoxResult<()> {
    let topic: String = args.opt("topic", String::new())?;
    if topic.is_empty() {
        return Err("--topic is required".into());
    }
    let n: u64 = args.opt("records", 200_000)?;
    let size: usize = args.opt("record-bytes", 1024)?;
    let linger_ms: u64 = args.opt("linger-ms", 5)?;
    let batch_size: usize = args.opt("batch-size", 1_048_576)?;
    let buffer_memory: usize = args.opt("buffer-memory", 33_554_432)?;
    let idempotence: bool = args.opt("idempotence", true)?;
    let compression: String = args.opt("compression", "none".to_string())?;
    let rate: Option<f64> = match args.options.get("rate") {
        None => None,
        Some(v) => Some(v.parse().map_err(|_| format!("--rate: {v:?}"))?),
    };
    let broker_pid: Option<u32> = match args.options.get("broker-pid") {
        None => None,
        Some(v) => Some(v.parse().map_err(|_| format!("--broker-pid: {v:?}"))?),
    };
    let producer = kafka
        .producer()
        .acks(Acks::All)
        .compression(codec(&compression)?)
        .linger(Duration::from_millis(linger_ms))
        .batch_size(batch_size)
        .buffer_memory(buffer_memory)
        .idempotent(idempotence)
        .build()
        .await?;
    let partitions = producer.partitions_for(&topic).await?.len() as u64;
    if partitions == 0 {
        return Err(format!("topic {topic} has no partitions").into());
    }
    let values = random_values(size);

    let (tx, mut rx) = mpsc::channel::<(Instant, DeliveryHandle)>(COLLECTOR_QUEUE);
    let collector = tokio::spawn(async move {
        let mut latencies_us: Vec<u32> = Vec::with_capacity(n as usize);
        let mut errors = 0u64;
        let mut first_error = None;
        while let Some((sent, handle)) = rx.recv().await {
            match handle.await {
                Ok(_) => {
                    latencies_us.push(u32::try_from(sent.elapsed().as_micros()).unwrap_or(u32::MAX))
                }
                Err(e) => {
                    errors += 1;
                    first_error.get_or_insert_with(|| e.to_string());
                }
            }
        }
        (latencies_us, errors, first_error, Instant::now())
    });

    let cpu = CpuSample::start(broker_pid);
    let t0 = Instant::now();
    let mut send_errors = 0u64;
    let mut first_send_error = None;
    for i in 0..n {
        if let Some(rate) = rate {
            let due = t0 + Duration::from_secs_f64(i as f64 / rate);
            if due > Instant::now() {
                tokio::time::sleep_until(due.into()).await;
            }
        }
        let record = Record::new(topic.as_str(), values[i as usize % VALUES].clone())
            .partition((i % partitions) as i32);
        let sent = Instant::now();
        match producer.enqueue(record).await {
            Ok(handle) => {
                if tx.send((sent, handle)).await.is_err() {
                    return Err("the delivery collector stopped".into());
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
    let (mut lat, delivery_errors, first_delivery_error, done) = collector.await?;
    let seconds = done.duration_since(t0).as_secs_f64();
    let (client_cpu, broker_cpu) = cpu.finish(seconds);
    producer.close().await?;

    lat.sort_unstable();
    let ms = |q: f64| percentile(&lat, q).map(|us| f64::from(us) / 1000.0);
    let mean = (!lat.is_empty())
        .then(|| lat.iter().map(|&v| f64::from(v)).sum::<f64>() / lat.len() as f64 / 1e3);
    let delivered = lat.len() as f64;
    let first_error = first_send_error.or(first_delivery_error);
    let mut j = Json::new();
    j.str("client", "krafka")
        .str(
            "test",
            if rate.is_some() {
                "produce_latency"
            } else {
                "produce"
            },
        )
        .str("topic", &topic)
        .num("partitions", partitions as f64, 0)
        .num("records", n as f64, 0)
        .num("record_bytes", size as f64, 0)
        .str("acks", "all")
        .num("linger_ms", linger_ms as f64, 0)
        .num("batch_size", batch_size as f64, 0)
        .num("buffer_memory", buffer_memory as f64, 0)
        .bool("idempotence", idempotence)
        .str("compression", &compression)
        .opt("target_rate", rate, 0)
        .num("achieved_rate", n as f64 / send_seconds, 0)
        .num("seconds", seconds, 3)
        .num("send_seconds", send_seconds, 3)
        .num("records_per_s", delivered / seconds, 0)
        .num("mb_per_s", delivered * size as f64 / seconds / 1e6, 1)
        .opt("p50_ms", ms(0.50), 3)
        .opt("p99_ms", ms(0.99), 3)
        .opt("max_ms", ms(1.0), 3)
        .opt("mean_ms", mean, 3)
        .num("errors", (send_errors + delivery_errors) as f64, 0)
        .opt_str("first_error", first_error.as_deref())
        .opt("client_cpu_pct", client_cpu, 1)
        .opt("broker_cpu_pct", broker_cpu, 1);
    println!("{}", j.finish());
    Ok(())
}

pub async fn share_consume(kafka: &Kafka, args: &Args) -> BoxResult<()> {
    let topic: String = args.opt("topic", String::new())?;
    let group: String = args.opt("group", String::new())?;
    if topic.is_empty() || group.is_empty() {
        return Err("--topic and --group are required".into());
    }
    let n: u64 = args.opt("records", 0)?;
    if n == 0 {
        return Err("--records must be positive".into());
    }
    let broker_pid: Option<u32> = match args.options.get("broker-pid") {
        None => None,
        Some(v) => Some(v.parse().map_err(|_| format!("--broker-pid: {v:?}"))?),
    };
    let admin = kafka.admin();
    for (_, r) in admin
        .incremental_alter_configs(
            [(
                ConfigResource::group(group.as_str()),
                vec![ConfigOp::set("share.auto.offset.reset", "earliest")],
            )],
            IncrementalAlterConfigsOptions::default(),
        )
        .await?
    {
        r?;
    }
    let consumer = kafka
        .share_consumer(group.as_str())
        .acknowledgement_mode(AcknowledgementMode::Explicit)
        .build()
        .await?;
    consumer.subscribe([topic.as_str()]).await?;
    let started = Instant::now();
    let mut first: Option<(Instant, CpuSample)> = None;
    let mut last = Instant::now();
    let (mut consumed, mut bytes, mut redelivered) = (0u64, 0u64, 0u64);
    while consumed < n {
        let records = consumer.poll(Duration::from_millis(500)).await?;
        if records.is_empty() {
            if last.elapsed() > IDLE_MAX {
                return Err(format!("no record for {IDLE_MAX:?} after {consumed} of {n}").into());
            }
            continue;
        }
        if first.is_none() {
            first = Some((Instant::now(), CpuSample::start(broker_pid)));
        }
        for r in &records {
            consumer.ack(r)?;
            redelivered += u64::from(r.delivery_count.unwrap_or(1) > 1);
            bytes += r.value.as_ref().map_or(0, |v| v.len() as u64);
            consumed += 1;
        }
        last = Instant::now();
    }
    let Some((t_first, cpu)) = first else {
        return Err("no record read".into());
    };
    let seconds = last.duration_since(t_first).as_secs_f64();
    let (client_cpu, broker_cpu) = cpu.finish(seconds);
    let commit_started = Instant::now();
    let mut errors = 0u64;
    for (_, r) in consumer.commit().await? {
        errors += u64::from(r.is_err());
    }
    let commit_ms = commit_started.elapsed().as_secs_f64() * 1000.0;
    consumer.close().await?;
    admin.close().await?;
    let mut j = Json::new();
    j.str("client", "krafka")
        .str("test", "share_consume")
        .str("topic", &topic)
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
        .num("errors", errors as f64, 0)
        .opt("client_cpu_pct", client_cpu, 1)
        .opt("broker_cpu_pct", broker_cpu, 1);
    println!("{}", j.finish());
    Ok(())
}

/// [`VALUES`] buffers of `size` pseudo-random bytes (xorshift64*).
fn random_values(size: usize) -> Vec<bytes::Bytes> {
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
            bytes::Bytes::from(v)
        })
        .collect()
}

/// Nearest-rank on sorted values, as kbench.py's `percentile`.
fn percentile(sorted: &[u32], q: f64) -> Option<u32> {
    let last = sorted.len().checked_sub(1)?;
    Some(sorted[((q * last as f64).round() as usize).min(last)])
}

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
        let pct = |a: Option<u64>, b: Option<u64>| match (a, b) {
            (Some(a), Some(b)) if wall > 0.0 => {
                Some(100.0 * b.saturating_sub(a) as f64 / USER_HZ / wall)
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
    let mut fields = stat.rsplit_once(')')?.1.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

/// A one-line JSON object built field by field.
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
