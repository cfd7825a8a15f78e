//! ShareFetch and ShareAcknowledge over the wire: share-session epochs and their errors,
//! acquisition locks held by one member at a time, accept / release / reject, delivery
//! counts, foreign acknowledgements, lock expiry, and the acknowledged state surviving a
//! restart while merely acquired records come back.

mod common;

use common::share::{
    ack_batch, acknowledge, acquired_ranges, heartbeat, produce_values, setup_share_topic,
    share_fetch, ACCEPT, GROUP, REJECT, RELEASE, TOPIC,
};
use common::TestBroker;
use kafka_protocol::messages::GroupId;
use kafka_protocol::protocol::StrBytes;
use shoal_client::Connection;
use shoal_protocol::share::{AcknowledgementBatch, ShareFetchResponse};
use shoal_protocol::ErrorCode;
use shoal_storage::batch::split_batches;
use uuid::Uuid;

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

async fn start(dir: &std::path::Path) -> TestBroker {
    TestBroker::start_with(dir, &[("group.share.min.record.lock.duration.ms", "1000")]).await
}

/// Creates the topic, produces 10 records in batches of 4, 3 and 3, and configures the group
/// (earliest, 1 s locks, delivery limit 4); returns the topic id.
async fn setup(broker: &TestBroker, conn: &mut Connection) -> Uuid {
    let configs = [
        ("share.auto.offset.reset", "earliest"),
        ("share.record.lock.duration.ms", "1000"),
        ("share.delivery.count.limit", "4"),
    ];
    setup_share_topic(broker, conn, 1, &[4, 3, 3], &configs).await
}

fn batch(first: i64, last: i64, ack_type: i8) -> AcknowledgementBatch {
    ack_batch(first, last, vec![ack_type])
}

async fn fetch(
    conn: &mut Connection,
    topic_id: Uuid,
    member: &str,
    epoch: i32,
    acks: Vec<AcknowledgementBatch>,
    max_wait_ms: i32,
) -> ShareFetchResponse {
    fetch_max_bytes(conn, topic_id, member, epoch, acks, max_wait_ms, 1 << 20).await
}

async fn fetch_max_bytes(
    conn: &mut Connection,
    topic_id: Uuid,
    member: &str,
    epoch: i32,
    acks: Vec<AcknowledgementBatch>,
    max_wait_ms: i32,
    max_bytes: i32,
) -> ShareFetchResponse {
    share_fetch(
        conn,
        topic_id,
        member,
        epoch,
        vec![(0, acks)],
        max_wait_ms,
        max_bytes,
    )
    .await
}

/// `(first, last, delivery count)` of every acquired range, and the offsets of the batches.
fn acquired(r: &ShareFetchResponse) -> (Vec<(i64, i64, i16)>, Vec<i64>) {
    assert_eq!(r.error_code, 0, "{:?}", r.error_message);
    let Some(p) = r.responses.first().and_then(|t| t.partitions.first()) else {
        return (Vec::new(), Vec::new());
    };
    assert_eq!(p.error_code, 0, "{:?}", p.error_message);
    let ranges = p
        .acquired_records
        .iter()
        .map(|a| (a.first_offset, a.last_offset, a.delivery_count))
        .collect();
    let batches = split_batches(&p.records)
        .map(|b| b.unwrap().0.base_offset())
        .collect();
    (ranges, batches)
}

fn ack_error(r: &ShareFetchResponse) -> i16 {
    r.responses[0].partitions[0].acknowledge_error_code
}

