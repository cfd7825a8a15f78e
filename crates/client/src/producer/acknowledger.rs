//! [`TransactionalShareAcknowledger`]: transactional share acknowledgements for a pipeline
//! that produces nothing itself (KIP-1289 §4) — a stream processor's source that commits
//! what it read on a checkpoint, or a sink that writes elsewhere and must acknowledge each
//! record once.
//!
//! It is a transactional [`Producer`] that sends no records: each
//! [`commit_acknowledgements`](TransactionalShareAcknowledger::commit_acknowledgements) is a
//! whole transaction (begin, TxnShareAcknowledge, EndTxn — three steps, not one request), so
//! the acknowledgements are applied once and survive crashes of the client and the broker
//! like any transaction's. Its transactional id fences an older instance, as a producer's
//! does.
//!
//! With `transaction.two.phase.commit.enable` (KIP-939) a checkpointing source uses it in two
//! phases instead: [`stage_acknowledgements`](TransactionalShareAcknowledger::stage_acknowledgements)
//! after each poll (the records stay TX_PENDING, delivered to nobody), then at a checkpoint
//! [`prepare`](TransactionalShareAcknowledger::prepare), which returns a token to store in
//! the checkpoint, and when the checkpoint is complete
//! [`complete`](TransactionalShareAcknowledger::complete) with it. After a crash the next
//! instance calls [`init_transactions_keep_prepared`](TransactionalShareAcknowledger::init_transactions_keep_prepared)
//! and completes with the token of its last checkpoint: the prepared transaction commits if
//! that checkpoint recorded it, else it aborts and its records are delivered again. Records
//! the same producer sends ([`producer`](TransactionalShareAcknowledger::producer)) between
//! stage and prepare are in the same transaction (a Kafka sink's output).

use super::config::ProducerConfig;
use super::producer::Producer;
use super::transaction::{PreparedOutcome, PreparedTxnState, TxnState};
use crate::error::{Error, ErrorClass};
use crate::share_consumer::{ShareAcknowledgements, ShareGroupMetadata};

/// Commits share acknowledgements in transactions of their own. See the module docs.
#[derive(Debug)]
pub struct TransactionalShareAcknowledger {
    producer: Producer,
}

impl TransactionalShareAcknowledger {
    /// Connects with `config`, which needs a `transactional.id`.
    ///
    /// # Errors
    /// [`Error::Config`] without a transactional id; the errors of [`Producer::new`].
    pub async fn new(config: ProducerConfig) -> Result<TransactionalShareAcknowledger, Error> {
        if config.transactional_id().is_none() {
            return Err(Error::Config {
                key: "transactional.id".into(),
                reason: "a TransactionalShareAcknowledger needs one".into(),
            });
        }
        Ok(TransactionalShareAcknowledger {
            producer: Producer::new(config).await?,
        })
    }

    /// Gets the producer id and epoch for the transactional id, fencing an older instance
    /// and finishing (aborting) a transaction it left open.
    ///
    /// # Errors
    /// As [`Producer::init_transactions`].
    pub async fn init_transactions(&self) -> Result<(), Error> {
        self.producer.init_transactions().await
    }

    /// Applies `acks` (of the member `metadata` names) in one transaction. On an abortable
    /// failure the transaction is aborted before this returns — the records become
    /// available again — and the error says why (STALE_MEMBER_EPOCH after a rebalance:
    /// poll again and acknowledge what comes back). Nothing to acknowledge commits nothing.
    ///
    /// # Errors
    /// The errors of [`Producer::send_share_acknowledgements_to_transaction`] and
    /// [`Producer::commit_transaction`]. After a fatal one (PRODUCER_FENCED) only
    /// [`close`](TransactionalShareAcknowledger::close) is left. A commit that times out
    /// leaves its outcome to the coordinator: call it again with the same acknowledgements
    /// or [`abort_acknowledgements`](TransactionalShareAcknowledger::abort_acknowledgements).
    pub async fn commit_acknowledgements(
        &self,
        acks: &ShareAcknowledgements,
        metadata: &ShareGroupMetadata,
    ) -> Result<(), Error> {
        if acks.is_empty() {
            return Ok(());
        }
        self.producer.begin_transaction()?;
        let result = match self
            .producer
            .send_share_acknowledgements_to_transaction(acks, metadata)
            .await
        {
            Ok(()) => self.producer.commit_transaction().await,
            Err(e) => Err(e),
        };
        match result {
            Err(e) if e.class() == ErrorClass::Abortable => {
                self.producer.abort_transaction().await?;
                Err(e)
            }
            other => other,
        }
    }

