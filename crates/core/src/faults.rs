//! Known bugs, re-introduced on purpose behind a test-only switch, so that the simulator
//! (`crates/sim`) can show it catches each of them (issue 13, point 5).
//!
//! Compiled in only with the `fault-injection` feature (which only `shoal-sim` enables); without
//! it [`active`] is a constant `false` and every guarded branch disappears. With it, a fault is
//! off until a thread turns it on with `set`, and it is per thread, so tests running in
//! parallel do not see each other's faults.

/// One known bug.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Fault {
    /// The KIP-1289 draft's marker match: a marker resolves only stagings of exactly its
    /// epoch. Under transaction version 2 the marker carries the bumped epoch, so nothing ever
    /// resolves.
    ExactEpochMarker,
    /// The acquisition lock keeps running after staging and its expiry makes the TX_PENDING
    /// record AVAILABLE again.
    LockExpiresTxPending,
    /// A marker resolves every staging on the share partition, whichever producer staged it.
    MarkerIgnoresProducer,
    /// The coordinator runtime's order of work (`coordinator::Passes`) answers a pass before
    /// its records are durable: they are appended with the next pass instead.
    ReplyBeforeDurable,
    /// The same order broken for KIP-1289 stagings only: a pass's transactional batches (a
    /// TxnShareAcknowledge's stagings on `__share_group_state`) wait for the next pass, the
    /// answer that they are staged does not.
    StageBeforePersist,
    /// A transaction marker on a coordinator's topic is applied (by the shard, then by the
    /// live share partitions its answer reaches) before it is appended: its control batch
    /// waits for the next pass.
    MarkerBeforeAppend,
    /// An InitProducerId with `KeepPreparedTxn` (KIP-939) aborts the prepared transaction as
    /// one without it does, instead of keeping it for the new incarnation to complete.
    KeepPreparedAborts,
    /// The COMMIT of a REJECT whose transaction carried its dead letter (decision 0022
    /// point 6) makes the record ARCHIVING, as if it had none: a second dead letter follows.
    CommitArchivesCarried,
}

impl Fault {
    pub const ALL: [Fault; 8] = [
        Fault::ExactEpochMarker,
        Fault::LockExpiresTxPending,
        Fault::MarkerIgnoresProducer,
        Fault::ReplyBeforeDurable,
        Fault::StageBeforePersist,
        Fault::MarkerBeforeAppend,
        Fault::KeepPreparedAborts,
        Fault::CommitArchivesCarried,
    ];

    fn bit(self) -> u8 {
        match self {
            Fault::ExactEpochMarker => 1,
            Fault::LockExpiresTxPending => 2,
            Fault::MarkerIgnoresProducer => 4,
            Fault::ReplyBeforeDurable => 8,
            Fault::StageBeforePersist => 16,
            Fault::MarkerBeforeAppend => 32,
            Fault::KeepPreparedAborts => 64,
            Fault::CommitArchivesCarried => 128,
        }
    }
}

#[cfg(feature = "fault-injection")]
thread_local! {
    static ACTIVE: std::cell::Cell<u8> = const { std::cell::Cell::new(0) };
}

/// Whether `fault` is switched on for this thread.
#[cfg(feature = "fault-injection")]
pub fn active(fault: Fault) -> bool {
    ACTIVE.with(|a| a.get() & fault.bit() != 0)
}

/// Whether `fault` is switched on: never, without the `fault-injection` feature.
#[cfg(not(feature = "fault-injection"))]
#[inline(always)]
pub fn active(fault: Fault) -> bool {
    let _ = fault.bit();
    false
}

/// Switches `fault` on or off for this thread.
#[cfg(feature = "fault-injection")]
pub fn set(fault: Fault, on: bool) {
    ACTIVE.with(|a| {
        let bits = if on {
            a.get() | fault.bit()
        } else {
            a.get() & !fault.bit()
        };
        a.set(bits);
    });
}

/// Switches every fault off for this thread.
#[cfg(feature = "fault-injection")]
pub fn clear() {
    ACTIVE.with(|a| a.set(0));
}
