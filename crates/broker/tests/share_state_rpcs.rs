//! Kafka's share-state RPCs as a broker serves them to the others of its cluster
//! (`handlers::share_state`), sent here over a real connection to one node, which owns every
//! `__share_group_state` partition: InitializeShareGroupState, ReadShareGroupState,
//! WriteShareGroupState, ReadShareGroupStateSummary and DeleteShareGroupState answer from the
//! share-state coordinator, with Kafka's "no state" answer (start offset -1) and its errors.

mod common;

use common::{create_topic, TestBroker};
use shoal_broker::share_state::wire;
use shoal_core::share_coordinator::{
    InitializeState, ReadState, SharePartitionKey, StateBatch, TopicId, WriteState,
};

#[tokio::test]
async fn a_partition_s_state_is_initialized_read_written_summarized_and_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(dir.path()).await;
    let mut conn = broker.connect().await;
    create_topic(&mut conn, "t", 2).await;
    let topic_id = broker.broker.topic("t").unwrap().id;
    let key = SharePartitionKey::new("g", TopicId(topic_id.into_bytes()), 1);

    // Never initialized: no state, no error.
    let read = conn.request(0, &wire::read_request(&key, 0)).await.unwrap();
    assert_eq!(wire::read_result(&read, &key), Some((0, None)));
    let summary = conn.request(0, &wire::summary_request(&key)).await.unwrap();
    assert_eq!(wire::summary_result(&summary, &key), Some((0, None)));

    let init = InitializeState {
        state_epoch: 0,
        start_offset: 5,
    };
    let answer = conn
        .request(0, &wire::initialize_request(&key, init))
        .await
        .unwrap();
    assert_eq!(wire::initialize_code(&answer, &key), Some(0));
    let read = conn.request(0, &wire::read_request(&key, 0)).await.unwrap();
    assert_eq!(
        wire::read_result(&read, &key),
        Some((
            0,
            Some(ReadState {
                state_epoch: 0,
                start_offset: 5,
                state_batches: vec![],
            })
        ))
    );

    let write = WriteState {
        state_epoch: 0,
        leader_epoch: 0,
        start_offset: 5,
        delivery_complete_count: 3,
        state_batches: vec![StateBatch::new(5, 7, 2, 1), StateBatch::new(8, 9, 0, 2)],
    };
    let answer = conn
        .request(0, &wire::write_request(&key, &write))
        .await
        .unwrap();
    assert_eq!(wire::write_code(&answer, &key), Some(0));
    let read = conn.request(0, &wire::read_request(&key, 0)).await.unwrap();
    let (code, state) = wire::read_result(&read, &key).unwrap();
    assert_eq!(code, 0);
    assert_eq!(state.unwrap().state_batches, write.state_batches);
    let summary = conn.request(0, &wire::summary_request(&key)).await.unwrap();
    let (_, summary) = wire::summary_result(&summary, &key).unwrap();
    let summary = summary.expect("a summary");
    assert_eq!(summary.start_offset, 5);
    assert_eq!(summary.delivery_complete_count, 3);

    // A write under an older state epoch than the state's is fenced, as in Kafka.
    let again = InitializeState {
        state_epoch: 1,
        start_offset: 0,
    };
    let answer = conn
        .request(0, &wire::initialize_request(&key, again))
        .await
        .unwrap();
    assert_eq!(wire::initialize_code(&answer, &key), Some(0));
    let answer = conn
        .request(0, &wire::write_request(&key, &write))
        .await
        .unwrap();
    assert_eq!(
        wire::write_code(&answer, &key),
        Some(shoal_protocol::ErrorCode::FENCED_STATE_EPOCH.code())
    );

    let answer = conn.request(0, &wire::delete_request(&key)).await.unwrap();
    assert_eq!(wire::delete_code(&answer, &key), Some(0));
    let read = conn.request(0, &wire::read_request(&key, 0)).await.unwrap();
    assert_eq!(wire::read_result(&read, &key), Some((0, None)));
}
