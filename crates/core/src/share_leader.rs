//! The share-partition leader's orders of work around the share-state coordinator, without
//! I/O: the broker's share-partition leader (`crates/broker/src/share.rs`) and the simulator
//! (`crates/sim`) both drive them, so the order the simulator checks is the order that ships.
//!
//! Each order is a chain of values that consume themselves: the driver can only reach the next
//! step by reporting the one before, and a machine is only handed back for use once the write
//! that persists it has been reported durable.
//!
//! - [`Loading`] — a share partition's machine on first use: the state the share-state
//!   coordinator reads back, else an initialization at the start offset the driver picks
//!   (`share.auto.offset.reset`) persisted first; a loaded state that needs a write (a state
//!   epoch bump, locks dropped) is persisted before the machine is used.
//! - [`acknowledge`], [`acquire`] and every other change to a live machine — the answer held
//!   as [`Unpersisted`] until the state write the change returned is reported durable.
//! - [`Staging`] — a TxnShareAcknowledge's staging (KIP-1289 §3.2 step 8): on copies of the
//!   machines, all or nothing; the stagings persisted as the producer's transactional batch in
//!   `__share_group_state`; only then the copies handed back to be put in place. Answering or
//!   installing first would let a crash lose a staging the client was told about.
//!
//! Must not: hand back a machine whose state write was not reported durable; stage anything
//! when one share partition refuses.

use crate::group_coordinator::ErrorCode;
use crate::share_coordinator::shard::StageRefused;
use crate::share_coordinator::{
    InitializeState, ReadState, SharePartitionKey, WriteState, UNINITIALIZED_START_OFFSET,
};
use crate::share_partition::{
    stage_all, AckBatch, AcquireRequest, AcquiredRecords, ShareError, SharePartition,
    SharePartitionConfig, StateWrite, Violation,
};
use crate::txn_share_ack::Refusal;

/// Loading a share partition's machine, from what the share-state coordinator read back.
#[derive(Debug)]
#[must_use = "a loaded machine is used only once its writes are persisted"]
pub enum Loading {
    /// The persisted state, usable as it is.
    Ready(SharePartition),
    /// The persisted state, with a write to persist before the machine is used.
    Persist(Unpersisted<SharePartition>),
    /// No state (or an uninitialized one): pick the start offset.
    PickStart(Uninitialized),
}

/// What a change to a share partition answers, held until the state write the change
/// returned is durable: the answer is only reachable through [`Unpersisted::persisted`].
#[derive(Debug)]
#[must_use = "answer only once the write is persisted"]
pub struct Unpersisted<T> {
    answer: T,
    write: Option<StateWrite>,
}

/// A share partition without state, waiting for its start offset.
#[derive(Debug)]
#[must_use]
pub struct Uninitialized {
    config: SharePartitionConfig,
    state_epoch: i32,
}

/// An initialization to persist before the machine exists.
#[derive(Debug)]
#[must_use]
pub struct Initializing {
    config: SharePartitionConfig,
    state: InitializeState,
}

impl Loading {
    /// The first step once the share-state coordinator answered a read of the share
    /// partition (None: it has no state).
    ///
    /// # Errors
    /// The persisted state is unusable (or the config invalid).
    pub fn read(
        config: SharePartitionConfig,
        persisted: Option<&ReadState>,
    ) -> Result<Loading, ShareError> {
        match persisted {
            Some(read) if read.start_offset != UNINITIALIZED_START_OFFSET => {
                let (machine, write) = SharePartition::from_persisted(config, read)?;
                Ok(match write {
                    None => Loading::Ready(machine),
                    Some(write) => Loading::Persist(Unpersisted {
                        answer: machine,
                        write: Some(write),
                    }),
                })
            }
            other => Ok(Loading::PickStart(Uninitialized {
                config,
                state_epoch: other.map_or(0, |read| read.state_epoch),
            })),
        }
    }
}

impl<T> Unpersisted<T> {
    /// The write to persist, by the leader at `leader_epoch` (None: nothing to persist).
    pub fn write(&self, leader_epoch: i32) -> Option<WriteState> {
        self.write.as_ref().map(|w| w.to_write_state(leader_epoch))
    }

