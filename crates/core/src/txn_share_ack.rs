//! The order of work of a TxnShareAcknowledge (KIP-1289 §3.2, steps 5–8) once the request is
//! well formed, without I/O: the broker's handler and the simulator (`crates/sim`) both drive
//! it, so the order the simulator checks is the order that ships.
//!
//! [`TxnShareAck::start`] gives the first [`Step`]; the driver does what the step asks (a call
//! to a coordinator, a lookup, the staging) and reports the outcome to the method the step
//! names, which gives the next step, until [`Step::Answer`]:
//!
//! 1. [`Step::MemberEpoch`] — the member (step 6), checked first because it has no side
//!    effect, so a refused member registers nothing. Unknown group: GROUP_ID_NOT_FOUND; not a
//!    member: UNKNOWN_MEMBER_ID; an older epoch than the member's: STALE_MEMBER_EPOCH; a newer
//!    one: FENCED_MEMBER_EPOCH.
//! 2. [`Step::DescribeProducer`], only when the member was refused: the producer's refusal
//!    (step 5) takes precedence over the member's, so the driver describes the transactional
//!    id and the answer is the producer's error if it has one (TRANSACTIONAL_ID_NOT_FOUND,
//!    INVALID_PRODUCER_ID_MAPPING, PRODUCER_FENCED, CONCURRENT_TRANSACTIONS while the
//!    transaction completes), else the member's.
//! 3. [`Step::CheckPartitions`] — each share partition's topic and leadership (step 7), the
//!    driver's to judge.
//! 4. [`Step::Register`] — the `__share_group_state` partitions of the share partitions added
//!    to the producer's transaction (step 7, transaction-version-2 style), which checks the
//!    producer as any transactional request is checked. An unknown transactional id comes back
//!    as INVALID_PRODUCER_ID_MAPPING from the coordinator; the spec wants
//!    TRANSACTIONAL_ID_NOT_FOUND, so the producer is described to tell them apart.
//! 5. [`Step::Stage`] — staging on copies, all or nothing, persisted before it is answered
//!    (step 8; `share_leader::Staging` and the share-state coordinator).
//!
//! Must not: register anything for a request a member check refuses; stage before the state
//! partitions are registered (a marker would not reach them, and the staging would stay
//! TX_PENDING for ever).

use std::collections::BTreeSet;

use crate::group_coordinator::ErrorCode;
use crate::share_coordinator::{state_partition, SharePartitionKey};
use crate::txn_coordinator::TransactionDescription;

/// Why the request staged nothing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub code: ErrorCode,
    /// The share partition refused, if the refusal is one partition's.
    pub key: Option<SharePartitionKey>,
    pub message: String,
}

impl Refusal {
    /// A refusal of the whole request.
    pub fn request(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            key: None,
            message: message.into(),
        }
    }

    /// A refusal of one share partition (nothing of the request is staged either).
    pub fn partition(code: ErrorCode, key: SharePartitionKey, message: impl Into<String>) -> Self {
        Self {
            code,
            key: Some(key),
            message: message.into(),
        }
    }
}

/// What the driver does next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Ask the group coordinator for the member's current epoch; report it with
    /// [`TxnShareAck::member`].
    MemberEpoch,
    /// Describe the transactional id; report it with [`TxnShareAck::described`].
    DescribeProducer,
    /// Check each share partition's topic and leadership; report with
    /// [`TxnShareAck::partitions_checked`].
    CheckPartitions,
    /// Add these `__share_group_state` partitions to the producer's transaction; report the
    /// coordinator's error code with [`TxnShareAck::registered`].
    Register(Vec<i32>),
    /// Stage the acknowledgements, all or nothing, and persist them; report with
    /// [`TxnShareAck::staged`].
    Stage,
    /// Answer: staged, or refused with nothing staged.
    Answer(Result<(), Refusal>),
}

/// Where the request is.
#[derive(Clone, Debug, PartialEq, Eq)]
enum At {
    Member,
    /// Describing the producer, then answering its refusal or this one.
    Producer(Option<Refusal>),
    Partitions,
    Registering,
    Staging,
    Answered,
}

/// One TxnShareAcknowledge's order of work.
#[derive(Clone, Debug)]
pub struct TxnShareAck {
    member_epoch: i32,
    producer_id: i64,
    producer_epoch: i16,
    state_partitions: Vec<i32>,
    at: At,
}

/// The producer's refusal by its transaction's description (step 5), if any.
fn producer_refusal(
    described: &TransactionDescription,
    producer_id: i64,
    producer_epoch: i16,
) -> Option<Refusal> {
    let refuse = |code: ErrorCode| Some(Refusal::request(code, producer_message(code)));
    if described.error_code != ErrorCode::NONE {
        return refuse(described.error_code);
    }
    if described.producer_id != producer_id {
        return refuse(ErrorCode::INVALID_PRODUCER_ID_MAPPING);
    }
    if described.producer_epoch != producer_epoch {
        return refuse(ErrorCode::PRODUCER_FENCED);
    }
    if described.state == "PrepareCommit" || described.state == "PrepareAbort" {
        return refuse(ErrorCode::CONCURRENT_TRANSACTIONS);
    }
    None
}

fn producer_message(code: ErrorCode) -> &'static str {
    match code {
        ErrorCode::TRANSACTIONAL_ID_NOT_FOUND => "unknown transactional id",
        ErrorCode::INVALID_PRODUCER_ID_MAPPING => {
            "the producer id does not match the transactional id"
        }
        ErrorCode::PRODUCER_FENCED => "the producer epoch is not the transactional id's",
        ErrorCode::CONCURRENT_TRANSACTIONS => "the transaction is completing",
        ErrorCode::TRANSACTION_ABORTABLE => "the transaction cannot take more partitions",
        ErrorCode::COORDINATOR_NOT_AVAILABLE => "the transaction coordinator is not available",
        _ => "the transaction coordinator refused the request",
    }
}

