//! The interop suite's driver for shoal-client (`tests/interop/test_rust_client.py`): one
//! subcommand per step, one fact per stdout line as a JSON object with a `kind`. Keys, values
//! and header values are hex (`null` when absent), so any bytes survive. It uses only the
//! crate's public API, as an application would.
//!
//! ```text
//! client_driver produce BOOTSTRAP TOPIC COUNT CODEC TS0
//!     keys key-I, values rs-CODEC-I (+ 0x00 0xff), headers i=I, n=null, timestamps TS0+I:
//!     {"kind":"ack","key":..,"partition":..,"offset":..,"timestamp":..}
//! client_driver produce-headers BOOTSTRAP TOPIC
//!     one record, key h, headers d=1, x=null, d=2 (a key repeated, as Kafka allows):
//!     {"kind":"ack","key":"h","partition":..,"offset":..,"timestamp":..}
//! client_driver share BOOTSTRAP TOPIC GROUP [--config K=V]... [--max N] [--idle S]
//!     [--timeout S] [--release V,..] [--reject V,..] [--renew V --renew-for S] [--hold]
//!     explicit mode; every record ACCEPTed unless its value (utf-8) is listed: RELEASE and
//!     REJECT apply to a first delivery, RENEW is sent once a second for --renew-for seconds
//!     (no poll meanwhile), then ACCEPT. --hold: after the first records, acknowledge
//!     nothing and sleep until killed. Stops after --max records ACCEPTed or REJECTed, after
//!     --idle s without a record once one came, or fails at --timeout:
//!     {"kind":"rec",...,"dc":N} {"kind":"commit","acks":[[P,O,"accept"],..],"error":null|CODE}
//!     {"kind":"renewed","offset":O,"error":..} {"kind":"held"} {"kind":"done","acked":N}
//! client_driver txn BOOTSTRAP TOPIC TRANSACTIONAL_ID
//!     commit c0-c4, abort a0-a4, commit c5-c9: {"kind":"commit"|"abort","keys":[..]}
//! client_driver fence BOOTSTRAP TOPIC TRANSACTIONAL_ID
//!     producer A opens a transaction with z0-z4; B inits with the same id, A's commit fails,
//!     B commits n0-n4: {"kind":"open"} {"kind":"fenced","step":..,"code":..,"fatal":..}
//!     {"kind":"commit","keys":[..]}
//! client_driver share-offsets BOOTSTRAP GROUP TOPIC PARTITIONS
//!     DescribeShareGroupOffsets: {"kind":"offset","partition":P,"start":S,"lag":L}
//! ```
//!
//! Every run is bounded: `--timeout` (default 60 s) for `share`, 60 s for the others.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use bytes::Bytes;
use shoal_client::admin::{AlterConfigOp, ConfigResource, Mode};
use shoal_client::producer::{Producer, ProducerConfig, ProducerRecord};
use shoal_client::share_consumer::{
    AcknowledgeType, ShareConsumer, ShareConsumerConfig, ShareRecord,
};
use shoal_client::{Admin, ClientConfig, Error};

/// Bounds a step other than `share`.
const STEP_MAX: Duration = Duration::from_secs(60);

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some((cmd, rest)) = args.split_first() else {
        bail!("usage: client_driver produce|share|txn|fence|share-offsets BOOTSTRAP ...");
    };
    match (cmd.as_str(), rest) {
        ("produce", [b, topic, count, codec, ts0]) => {
            bounded(produce(b, topic, count.parse()?, codec, ts0.parse()?)).await
        }
        ("produce-headers", [b, topic]) => bounded(produce_headers(b, topic)).await,
        ("share", [b, topic, group, opts @ ..]) => share(b, topic, group, opts).await,
        ("txn", [b, topic, tid]) => bounded(txn(b, topic, tid)).await,
        ("fence", [b, topic, tid]) => bounded(fence(b, topic, tid)).await,
        ("share-offsets", [b, group, topic, n]) => {
            bounded(share_offsets(b, group, topic, n.parse()?)).await
        }
        _ => bail!("bad arguments: {args:?}"),
    }
}

async fn bounded(f: impl std::future::Future<Output = anyhow::Result<()>>) -> anyhow::Result<()> {
    tokio::time::timeout(STEP_MAX, f)
        .await
        .context("step timed out")?
}

