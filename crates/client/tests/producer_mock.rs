//! The producer's sender against a scripted loopback broker, for answers a real broker gives
//! only in rare moments: NOT_LEADER_OR_FOLLOWER and UNKNOWN_TOPIC_OR_PARTITION on a Produce
//! refresh metadata before the retry, the retried batch keeps its producer id, epoch and
//! base sequence (so the broker can recognise a duplicate), and a batch that failed for good
//! makes an idempotent producer bump its epoch. Two scripted brokers sharing one metadata
//! script show a leader killed mid-work: the producer asks for a metadata update when the
//! leader cannot be reached and delivers to the new leader.

mod common;

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::{Bytes, BytesMut};
use common::bounded;
use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use kafka_protocol::messages::{
    ApiVersionsResponse, BrokerId, InitProducerIdResponse, MetadataResponse, ProduceResponse,
    ProducerId, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::RecordBatchDecoder;
use shoal_client::producer::{DeliveryFuture, Producer, ProducerConfig, ProducerRecord};
use shoal_protocol::response::encode_response;
use shoal_protocol::{decode_request, ApiKey, ErrorCode, Request, Response};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

#[global_allocator]
static ALLOC: shoal_protocol::alloc::ReserveLazily = shoal_protocol::alloc::ReserveLazily;

/// What one Produce carried: (base sequence, producer id, epoch, records).
type Batch = (i32, i64, i16, usize);

#[derive(Clone, Default)]
struct Script {
    /// Error codes for the next Produce answers, then NONE.
    produce_errors: Arc<Mutex<VecDeque<ErrorCode>>>,
    produced: Arc<Mutex<Vec<Batch>>>,
    metadata_requests: Arc<Mutex<u32>>,
    /// The brokers metadata names (node id, port); none: this broker alone, as node 1.
    brokers: Arc<Mutex<Vec<(i32, u16)>>>,
    /// The leader of `t`-0 metadata names, with its leader epoch; none: node 1 at epoch 0.
    leader: Arc<Mutex<Option<(i32, i32)>>>,
}

/// A scripted broker that runs until the test ends.
async fn start_mock(script: Script) -> SocketAddr {
    let (addr, kill) = start_killable(script).await;
    // Never killed: the sender must outlive the broker's tasks.
    std::mem::forget(kill);
    addr
}

/// Kills a scripted broker when dropped: its listener closes (new connections are refused)
/// and so do its connections, a request read after the kill unanswered — a `kill -9` as the
/// client sees it.
struct Kill {
    killed: Arc<std::sync::atomic::AtomicBool>,
    _wake: tokio::sync::watch::Sender<()>,
}

impl Drop for Kill {
    fn drop(&mut self) {
        self.killed.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

async fn start_killable(script: Script) -> (SocketAddr, Kill) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (wake, woken) = tokio::sync::watch::channel(());
    let killed: Arc<std::sync::atomic::AtomicBool> = Arc::default();
    let kill = Kill {
        killed: killed.clone(),
        _wake: wake,
    };
    tokio::spawn(async move {
        let mut stop = woken.clone();
        loop {
            let stream = tokio::select! {
                _ = stop.changed() => return,
                accepted = listener.accept() => match accepted {
                    Ok((stream, _)) => stream,
                    Err(_) => return,
                },
            };
            let mut stop = woken.clone();
            let (script, killed) = (script.clone(), killed.clone());
            tokio::spawn(async move {
                tokio::select! {
                    _ = stop.changed() => {}
                    () = serve(stream, addr, script, killed) => {}
                }
            });
        }
    });
    (addr, kill)
}

fn range(api: ApiKey, min: i16, max: i16) -> ApiVersion {
    ApiVersion::default()
        .with_api_key(api as i16)
        .with_min_version(min)
        .with_max_version(max)
}

async fn serve(
    mut stream: TcpStream,
    addr: SocketAddr,
    script: Script,
    killed: Arc<std::sync::atomic::AtomicBool>,
) {
    let mut next_offset = 0i64;
    loop {
        let mut size = [0u8; 4];
        if stream.read_exact(&mut size).await.is_err() {
            return;
        }
        let mut frame = vec![0u8; i32::from_be_bytes(size) as usize];
        if stream.read_exact(&mut frame).await.is_err() {
            return;
        }
        if killed.load(std::sync::atomic::Ordering::SeqCst) {
            // Dead: the connection closes, the request unanswered.
            return;
        }
        let request = decode_request(Bytes::from(frame)).unwrap();
        let response: Response = match &request.body {
            Request::ApiVersions(_) => ApiVersionsResponse::default()
                .with_api_keys(vec![
                    range(ApiKey::ApiVersions, 0, 3),
                    range(ApiKey::Metadata, 10, 12),
                    range(ApiKey::InitProducerId, 0, 5),
                    range(ApiKey::Produce, 3, 11),
                ])
                .into(),
            Request::Metadata(_) => {
                *script.metadata_requests.lock().unwrap() += 1;
                let mut brokers = script.brokers.lock().unwrap().clone();
                if brokers.is_empty() {
                    brokers.push((1, addr.port()));
                }
                let (leader, epoch) = script.leader.lock().unwrap().unwrap_or((1, 0));
                MetadataResponse::default()
                    .with_brokers(
                        brokers
                            .iter()
                            .map(|&(id, port)| {
                                MetadataResponseBroker::default()
                                    .with_node_id(BrokerId(id))
                                    .with_host(StrBytes::from_static_str("127.0.0.1"))
                                    .with_port(i32::from(port))
                            })
                            .collect(),
                    )
                    .with_cluster_id(Some(StrBytes::from_static_str("mock")))
                    .with_controller_id(BrokerId(1))
                    .with_topics(vec![MetadataResponseTopic::default()
                        .with_name(Some(TopicName(StrBytes::from_static_str("t"))))
                        .with_topic_id(shoal_protocol::uuid::Uuid::from_u128(7))
                        .with_partitions(vec![MetadataResponsePartition::default()
                            .with_partition_index(0)
                            .with_leader_id(BrokerId(leader))
                            .with_leader_epoch(epoch)
                            .with_replica_nodes(vec![BrokerId(leader)])
                            .with_isr_nodes(vec![BrokerId(leader)])])])
                    .into()
            }
            // A bump (KIP-360) names the current id and epoch and gets the next epoch.
            Request::InitProducerId(r) => InitProducerIdResponse::default()
                .with_producer_id(ProducerId(42))
                .with_producer_epoch(if r.producer_id.0 >= 0 {
                    r.producer_epoch + 1
                } else {
                    3
                })
                .into(),
            Request::Produce(p) => {
                let data = &p.topic_data[0].partition_data[0];
                let mut records = data.records.clone().unwrap();
                let set = RecordBatchDecoder::decode(&mut records).unwrap();
                let first = &set.records[0];
                script.produced.lock().unwrap().push((
                    first.sequence,
                    first.producer_id,
                    first.producer_epoch,
                    set.records.len(),
                ));
                let code = script
                    .produce_errors
                    .lock()
                    .unwrap()
                    .pop_front()
                    .unwrap_or(ErrorCode::NONE);
                let base_offset = if code.is_ok() { next_offset } else { -1 };
                if code.is_ok() {
                    next_offset += set.records.len() as i64;
                }
                ProduceResponse::default()
                    .with_responses(vec![TopicProduceResponse::default()
                        .with_name(TopicName(StrBytes::from_static_str("t")))
                        .with_partition_responses(vec![PartitionProduceResponse::default()
                            .with_index(0)
                            .with_error_code(code.0)
                            .with_base_offset(base_offset)])])
                    .into()
            }
            _ => return,
        };
        let mut out = BytesMut::new();
        encode_response(
            &mut out,
            request.correlation_id(),
            request.version(),
            &response,
        )
        .unwrap();
        if stream.write_all(&out).await.is_err() {
            return;
        }
    }
}

fn config(addr: SocketAddr) -> ProducerConfig {
    let bootstrap = addr.to_string();
    ProducerConfig::from_properties([
        ("bootstrap.servers", bootstrap.as_str()),
        ("request.timeout.ms", "2000"),
        ("default.api.timeout.ms", "5000"),
        ("retry.backoff.ms", "10"),
        ("retry.backoff.max.ms", "50"),
        ("linger.ms", "0"),
    ])
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_leader_answers_refresh_metadata_and_retry_with_the_same_sequence() {
    bounded(30, async {
        let script = Script::default();
        script.produce_errors.lock().unwrap().extend([
            ErrorCode::NOT_LEADER_OR_FOLLOWER,
            ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
        ]);
        let addr = start_mock(script.clone()).await;
        let producer = Producer::new(config(addr)).await.unwrap();
        assert_eq!(producer.producer_id_epoch(), Some((42, 3)));
        // Read before the send: with linger.ms=0 the batch may go out, and its first error
        // refresh metadata, before send() returns (seen in CI on a loaded machine).
        let metadata_before = *script.metadata_requests.lock().unwrap();
        let first = producer
            .send(ProducerRecord::new("t", "a").with_partition(0))
            .await
            .unwrap();
        let md = first.await.unwrap();
        assert_eq!(md.offset, 0);
        let metadata_after = *script.metadata_requests.lock().unwrap();
        assert!(
            metadata_after >= metadata_before + 2,
            "each stale-leader answer refreshes metadata ({metadata_before} → {metadata_after})"
        );
        // The next batch follows the first one's sequence.
        let second = producer
            .send(ProducerRecord::new("t", "b").with_partition(0))
            .await
            .unwrap();
        assert_eq!(second.await.unwrap().offset, 1);
        let produced = script.produced.lock().unwrap().clone();
        assert_eq!(
            produced,
            [(0, 42, 3, 1), (0, 42, 3, 1), (0, 42, 3, 1), (1, 42, 3, 1)],
            "the retried batch kept its base sequence, the next one followed it"
        );
        producer.close().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_non_retriable_produce_error_fails_only_that_batch() {
    bounded(30, async {
        let script = Script::default();
        script
            .produce_errors
            .lock()
            .unwrap()
            .push_back(ErrorCode::RECORD_LIST_TOO_LARGE);
        let addr = start_mock(script.clone()).await;
        let producer = Producer::new(config(addr)).await.unwrap();
        let err = producer
            .send(ProducerRecord::new("t", "a").with_partition(0))
            .await
            .unwrap()
            .await
            .unwrap_err();
        assert_eq!(err.code(), ErrorCode::RECORD_LIST_TOO_LARGE, "{err:?}");
        assert!(err.requires_abort() || !err.is_retriable(), "{err:?}");
        let ok = producer
            .send(ProducerRecord::new("t", "b").with_partition(0))
            .await
            .unwrap()
            .await
            .unwrap();
        assert_eq!(ok.offset, 0);
        // The failed batch's sequence would leave a gap: the producer bumped its epoch and
        // started the partition's sequences again.
        assert_eq!(
            script.produced.lock().unwrap().clone(),
            [(0, 42, 3, 1), (0, 42, 4, 1)]
        );
        assert_eq!(producer.producer_id_epoch(), Some((42, 4)));
        producer.close().await;
    })
    .await;
}

/// A partition's leader killed mid-work (its connections closed, new ones refused), its
/// partition moved to another broker half a second later: the producer, failing to reach the
/// old leader, asks for a metadata update (fetched in the background, `retry.backoff.ms`
/// apart, not in a loop) while send() goes on using the cache for the known partition, and
/// delivers every record to the new leader well within `delivery.timeout.ms`, with the
/// idempotent sequences continuing where the old leader's left off (nothing sent twice).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_that_cannot_be_reached_is_looked_up_again() {
    bounded(30, async {
        let first = Script::default();
        // Node 2 shares node 1's metadata script but records its own Produce requests.
        let second = Script {
            produced: Arc::default(),
            ..first.clone()
        };
        let (addr1, _keep1) = start_killable(first.clone()).await;
        let (addr2, kill2) = start_killable(second.clone()).await;
        *first.brokers.lock().unwrap() = vec![(1, addr1.port()), (2, addr2.port())];
        *first.leader.lock().unwrap() = Some((2, 1));
        let config = ProducerConfig::from_properties([
            ("bootstrap.servers", addr1.to_string().as_str()),
            ("request.timeout.ms", "2000"),
            ("default.api.timeout.ms", "5000"),
            ("retry.backoff.ms", "20"),
            ("retry.backoff.max.ms", "100"),
            ("reconnect.backoff.ms", "20"),
            ("reconnect.backoff.max.ms", "100"),
            ("linger.ms", "0"),
            ("max.block.ms", "1000"),
            ("delivery.timeout.ms", "10000"),
        ])
        .unwrap();
        let producer = Producer::new(config).await.unwrap();
        for i in 0..3 {
            assert_eq!(
                send(&producer, format!("a{i}")).await.await.unwrap().offset,
                i
            );
        }
        assert_eq!(second.produced.lock().unwrap().len(), 3);

        drop(kill2);
        let started = std::time::Instant::now();
        let metadata_before = *first.metadata_requests.lock().unwrap();
        let mover = {
            let leader = first.leader.clone();
            tokio::spawn(async move {
                tokio::time::sleep(std::time::Duration::from_millis(500)).await;
                *leader.lock().unwrap() = Some((1, 2));
            })
        };
        // send() does not wait for metadata while the leader is unreachable: the partition
        // is known, its cached leader used until the update names another.
        let mut pending = Vec::new();
        for i in 0..5 {
            let before = std::time::Instant::now();
            pending.push(send(&producer, format!("b{i}")).await);
            assert!(
                before.elapsed() < std::time::Duration::from_millis(500),
                "send() waited {:?}",
                before.elapsed()
            );
        }
        let mut offsets = Vec::new();
        for p in pending {
            offsets.push(p.await.expect("delivered to the new leader").offset);
        }
        mover.await.unwrap();
        let elapsed = started.elapsed();
        assert!(
            elapsed < std::time::Duration::from_secs(5),
            "took {elapsed:?}"
        );
        assert_eq!(offsets, [0, 1, 2, 3, 4], "node 1's log, in order");
        let metadata = *first.metadata_requests.lock().unwrap() - metadata_before;
        assert!(
            (1..=100).contains(&metadata),
            "{metadata} metadata requests in {elapsed:?}: updates are backed off"
        );
        // Node 1 got every record once, in order, its sequences following node 2's.
        let mut sequences = Vec::new();
        for &(sequence, id, epoch, records) in first.produced.lock().unwrap().iter() {
            assert_eq!((id, epoch), (42, 3));
            sequences.extend(sequence..sequence + records as i32);
        }
        assert_eq!(
            sequences,
            [3, 4, 5, 6, 7],
            "sequences continue from node 2's"
        );
        let node2: Vec<i32> = second
            .produced
            .lock()
            .unwrap()
            .iter()
            .map(|b| b.0)
            .collect();
        assert_eq!(node2, [0, 1, 2], "nothing more reached the killed leader");
        producer.close().await;
    })
    .await;
}

/// Sends one record to `t`-0 (send() must succeed), for its delivery future.
async fn send(producer: &Producer, value: String) -> DeliveryFuture {
    producer
        .send(ProducerRecord::new("t", value).with_partition(0))
        .await
        .unwrap()
}
