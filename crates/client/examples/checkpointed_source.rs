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
//!
//! **With `--output OUT --checkpoint-file PATH`: end-to-end exactly-once with a prepared
//! transaction (KIP-939 two-phase commit; the broker needs
//! `transaction.two.phase.commit.enable=true`).** One transaction spans every poll between two
//! checkpoints and carries both the acknowledgements (staged after each poll, TX_PENDING) and
//! the Kafka sink's output (`processed:` + the input's value, key and headers kept, to OUT).
//! A checkpoint is the two phases of a checkpointing framework:
//!
//! | this example | Flink |
//! | --- | --- |
//! | `prepare()`: flush, get the token | `snapshotState` (pre-commit) |
//! | write token + state to PATH (fsync, rename) | the checkpoint is stored |
//! | `complete(token)`: commit | `notifyCheckpointComplete` |
//! | start: `init_transactions_keep_prepared`, `complete(token from PATH)` | `initializeState` on restore |
//!
//! Killed anywhere, the next start restores the state from PATH and completes the kept
//! transaction with PATH's token: committed when the checkpoint recorded it (the kill came
//! after the checkpoint), aborted otherwise (its records are delivered again and its outputs
//! never become visible). Every input's output is visible once, and every acknowledgement
//! commits with the state that counted it. Lines: `checkpoint C: R records acknowledged in
//! D ms (total T, sum S)` (D: prepare, checkpoint file, commit), and `recovered: commit|abort|nothing prepared (total T, sum S)`.
//! `shoal verify --pipeline checkpointed` runs it under crashes, some at chosen steps
//! (`SHOAL_CRASH_AT=polled|staged|prepared|checkpointed:N`, see `support::crash_point`);
//! `--broken-abort-on-recover` is a deliberately wrong recovery, for testing that check.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use shoal_client::producer::{
    PreparedOutcome, PreparedTxnState, ProducerConfig, ProducerRecord,
    TransactionalShareAcknowledger,
};
use shoal_client::share_consumer::{
    AcknowledgeType, ShareAcknowledgements, ShareConsumer, ShareGroupMetadata, ShareRecord,
};
use shoal_client::ErrorClass;

mod support;

const CLIENT_ID: &str = "shoal-example-checkpointed-source";

#[global_allocator]
static ALLOC: shoal_protocol::alloc::ReserveLazily = shoal_protocol::alloc::ReserveLazily;

const USAGE: &str = "usage: checkpointed_source --bootstrap B --input IN --group G \
                     --transactional-id TID [--checkpoint-ms MS] \
                     [--output OUT --checkpoint-file PATH]";

/// What the output value starts with (as `exactly_once_pipeline`).
const PREFIX: &str = "processed:";

/// What the processor computes.
#[derive(Clone, Copy, Default)]
struct State {
    records: u64,
    sum: i64,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let flags = support::Flags::parse(USAGE, &["broken-abort-on-recover"])?;
    let bootstrap = flags.required("bootstrap")?;
    let input = flags.required("input")?;
    let group = flags.required("group")?;
    let transactional_id = flags.required("transactional-id")?;
    let interval = Duration::from_millis(flags.number("checkpoint-ms", 1000)?);

    support::start_at_earliest(&bootstrap, &group).await?;
    if let Some(path) = flags.optional("checkpoint-file") {
        let output = flags.required("output")?;
        let settings = Settings {
            bootstrap,
            input,
            output,
            group,
            transactional_id,
            interval,
            path: PathBuf::from(path),
            broken_abort_on_recover: flags.switch("broken-abort-on-recover"),
        };
        return two_phase(settings).await;
    }
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

// ---- two-phase commit (KIP-939) with a checkpoint file ----

struct Settings {
    bootstrap: String,
    input: String,
    output: String,
    group: String,
    transactional_id: String,
    interval: Duration,
    path: PathBuf,
    /// Deliberately wrong (for testing checkers): abort the kept transaction at recovery even
    /// when the checkpoint recorded it, so the checkpointed state counts records that are
    /// delivered and counted again.
    broken_abort_on_recover: bool,
}

/// What the checkpoint file holds: the state and the token of the transaction that carries
/// everything the state counts since the checkpoint before.
#[derive(Clone, Copy, Default)]
struct Checkpoint {
    state: State,
    token: Option<PreparedTxnState>,
}

fn read_checkpoint(path: &Path) -> anyhow::Result<Checkpoint> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Checkpoint::default()),
        Err(e) => return Err(e).with_context(|| format!("read {}", path.display())),
    };
    let mut c = Checkpoint::default();
    for line in text.lines() {
        let (key, value) = line.split_once(' ').unwrap_or((line, ""));
        match key {
            "records" => c.state.records = value.parse()?,
            "sum" => c.state.sum = value.parse()?,
            "token" => c.token = Some(value.parse()?),
            other => bail!("{}: unknown line {other:?}", path.display()),
        }
    }
    Ok(c)
}

/// Writes the checkpoint durably: a temporary file, fsynced, renamed over the old one, and
/// the directory fsynced, so a crash leaves the old checkpoint or the new one.
fn write_checkpoint(path: &Path, c: &Checkpoint) -> anyhow::Result<()> {
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::File::create(&tmp).with_context(|| format!("create {}", tmp.display()))?;
    write!(f, "records {}\nsum {}\n", c.state.records, c.state.sum)?;
    if let Some(token) = c.token {
        writeln!(f, "token {token}")?;
    }
    f.sync_all()?;
    std::fs::rename(&tmp, path)?;
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::File::open(dir)?.sync_all()?;
    Ok(())
}

