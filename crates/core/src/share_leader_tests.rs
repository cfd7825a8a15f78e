//! Tests of the share-partition leader's orders: what a machine is handed back after, and
//! that a staging is all or nothing and never touches the machines it copied.

use proptest::prelude::*;

use super::*;
use crate::share_coordinator::{ShareStateError, StateBatch, TopicId};
use crate::share_partition::{
    AcknowledgeType, AcquireMode, AcquireRequest, FetchedBatch, Isolation, RecordState,
};

const PID: i64 = 9;
const EPOCH: i16 = 2;

fn key(p: i32) -> SharePartitionKey {
    SharePartitionKey::new("g", TopicId([3; 16]), p)
}

fn acquired(member: &str, last: i64) -> SharePartition {
    let mut sp = SharePartition::new(SharePartitionConfig::default(), 0, 0).expect("valid");
    let fetched = [FetchedBatch {
        base_offset: 0,
        last_offset: last,
        is_control: false,
        producer_id: -1,
        is_transactional: false,
    }];
    sp.acquire(&AcquireRequest {
        member_id: member,
        fetch_offset: 0,
        fetched: &fetched,
        max_records: 500,
        batch_size: 500,
        mode: AcquireMode::BatchOptimized,
        isolation: Isolation::ReadUncommitted,
        now_ms: 0,
    })
    .expect("acquire");
    sp
}

fn accept(first: i64, last: i64) -> Vec<AckBatch> {
    vec![AckBatch::new(
        first,
        last,
        vec![AcknowledgeType::Accept.id()],
    )]
}

fn states(sp: &SharePartition) -> Vec<(i64, i64, RecordState)> {
    sp.ranges()
        .map(|r| (r.first_offset, r.last_offset, r.state))
        .collect()
}

#[test]
fn no_state_is_initialized_at_the_picked_offset_before_the_machine_exists() {
    let Ok(Loading::PickStart(pick)) = Loading::read(SharePartitionConfig::default(), None) else {
        panic!("no state must ask for a start offset");
    };
    let init = pick.start_at(17);
    assert_eq!(
        init.state(),
        InitializeState {
            state_epoch: 0,
            start_offset: 17
        }
    );
    let sp = init.initialized().expect("valid");
    assert_eq!(sp.start_offset(), 17);
    assert_eq!(sp.next_fetch_offset(), 17);
}

#[test]
fn an_uninitialized_state_keeps_its_state_epoch() {
    let read = ReadState {
        state_epoch: 4,
        start_offset: UNINITIALIZED_START_OFFSET,
        state_batches: Vec::new(),
    };
    let Ok(Loading::PickStart(pick)) = Loading::read(SharePartitionConfig::default(), Some(&read))
    else {
        panic!("an uninitialized state must ask for a start offset");
    };
    assert_eq!(pick.start_at(0).state().state_epoch, 4);
}

#[test]
fn a_persisted_state_is_ready_or_handed_back_only_after_its_write() {
    let clean = ReadState {
        state_epoch: 1,
        start_offset: 5,
        state_batches: vec![StateBatch::new(5, 9, RecordState::Available.id(), 1)],
    };
    match Loading::read(SharePartitionConfig::default(), Some(&clean)) {
        Ok(Loading::Ready(sp)) => assert_eq!(sp.start_offset(), 5),
        other => panic!("a clean state needs no write: {other:?}"),
    }
    // Records acknowledged at the start move the start offset: that must be written first.
    let moved = ReadState {
        state_epoch: 1,
        start_offset: 5,
        state_batches: vec![StateBatch::new(5, 9, RecordState::Acknowledged.id(), 1)],
    };
    match Loading::read(SharePartitionConfig::default(), Some(&moved)) {
        Ok(Loading::Persist(pending)) => {
            let write = pending.write(7).expect("a write");
            assert_eq!((write.start_offset, write.leader_epoch), (10, 7));
            assert_eq!(
                pending.persisted(Ok::<_, ()>(())).unwrap().start_offset(),
                10
            );
        }
        other => panic!("a moved start must be persisted first: {other:?}"),
    }
}

