use proptest::prelude::*;

use super::*;
use crate::share_coordinator::TopicId;

fn keys(n: i32) -> Vec<SharePartitionKey> {
    (0..n)
        .map(|p| SharePartitionKey::new("g", TopicId([7; 16]), p))
        .collect()
}

fn described(producer_id: i64, producer_epoch: i16, state: &str) -> TransactionDescription {
    TransactionDescription {
        transactional_id: "t".into(),
        error_code: ErrorCode::NONE,
        state: state.into(),
        transaction_timeout_ms: 60_000,
        transaction_start_time_ms: -1,
        producer_id,
        producer_epoch,
        partitions: Vec::new(),
    }
}

fn code(step: &Step) -> Option<ErrorCode> {
    match step {
        Step::Answer(Err(r)) => Some(r.code),
        _ => None,
    }
}

#[test]
fn the_happy_path_checks_the_member_then_partitions_then_registers_then_stages() {
    let (mut f, step) = TxnShareAck::start(5, 2, 3, &keys(4), 2);
    assert_eq!(step, Step::MemberEpoch);
    assert_eq!(f.member(Ok(3)), Step::CheckPartitions);
    // Four share partitions spread over the two state partitions, each named once, sorted.
    let Step::Register(parts) = f.partitions_checked(Ok(())) else {
        panic!("not a registration");
    };
    let expected: BTreeSet<i32> = keys(4).iter().map(|k| state_partition(k, 2)).collect();
    assert_eq!(parts, expected.into_iter().collect::<Vec<_>>());
    assert_eq!(f.registered(ErrorCode::NONE), Step::Stage);
    assert_eq!(f.staged(Ok(())), Step::Answer(Ok(())));
}

#[test]
fn a_refused_member_registers_nothing_and_the_producer_refusal_takes_precedence() {
    let (mut f, _) = TxnShareAck::start(5, 2, 3, &keys(1), 1);
    assert_eq!(f.member(Ok(4)), Step::DescribeProducer);
    // The producer is fine: the member's refusal.
    assert_eq!(
        code(&f.described(Some(&described(5, 2, "Ongoing")))),
        Some(ErrorCode::STALE_MEMBER_EPOCH)
    );
    let (mut f, _) = TxnShareAck::start(5, 2, 3, &keys(1), 1);
    f.member(Ok(2));
    // The producer was fenced: its refusal wins over FENCED_MEMBER_EPOCH.
    assert_eq!(
        code(&f.described(Some(&described(5, 3, "Ongoing")))),
        Some(ErrorCode::PRODUCER_FENCED)
    );
    for (current, expected) in [
        (
            Err(ErrorCode::GROUP_ID_NOT_FOUND),
            ErrorCode::GROUP_ID_NOT_FOUND,
        ),
        (
            Err(ErrorCode::UNKNOWN_MEMBER_ID),
            ErrorCode::UNKNOWN_MEMBER_ID,
        ),
        (
            Err(ErrorCode::COORDINATOR_NOT_AVAILABLE),
            ErrorCode::COORDINATOR_NOT_AVAILABLE,
        ),
        (Ok(2), ErrorCode::FENCED_MEMBER_EPOCH),
    ] {
        let (mut f, _) = TxnShareAck::start(5, 2, 3, &keys(1), 1);
        assert_eq!(f.member(current), Step::DescribeProducer);
        assert_eq!(
            code(&f.described(Some(&described(5, 2, "Empty")))),
            Some(expected)
        );
    }
}

#[test]
fn the_producer_is_described_to_tell_an_unknown_id_from_a_wrong_mapping() {
    let unknown = TransactionDescription {
        error_code: ErrorCode::TRANSACTIONAL_ID_NOT_FOUND,
        ..described(-1, -1, "")
    };
    let (mut f, _) = TxnShareAck::start(5, 2, 3, &keys(1), 1);
    f.member(Ok(3));
    f.partitions_checked(Ok(()));
    assert_eq!(
        f.registered(ErrorCode::INVALID_PRODUCER_ID_MAPPING),
        Step::DescribeProducer
    );
    assert_eq!(
        code(&f.described(Some(&unknown))),
        Some(ErrorCode::TRANSACTIONAL_ID_NOT_FOUND)
    );
    // Described fine after all: the mapping refusal stands.
    let (mut f, _) = TxnShareAck::start(5, 2, 3, &keys(1), 1);
    f.member(Ok(3));
    f.partitions_checked(Ok(()));
    f.registered(ErrorCode::INVALID_PRODUCER_ID_MAPPING);
    assert_eq!(
        code(&f.described(Some(&described(5, 2, "Ongoing")))),
        Some(ErrorCode::INVALID_PRODUCER_ID_MAPPING)
    );
    // Other refusals of the registration are answered as they come.
    let (mut f, _) = TxnShareAck::start(5, 2, 3, &keys(1), 1);
    f.member(Ok(3));
    f.partitions_checked(Ok(()));
    assert_eq!(
        code(&f.registered(ErrorCode::CONCURRENT_TRANSACTIONS)),
        Some(ErrorCode::CONCURRENT_TRANSACTIONS)
    );
}

