//! krafka (0.28, a pure-Rust Kafka client) driven against a broker, one scenario per run.
//!
//! The interop suite (`tests/interop/test_krafka.py`) starts the broker (Shoal, or Apache Kafka
//! with `INTEROP_TARGET=kafka`), runs this binary once per step and checks what it prints:
//! one fact per line, space-separated, so a failing assertion shows the whole exchange.
//! Nothing here decides pass or fail beyond "the call returned an error": the expectations live in
//! the pytest file, next to the ones for confluent-kafka and kafka-python.
//!
//! ```text
//! shoal-krafka-interop BOOTSTRAP produce TOPIC COUNT CODEC      -> ack P OFFSET KEY
//! shoal-krafka-interop BOOTSTRAP consume TOPIC GROUP COUNT [--isolation committed|uncommitted]
//!                                        [--max-poll N] [--protocol classic|consumer]
//!                                                                -> rec P OFFSET KEY VALUE HEADER
//! shoal-krafka-interop BOOTSTRAP txn TOPIC TXID                  -> commit|abort KEY@P:OFFSET...
//! shoal-krafka-interop BOOTSTRAP admin-topics TOPIC              -> one line per admin answer
//! shoal-krafka-interop BOOTSTRAP admin-groups GROUP TOPIC        -> one line per admin answer
//! shoal-krafka-interop BOOTSTRAP share TOPIC GROUP COUNT          -> rec P OFFSET KEY DELIVERY_COUNT
//! shoal-krafka-interop BOOTSTRAP admin-offsets TOPIC PARTITIONS   -> one line per admin answer
//! shoal-krafka-interop BOOTSTRAP admin-txn TOPIC TXID             -> one line per admin answer
//! shoal-krafka-interop BOOTSTRAP copy IN OUT GROUP TXID COUNT     -> aborted|committed N
//! shoal-krafka-interop BOOTSTRAP bench-produce --topic T ...       -> one JSON line (bench.rs)
//! shoal-krafka-interop BOOTSTRAP bench-share-consume --topic T --group G --records N
//!                                                                -> one JSON line (bench.rs)
//! ```
//!
//! Every run is bounded (`--deadline SECS`, default 60): a client that hangs fails the step.

use std::collections::{BTreeMap, HashMap};
use std::error::Error;
use std::time::Duration;

use krafka::admin::{
    AdminClient, ConfigOp, ConfigResource, ConsumerGroupLagOptions, CreatePartitionsOptions,
    CreateTopicsOptions, DeleteConsumerGroupsOptions, DeleteTopicsOptions, DescribeClusterOptions,
    DescribeConfigsOptions, DescribeConsumerGroupsOptions, DescribeTopicsOptions,
    IncrementalAlterConfigsOptions, ListConsumerGroupOffsetsOptions, ListConsumerGroupsOptions,
    ListTopicsOptions, NewTopic,
};
use krafka::admin::{
    DeleteRecordsOptions, DescribeProducersOptions, DescribeShareGroupOffsetsOptions,
    DescribeTransactionsOptions, ListOffsetsOptions, ListTransactionsOptions, OffsetSpec,
    TopicPartition,
};
use krafka::consumer::{AutoOffsetReset, GroupProtocol, IsolationLevel};
use krafka::producer::TopicPartitionOffset;
use krafka::share_consumer::AcknowledgementMode;
use krafka::{Compression, Kafka, KrafkaError, Record};

mod bench;

type BoxResult<T> = Result<T, Box<dyn Error>>;

struct Args {
    positional: Vec<String>,
    options: HashMap<String, String>,
}

impl Args {
    fn parse() -> BoxResult<Self> {
        let mut positional = Vec::new();
        let mut options = HashMap::new();
        let mut it = std::env::args().skip(1);
        while let Some(arg) = it.next() {
            if let Some(name) = arg.strip_prefix("--") {
                let value = it.next().ok_or_else(|| format!("--{name} needs a value"))?;
                options.insert(name.to_string(), value);
            } else {
                positional.push(arg);
            }
        }
        Ok(Self {
            positional,
            options,
        })
    }