    /// Aborts the transaction a failed or interrupted commit left open (a no-op when none
    /// is): its acknowledgements are undone.
    ///
    /// # Errors
    /// As [`Producer::abort_transaction`], except that no open transaction is not an error.
    pub async fn abort_acknowledgements(&self) -> Result<(), Error> {
        if self.producer.transaction_state().is_open() {
            self.producer.abort_transaction().await
        } else {
            Ok(())
        }
    }

    /// As [`init_transactions`](Self::init_transactions), but a transaction the previous
    /// instance prepared is kept, still holding its acknowledgements TX_PENDING, for
    /// [`complete`](Self::complete) to commit or abort (KIP-939).
    ///
    /// # Errors
    /// As [`Producer::init_transactions_keep_prepared`].
    pub async fn init_transactions_keep_prepared(&self) -> Result<(), Error> {
        self.producer.init_transactions_keep_prepared().await
    }

    /// Stages `acks` (of the member `metadata` names) in the current transaction, beginning
    /// one if none is open: the records become TX_PENDING until the transaction ends. Call
    /// after each poll, then [`prepare`](Self::prepare) at a checkpoint. Nothing to
    /// acknowledge stages nothing.
    ///
    /// # Errors
    /// As [`Producer::send_share_acknowledgements_to_transaction`]; after an abortable error
    /// the transaction must be aborted ([`abort_acknowledgements`](Self::abort_acknowledgements)).
    /// [`Error::Transaction`] while a prepared transaction waits for completion.
    pub async fn stage_acknowledgements(
        &self,
        acks: &ShareAcknowledgements,
        metadata: &ShareGroupMetadata,
    ) -> Result<(), Error> {
        if acks.is_empty() {
            return Ok(());
        }
        if self.producer.transaction_state() == TxnState::Ready {
            self.producer.begin_transaction()?;
        }
        self.producer
            .send_share_acknowledgements_to_transaction(acks, metadata)
            .await
    }

    /// Prepares the transaction of the staged acknowledgements (and of anything the producer
    /// sent in it), beginning an empty one if none is open; the token goes into the
    /// checkpoint. See [`Producer::prepare_transaction`].
    ///
    /// # Errors
    /// As [`Producer::prepare_transaction`].
    pub async fn prepare(&self) -> Result<PreparedTxnState, Error> {
        if self.producer.transaction_state() == TxnState::Ready {
            self.producer.begin_transaction()?;
        }
        self.producer.prepare_transaction().await
    }

    /// Commits the prepared transaction if `state` is its token, else aborts it; nothing
    /// prepared is a no-op. See [`Producer::complete_transaction`].
    ///
    /// # Errors
    /// As [`Producer::complete_transaction`].
    pub async fn complete(&self, state: &PreparedTxnState) -> Result<PreparedOutcome, Error> {
        self.producer.complete_transaction(state).await
    }

    /// The producer underneath (its cluster, producer id and epoch).
    pub fn producer(&self) -> &Producer {
        &self.producer
    }

    /// Closes the connections; an open transaction is left to time out (aborted by the
    /// coordinator), as a producer's is. A two-phase-commit transaction never times out: it
    /// waits for the next instance to complete it (or for an InitProducerId that does not
    /// keep it, which aborts it).
    pub async fn close(self) {
        self.producer.close().await;
    }
}