fn q(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn hex(b: Option<&Bytes>) -> String {
    match b {
        None => "null".into(),
        Some(b) => format!(
            "\"{}\"",
            b.iter().map(|x| format!("{x:02x}")).collect::<String>()
        ),
    }
}

fn code_of(r: &Result<(), Error>) -> String {
    match r {
        Ok(()) => "null".into(),
        Err(e) => e.code().0.to_string(),
    }
}

async fn producer(bootstrap: &str, extra: &[(&str, &str)]) -> anyhow::Result<Producer> {
    let mut props = vec![
        ("bootstrap.servers", bootstrap),
        ("client.id", "shoal-interop-driver"),
    ];
    props.extend_from_slice(extra);
    Ok(Producer::new(ProducerConfig::from_properties(props)?).await?)
}

/// `count` keyed records; record I gets timestamp `ts0` + I.
async fn produce(
    bootstrap: &str,
    topic: &str,
    count: u64,
    codec: &str,
    ts0: i64,
) -> anyhow::Result<()> {
    let p = producer(
        bootstrap,
        &[("compression.type", codec), ("linger.ms", "20")],
    )
    .await?;
    let mut deliveries = Vec::new();
    for i in 0..count {
        let mut value = format!("rs-{codec}-{i}").into_bytes();
        value.extend_from_slice(&[0x00, 0xff]);
        let mut record = ProducerRecord::new(topic, value)
            .with_key(format!("key-{i}"))
            .with_header("i", i.to_string())
            .with_timestamp(ts0 + i as i64);
        record.headers.push(("n".into(), None));
        deliveries.push((i, p.send(record).await?));
    }
    for (i, d) in deliveries {
        let m = d.await?;
        println!(
            "{{\"kind\":\"ack\",\"key\":{},\"partition\":{},\"offset\":{},\"timestamp\":{}}}",
            q(&format!("key-{i}")),
            m.partition,
            m.offset,
            m.timestamp
        );
    }
    p.close().await;
    Ok(())
}

async fn produce_headers(bootstrap: &str, topic: &str) -> anyhow::Result<()> {
    let p = producer(bootstrap, &[]).await?;
    let mut record = ProducerRecord::new(topic, "v").with_key("h");
    record.headers = vec![
        ("d".into(), Some(Bytes::from_static(b"1"))),
        ("x".into(), None),
        ("d".into(), Some(Bytes::from_static(b"2"))),
    ];
    let m = p.send(record).await?.await?;
    println!(
        "{{\"kind\":\"ack\",\"key\":\"h\",\"partition\":{},\"offset\":{},\"timestamp\":{}}}",
        m.partition, m.offset, m.timestamp
    );
    p.close().await;
    Ok(())
}

/// `share`'s options.
#[derive(Default)]
struct ShareOpts {
    configs: Vec<(String, String)>,
    max: Option<usize>,
    idle: Option<Duration>,
    timeout: Duration,
    release: BTreeSet<String>,
    reject: BTreeSet<String>,
    renew: Option<String>,
    renew_for: Duration,
    hold: bool,
}

fn share_opts(opts: &[String]) -> anyhow::Result<ShareOpts> {
    let mut o = ShareOpts {
        timeout: Duration::from_secs(60),
        ..Default::default()
    };
    let secs = |v: &str| -> anyhow::Result<Duration> { Ok(Duration::from_secs_f64(v.parse()?)) };
    let set = |v: &str| v.split(',').map(str::to_owned).collect::<BTreeSet<_>>();
    let mut it = opts.iter();
    while let Some(flag) = it.next() {
        if flag == "--hold" {
            o.hold = true;
            continue;
        }
        let v = it.next().with_context(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--config" => {
                let (k, val) = v.split_once('=').context("--config K=V")?;
                o.configs.push((k.into(), val.into()));
            }
            "--max" => o.max = Some(v.parse()?),
            "--idle" => o.idle = Some(secs(v)?),
            "--timeout" => o.timeout = secs(v)?,
            "--release" => o.release = set(v),
            "--reject" => o.reject = set(v),
            "--renew" => o.renew = Some(v.clone()),
            "--renew-for" => o.renew_for = secs(v)?,
            _ => bail!("unknown option {flag}"),
        }
    }
    Ok(o)
}

async fn set_group_configs(
    bootstrap: &str,
    group: &str,
    configs: &[(String, String)],
) -> anyhow::Result<()> {
    if configs.is_empty() {
        return Ok(());
    }
    let admin = Admin::connect(ClientConfig::from_properties([(
        "bootstrap.servers",
        bootstrap,
    )])?)
    .await?;
    let ops = configs
        .iter()
        .map(|(k, v)| AlterConfigOp::Set {
            name: k.clone(),
            value: v.clone(),
        })
        .collect();
    let set = admin
        .incremental_alter_configs(&[(ConfigResource::group(group), ops)], Mode::Apply)
        .await;
    admin.close().await;
    for (_, result) in set? {
        result.context("group configs")?;
    }
    Ok(())
}