    /// The share-state coordinator's outcome for [`Unpersisted::write`]: the answer once it
    /// is durable.
    ///
    /// # Errors
    /// The outcome's error: the request that made the change fails with it.
    pub fn persisted<E>(self, outcome: Result<(), E>) -> Result<T, E> {
        outcome.map(|()| self.answer)
    }
}

/// Why a share partition refused acknowledgements.
#[derive(Debug, Clone)]
pub enum AckRefused {
    /// The share partition has no machine: nothing of it was ever acquired.
    NoMachine,
    /// The machine refused; nothing changed.
    Refused(ShareError),
}

impl AckRefused {
    pub fn error_code(&self) -> ErrorCode {
        match self {
            AckRefused::NoMachine => ErrorCode::INVALID_RECORD_STATE,
            AckRefused::Refused(e) => e.error_code(),
        }
    }
}

/// A ShareAcknowledge's (or a ShareFetch's) acknowledgements of `member_id` on one share
/// partition, answered once persisted.
///
/// # Errors
/// No machine (INVALID_RECORD_STATE) or the machine's refusal; nothing changed.
pub fn acknowledge(
    machine: Option<&mut SharePartition>,
    member_id: &str,
    batches: &[AckBatch],
    now_ms: i64,
) -> Result<Unpersisted<()>, AckRefused> {
    let machine = machine.ok_or(AckRefused::NoMachine)?;
    let write = machine
        .acknowledge(member_id, batches, now_ms)
        .map_err(AckRefused::Refused)?;
    Ok(Unpersisted { answer: (), write })
}

/// A ShareFetch's acquisition on one share partition: the records acquired, answered once
/// persisted (the acquisition's write archives records, moves the start, expires locks).
///
/// # Errors
/// The machine's refusal; nothing changed.
pub fn acquire(
    machine: &mut SharePartition,
    request: &AcquireRequest<'_>,
) -> Result<Unpersisted<Vec<AcquiredRecords>>, ShareError> {
    let acquisition = machine.acquire(request)?;
    Ok(Unpersisted {
        answer: acquisition.records,
        write: acquisition.write,
    })
}

/// Any other change a share-partition leader makes to a machine (a member's records
/// released, locks expired, the log start moved), as a write to persist before it counts.
pub fn changed(write: Option<StateWrite>) -> Unpersisted<()> {
    Unpersisted { answer: (), write }
}

impl Uninitialized {
    /// The share partition starts at `start_offset`.
    pub fn start_at(self, start_offset: i64) -> Initializing {
        Initializing {
            config: self.config,
            state: InitializeState {
                state_epoch: self.state_epoch,
                start_offset,
            },
        }
    }
}

impl Initializing {
    /// The initialization to persist.
    pub fn state(&self) -> InitializeState {
        self.state
    }

    /// The initialization is durable: the new machine, to put in place.
    ///
    /// # Errors
    /// The config or start offset is invalid.
    pub fn initialized(self) -> Result<SharePartition, ShareError> {
        SharePartition::new(self.config, self.state.start_offset, self.state.state_epoch)
    }
}

/// Why a staging's write was not persisted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotPersisted {
    /// The share-state coordinator refused it.
    Refused(StageRefused),
    /// The coordinator could not be reached or its append failed.
    Unavailable,
}

/// One share partition of a staging: its key, its machine (None: it has none), the batches,
/// and whether the transaction carries the dead letters of its REJECTs.
pub type StagePart<'a> = (
    &'a SharePartitionKey,
    Option<&'a SharePartition>,
    &'a [AckBatch],
    bool,
);

/// One TxnShareAcknowledge's staging, staged on copies and waiting to be persisted.
#[derive(Debug)]
#[must_use = "a staging takes effect only once persisted"]
pub struct Staging {
    producer_id: i64,
    producer_epoch: i16,
    staged: Vec<(SharePartitionKey, SharePartition, Option<StateWrite>)>,
}

/// Why nothing was staged: the share partition at `index` of the request refused.
#[derive(Debug, Clone)]
pub struct NotStaged {
    pub index: usize,
    pub key: SharePartitionKey,
    /// None: the share partition has no machine (nothing of it was ever acquired).
    pub error: Option<ShareError>,
}