    fn pos(&self, index: usize, what: &str) -> BoxResult<&str> {
        self.positional
            .get(index)
            .map(String::as_str)
            .ok_or_else(|| format!("missing argument {index}: {what}").into())
    }

    fn opt<T: std::str::FromStr>(&self, name: &str, default: T) -> BoxResult<T> {
        match self.options.get(name) {
            None => Ok(default),
            Some(v) => v
                .parse()
                .map_err(|_| format!("--{name}: cannot parse {v:?}").into()),
        }
    }
}

/// The Kafka error code of a failed call, or `other` with the message.
fn code(e: &KrafkaError) -> String {
    match e {
        KrafkaError::Broker { code, .. } => code.to_i16().to_string(),
        other => format!("other:{}", other.to_string().replace(' ', "_")),
    }
}

fn text(b: &Option<bytes::Bytes>) -> String {
    match b {
        None => "-".to_string(),
        Some(b) => String::from_utf8_lossy(b).into_owned(),
    }
}

fn codec(name: &str) -> BoxResult<Compression> {
    Ok(match name {
        "none" => Compression::None,
        "gzip" => Compression::Gzip,
        "snappy" => Compression::Snappy,
        "lz4" => Compression::Lz4,
        "zstd" => Compression::Zstd,
        other => return Err(format!("unknown codec {other}").into()),
    })
}

/// COUNT records `k{i}` -> `v{i}` with header `i` = `{i}`, pipelined (so batches hold several
/// records and compression applies to real batches), default partitioner (murmur2 on the key).
async fn produce(kafka: &Kafka, args: &Args) -> BoxResult<()> {
    let topic = args.pos(2, "topic")?;
    let count: usize = args.pos(3, "count")?.parse()?;
    let producer = kafka
        .producer()
        .compression(codec(args.pos(4, "codec")?)?)
        .linger(Duration::from_millis(20))
        .build()
        .await?;
    let mut handles = Vec::with_capacity(count);
    for i in 0..count {
        let record = Record::new(topic, format!("v{i}"))
            .key(format!("k{i}"))
            .header("i", i.to_string());
        handles.push((i, producer.enqueue(record).await?));
    }
    for (i, handle) in handles {
        let meta = handle.await?;
        println!("ack {} {} k{i}", meta.partition, meta.offset);
    }
    producer.close().await?;
    Ok(())
}

/// Subscribe in GROUP (classic protocol, earliest, no auto-commit) and read until at least COUNT
/// records; then commit the positions, print them and leave the group.
async fn consume(kafka: &Kafka, args: &Args) -> BoxResult<()> {
    let topic = args.pos(2, "topic")?;
    let group = args.pos(3, "group")?;
    let count: usize = args.pos(4, "count")?.parse()?;
    let isolation = match args.opt("isolation", "uncommitted".to_string())?.as_str() {
        "committed" => IsolationLevel::ReadCommitted,
        "uncommitted" => IsolationLevel::ReadUncommitted,
        other => return Err(format!("unknown isolation {other}").into()),
    };
    let consumer = kafka
        .consumer(group)
        .auto_offset_reset(AutoOffsetReset::Earliest)
        .enable_auto_commit(false)
        .isolation_level(isolation)
        .max_poll_records(args.opt("max-poll", 500)?)
        .group_protocol(
            match args.opt("protocol", "classic".to_string())?.as_str() {
                "classic" => GroupProtocol::Classic,
                "consumer" => GroupProtocol::Consumer,
                other => return Err(format!("unknown group protocol {other}").into()),
            },
        )
        .build()
        .await?;
    consumer.subscribe([topic]).await?;
    let mut seen = 0;
    while seen < count {
        for r in consumer.poll(Duration::from_secs(1)).await? {
            let header = r
                .headers
                .iter()
                .map(|(k, v)| format!("{k}={}", text(v)))
                .collect::<Vec<_>>()
                .join(",");
            println!(
                "rec {} {} {} {} {}",
                r.partition,
                r.offset,
                text(&r.key),
                text(&r.value),
                if header.is_empty() { "-" } else { &header }
            );
            seen += 1;
        }
    }
    consumer.commit().await?;
    let mut positions = BTreeMap::new();
    for (t, partitions) in consumer.assignment().await {
        for p in partitions {
            if let Some(pos) = consumer.position(&t, p).await {
                positions.insert(p, pos);
            }
        }
    }
    for (p, pos) in positions {
        println!("position {p} {pos}");
    }
    consumer.close().await?;
    Ok(())
}