fn print_record(r: &ShareRecord) {
    let headers: Vec<String> = r
        .headers
        .iter()
        .map(|(k, v)| format!("[{},{}]", q(k), hex(v.as_ref())))
        .collect();
    println!(
        "{{\"kind\":\"rec\",\"topic\":{},\"partition\":{},\"offset\":{},\"key\":{},\"value\":{},\
         \"headers\":[{}],\"timestamp\":{},\"dc\":{},\"lock_ms\":{}}}",
        q(&r.topic),
        r.partition,
        r.offset,
        hex(r.key.as_ref()),
        hex(r.value.as_ref()),
        headers.join(","),
        r.timestamp,
        r.delivery_count,
        r.acquisition_lock_timeout.as_millis()
    );
}

fn type_name(t: AcknowledgeType) -> &'static str {
    match t {
        AcknowledgeType::Gap => "gap",
        AcknowledgeType::Accept => "accept",
        AcknowledgeType::Release => "release",
        AcknowledgeType::Reject => "reject",
        AcknowledgeType::Renew => "renew",
    }
}

async fn share(bootstrap: &str, topic: &str, group: &str, opts: &[String]) -> anyhow::Result<()> {
    let o = share_opts(opts)?;
    set_group_configs(bootstrap, group, &o.configs).await?;
    let config = ShareConsumerConfig::from_properties([
        ("bootstrap.servers", bootstrap),
        ("client.id", "shoal-interop-driver"),
        ("group.id", group),
        ("share.acknowledgement.mode", "explicit"),
    ])?;
    let mut consumer = ShareConsumer::new(config).await?;
    consumer.subscribe([topic.to_owned()]);
    let started = Instant::now();
    let mut last: Option<Instant> = None;
    let mut acked = 0usize;
    while o.max.is_none_or(|m| acked < m) {
        if started.elapsed() > o.timeout {
            bail!("timed out after {:?} with {acked} acknowledged", o.timeout);
        }
        if let (Some(idle), Some(l)) = (o.idle, last) {
            if l.elapsed() > idle {
                break;
            }
        }
        let records = consumer.poll(Duration::from_millis(500)).await?;
        if records.is_empty() {
            continue;
        }
        last = Some(Instant::now());
        records.iter().for_each(print_record);
        if o.hold {
            println!("{{\"kind\":\"held\"}}");
            tokio::time::sleep(Duration::from_secs(3600)).await;
        }
        let mut acks = Vec::new();
        let mut renewing = None;
        for r in &records {
            let value = String::from_utf8_lossy(r.value.as_deref().unwrap_or_default());
            let first = r.delivery_count == 1;
            let t = if o.renew.as_deref() == Some(&*value) {
                renewing = Some(r.clone());
                AcknowledgeType::Renew
            } else if first && o.release.contains(&*value) {
                AcknowledgeType::Release
            } else if first && o.reject.contains(&*value) {
                AcknowledgeType::Reject
            } else {
                AcknowledgeType::Accept
            };
            consumer.acknowledge(r, t)?;
            acks.push(format!(
                "[{},{},{}]",
                r.partition,
                r.offset,
                q(type_name(t))
            ));
            acked += usize::from(matches!(
                t,
                AcknowledgeType::Accept | AcknowledgeType::Reject
            ));
        }
        let result = consumer.commit_sync().await;
        println!(
            "{{\"kind\":\"commit\",\"acks\":[{}],\"error\":{}}}",
            acks.join(","),
            code_of(&result)
        );
        result?;
        if let Some(r) = renewing {
            renew(&mut consumer, &r, o.renew_for).await?;
            acked += 1;
        }
    }
    consumer.close().await;
    println!("{{\"kind\":\"done\",\"acked\":{acked}}}");
    Ok(())
}

