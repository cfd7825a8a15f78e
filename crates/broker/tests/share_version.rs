//! `share.version` over the wire (spec §3.5, decision 0012): a new data directory starts at 3,
//! where TxnShareAcknowledge (api key 95) is advertised at v0; below 3 it is not advertised and
//! answers UNSUPPORTED_VERSION while the share-group RPCs stay (level 2 behaves as 1); at 0
//! none are; an upgrade restores them; an existing directory keeps its level across restarts;
//! and leaving level 3 is refused while any share-group record is TX_PENDING.

mod common;

use common::features::{
    advertised, api_versions, feature, set_share_version, update, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE,
    UPGRADE,
};
use common::TestBroker;
use kafka_protocol::messages::{ApiVersionsResponse, UpdateFeaturesRequest};
use shoal_broker::api_table::SHARE_APIS;
use shoal_client::Connection;
use shoal_core::share_coordinator::{SharePartitionKey, StagedTxn, TopicId};
use shoal_core::share_partition::{PersistedBatch, RecordState, StateWrite};
use shoal_protocol::messages::ApiKey;
use shoal_protocol::share::TxnShareAcknowledgeRequest;
use shoal_protocol::ErrorCode;

fn finalized_share_version(r: &ApiVersionsResponse) -> Option<i16> {
    r.finalized_features
        .iter()
        .find(|f| f.name.as_str() == "share.version")
        .map(|f| f.max_version_level)
}

/// What the broker advertises now: (TxnShareAcknowledge's range, how many share APIs).
async fn advertised_now(conn: &mut Connection) -> (Option<(i16, i16)>, usize) {
    let r = api_versions(conn).await;
    let share = SHARE_APIS
        .iter()
        .filter(|k| advertised(&r, **k).is_some())
        .count();
    (advertised(&r, ApiKey::TxnShareAcknowledge), share)
}

/// A TxnShareAcknowledge v0: its top-level error code.
async fn txn_share_ack(conn: &mut Connection) -> i16 {
    conn.request(0, &TxnShareAcknowledgeRequest::default())
        .await
        .unwrap()
        .error_code
}

#[tokio::test]
async fn txn_share_acknowledge_is_advertised_and_gated_by_share_version() {
    let dir = tempfile::tempdir().unwrap();
    let all_share = SHARE_APIS.len();
    {
        let broker = TestBroker::start(dir.path()).await;
        let mut conn = broker.connect().await;
        let r = api_versions(&mut conn).await;
        assert_eq!(
            finalized_share_version(&r),
            Some(3),
            "a new data directory starts at the newest level"
        );
        let supported = r
            .supported_features
            .iter()
            .find(|f| f.name.as_str() == "share.version")
            .unwrap();
        assert_eq!((supported.min_version, supported.max_version), (0, 3));
        assert_eq!(advertised_now(&mut conn).await, (Some((0, 0)), all_share));

        // Level 1 (share groups): the share RPCs stay, TxnShareAcknowledge goes and is
        // answered UNSUPPORTED_VERSION on a connection that stays usable.
        set_share_version(&mut conn, 1, SAFE_DOWNGRADE).await;
        assert_eq!(advertised_now(&mut conn).await, (None, all_share));
        assert_eq!(
            txn_share_ack(&mut conn).await,
            ErrorCode::UNSUPPORTED_VERSION.code()
        );
        // Level 2 (Kafka's dead-letter queues, not built) behaves as 1.
        set_share_version(&mut conn, 2, UPGRADE).await;
        assert_eq!(advertised_now(&mut conn).await, (None, all_share));
        assert_eq!(
            txn_share_ack(&mut conn).await,
            ErrorCode::UNSUPPORTED_VERSION.code()
        );
        // Level 0: none of them.
        set_share_version(&mut conn, 0, SAFE_DOWNGRADE).await;
        assert_eq!(advertised_now(&mut conn).await, (None, 0));
        assert_eq!(
            txn_share_ack(&mut conn).await,
            ErrorCode::UNSUPPORTED_VERSION.code()
        );
        // Back up to 3: everything again.
        set_share_version(&mut conn, 3, UPGRADE).await;
        assert_eq!(advertised_now(&mut conn).await, (Some((0, 0)), all_share));
        // And down to 1 for the restart below.
        set_share_version(&mut conn, 1, SAFE_DOWNGRADE).await;
        drop(conn);
        broker.stop().await;
    }
    // An existing directory keeps its finalized level: it is not raised to the default.
    let broker = TestBroker::start(dir.path()).await;
    let mut conn = broker.connect().await;
    let r = api_versions(&mut conn).await;
    assert_eq!(finalized_share_version(&r), Some(1));
    assert_eq!(advertised_now(&mut conn).await, (None, all_share));
    assert_eq!(
        txn_share_ack(&mut conn).await,
        ErrorCode::UNSUPPORTED_VERSION.code()
    );
    broker.stop().await;
}