#[tokio::test]
async fn share_fetch_and_acknowledge_over_the_wire() {
    let dir = tempfile::tempdir().unwrap();
    let topic_id;
    {
        let broker = start(dir.path()).await;
        let mut a = broker.connect().await;
        let mut b = broker.connect().await;
        topic_id = setup(&broker, &mut a).await;

        // Session errors.
        let r = fetch(&mut a, topic_id, "a", 1, vec![], 0).await;
        assert_eq!(r.error_code, ErrorCode::SHARE_SESSION_NOT_FOUND.code());
        let r = fetch(&mut a, topic_id, "a", 0, vec![batch(0, 0, ACCEPT)], 0).await;
        assert_eq!(r.error_code, ErrorCode::INVALID_REQUEST.code());
        assert_eq!(
            acknowledge(&mut a, topic_id, "a", 0, vec![]).await.0,
            ErrorCode::INVALID_SHARE_SESSION_EPOCH.code()
        );

        // Member a acquires everything (earliest), whole batches, delivery count 1.
        let r = fetch(&mut a, topic_id, "a", 0, vec![], 500).await;
        assert_eq!(acquired(&r), (vec![(0, 9, 1)], vec![0, 4, 7]));
        assert_eq!(r.acquisition_lock_timeout_ms, 1000);
        // Member b finds nothing free (and does not wait past MaxWaitMs).
        let r = fetch(&mut b, topic_id, "b", 0, vec![], 50).await;
        assert_eq!(acquired(&r).0, vec![]);
        // The metrics show the in-flight window: 10 records, all acquired.
        let metrics = broker.broker.render_metrics();
        let gauge = |name: &str| {
            let line = format!("{name}{{group=\"{GROUP}\",topic=\"{TOPIC}\",partition=\"0\"}} ");
            metrics
                .lines()
                .find_map(|l| l.strip_prefix(&line))
                .unwrap_or_else(|| panic!("no {name} in {metrics}"))
                .to_string()
        };
        assert_eq!(gauge("shoal_share_partition_in_flight_records"), "10");
        assert_eq!(gauge("shoal_share_partition_acquired_records"), "10");
        assert_eq!(gauge("shoal_share_partition_available_records"), "0");

        // a accepts 0-3, releases 4-6, rejects 7; b may not acknowledge a's records.
        assert_eq!(
            acknowledge(
                &mut a,
                topic_id,
                "a",
                1,
                vec![
                    batch(0, 3, ACCEPT),
                    batch(4, 6, RELEASE),
                    batch(7, 7, REJECT)
                ]
            )
            .await,
            (0, 0)
        );
        assert_eq!(
            acknowledge(&mut a, topic_id, "a", 1, vec![]).await.0,
            ErrorCode::INVALID_SHARE_SESSION_EPOCH.code(),
            "epoch 1 was used"
        );
        let r = fetch(&mut b, topic_id, "b", 1, vec![batch(8, 9, ACCEPT)], 500).await;
        assert_eq!(ack_error(&r), ErrorCode::INVALID_RECORD_STATE.code());
        // The released records go to b, as their second delivery.
        assert_eq!(acquired(&r).0, vec![(4, 6, 2)]);

        // a accepts 8-9 on its next fetch; nothing new arrives meanwhile.
        let r = fetch(&mut a, topic_id, "a", 2, vec![batch(8, 9, ACCEPT)], 100).await;
        assert_eq!(ack_error(&r), 0);
        assert_eq!(acquired(&r).0, vec![]);

        // b never acknowledges: after its 1 s lock, a gets 4-6 for the third time.
        let r = fetch(&mut a, topic_id, "a", 3, vec![], 5000).await;
        assert_eq!(acquired(&r).0, vec![(4, 6, 3)]);
        broker.stop().await;
    }
    // After a restart: accepted and rejected records never come back; 4-6 do. Shutting down
    // closed a's connection, which released its records keeping their count (3), and that
    // release was persisted. Count 4 of 4 is the last attempt: Kafka delivers such records one
    // at a time, and a release then archives them.
    let broker = start(dir.path()).await;
    let mut c = broker.connect().await;
    let r = fetch(&mut c, topic_id, "c", 0, vec![], 2000).await;
    assert_eq!(acquired(&r).0, vec![(4, 4, 4)]);
    let r = fetch(&mut c, topic_id, "c", 1, vec![batch(4, 4, RELEASE)], 100).await;
    assert_eq!(ack_error(&r), 0);
    assert_eq!(acquired(&r).0, vec![(5, 5, 4)]);
    let r = fetch(&mut c, topic_id, "c", 2, vec![batch(5, 5, REJECT)], 100).await;
    assert_eq!(ack_error(&r), 0);
    assert_eq!(acquired(&r).0, vec![(6, 6, 4)]);
    assert_eq!(
        acknowledge(&mut c, topic_id, "c", 3, vec![batch(6, 6, RELEASE)]).await,
        (0, 0)
    );
    let r = fetch(&mut c, topic_id, "c", 4, vec![], 100).await;
    assert_eq!(acquired(&r).0, vec![], "everything is terminal now");
    // The final epoch closes the session.
    assert_eq!(acknowledge(&mut c, topic_id, "c", -1, vec![]).await.0, 0);
    assert_eq!(
        acknowledge(&mut c, topic_id, "c", 6, vec![]).await.0,
        ErrorCode::SHARE_SESSION_NOT_FOUND.code()
    );
    broker.stop().await;
}