impl NotStaged {
    /// The invariant a copy found broken: the driver stops the machine it copied.
    pub fn violation(&self) -> Option<&Violation> {
        self.error.as_ref().and_then(ShareError::violation)
    }

    /// The answer.
    pub fn refusal(&self) -> Refusal {
        match &self.error {
            None => Refusal::partition(
                ErrorCode::INVALID_RECORD_STATE,
                self.key.clone(),
                "no records of this share partition are acquired",
            ),
            Some(e) => Refusal::partition(e.error_code(), self.key.clone(), e.to_string()),
        }
    }
}

impl Staging {
    /// Stages `member_id`'s batches of each share partition on a copy of its machine (None:
    /// the partition has none), all or nothing, for the producer's transaction; each part's
    /// flag says whether the transaction carries the dead letters of its REJECTs.
    ///
    /// # Errors
    /// The first share partition that refused; nothing is staged.
    pub fn on_copies<'a>(
        parts: impl IntoIterator<Item = StagePart<'a>>,
        now_ms: i64,
        member_id: &str,
        producer_id: i64,
        producer_epoch: i16,
    ) -> Result<Staging, NotStaged> {
        let mut keys = Vec::new();
        let mut machines = Vec::new();
        for (index, (key, machine, batches, dead_lettered)) in parts.into_iter().enumerate() {
            let Some(machine) = machine else {
                return Err(NotStaged {
                    index,
                    key: key.clone(),
                    error: None,
                });
            };
            keys.push(key.clone());
            machines.push((machine, batches, dead_lettered));
        }
        let copies = stage_all(machines, now_ms, member_id, (producer_id, producer_epoch))
            .map_err(|(index, e)| NotStaged {
                index,
                key: keys[index].clone(),
                error: Some(e),
            })?;
        Ok(Staging {
            producer_id,
            producer_epoch,
            staged: keys
                .into_iter()
                .zip(copies)
                .map(|(key, (copy, write))| (key, copy, write))
                .collect(),
        })
    }

    /// The producer whose transactional batch persists the stagings.
    pub fn producer(&self) -> (i64, i16) {
        (self.producer_id, self.producer_epoch)
    }

    /// The staged copies, in the request's order (what is not persisted yet: the broker reads
    /// a copy's staged REJECTs to write the dead letters its transaction carries).
    pub fn copies(&self) -> impl Iterator<Item = (&SharePartitionKey, &SharePartition)> + '_ {
        self.staged.iter().map(|(key, copy, _)| (key, copy))
    }

    /// The writes to persist together, by the leader at `leader_epoch` (empty: nothing to
    /// persist, as for empty batches).
    pub fn writes(&self, leader_epoch: i32) -> Vec<(SharePartitionKey, WriteState)> {
        self.staged
            .iter()
            .filter_map(|(key, _, write)| {
                write
                    .as_ref()
                    .map(|w| (key.clone(), w.to_write_state(leader_epoch)))
            })
            .collect()
    }

    /// The share-state coordinator's outcome for [`Staging::writes`]: when durable, the staged
    /// copies to put in place of the machines, in the request's order.
    ///
    /// # Errors
    /// The refusal to answer; nothing was staged.
    pub fn persisted(
        self,
        outcome: Result<(), NotPersisted>,
    ) -> Result<Vec<(SharePartitionKey, SharePartition)>, Refusal> {
        match outcome {
            Ok(()) => Ok(self
                .staged
                .into_iter()
                .map(|(key, copy, _)| (key, copy))
                .collect()),
            Err(NotPersisted::Refused(StageRefused::State { key, error })) => Err(
                Refusal::partition(error.error_code(), key, error.to_string()),
            ),
            Err(NotPersisted::Refused(StageRefused::Fenced { .. })) => Err(Refusal::request(
                ErrorCode::PRODUCER_FENCED,
                "the transaction ended before the acknowledgements were staged",
            )),
            Err(NotPersisted::Unavailable) => Err(Refusal::request(
                ErrorCode::KAFKA_STORAGE_ERROR,
                "the staging could not be persisted",
            )),
        }
    }
}

#[cfg(test)]
#[path = "share_leader_tests.rs"]
mod tests;