fn output_of(output: &str, r: &ShareRecord) -> ProducerRecord {
    let mut value = PREFIX.as_bytes().to_vec();
    value.extend_from_slice(r.value.as_deref().unwrap_or_default());
    ProducerRecord {
        topic: output.to_owned(),
        key: r.key.clone(),
        value: Some(value.into()),
        headers: r.headers.clone(),
        ..ProducerRecord::default()
    }
}

/// Restores from the checkpoint and finishes what the previous instance prepared.
async fn recover(s: &Settings) -> anyhow::Result<(TransactionalShareAcknowledger, Checkpoint)> {
    let checkpoint = read_checkpoint(&s.path)?;
    let acknowledger = TransactionalShareAcknowledger::new(ProducerConfig::from_properties([
        ("bootstrap.servers", s.bootstrap.as_str()),
        ("client.id", CLIENT_ID),
        ("transactional.id", s.transactional_id.as_str()),
        ("transaction.two.phase.commit.enable", "true"),
    ])?)
    .await?;
    acknowledger.init_transactions_keep_prepared().await?;
    let outcome = match (
        acknowledger.producer().prepared_transaction(),
        checkpoint.token,
    ) {
        (None, _) => PreparedOutcome::NothingPrepared,
        (Some(_), Some(token)) if !s.broken_abort_on_recover => {
            acknowledger.complete(&token).await?
        }
        (Some(_), _) => {
            // No checkpoint yet: nothing of it was recorded (or the deliberate bug).
            acknowledger.abort_acknowledgements().await?;
            PreparedOutcome::Abort
        }
    };
    let word = match outcome {
        PreparedOutcome::Commit => "commit",
        PreparedOutcome::Abort => "abort",
        _ => "nothing prepared",
    };
    eprintln!(
        "recovered: {word} (total {}, sum {})",
        checkpoint.state.records, checkpoint.state.sum
    );
    Ok((acknowledger, checkpoint))
}

/// Folds one poll into the state and the open transaction: its outputs sent, its ACCEPTs
/// staged.
async fn process(
    s: &Settings,
    acknowledger: &TransactionalShareAcknowledger,
    consumer: &mut ShareConsumer,
    records: &[ShareRecord],
    state: &mut State,
) -> Result<(), shoal_client::Error> {
    for r in records {
        consumer.acknowledge(r, AcknowledgeType::Accept)?;
    }
    let acks = consumer.acknowledgements_for_transaction()?;
    acknowledger
        .stage_acknowledgements(&acks, &consumer.share_group_metadata())
        .await?;
    let mut deliveries = Vec::with_capacity(records.len());
    for r in records {
        deliveries.push(
            acknowledger
                .producer()
                .send(output_of(&s.output, r))
                .await?,
        );
        state.records += 1;
        let value = std::str::from_utf8(r.value.as_deref().unwrap_or_default()).ok();
        if let Some(n) = value.and_then(|v| v.trim().parse::<i64>().ok()) {
            state.sum = state.sum.wrapping_add(n);
        }
    }
    for d in deliveries {
        d.await?;
    }
    Ok(())
}

async fn two_phase(s: Settings) -> anyhow::Result<()> {
    let (acknowledger, mut checkpoint) = recover(&s).await?;
    let mut consumer =
        support::explicit_consumer(&s.bootstrap, &s.group, &s.input, CLIENT_ID, 500).await?;
    let mut state = checkpoint.state;
    let (mut checkpoints, mut since) = (0u64, 0u64);
    let mut next = Instant::now() + s.interval;
    loop {
        let wait = next.saturating_duration_since(Instant::now());
        let records = support::retrying(consumer.poll(wait.max(Duration::from_millis(10)))).await?;
        if !records.is_empty() {
            support::crash_point("polled");
            match process(&s, &acknowledger, &mut consumer, &records, &mut state).await {
                Ok(()) => {
                    since += records.len() as u64;
                    support::crash_point("staged");
                }
                Err(e) if e.class() == ErrorClass::Abortable => {
                    // The transaction aborts: its records come back, the state goes back.
                    eprintln!("transaction failed, back to the last checkpoint: {e}");
                    acknowledger.abort_acknowledgements().await?;
                    (state, since) = (checkpoint.state, 0);
                }
                Err(e) => bail!("processing failed ({:?}): {e}", e.code()),
            }
        }
        if Instant::now() < next {
            continue;
        }
        next = Instant::now() + s.interval;
        if since == 0 {
            continue; // nothing read since the last checkpoint
        }
        // snapshotState: prepare, then store the token with the state.
        let checkpoint_started = Instant::now();
        let token = acknowledger.prepare().await?;
        support::crash_point("prepared");
        checkpoint = Checkpoint {
            state,
            token: Some(token),
        };
        write_checkpoint(&s.path, &checkpoint)?;
        support::crash_point("checkpointed");
        // notifyCheckpointComplete.
        let outcome = acknowledger.complete(&token).await?;
        if outcome != PreparedOutcome::Commit {
            bail!("the prepared transaction did not commit: {outcome:?}");
        }
        checkpoints += 1;
        eprintln!(
            "checkpoint {checkpoints}: {since} records acknowledged in {:.1} ms (total {}, sum {})",
            checkpoint_started.elapsed().as_secs_f64() * 1e3,
            state.records,
            state.sum
        );
        since = 0;
    }
}