/// Pruning `__share_group_state` drops what a share partition's latest snapshot supersedes and
/// nothing replay needs: after pruning and a restart the acknowledged state is unchanged.
#[tokio::test]
async fn pruned_share_state_replays_to_the_same_state() {
    let dir = tempfile::tempdir().unwrap();
    let settings = [
        ("group.share.min.record.lock.duration.ms", "1000"),
        // A snapshot after every second update: several snapshots below.
        (
            "share.coordinator.snapshot.update.records.per.snapshot",
            "2",
        ),
    ];
    let topic_id;
    let (spso, lag);
    {
        let broker = TestBroker::start_with(dir.path(), &settings).await;
        let mut a = broker.connect().await;
        topic_id = setup(&broker, &mut a).await;
        heartbeat(&mut a, "a", 0).await;
        let r = fetch(&mut a, topic_id, "a", 0, vec![], 2000).await;
        assert_eq!(acquired(&r).0, vec![(0, 9, 1)]);
        let acks = [
            batch(0, 0, ACCEPT),
            batch(1, 1, ACCEPT),
            batch(2, 2, REJECT),
            batch(3, 3, ACCEPT),
            batch(4, 6, RELEASE),
            batch(7, 9, RELEASE),
        ];
        for (epoch, ack) in (1..).zip(acks) {
            assert_eq!(
                acknowledge(&mut a, topic_id, "a", epoch, vec![ack]).await,
                (0, 0)
            );
        }
        // Nothing is held any more, so closing the session writes nothing: the restart below
        // replays exactly what pruning left.
        assert_eq!(acknowledge(&mut a, topic_id, "a", -1, vec![]).await.0, 0);
        (spso, lag, _) = describe_offsets(&mut a).await;
        assert_eq!((spso, lag), (4, 6), "0-3 are terminal, 4-9 are not");
        let pruned = broker.broker.share.prune(&broker.broker).await.unwrap();
        assert!(pruned > 0, "superseded records were pruned");
        let state = broker.broker.topic("__share_group_state").unwrap();
        let starts: Vec<i64> = state
            .partitions()
            .iter()
            .map(|p| p.lock().log_start_offset())
            .collect();
        assert!(starts.iter().any(|s| *s > 0), "{starts:?}");
        // Pruning again finds nothing more to drop.
        assert_eq!(broker.broker.share.prune(&broker.broker).await.unwrap(), 0);
        drop(a);
        broker.stop().await;
    }
    let broker = TestBroker::start_with(dir.path(), &settings).await;
    let mut c = broker.connect().await;
    assert_eq!(describe_offsets(&mut c).await, (spso, lag, 0));
    // 4-9 come back (released), 0-3 never do.
    let r = fetch(&mut c, topic_id, "c", 0, vec![], 2000).await;
    let offsets: Vec<i64> = acquired(&r)
        .0
        .iter()
        .flat_map(|(first, last, _)| *first..=*last)
        .collect();
    assert_eq!(offsets, (4..=9).collect::<Vec<_>>());
    assert_eq!(acknowledge(&mut c, topic_id, "c", -1, vec![]).await.0, 0);

    // Once the topic is gone, its share state goes at the next pruning, and with it everything
    // the state partition held.
    broker.broker.delete_topic(TOPIC).await.unwrap();
    broker.broker.share.prune(&broker.broker).await.unwrap();
    assert!(broker.broker.share.keys_of_group(GROUP).await.is_empty());
    let state = broker.broker.topic("__share_group_state").unwrap();
    for p in state.partitions() {
        let log = p.lock();
        assert_eq!(log.log_start_offset(), log.log_end_offset(), "{}", p.index);
    }
    drop(state);
    broker.stop().await;
}