#[test]
fn an_unusable_persisted_state_is_an_error() {
    let overlapping = ReadState {
        state_epoch: 1,
        start_offset: 0,
        state_batches: vec![
            StateBatch::new(0, 9, RecordState::Available.id(), 1),
            StateBatch::new(5, 12, RecordState::Available.id(), 1),
        ],
    };
    assert!(Loading::read(SharePartitionConfig::default(), Some(&overlapping)).is_err());
}

#[test]
fn a_staging_is_handed_back_only_when_persisted() {
    let a = acquired("m", 9);
    let b = acquired("m", 4);
    let (ka, kb) = (key(0), key(1));
    let (ba, bb) = (accept(0, 9), accept(0, 4));
    let parts = [
        (&ka, Some(&a), &ba[..], false),
        (&kb, Some(&b), &bb[..], false),
    ];
    let staging = Staging::on_copies(parts, 1, "m", PID, EPOCH).expect("staged");
    assert_eq!(staging.producer(), (PID, EPOCH));
    let writes = staging.writes(0);
    assert_eq!(
        writes.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>(),
        vec![ka.clone(), kb.clone()]
    );
    // Unavailable: a storage error, and the machines are as they were.
    let refusal = staging
        .persisted(Err(NotPersisted::Unavailable))
        .expect_err("not persisted");
    assert_eq!(refusal.code, ErrorCode::KAFKA_STORAGE_ERROR);
    assert_eq!(states(&a), vec![(0, 9, RecordState::Acquired)]);

    let staging = Staging::on_copies(parts, 1, "m", PID, EPOCH).expect("staged");
    let installed = staging.persisted(Ok(())).expect("persisted");
    assert_eq!(installed[0].0, ka);
    assert_eq!(
        states(&installed[0].1),
        vec![(0, 9, RecordState::TxPending)]
    );
    assert_eq!(
        states(&installed[1].1),
        vec![(0, 4, RecordState::TxPending)]
    );
}

#[test]
fn the_coordinators_refusals_are_the_answers_the_spec_gives() {
    let a = acquired("m", 3);
    let ka = key(0);
    let ba = accept(0, 3);
    let stage =
        || Staging::on_copies([(&ka, Some(&a), &ba[..], false)], 1, "m", PID, EPOCH).unwrap();
    let fenced = stage()
        .persisted(Err(NotPersisted::Refused(StageRefused::Fenced {
            state_partition: 0,
        })))
        .expect_err("fenced");
    assert_eq!(fenced.code, ErrorCode::PRODUCER_FENCED);
    assert_eq!(fenced.key, None);
    let refused = stage()
        .persisted(Err(NotPersisted::Refused(StageRefused::State {
            key: ka.clone(),
            error: ShareStateError::Uninitialized,
        })))
        .expect_err("refused");
    assert_eq!(refused.code, ShareStateError::Uninitialized.error_code());
    assert_eq!(refused.key, Some(ka.clone()));
}

#[test]
fn a_partition_without_a_machine_or_with_records_not_acquired_refuses_the_whole_request() {
    let a = acquired("m", 3);
    let (ka, kb) = (key(0), key(1));
    let ba = accept(0, 3);
    let missing = Staging::on_copies(
        [(&ka, Some(&a), &ba[..], false), (&kb, None, &ba[..], false)],
        1,
        "m",
        PID,
        EPOCH,
    )
    .expect_err("no machine");
    assert_eq!((missing.index, &missing.key), (1, &kb));
    assert_eq!(missing.refusal().code, ErrorCode::INVALID_RECORD_STATE);
    assert!(missing.violation().is_none());
    let other = Staging::on_copies([(&ka, Some(&a), &ba[..], false)], 1, "other", PID, EPOCH)
        .expect_err("not the holder");
    assert_eq!(other.index, 0);
    assert_eq!(other.refusal().code, ErrorCode::INVALID_RECORD_STATE);
    assert_eq!(other.refusal().key, Some(ka));
}