/// Persists `batch` as the state of `key` (initialized first, as a share fetch would) through
/// the share manager's own write path, so the share-state store holds it as after a
/// TxnShareAcknowledge staging (whose handler is not part of this change).
async fn persist_batch(broker: &TestBroker, key: &SharePartitionKey, batch: PersistedBatch) {
    let slot = broker.broker.share.slot(key);
    let mut state = slot.state.lock().await;
    broker
        .broker
        .share
        .ensure_initialized(&broker.broker, key, &mut state)
        .await
        .unwrap();
    let sp = state.as_ref().unwrap();
    let write = StateWrite {
        start_offset: sp.start_offset(),
        state_epoch: sp.state_epoch(),
        delivery_complete_count: 0,
        batches: vec![batch],
    };
    let change = shoal_core::share_leader::changed(Some(write));
    broker
        .broker
        .share
        .persisted(&broker.broker, key, change)
        .await
        .unwrap();
}

#[tokio::test]
async fn leaving_share_version_3_is_refused_while_records_are_tx_pending() {
    let dir = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(dir.path()).await;
    let mut conn = broker.connect().await;
    common::create_topic(&mut conn, "input", 1).await;
    let topic_id = broker.broker.topic("input").unwrap().id;
    let key = SharePartitionKey::new("g", TopicId(*topic_id.as_bytes()), 0);
    // Offsets 0-4 staged by producer 4242 (as persisted: the count before the acquisition).
    persist_batch(
        &broker,
        &key,
        PersistedBatch {
            first_offset: 0,
            last_offset: 4,
            state: RecordState::TxPending,
            delivery_count: 0,
            staged_txn: Some(StagedTxn {
                producer_id: 4242,
                producer_epoch: 0,
                ack_type: 1,
                dead_lettered: false,
            }),
        },
    )
    .await;
    assert_eq!(broker.broker.share.tx_pending_records(None).await, 5);

    // Every way below 3 is refused with a message, dry run and --unsafe included.
    for (level, upgrade_type, validate_only) in [
        (1, SAFE_DOWNGRADE, false),
        (2, SAFE_DOWNGRADE, false),
        (0, UNSAFE_DOWNGRADE, false),
        (1, SAFE_DOWNGRADE, true),
    ] {
        let results = update(
            &mut conn,
            vec![feature("share.version", level, upgrade_type)],
            validate_only,
        )
        .await;
        assert_eq!(
            results[0].1,
            ErrorCode::INVALID_UPDATE_VERSION.code(),
            "{level} {upgrade_type} {validate_only}: {results:?}"
        );
        let message = results[0].2.as_deref().unwrap_or_default();
        assert!(
            message.contains("5 share-group record(s) are TX_PENDING"),
            "{message}"
        );
    }
    // UpdateFeatures v2 carries the refusal at the top (what kafka-features reads).
    let v2 = conn
        .request(
            2,
            &UpdateFeaturesRequest::default().with_feature_updates(vec![feature(
                "share.version",
                1,
                SAFE_DOWNGRADE,
            )]),
        )
        .await
        .unwrap();
    assert_eq!(v2.error_code, ErrorCode::INVALID_UPDATE_VERSION.code());
    assert!(v2
        .error_message
        .as_ref()
        .is_some_and(|m| m.contains("TX_PENDING")));
    // All or nothing: a valid update beside the refused one is not applied either.
    let results = update(
        &mut conn,
        vec![
            feature("share.version", 1, SAFE_DOWNGRADE),
            feature("transaction.version", 1, SAFE_DOWNGRADE),
        ],
        false,
    )
    .await;
    assert!(
        results
            .iter()
            .all(|r| r.1 == ErrorCode::INVALID_UPDATE_VERSION.code()),
        "{results:?}"
    );
    assert_eq!(broker.broker.feature_level("transaction.version").await, 2);
    // Changes that keep level 3 are not held up.
    assert_eq!(
        update(&mut conn, vec![feature("share.version", 3, UPGRADE)], false).await[0].1,
        0
    );
    assert_eq!(
        finalized_share_version(&api_versions(&mut conn).await),
        Some(3)
    );
    assert_eq!(advertised_now(&mut conn).await.0, Some((0, 0)));

    // The transaction aborts: the records are AVAILABLE again with the attempt counted (what
    // the ABORT marker's resolution persists, decision 0011), and nothing holds the downgrade.
    persist_batch(
        &broker,
        &key,
        PersistedBatch {
            first_offset: 0,
            last_offset: 4,
            state: RecordState::Available,
            delivery_count: 1,
            staged_txn: None,
        },
    )
    .await;
    assert_eq!(broker.broker.share.tx_pending_records(None).await, 0);
    // A dry run is accepted and applies nothing; then the downgrade itself.
    let results = update(
        &mut conn,
        vec![feature("share.version", 1, SAFE_DOWNGRADE)],
        true,
    )
    .await;
    assert_eq!(results[0].1, 0, "{results:?}");
    assert_eq!(
        finalized_share_version(&api_versions(&mut conn).await),
        Some(3)
    );
    set_share_version(&mut conn, 1, SAFE_DOWNGRADE).await;
    assert_eq!(
        finalized_share_version(&api_versions(&mut conn).await),
        Some(1)
    );
    assert_eq!(advertised_now(&mut conn).await.0, None);
    drop(conn);
    broker.stop().await;
}