#[test]
fn steps_reported_out_of_order_are_answered_as_a_bug_never_staged() {
    let (mut f, _) = TxnShareAck::start(5, 2, 3, &keys(1), 1);
    assert_eq!(
        code(&f.registered(ErrorCode::NONE)),
        Some(ErrorCode::UNKNOWN_SERVER_ERROR)
    );
    assert_eq!(
        code(&f.staged(Ok(()))),
        Some(ErrorCode::UNKNOWN_SERVER_ERROR)
    );
}

/// What the driver may report next: usually what the step asked for (with a random outcome),
/// sometimes another kind of report (a driver bug).
#[derive(Clone, Debug)]
struct Choice {
    /// Report this kind (0–4) instead of the one the step asked for.
    wrong: Option<u8>,
    member: Result<i32, ErrorCode>,
    described: Option<(i64, i16, &'static str, bool)>,
    partitions: bool,
    registered: ErrorCode,
    staged: bool,
}

fn choice() -> impl Strategy<Value = Choice> {
    let codes = prop_oneof![
        3 => Just(ErrorCode::NONE),
        1 => Just(ErrorCode::INVALID_PRODUCER_ID_MAPPING),
        1 => Just(ErrorCode::PRODUCER_FENCED),
        1 => Just(ErrorCode::CONCURRENT_TRANSACTIONS),
        1 => Just(ErrorCode::COORDINATOR_NOT_AVAILABLE),
    ];
    (
        prop_oneof![6 => Just(None), 1 => (0..5u8).prop_map(Some)],
        prop_oneof![
            3 => Just(Ok(3)),
            1 => (1..5i32).prop_map(Ok),
            1 => Just(Err(ErrorCode::UNKNOWN_MEMBER_ID))
        ],
        proptest::option::of((
            4..7i64,
            1..4i16,
            prop_oneof![Just("Ongoing"), Just("PrepareCommit"), Just("Empty")],
            any::<bool>(),
        )),
        prop_oneof![3 => Just(true), 1 => Just(false)],
        codes,
        any::<bool>(),
    )
        .prop_map(
            |(wrong, member, described, partitions, registered, staged)| Choice {
                wrong,
                member,
                described,
                partitions,
                registered,
                staged,
            },
        )
}

fn expected_kind(step: &Step) -> u8 {
    match step {
        Step::MemberEpoch => 0,
        Step::DescribeProducer => 1,
        Step::CheckPartitions => 2,
        Step::Register(_) => 3,
        Step::Stage | Step::Answer(_) => 4,
    }
}

proptest! {
    /// Against the reference order, whatever the driver reports: a registration only after
    /// an accepted member and partitions, a staging only after a registration answered NONE,
    /// success only through a staging that succeeded, and after the answer only refusals of
    /// reports out of order.
    #[test]
    fn the_order_holds_whatever_is_reported(choices in proptest::collection::vec(choice(), 0..10)) {
        let (mut f, mut step) = TxnShareAck::start(5, 2, 3, &keys(3), 2);
        let (mut member_ok, mut partitions_ok, mut registered_ok) = (false, false, false);
        let mut answered = false;
        for c in choices {
            let kind = c.wrong.unwrap_or_else(|| expected_kind(&step));
            let next = match kind {
                0 => {
                    let next = f.member(c.member);
                    if next == Step::CheckPartitions {
                        member_ok = true;
                        prop_assert_eq!(c.member, Ok(3));
                    }
                    next
                }
                1 => {
                    let d = c.described.map(|(pid, epoch, state, unknown)| TransactionDescription {
                        error_code: if unknown { ErrorCode::TRANSACTIONAL_ID_NOT_FOUND } else { ErrorCode::NONE },
                        ..described(pid, epoch, state)
                    });
                    f.described(d.as_ref())
                }
                2 => {
                    let next = f.partitions_checked(if c.partitions { Ok(()) } else {
                        Err(Refusal::partition(ErrorCode::UNKNOWN_TOPIC_ID, keys(1)[0].clone(), "x"))
                    });
                    if matches!(next, Step::Register(_)) { partitions_ok = c.partitions; }
                    next
                }
                3 => {
                    let next = f.registered(c.registered);
                    if next == Step::Stage { registered_ok = c.registered == ErrorCode::NONE; }
                    next
                }
                _ => f.staged(if c.staged { Ok(()) } else {
                    Err(Refusal::request(ErrorCode::INVALID_RECORD_STATE, "x"))
                }),
            };
            if let Step::Register(_) = next {
                prop_assert!(member_ok && partitions_ok, "registered before the checks");
            }
            if next == Step::Stage {
                prop_assert!(member_ok && partitions_ok && registered_ok, "staged before registering");
            }
            if let Step::Answer(result) = &next {
                if answered {
                    prop_assert_eq!(result.as_ref().map_err(|r| r.code), Err(ErrorCode::UNKNOWN_SERVER_ERROR));
                } else if result.is_ok() {
                    prop_assert!(step == Step::Stage && c.staged && kind == 4, "success without a staging");
                }
                answered = true;
            }
            step = next;
        }
    }
}
