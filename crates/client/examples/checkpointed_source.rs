//! A stream processor's share-group source with checkpoints (KIP-1289): reads INPUT as a
//! member of share group GROUP (explicit acknowledgement), folds each record into its state
//! (a count, and a sum of the values that are decimal integers), and acknowledges nothing
//! until a checkpoint. Every `--checkpoint-ms` (default 1000; keep it well below the group's
//! record lock duration, 30 s by default) it commits the ACCEPTs of every record read since
//! the last checkpoint in one transaction of their own, with a
//! `TransactionalShareAcknowledger` — the records are acknowledged exactly when the state that
//! includes them is checkpointed. A failed checkpoint (a rebalance in between: abortable)
//! rolls the state back to the last checkpoint and the records come back. It runs until
//! killed, printing one line per checkpoint to stderr: `checkpoint C: R records acknowledged
//! (total T, sum S)`.
//!
//! ```text
//! cargo run --release -p shoal-client --example checkpointed_source -- \
//!     --bootstrap 127.0.0.1:9092 --input amounts --group amount-source \
//!     --transactional-id amount-source-1 [--checkpoint-ms 1000]
//! ```
//!
//! A real processor writes its state snapshot durably before the acknowledgements commit
//! (here the state lives in memory only). As `exactly_once_pipeline`, it sets the group's
//! `share.auto.offset.reset` to `earliest` first; a fatal error (another instance with the
//! transactional id) exits non-zero.

use std::time::{Duration, Instant};

use anyhow::bail;
use shoal_client::producer::{ProducerConfig, TransactionalShareAcknowledger};
use shoal_client::share_consumer::{AcknowledgeType, ShareAcknowledgements, ShareGroupMetadata};
use shoal_client::ErrorClass;

mod support;

const CLIENT_ID: &str = "shoal-example-checkpointed-source";

#[global_allocator]
static ALLOC: shoal_protocol::alloc::ReserveLazily = shoal_protocol::alloc::ReserveLazily;

const USAGE: &str = "usage: checkpointed_source --bootstrap B --input IN --group G \
                     --transactional-id TID [--checkpoint-ms MS]";

/// What the processor computes.
#[derive(Clone, Copy, Default)]
struct State {
    records: u64,
    sum: i64,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let flags = support::Flags::parse(USAGE, &[])?;
    let bootstrap = flags.required("bootstrap")?;
    let input = flags.required("input")?;
    let group = flags.required("group")?;
    let transactional_id = flags.required("transactional-id")?;
    let interval = Duration::from_millis(flags.number("checkpoint-ms", 1000)?);

    support::start_at_earliest(&bootstrap, &group).await?;
    let acknowledger = TransactionalShareAcknowledger::new(ProducerConfig::from_properties([
        ("bootstrap.servers", bootstrap.as_str()),
        ("client.id", CLIENT_ID),
        ("transactional.id", transactional_id.as_str()),
    ])?)
    .await?;
    acknowledger.init_transactions().await?;
    let mut consumer =
        support::explicit_consumer(&bootstrap, &group, &input, CLIENT_ID, 500).await?;

    let (mut checkpointed, mut state) = (State::default(), State::default());
    let mut buffered = ShareAcknowledgements::new();
    let mut metadata: Option<ShareGroupMetadata> = None;
    let mut checkpoints = 0u64;
    let mut next = Instant::now() + interval;
    loop {
        let wait = next.saturating_duration_since(Instant::now());
        let records = support::retrying(consumer.poll(wait.max(Duration::from_millis(10)))).await?;
        for r in &records {
            state.records += 1;
            let value = std::str::from_utf8(r.value.as_deref().unwrap_or_default()).ok();
            if let Some(n) = value.and_then(|v| v.trim().parse::<i64>().ok()) {
                state.sum = state.sum.wrapping_add(n);
            }
            consumer.acknowledge(r, AcknowledgeType::Accept)?;
        }
        if !records.is_empty() {
            // Drained before the next poll, which would otherwise carry them.
            metadata.get_or_insert_with(|| consumer.share_group_metadata());
            buffered.extend(consumer.acknowledgements_for_transaction()?)?;
        }
        if Instant::now() < next {
            continue;
        }
        next = Instant::now() + interval;
        let Some(member) = metadata.take() else {
            continue; // nothing read since the last checkpoint
        };
        let acks = std::mem::take(&mut buffered);
        match acknowledger.commit_acknowledgements(&acks, &member).await {
            Ok(()) => {
                checkpoints += 1;
                eprintln!(
                    "checkpoint {checkpoints}: {} records acknowledged (total {}, sum {})",
                    acks.len(),
                    state.records,
                    state.sum
                );
                checkpointed = state;
            }
            Err(e) if e.class() == ErrorClass::Abortable => {
                // Aborted already: the records come back, so the state goes back too.
                eprintln!("checkpoint failed, {} records come back: {e}", acks.len());
                state = checkpointed;
            }
            Err(e) => bail!("checkpoint failed ({:?}): {e}", e.code()),
        }
    }
}
