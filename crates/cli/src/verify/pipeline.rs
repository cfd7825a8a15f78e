//! The pipelines `shoal verify` runs as its workers, and what each needs beyond the common
//! checks: the per-poll `exactly_once_pipeline` (one transaction per N records), the
//! `checkpointed_source` (KIP-939: one prepared transaction per checkpoint, its token kept in
//! a checkpoint file, completed when the checkpoint is written or by the next incarnation), or
//! `atomic_dead_letter` (poison inputs REJECTed, their dead letters written by the broker in
//! the same transaction: KIP-1191's dead-letter topic with KIP-1289).
//!
//! Each pipeline says what its inputs are and which input an output stands for: `record-<i>`
//! and `processed:record-<i>`, or, for the dead-letter pipeline, the decimal `<i>` and its
//! double, with every tenth input (`i % 10 == 3`) poison instead: `poison-<i>`, never in the
//! output, exactly once in [`DEAD_LETTER`].
//!
//! For the checkpointed pipeline the crash schedule also kills workers at chosen steps: half
//! the worker crashes restart the worker with a crash point armed (`SHOAL_CRASH_AT`, the
//! example's `support::crash_point`), so it SIGKILLs itself after a poll, after staging,
//! after prepare and before its checkpoint file is written, or after the checkpoint and
//! before completion — steps a random moment rarely hits. And its state is checked: the
//! record counts of the workers' last checkpoints add up to the input exactly, since a
//! checkpoint counts exactly the records whose acknowledgements its transaction commits.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The steps a checkpointed worker can be made to crash at, in the order they happen.
pub const PHASES: [&str; 4] = ["polled", "staged", "prepared", "checkpointed"];

/// The environment variable of the example's crash points.
pub const CRASH_AT: &str = "SHOAL_CRASH_AT";

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pipeline {
    /// `exactly_once_pipeline`: outputs and acknowledgements commit every N records.
    PerPoll,
    /// `checkpointed_source`: a prepared (two-phase-commit) transaction per checkpoint.
    Checkpointed,
    /// `atomic_dead_letter`: poison inputs rejected, dead-lettered in the transaction.
    DeadLetter,
}

/// The dead-letter pipeline's dead-letter topic (the broker's default prefix `dlq.`).
pub const DEAD_LETTER: &str = "dlq.verify";

/// What the per-poll and checkpointed pipelines put before each input value.
const PREFIX: &str = "processed:";

impl Pipeline {
    /// The example's name (and binary name under `examples/`).
    pub fn example(self) -> &'static str {
        match self {
            Pipeline::PerPoll => "exactly_once_pipeline",
            Pipeline::Checkpointed => "checkpointed_source",
            Pipeline::DeadLetter => "atomic_dead_letter",
        }
    }

    /// Whether input `i` is poison: rejected, dead-lettered, never output.
    pub fn poison(self, i: u64) -> bool {
        self == Pipeline::DeadLetter && i % 10 == 3
    }

    /// Input `i`'s value.
    pub fn input_value(self, i: u64) -> String {
        match self {
            Pipeline::DeadLetter if self.poison(i) => format!("poison-{i}"),
            Pipeline::DeadLetter => i.to_string(),
            Pipeline::PerPoll | Pipeline::Checkpointed => format!("record-{i}"),
        }
    }

    /// The input an output value stands for; `None` for a value no input of the pipeline
    /// turns into.
    pub fn output_of(self, value: &[u8]) -> Option<u64> {
        let value = std::str::from_utf8(value).ok()?;
        match self {
            Pipeline::DeadLetter => {
                let doubled: u64 = value.parse().ok()?;
                (doubled.is_multiple_of(2) && doubled.to_string() == value).then_some(doubled / 2)
            }
            Pipeline::PerPoll | Pipeline::Checkpointed => value
                .strip_prefix(PREFIX)?
                .strip_prefix("record-")?
                .parse()
                .ok(),
        }
    }

    /// Broker settings the pipeline needs.
    pub fn broker_settings(self) -> &'static [&'static str] {
        match self {
            Pipeline::PerPoll | Pipeline::DeadLetter => &[],
            Pipeline::Checkpointed => &["transaction.two.phase.commit.enable=true"],
        }
    }

    /// The flags of worker `w` besides `--bootstrap`, `--input`, `--output` and `--group`.
    pub fn worker_args(
        self,
        command: &mut Command,
        w: usize,
        records_per_txn: u64,
        checkpoint_ms: u64,
        run_dir: &Path,
    ) {
        command.args(["--transactional-id", &format!("verify-worker-{w}")]);
        match self {
            Pipeline::PerPoll => {
                command.args(["--records-per-txn", &records_per_txn.to_string()]);
            }
            Pipeline::DeadLetter => {
                command
                    .args(["--records-per-txn", &records_per_txn.to_string()])
                    .args(["--dead-letter", DEAD_LETTER]);
            }
            Pipeline::Checkpointed => {
                command
                    .args(["--checkpoint-ms", &checkpoint_ms.to_string()])
                    .arg("--checkpoint-file")
                    .arg(checkpoint_file(run_dir, w));
            }
        }
    }
}

/// Worker `w`'s checkpoint file.
pub fn checkpoint_file(run_dir: &Path, w: usize) -> PathBuf {
    run_dir.join(format!("checkpoint-{w}"))
}

/// The record count of a checkpoint file (`records N` line); 0 when there is none yet.
///
/// # Errors
/// A file that cannot be read or has no count.
pub fn checkpointed_records(path: &Path) -> anyhow::Result<u64> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e.into()),
    };
    text.lines()
        .find_map(|l| l.strip_prefix("records "))
        .ok_or_else(|| anyhow::anyhow!("{}: no records line", path.display()))?
        .trim()
        .parse()
        .map_err(Into::into)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checkpoint_counts_are_read_or_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c");
        assert_eq!(checkpointed_records(&path).unwrap(), 0);
        std::fs::write(&path, "records 42\nsum 7\ntoken 5:3\n").unwrap();
        assert_eq!(checkpointed_records(&path).unwrap(), 42);
        std::fs::write(&path, "sum 7\n").unwrap();
        assert!(checkpointed_records(&path).is_err());
        std::fs::write(&path, "records x\n").unwrap();
        assert!(checkpointed_records(&path).is_err());
    }

    #[test]
    fn outputs_map_back_to_their_inputs_and_nothing_else() {
        for pipeline in [Pipeline::PerPoll, Pipeline::Checkpointed] {
            assert_eq!(pipeline.input_value(7), "record-7");
            assert_eq!(pipeline.output_of(b"processed:record-7"), Some(7));
            for stray in [
                &b"record-7"[..],
                b"processed:record-x",
                b"processed:7",
                b"\xff",
            ] {
                assert_eq!(pipeline.output_of(stray), None);
            }
            assert!(!(0..100).any(|i| pipeline.poison(i)));
        }
        let dl = Pipeline::DeadLetter;
        assert_eq!(
            (dl.input_value(7), dl.input_value(13)),
            ("7".into(), "poison-13".into())
        );
        assert_eq!(dl.output_of(b"14"), Some(7));
        assert_eq!(dl.output_of(b"0"), Some(0));
        for stray in [&b"7"[..], b"+14", b"014", b"-14", b"poison-13", b""] {
            assert_eq!(dl.output_of(stray), None, "{stray:?}");
        }
        assert_eq!((0..100).filter(|i| dl.poison(*i)).count(), 10);
    }
}