proptest! {
    /// Whatever the request, either every partition's copy is staged or none, and the machines
    /// copied never change.
    #[test]
    fn a_staging_is_all_or_nothing_and_leaves_the_originals(
        parts in prop::collection::vec((0i64..6, 0i64..8, 0i64..8, any::<bool>()), 1..5)
    ) {
        let keys: Vec<SharePartitionKey> = (0..parts.len() as i32).map(key).collect();
        let machines: Vec<SharePartition> =
            parts.iter().map(|(last, _, _, _)| acquired("m", *last)).collect();
        let before: Vec<_> = machines.iter().map(states).collect();
        let batches: Vec<Vec<AckBatch>> = parts
            .iter()
            .map(|(_, first, len, _)| accept(*first, first + len))
            .collect();
        let request = keys.iter().zip(&machines).zip(&batches).zip(&parts).map(
            |(((k, sp), b), (_, _, _, present))| (k, present.then_some(sp), &b[..], false),
        );
        let fits = parts.iter().all(|(last, first, len, present)| *present && first + len <= *last);
        match Staging::on_copies(request, 1, "m", PID, EPOCH) {
            Ok(staging) => {
                prop_assert!(fits);
                let installed = staging.persisted(Ok(())).expect("persisted");
                prop_assert_eq!(installed.len(), parts.len());
                for ((_, sp), (_, first, len, _)) in installed.iter().zip(&parts) {
                    prop_assert!(sp
                        .ranges()
                        .filter(|r| r.first_offset <= first + len && *first <= r.last_offset)
                        .all(|r| r.state == RecordState::TxPending));
                }
            }
            Err(refused) => {
                prop_assert!(!fits);
                let (_, first, len, present) = parts[refused.index];
                let last = parts[refused.index].0;
                prop_assert!(!present || first + len > last);
            }
        }
        let after: Vec<_> = machines.iter().map(states).collect();
        prop_assert_eq!(before, after);
    }
}

#[test]
fn acknowledgements_are_answered_only_once_persisted_and_need_a_machine() {
    assert_eq!(
        acknowledge(None, "m", &accept(0, 0), 1)
            .expect_err("no machine")
            .error_code(),
        ErrorCode::INVALID_RECORD_STATE
    );
    let mut sp = acquired("m", 3);
    let refused = acknowledge(Some(&mut sp), "other", &accept(0, 3), 1).expect_err("not held");
    assert_eq!(refused.error_code(), ErrorCode::INVALID_RECORD_STATE);
    let done = acknowledge(Some(&mut sp), "m", &accept(0, 3), 1).expect("acknowledged");
    assert!(done.write(0).is_some());
    assert_eq!(done.persisted(Err("disk")), Err("disk"));
}

#[test]
fn an_acquisition_answers_its_records_once_persisted() {
    let mut sp = SharePartition::new(SharePartitionConfig::default(), 0, 0).expect("valid");
    let fetched = [FetchedBatch {
        base_offset: 0,
        last_offset: 4,
        is_control: false,
        producer_id: -1,
        is_transactional: false,
    }];
    let request = AcquireRequest {
        member_id: "m",
        fetch_offset: 0,
        fetched: &fetched,
        max_records: 500,
        batch_size: 500,
        mode: AcquireMode::BatchOptimized,
        isolation: Isolation::ReadUncommitted,
        now_ms: 0,
    };
    let records = acquire(&mut sp, &request)
        .expect("acquired")
        .persisted(Ok::<_, ()>(()))
        .expect("persisted");
    assert_eq!(
        records
            .iter()
            .map(|r| (r.first_offset, r.last_offset))
            .collect::<Vec<_>>(),
        vec![(0, 4)]
    );
}