/// One transactional producer, three transactions on TOPIC: c0..c4 committed, a0..a4 aborted,
/// c5..c9 committed.
async fn txn(kafka: &Kafka, args: &Args) -> BoxResult<()> {
    let topic = args.pos(2, "topic")?;
    let txid = args.pos(3, "transactional id")?;
    let producer = kafka.producer().build_transactional(txid).await?;
    for (prefix, range, commit) in [("c", 0..5, true), ("a", 0..5, false), ("c", 5..10, true)] {
        producer.begin()?;
        let mut keys = Vec::new();
        for i in range {
            let key = format!("{prefix}{i}");
            let meta = producer
                .send(Record::new(topic, format!("value-{key}")).key(key.clone()))
                .await?;
            keys.push(format!("{key}@{}:{}", meta.partition, meta.offset));
        }
        if commit {
            producer.commit().await?;
            println!("commit {}", keys.join(" "));
        } else {
            producer.abort().await?;
            println!("abort {}", keys.join(" "));
        }
    }
    producer.close().await?;
    Ok(())
}

fn print_result<E: std::borrow::Borrow<KrafkaError>>(what: &str, name: &str, r: Result<(), E>) {
    match r {
        Ok(()) => println!("{what} {name} ok"),
        Err(e) => println!("{what} {name} err {}", code(e.borrow())),
    }
}

async fn describe_topic_configs(admin: &AdminClient, topic: &str, keys: &[&str]) -> BoxResult<()> {
    let res = admin
        .describe_configs(
            [ConfigResource::topic(topic)],
            DescribeConfigsOptions::default(),
        )
        .await?;
    for (_, entries) in res {
        for e in entries? {
            if keys.contains(&e.name.as_str()) {
                println!(
                    "config {} {} source={}",
                    e.name,
                    e.value.as_deref().unwrap_or("-"),
                    e.config_source
                );
            }
        }
    }
    Ok(())
}