/// `(start offset, lag, error)` of partition 0 from DescribeShareGroupOffsets v1.
async fn describe_offsets(conn: &mut Connection) -> (i64, i64, i16) {
    use shoal_protocol::share::describe_share_group_offsets::{
        DescribeShareGroupOffsetsRequest, DescribeShareGroupOffsetsRequestGroup,
    };
    let r = conn
        .request(
            1,
            &DescribeShareGroupOffsetsRequest {
                groups: vec![DescribeShareGroupOffsetsRequestGroup {
                    group_id: GroupId(s(GROUP)),
                    topics: None,
                    ..Default::default()
                }],
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let g = &r.groups[0];
    match g.topics.first().and_then(|t| t.partitions.first()) {
        Some(p) => (p.start_offset, p.lag, p.error_code),
        None => (-1, -1, g.error_code),
    }
}

#[tokio::test]
async fn share_group_offsets_are_described_altered_and_deleted() {
    use common::share::{alter_offsets, delete_offsets};
    let dir = tempfile::tempdir().unwrap();
    let broker = start(dir.path()).await;
    let mut conn = broker.connect().await;
    let topic_id = setup(&broker, &mut conn).await;
    assert_eq!(
        describe_offsets(&mut conn).await.2,
        ErrorCode::GROUP_ID_NOT_FOUND.code()
    );
    let epoch = heartbeat(&mut conn, "m", 0).await;
    let r = fetch(&mut conn, topic_id, "m", 0, vec![], 500).await;
    assert_eq!(acquired(&r).0, vec![(0, 9, 1)]);
    // Accept 0-3 and 6: the start offset moves to 4; 5 records are still to be done.
    let r = fetch(
        &mut conn,
        topic_id,
        "m",
        1,
        vec![batch(0, 3, ACCEPT), batch(6, 6, ACCEPT)],
        0,
    )
    .await;
    assert_eq!(ack_error(&r), 0);
    assert_eq!(describe_offsets(&mut conn).await, (4, 5, 0));

    let alter = alter_offsets;
    let r = conn.request(0, &alter(8)).await.unwrap();
    assert_eq!(r.error_code, ErrorCode::NON_EMPTY_GROUP.code());
    heartbeat(&mut conn, "m", -1).await;
    let _ = epoch;
    let r = conn.request(0, &alter(11)).await.unwrap();
    assert_eq!(
        r.responses[0].partitions[0].error_code,
        ErrorCode::INVALID_REQUEST.code(),
        "past the log end"
    );
    let r = conn.request(0, &alter(8)).await.unwrap();
    assert_eq!(
        (r.error_code, r.responses[0].partitions[0].error_code),
        (0, 0)
    );
    assert_eq!(describe_offsets(&mut conn).await, (8, 2, 0));
    // The next fetch (a new session) starts at 8.
    let r = fetch(&mut conn, topic_id, "m", 0, vec![], 500).await;
    assert_eq!(acquired(&r).0, vec![(8, 9, 1)]);
    let r = fetch(&mut conn, topic_id, "m", -1, vec![], 0).await;
    assert_eq!(r.error_code, 0);

    let r = conn.request(0, &delete_offsets()).await.unwrap();
    assert_eq!((r.error_code, r.responses[0].error_code), (0, 0));
    assert_eq!(describe_offsets(&mut conn).await, (-1, -1, 0));
    // State gone: a new session starts over from share.auto.offset.reset (earliest).
    let r = fetch(&mut conn, topic_id, "m", 0, vec![], 500).await;
    assert_eq!(acquired(&r).0, vec![(0, 9, 1)]);
    broker.stop().await;
}

/// ShareFetch MaxBytes 0 (Kafka's Java share consumer with fetch.max.bytes=0) acquires and
/// returns nothing, as Kafka; the next fetch with a budget gets every record.
#[tokio::test]
async fn max_bytes_zero_acquires_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start(dir.path()).await;
    let mut a = broker.connect().await;
    let topic_id = setup(&broker, &mut a).await;
    let r = fetch_max_bytes(&mut a, topic_id, "a", 0, vec![], 0, 0).await;
    assert_eq!(r.error_code, 0);
    assert_eq!(acquired(&r), (vec![], vec![]));
    let r = fetch_max_bytes(&mut a, topic_id, "a", 1, vec![], 0, -1).await;
    assert_eq!(
        acquired(&r),
        (vec![], vec![]),
        "a negative budget is no budget"
    );
    let r = fetch(&mut a, topic_id, "a", 2, vec![], 500).await;
    assert_eq!(acquired(&r), (vec![(0, 9, 1)], vec![0, 4, 7]));
    broker.stop().await;
}

/// MaxRecords bounds a ShareFetch across all its partitions, not each one (Kafka's
/// ShareFetchUtils takes what one partition acquired from the next one's limit): in
/// record_limit mode exactly, in batch_optimized mode up to the batch that crosses it.
#[tokio::test]
async fn max_records_bounds_the_whole_request_not_each_partition() {
    for (member, mode, expected) in [("limit", 1i8, 12i64), ("batches", 0, 20)] {
        // A fresh broker each: three partitions of one 10-record batch.
        let dir = tempfile::tempdir().unwrap();
        let broker = start(dir.path()).await;
        let mut conn = broker.connect().await;
        let configs = [("share.auto.offset.reset", "earliest")];
        // The share partitions are initialised (by a first fetch finding nothing) before the
        // records arrive: a first fetch takes from one uninitialised partition only.
        let topic_id = setup_share_topic(&broker, &mut conn, 3, &[], &configs).await;
        heartbeat(&mut conn, member, 0).await;
        let all = || (0..3).map(|p| (p, vec![])).collect();
        let r = share_fetch(&mut conn, topic_id, member, 0, all(), 0, 1 << 20);
        assert_eq!(acquired_ranges(&r.await), vec![]);
        for partition in 0..3 {
            let values: Vec<String> = (0..10).map(|i| format!("r{i}")).collect();
            produce_values(&mut conn, TOPIC, partition, &values).await;
        }
        let r: ShareFetchResponse = conn
            .request(
                2,
                &shoal_protocol::share::share_fetch::ShareFetchRequest {
                    group_id: Some(GroupId(s(GROUP))),
                    member_id: Some(s(member)),
                    share_session_epoch: 1,
                    max_wait_ms: 500,
                    min_bytes: 1,
                    max_bytes: 1 << 20,
                    max_records: 12,
                    batch_size: 12,
                    share_acquire_mode: mode,
                    topics: vec![shoal_protocol::share::share_fetch::FetchTopic {
                        topic_id,
                        partitions: (0..3)
                            .map(|partition_index| {
                                shoal_protocol::share::share_fetch::FetchPartition {
                                    partition_index,
                                    ..Default::default()
                                }
                            })
                            .collect(),
                        ..Default::default()
                    }],
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        assert_eq!(r.error_code, 0);
        let count: i64 = r
            .responses
            .iter()
            .flat_map(|t| &t.partitions)
            .flat_map(|p| &p.acquired_records)
            .map(|a| a.last_offset - a.first_offset + 1)
            .sum();
        assert_eq!(count, expected, "mode {mode}: {r:?}");
    }
}

/// A new share group's first fetches of two partitions answer one partition each, as Kafka's
/// do while the share partitions initialise: the first to be initialised completes the fetch,
/// the other delivers in the next one. Initialised partitions then deliver together, and so
/// do partitions loaded again after a restart only one at a time.
#[tokio::test]
async fn uninitialised_share_partitions_deliver_one_per_fetch() {
    let dir = tempfile::tempdir().unwrap();
    let topic_id;
    let both = || vec![(0, vec![]), (1, vec![])];
    {
        let broker = start(dir.path()).await;
        let mut conn = broker.connect().await;
        let configs = [("share.auto.offset.reset", "earliest")];
        topic_id = setup_share_topic(&broker, &mut conn, 2, &[50], &configs).await;
        heartbeat(&mut conn, "m", 0).await;
        let r = share_fetch(&mut conn, topic_id, "m", 0, both(), 500, 1 << 20).await;
        assert_eq!(acquired_ranges(&r), vec![(0, 0, 49, 1)]);
        let r = share_fetch(&mut conn, topic_id, "m", 1, both(), 500, 1 << 20).await;
        assert_eq!(acquired_ranges(&r), vec![(1, 0, 49, 1)]);
        // Steady state: both partitions in one answer.
        for partition in 0..2 {
            let values: Vec<String> = (50..60).map(|i| format!("r{i}")).collect();
            assert_eq!(
                produce_values(&mut conn, TOPIC, partition, &values).await,
                50
            );
        }
        let r = share_fetch(&mut conn, topic_id, "m", 2, both(), 500, 1 << 20).await;
        assert_eq!(acquired_ranges(&r), vec![(0, 50, 59, 1), (1, 50, 59, 1)]);
        broker.stop().await;
    }
    // The restart dropped the member's session, releasing its records (count kept), and the
    // share partitions' state: loading it again is initialising it.
    let broker = start(dir.path()).await;
    let mut conn = broker.connect().await;
    let r = share_fetch(&mut conn, topic_id, "n", 0, both(), 500, 1 << 20).await;
    assert_eq!(acquired_ranges(&r), vec![(0, 0, 59, 2)]);
    let r = share_fetch(&mut conn, topic_id, "n", 1, both(), 500, 1 << 20).await;
    assert_eq!(acquired_ranges(&r), vec![(1, 0, 59, 2)]);
    broker.stop().await;
}

/// A first fetch whose MinBytes one initialising partition does not fill takes from every
/// initialising partition, as Kafka's does (it waits out MaxWaitMs, by when all are ready).
#[tokio::test]
async fn unfilled_min_bytes_takes_every_initialising_partition() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start(dir.path()).await;
    let mut conn = broker.connect().await;
    let configs = [("share.auto.offset.reset", "earliest")];
    let topic_id = setup_share_topic(&broker, &mut conn, 2, &[50], &configs).await;
    heartbeat(&mut conn, "m", 0).await;
    let r: ShareFetchResponse = conn
        .request(
            1,
            &shoal_protocol::share::share_fetch::ShareFetchRequest {
                group_id: Some(GroupId(s(GROUP))),
                member_id: Some(s("m")),
                share_session_epoch: 0,
                max_wait_ms: 100,
                min_bytes: 1 << 20,
                max_bytes: 1 << 20,
                max_records: 500,
                batch_size: 500,
                topics: vec![shoal_protocol::share::share_fetch::FetchTopic {
                    topic_id,
                    partitions: (0..2)
                        .map(
                            |partition_index| shoal_protocol::share::share_fetch::FetchPartition {
                                partition_index,
                                ..Default::default()
                            },
                        )
                        .collect(),
                    ..Default::default()
                }],
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(acquired_ranges(&r), vec![(0, 0, 49, 1), (1, 0, 49, 1)]);
    broker.stop().await;
}