impl TxnShareAck {
    /// A request of `producer_id` at `producer_epoch` staging the acknowledgements of the
    /// member at `member_epoch` on the share partitions `keys` (distinct), whose state lives
    /// in `state_partitions` partitions of `__share_group_state`. Returns the machine and its
    /// first step.
    pub fn start(
        producer_id: i64,
        producer_epoch: i16,
        member_epoch: i32,
        keys: &[SharePartitionKey],
        state_partitions: u32,
    ) -> (Self, Step) {
        let partitions: BTreeSet<i32> = keys
            .iter()
            .map(|k| state_partition(k, state_partitions))
            .collect();
        let flow = Self {
            member_epoch,
            producer_id,
            producer_epoch,
            state_partitions: partitions.into_iter().collect(),
            at: At::Member,
        };
        (flow, Step::MemberEpoch)
    }

    fn answer(&mut self, result: Result<(), Refusal>) -> Step {
        self.at = At::Answered;
        Step::Answer(result)
    }

    /// A step reported out of order: a bug of the driver, answered as one.
    fn out_of_order(&mut self) -> Step {
        self.answer(Err(Refusal::request(
            ErrorCode::UNKNOWN_SERVER_ERROR,
            "TxnShareAcknowledge steps out of order",
        )))
    }

    /// The member's current epoch, or why the group coordinator has none
    /// (GROUP_ID_NOT_FOUND, UNKNOWN_MEMBER_ID, COORDINATOR_NOT_AVAILABLE).
    pub fn member(&mut self, current: Result<i32, ErrorCode>) -> Step {
        if self.at != At::Member {
            return self.out_of_order();
        }
        let refusal = match current {
            Ok(epoch) if epoch == self.member_epoch => None,
            Ok(epoch) if self.member_epoch < epoch => Some(Refusal::request(
                ErrorCode::STALE_MEMBER_EPOCH,
                "the member epoch is older than the member's",
            )),
            Ok(_) => Some(Refusal::request(
                ErrorCode::FENCED_MEMBER_EPOCH,
                "the member epoch is newer than the member's",
            )),
            Err(ErrorCode::GROUP_ID_NOT_FOUND) => Some(Refusal::request(
                ErrorCode::GROUP_ID_NOT_FOUND,
                "no such share group",
            )),
            Err(ErrorCode::COORDINATOR_NOT_AVAILABLE) => Some(Refusal::request(
                ErrorCode::COORDINATOR_NOT_AVAILABLE,
                "the group coordinator is not available",
            )),
            Err(_) => Some(Refusal::request(
                ErrorCode::UNKNOWN_MEMBER_ID,
                "not a member of the share group",
            )),
        };
        match refusal {
            None => {
                self.at = At::Partitions;
                Step::CheckPartitions
            }
            Some(refusal) => {
                self.at = At::Producer(Some(refusal));
                Step::DescribeProducer
            }
        }
    }

    /// The producer's transaction as the transaction coordinator describes it, or None when
    /// it could not answer.
    pub fn described(&mut self, described: Option<&TransactionDescription>) -> Step {
        let At::Producer(pending) = std::mem::replace(&mut self.at, At::Answered) else {
            return self.out_of_order();
        };
        let producer = match described {
            None => Some(Refusal::request(
                ErrorCode::COORDINATOR_NOT_AVAILABLE,
                producer_message(ErrorCode::COORDINATOR_NOT_AVAILABLE),
            )),
            Some(d) => producer_refusal(d, self.producer_id, self.producer_epoch),
        };
        match (producer, pending) {
            (Some(refusal), _) => self.answer(Err(refusal)),
            (None, Some(member)) => self.answer(Err(member)),
            // Described after a registration refused the mapping, yet fine now: the mapping
            // refusal stands.
            (None, None) => self.answer(Err(Refusal::request(
                ErrorCode::INVALID_PRODUCER_ID_MAPPING,
                producer_message(ErrorCode::INVALID_PRODUCER_ID_MAPPING),
            ))),
        }
    }

    /// Every share partition exists and is led here, or the first that is not.
    pub fn partitions_checked(&mut self, checked: Result<(), Refusal>) -> Step {
        if self.at != At::Partitions {
            return self.out_of_order();
        }
        match checked {
            Ok(()) => {
                self.at = At::Registering;
                Step::Register(self.state_partitions.clone())
            }
            Err(refusal) => self.answer(Err(refusal)),
        }
    }

    /// The transaction coordinator's answer to the registration (its error code; NONE when
    /// the partitions are in the transaction).
    pub fn registered(&mut self, code: ErrorCode) -> Step {
        if self.at != At::Registering {
            return self.out_of_order();
        }
        match code {
            ErrorCode::NONE => {
                self.at = At::Staging;
                Step::Stage
            }
            ErrorCode::INVALID_PRODUCER_ID_MAPPING => {
                self.at = At::Producer(None);
                Step::DescribeProducer
            }
            code => self.answer(Err(Refusal::request(code, producer_message(code)))),
        }
    }

    /// The staging's outcome: staged and persisted, or refused with nothing staged.
    pub fn staged(&mut self, staged: Result<(), Refusal>) -> Step {
        if self.at != At::Staging {
            return self.out_of_order();
        }
        self.answer(staged)
    }
}

#[cfg(test)]
#[path = "txn_share_ack_tests.rs"]
mod tests;