/// Holds `r` (already renewed once) by renewing it once a second for `hold`, then accepts it.
async fn renew(
    consumer: &mut ShareConsumer,
    r: &ShareRecord,
    hold: Duration,
) -> anyhow::Result<()> {
    let until = Instant::now() + hold;
    while Instant::now() < until {
        tokio::time::sleep(Duration::from_secs(1)).await;
        consumer.acknowledge(r, AcknowledgeType::Renew)?;
        let result = consumer.commit_sync().await;
        println!(
            "{{\"kind\":\"renewed\",\"offset\":{},\"error\":{}}}",
            r.offset,
            code_of(&result)
        );
        result?;
    }
    consumer.acknowledge(r, AcknowledgeType::Accept)?;
    let result = consumer.commit_sync().await;
    println!(
        "{{\"kind\":\"commit\",\"acks\":[[{},{},\"accept\"]],\"error\":{}}}",
        r.partition,
        r.offset,
        code_of(&result)
    );
    Ok(result?)
}

/// Sends `keys` (value `value-KEY`) in one transaction and commits or aborts it.
async fn transaction(
    p: &Producer,
    topic: &str,
    keys: &[String],
    commit: bool,
) -> anyhow::Result<()> {
    p.begin_transaction()?;
    let mut deliveries = Vec::new();
    for k in keys {
        let record = ProducerRecord::new(topic, format!("value-{k}")).with_key(k.clone());
        deliveries.push(p.send(record).await?);
    }
    if commit {
        p.commit_transaction().await?;
    } else {
        p.flush().await?;
        p.abort_transaction().await?;
    }
    for d in deliveries {
        let result = d.await;
        if commit {
            result?;
        }
    }
    let keys: Vec<String> = keys.iter().map(|k| q(k)).collect();
    let kind = if commit { "commit" } else { "abort" };
    println!("{{\"kind\":\"{kind}\",\"keys\":[{}]}}", keys.join(","));
    Ok(())
}

fn keys(prefix: &str, range: std::ops::Range<usize>) -> Vec<String> {
    range.map(|i| format!("{prefix}{i}")).collect()
}

async fn txn(bootstrap: &str, topic: &str, tid: &str) -> anyhow::Result<()> {
    let p = producer(bootstrap, &[("transactional.id", tid)]).await?;
    p.init_transactions().await?;
    transaction(&p, topic, &keys("c", 0..5), true).await?;
    transaction(&p, topic, &keys("a", 0..5), false).await?;
    transaction(&p, topic, &keys("c", 5..10), true).await?;
    p.close().await;
    Ok(())
}

/// `[producer id, epoch]`, or null before InitProducerId.
fn epoch(p: &Producer) -> String {
    p.producer_id_epoch()
        .map_or("null".into(), |(id, e)| format!("[{id},{e}]"))
}

async fn fence(bootstrap: &str, topic: &str, tid: &str) -> anyhow::Result<()> {
    let a = producer(bootstrap, &[("transactional.id", tid)]).await?;
    a.init_transactions().await?;
    a.begin_transaction()?;
    for k in keys("z", 0..5) {
        let record = ProducerRecord::new(topic, format!("value-{k}")).with_key(k);
        a.send(record).await?.await?;
    }
    println!("{{\"kind\":\"open\",\"epoch\":{}}}", epoch(&a));

    let b = producer(bootstrap, &[("transactional.id", tid)]).await?;
    b.init_transactions().await?;
    println!("{{\"kind\":\"init\",\"epoch\":{}}}", epoch(&b));

    let report = |step: &str, r: Result<(), Error>| match r {
        Ok(()) => println!("{{\"kind\":\"fenced\",\"step\":{},\"code\":null}}", q(step)),
        Err(e) => println!(
            "{{\"kind\":\"fenced\",\"step\":{},\"code\":{},\"fatal\":{},\"message\":{}}}",
            q(step),
            e.code().0,
            e.is_fatal(),
            q(&e.to_string())
        ),
    };
    report("commit", a.commit_transaction().await);
    report("begin", a.begin_transaction());
    a.close().await;

    transaction(&b, topic, &keys("n", 0..5), true).await?;
    b.close().await;
    Ok(())
}

async fn share_offsets(bootstrap: &str, group: &str, topic: &str, n: i32) -> anyhow::Result<()> {
    let admin = Admin::connect(ClientConfig::from_properties([(
        "bootstrap.servers",
        bootstrap,
    )])?)
    .await?;
    let asked: Vec<(String, i32)> = (0..n).map(|p| (topic.to_owned(), p)).collect();
    let answers = admin
        .describe_share_group_offsets(group, Some(&asked))
        .await;
    admin.close().await;
    let mut out = BTreeMap::new();
    for ((_, p), r) in answers? {
        out.insert(p, r?);
    }
    for (p, o) in out {
        println!(
            "{{\"kind\":\"offset\",\"partition\":{p},\"start\":{},\"lag\":{}}}",
            o.start_offset, o.lag
        );
    }
    Ok(())
}