/// Kafka's brokers learn a new topic or partition from the metadata log a moment after the
/// controller answered: wait (within the deadline) until `topic` has `count` partitions, each
/// with a leader, before describing it.
async fn wait_partitions(admin: &AdminClient, topic: &str, count: usize) -> BoxResult<()> {
    loop {
        let mut ready = false;
        for (_, d) in admin
            .describe_topics([topic], DescribeTopicsOptions::default())
            .await?
        {
            if let Ok(d) = d {
                ready = d.partitions.len() == count
                    && d.partitions
                        .iter()
                        .all(|p| p.leader.is_some_and(|l| l >= 0));
            }
        }
        if ready {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Topics and configs: create (and create again), list, describe, describe/alter configs,
/// create partitions, broker configs, delete, describe after delete.
async fn admin_topics(kafka: &Kafka, args: &Args) -> BoxResult<()> {
    let topic = args.pos(2, "topic")?;
    let admin = kafka.admin();

    let cluster = admin
        .describe_cluster(DescribeClusterOptions::default())
        .await?;
    println!(
        "cluster brokers={} controller={}",
        cluster.brokers.len(),
        cluster.controller_id
    );
    let broker_id = cluster.brokers.first().map(|b| b.id).ok_or("no broker")?;

    for attempt in ["first", "again"] {
        let new = NewTopic::new(topic, 3, 1)?.with_config("retention.ms", "3600000");
        for (name, r) in admin
            .create_topics([new], CreateTopicsOptions::default())
            .await?
        {
            print_result(&format!("create-{attempt}"), &name, r);
        }
    }
    let bad = NewTopic::new(format!("{topic}-badconf"), 1, 1)?.with_config("no.such.key", "1");
    for (name, r) in admin
        .create_topics([bad], CreateTopicsOptions::default())
        .await?
    {
        print_result("create-badconf", &name, r);
    }

    wait_partitions(&admin, topic, 3).await?;
    let listed = admin.list_topics(ListTopicsOptions::default()).await?;
    println!("listed {}", listed.iter().any(|t| t == topic));

    for (name, d) in admin
        .describe_topics([topic], DescribeTopicsOptions::default())
        .await?
    {
        let d = d?;
        let leaders: Vec<String> = d
            .partitions
            .iter()
            .map(|p| format!("{}:{}", p.partition, p.leader.unwrap_or(-1)))
            .collect();
        println!(
            "describe {name} partitions={} internal={} leaders={}",
            d.partitions.len(),
            d.is_internal,
            leaders.join(",")
        );
    }

    let keys = ["retention.ms", "cleanup.policy", "max.message.bytes"];
    describe_topic_configs(&admin, topic, &keys).await?;
    for (_, r) in admin
        .incremental_alter_configs(
            [(
                ConfigResource::topic(topic),
                vec![
                    ConfigOp::set("cleanup.policy", "compact"),
                    ConfigOp::delete("retention.ms"),
                ],
            )],
            IncrementalAlterConfigsOptions::default(),
        )
        .await?
    {
        print_result("alter", topic, r);
    }
    // Kafka applies an alteration on the controller and its brokers learn it from the metadata
    // log a moment later, so a describe right after the alter may still show the old value: wait
    // (within the deadline) until the broker reports the new cleanup.policy.
    loop {
        let res = admin
            .describe_configs(
                [ConfigResource::topic(topic)],
                DescribeConfigsOptions::default().config_names(vec!["cleanup.policy".into()]),
            )
            .await?;
        let mut applied = false;
        for (_, entries) in res {
            applied |= entries?
                .iter()
                .any(|e| e.name == "cleanup.policy" && e.value.as_deref() == Some("compact"));
        }
        if applied {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    println!("after-alter");
    describe_topic_configs(&admin, topic, &keys).await?;
    for (_, r) in admin
        .incremental_alter_configs(
            [(
                ConfigResource::topic(topic),
                vec![ConfigOp::set("no.such.key", "1")],
            )],
            IncrementalAlterConfigsOptions::default(),
        )
        .await?
    {
        print_result("alter-badkey", topic, r);
    }

    let res = admin
        .describe_configs(
            [ConfigResource::broker(broker_id)],
            DescribeConfigsOptions::default().config_names(vec!["num.partitions".to_string()]),
        )
        .await?;
    for (_, entries) in res {
        for e in entries? {
            println!(
                "broker-config {} {}",
                e.name,
                e.value.as_deref().unwrap_or("-")
            );
        }
    }

    for (name, r) in admin
        .create_partitions([(topic, 5)], CreatePartitionsOptions::default())
        .await?
    {
        print_result("create-partitions", &name, r);
    }
    wait_partitions(&admin, topic, 5).await?;
    for (name, d) in admin
        .describe_topics([topic], DescribeTopicsOptions::default())
        .await?
    {
        println!(
            "describe-after-grow {name} partitions={}",
            d?.partitions.len()
        );
    }

    for (name, r) in admin
        .delete_topics([topic], DeleteTopicsOptions::default())
        .await?
    {
        print_result("delete", &name, r);
    }
    for (name, r) in admin
        .delete_topics([topic], DeleteTopicsOptions::default())
        .await?
    {
        print_result("delete-again", &name, r);
    }
    admin.close().await?;
    Ok(())
}

/// Consumer groups: list, describe, committed offsets, lag, delete.
async fn admin_groups(kafka: &Kafka, args: &Args) -> BoxResult<()> {
    let group = args.pos(2, "group")?;
    let topic = args.pos(3, "topic")?;
    let admin = kafka.admin();

    let mut listed = false;
    for (_, r) in admin
        .list_consumer_groups(ListConsumerGroupsOptions::default())
        .await?
    {
        for g in r? {
            if g.group_id == group {
                listed = true;
                println!(
                    "listed {} protocol={} state={}",
                    g.group_id,
                    g.protocol_type,
                    g.state.as_deref().unwrap_or("-")
                );
            }
        }
    }
    if !listed {
        println!("listed-missing {group}");
    }

    for (name, d) in admin
        .describe_consumer_groups([group], DescribeConsumerGroupsOptions::default())
        .await?
    {
        let d = d?;
        println!(
            "describe {name} state={} members={} protocol={}",
            d.state,
            d.members.len(),
            d.protocol_type.as_deref().unwrap_or("-")
        );
    }

    let offsets = admin
        .list_consumer_group_offsets(group, ListConsumerGroupOffsetsOptions::default())
        .await?;
    let mut sorted: Vec<_> = offsets
        .into_iter()
        .filter(|(tp, _)| tp.topic == topic)
        .collect();
    sorted.sort_by_key(|(tp, _)| tp.partition);
    for (tp, o) in sorted {
        let o = o?;
        println!("offset {} {}", tp.partition, o.offset.unwrap_or(-1));
    }

    let lag = admin
        .consumer_group_lag(group, ConsumerGroupLagOptions::default())
        .await?;
    let mut sorted: Vec<_> = lag
        .into_iter()
        .filter(|(tp, _)| tp.topic == topic)
        .collect();
    sorted.sort_by_key(|(tp, _)| tp.partition);
    for (tp, l) in sorted {
        let l = l?;
        println!(
            "lag {} committed={} end={} lag={}",
            tp.partition,
            l.committed_offset.unwrap_or(-1),
            l.end_offset,
            l.lag.unwrap_or(-1)
        );
    }

    for (name, r) in admin
        .delete_consumer_groups([group], DeleteConsumerGroupsOptions::default())
        .await?
    {
        print_result("delete", &name, r);
    }
    for (name, r) in admin
        .delete_consumer_groups([group], DeleteConsumerGroupsOptions::default())
        .await?
    {
        print_result("delete-again", &name, r);
    }
    admin.close().await?;
    Ok(())
}

/// A share group (KIP-932) read in explicit mode: the group is set to start at the earliest
/// offset, the consumer reads COUNT records, accepts the even offsets and releases the odd ones,
/// commits, reads the released ones again (delivery count 2), accepts them, commits and closes;
/// then the admin client describes the group's share-partition start offsets.
async fn share(kafka: &Kafka, args: &Args) -> BoxResult<()> {
    let topic = args.pos(2, "topic")?;
    let group = args.pos(3, "group")?;
    let count: usize = args.pos(4, "count")?.parse()?;
    let admin = kafka.admin();
    for (_, r) in admin
        .incremental_alter_configs(
            [(
                ConfigResource::group(group),
                vec![ConfigOp::set("share.auto.offset.reset", "earliest")],
            )],
            IncrementalAlterConfigsOptions::default(),
        )
        .await?
    {
        r?;
    }
    let consumer = kafka
        .share_consumer(group)
        .acknowledgement_mode(AcknowledgementMode::Explicit)
        .build()
        .await?;
    consumer.subscribe([topic]).await?;
    let mut first = 0;
    let mut released = 0;
    let mut redelivered = 0;
    while first < count || redelivered < released {
        let records = consumer.poll(Duration::from_secs(1)).await?;
        for r in &records {
            let dc = r.delivery_count.unwrap_or(-1);
            println!("rec {} {} {} {dc}", r.partition, r.offset, text(&r.key));
            if dc <= 1 {
                first += 1;
                if r.offset % 2 == 1 {
                    consumer.release(r)?;
                    released += 1;
                    continue;
                }
            } else {
                redelivered += 1;
            }
            consumer.ack(r)?;
        }
        if !records.is_empty() {
            let mut results: Vec<_> = consumer.commit().await?.into_iter().collect();
            results.sort_by_key(|(tp, _)| tp.partition);
            for (tp, r) in results {
                print_result("commit", &tp.partition.to_string(), r);
            }
        }
    }
    consumer.close().await?;
    let mut offsets: Vec<_> = admin
        .describe_share_group_offsets(group, DescribeShareGroupOffsetsOptions::default())
        .await?
        .into_iter()
        .filter(|(tp, _)| tp.topic == topic)
        .collect();
    offsets.sort_by_key(|(tp, _)| tp.partition);
    for (tp, o) in offsets {
        let o = o?;
        println!(
            "share-offset {} start={} lag={}",
            tp.partition,
            o.start_offset,
            o.lag.unwrap_or(-1)
        );
    }
    admin.close().await?;
    Ok(())
}

/// ListOffsets (earliest, latest, max timestamp), DeleteRecords, ListOffsets again.
async fn admin_offsets(kafka: &Kafka, args: &Args) -> BoxResult<()> {
    let topic = args.pos(2, "topic")?;
    let partitions: i32 = args.pos(3, "partitions")?.parse()?;
    let admin = kafka.admin();
    let tps: Vec<TopicPartition> = (0..partitions)
        .map(|p| TopicPartition::new(topic, p))
        .collect();
    let list = |label: &'static str, spec: OffsetSpec| {
        let admin = &admin;
        let tps = tps.clone();
        async move {
            let res = admin
                .list_offsets(
                    tps.into_iter().map(|tp| (tp, spec)),
                    ListOffsetsOptions::default(),
                )
                .await?;
            let mut res: Vec<_> = res.into_iter().collect();
            res.sort_by_key(|(tp, _)| tp.partition);
            for (tp, o) in res {
                match o {
                    Ok(o) => println!(
                        "{label} {} {} ts={}",
                        tp.partition,
                        o.offset,
                        o.timestamp.unwrap_or(-1)
                    ),
                    Err(e) => println!("{label} {} err {}", tp.partition, code(&e)),
                }
            }
            BoxResult::Ok(())
        }
    };
    list("earliest", OffsetSpec::Earliest).await?;
    list("latest", OffsetSpec::Latest).await?;
    list("max-timestamp", OffsetSpec::MaxTimestamp).await?;
    let mut res: Vec<_> = admin
        .delete_records(
            tps.iter().map(|tp| (tp.clone(), 2)),
            DeleteRecordsOptions::default(),
        )
        .await?
        .into_iter()
        .collect();
    res.sort_by_key(|(tp, _)| tp.partition);
    for (tp, r) in res {
        match r {
            Ok(low) => println!("delete-records {} low={low}", tp.partition),
            Err(e) => println!("delete-records {} err {}", tp.partition, code(&e)),
        }
    }
    list("earliest-after-delete", OffsetSpec::Earliest).await?;
    admin.close().await?;
    Ok(())
}

/// A transaction left open by a transactional producer, seen through ListTransactions,
/// DescribeTransactions and DescribeProducers; then committed and described again.
async fn admin_txn(kafka: &Kafka, args: &Args) -> BoxResult<()> {
    let topic = args.pos(2, "topic")?;
    let txid = args.pos(3, "transactional id")?;
    let admin = kafka.admin();
    let producer = kafka.producer().build_transactional(txid).await?;
    producer.begin()?;
    let meta = producer
        .send(Record::new(topic, "open").key("open"))
        .await?;
    println!("sent {} {}", meta.partition, meta.offset);
    let describe = |label: &'static str| {
        let admin = &admin;
        async move {
            for (_, listing) in admin
                .list_transactions(ListTransactionsOptions::default())
                .await?
            {
                for t in listing? {
                    if t.transactional_id == txid {
                        println!("{label}-listed {} {}", t.transactional_id, t.state);
                    }
                }
            }
            for (id, d) in admin
                .describe_transactions([txid], DescribeTransactionsOptions::default())
                .await?
            {
                let d = d?;
                let parts: Vec<String> = d
                    .partitions
                    .iter()
                    .map(|tp| format!("{}-{}", tp.topic, tp.partition))
                    .collect();
                println!(
                    "{label}-described {id} {} partitions={}",
                    d.state,
                    if parts.is_empty() {
                        "-".to_string()
                    } else {
                        parts.join(",")
                    }
                );
            }
            for (tp, states) in admin
                .describe_producers(
                    [TopicPartition::new(topic, 0)],
                    DescribeProducersOptions::default(),
                )
                .await?
            {
                for st in states? {
                    println!(
                        "{label}-producer {} start={}",
                        tp.partition,
                        st.current_transaction_start_offset.unwrap_or(-1)
                    );
                }
            }
            BoxResult::Ok(())
        }
    };
    describe("open").await?;
    producer.commit().await?;
    // The commit returns once the coordinator has decided (PrepareCommit); the markers are
    // written after that, as in Kafka, so wait for the transaction to complete.
    loop {
        let mut states = Vec::new();
        for (_, d) in admin
            .describe_transactions([txid], DescribeTransactionsOptions::default())
            .await?
        {
            states.push(d?.state);
        }
        if states.iter().all(|s| s != "PrepareCommit") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    describe("committed").await?;
    producer.close().await?;
    admin.close().await?;
    Ok(())
}

/// Consume-transform-produce, exactly once: a read_committed group member on IN and a
/// transactional producer copy COUNT records to OUT (value upper-cased, key kept), each batch in
/// one transaction with the consumer's offsets (`send_offsets`). The first batch's transaction is
/// aborted on purpose and the consumer seeks back to re-read it.
async fn copy(kafka: &Kafka, args: &Args) -> BoxResult<()> {
    let input = args.pos(2, "input topic")?;
    let output = args.pos(3, "output topic")?;
    let group = args.pos(4, "group")?;
    let txid = args.pos(5, "transactional id")?;
    let count: usize = args.pos(6, "count")?.parse()?;
    let consumer = kafka
        .consumer(group)
        .auto_offset_reset(AutoOffsetReset::Earliest)
        .enable_auto_commit(false)
        .isolation_level(IsolationLevel::ReadCommitted)
        .max_poll_records(7)
        .build()
        .await?;
    let producer = kafka.producer().build_transactional(txid).await?;
    consumer.subscribe([input]).await?;
    let mut copied = 0;
    let mut aborted_one = false;
    while copied < count {
        let records = consumer.poll(Duration::from_secs(1)).await?;
        if records.is_empty() {
            continue;
        }
        producer.begin()?;
        let mut next: BTreeMap<i32, i64> = BTreeMap::new();
        let mut first: BTreeMap<i32, i64> = BTreeMap::new();
        for r in &records {
            let value = r.value.as_deref().unwrap_or_default().to_ascii_uppercase();
            let mut out = Record::new(output, value);
            out.key = r.key.clone();
            let _ack = producer.send(out).await?;
            next.insert(r.partition, r.offset + 1);
            first.entry(r.partition).or_insert(r.offset);
        }
        let offsets: Vec<TopicPartitionOffset> = next
            .iter()
            .map(|(p, o)| TopicPartitionOffset::new(input, *p, *o))
            .collect();
        let metadata = consumer
            .group_metadata()
            .await
            .ok_or("not a group member")?;
        producer.send_offsets(&offsets, &metadata).await?;
        if aborted_one {
            producer.commit().await?;
            copied += records.len();
            println!("committed {}", records.len());
        } else {
            producer.abort().await?;
            aborted_one = true;
            println!("aborted {}", records.len());
            for (p, o) in first {
                consumer.seek(input, p, o).await?;
            }
        }
    }
    producer.close().await?;
    consumer.close().await?;
    Ok(())
}

async fn run(args: &Args) -> BoxResult<()> {
    let bootstrap = args.pos(0, "bootstrap")?;
    let kafka = Kafka::builder(bootstrap)
        .client_id("shoal-krafka-interop")
        .connect()
        .await?;
    match args.pos(1, "scenario")? {
        "produce" => produce(&kafka, args).await,
        "consume" => consume(&kafka, args).await,
        "txn" => txn(&kafka, args).await,
        "admin-topics" => admin_topics(&kafka, args).await,
        "admin-groups" => admin_groups(&kafka, args).await,
        "share" => share(&kafka, args).await,
        "admin-offsets" => admin_offsets(&kafka, args).await,
        "admin-txn" => admin_txn(&kafka, args).await,
        "copy" => copy(&kafka, args).await,
        "bench-produce" => bench::produce(&kafka, args).await,
        "bench-share-consume" => bench::share_consume(&kafka, args).await,
        other => Err(format!("unknown scenario {other}").into()),
    }
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    // krafka's own log on stderr, off unless KRAFKA_LOG is set (e.g. `krafka=debug`).
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("KRAFKA_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("off")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .init();
    let result = match Args::parse() {
        Err(e) => Err(e),
        Ok(args) => match args.opt("deadline", 60u64) {
            Err(e) => Err(e),
            Ok(secs) => match tokio::time::timeout(Duration::from_secs(secs), run(&args)).await {
                Ok(r) => r,
                Err(_) => Err(format!("scenario did not finish within {secs} s").into()),
            },
        },
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("krafka error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
