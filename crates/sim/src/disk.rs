//! The simulated disk: one append-only log of batches per partition, with an fsync point.
//!
//! A crash keeps every flushed batch and loses a random suffix of the unflushed ones, cut at a
//! batch boundary (what a torn-tail recovery of a segment keeps). Batches are typed rather
//! than encoded record batches; the records of the internal topics inside them are the real
//! encodings (`TxnRecord::encode`, `ShareStateRecord::encode`, `ShareGroupRecord::encode`) and
//! are decoded on replay.

use std::collections::BTreeMap;

use crate::rng::Rng;

/// One record: key and value bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    pub key: Vec<u8>,
    pub value: Option<Vec<u8>>,
}

/// What a batch holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Body {
    Data(Vec<Record>),
    /// A COMMIT (`commit`) or ABORT transaction marker.
    Control {
        commit: bool,
        coordinator_epoch: i32,
    },
}

/// One log batch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Batch {
    pub base_offset: i64,
    /// -1 for a batch without producer.
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    pub transactional: bool,
    pub body: Body,
}

impl Batch {
    /// A batch of records without producer (the coordinators' internal records, input).
    pub fn plain(records: Vec<Record>) -> Batch {
        Batch {
            base_offset: 0,
            producer_id: -1,
            producer_epoch: -1,
            base_sequence: -1,
            transactional: false,
            body: Body::Data(records),
        }
    }

    pub fn len(&self) -> i64 {
        match &self.body {
            Body::Data(records) => records.len().max(1) as i64,
            Body::Control { .. } => 1,
        }
    }

    /// Never: a batch holds at least one record (or is a marker).
    pub fn is_empty(&self) -> bool {
        false
    }

    pub fn last_offset(&self) -> i64 {
        self.base_offset + self.len() - 1
    }

    pub fn is_control(&self) -> bool {
        matches!(self.body, Body::Control { .. })
    }
}

/// One partition's log.
#[derive(Clone, Debug, Default)]
pub struct Log {
    batches: Vec<Batch>,
    /// Batches known durable (a prefix).
    flushed: usize,
}

impl Log {
    pub fn batches(&self) -> &[Batch] {
        &self.batches
    }

    pub fn end_offset(&self) -> i64 {
        self.batches.last().map_or(0, |b| b.last_offset() + 1)
    }

    /// The offset below which everything is durable.
    pub fn flushed_offset(&self) -> i64 {
        self.batches[..self.flushed]
            .last()
            .map_or(0, |b| b.last_offset() + 1)
    }

    pub fn unflushed(&self) -> usize {
        self.batches.len() - self.flushed
    }

    /// Appends a batch at the log end; returns its base offset.
    fn append(&mut self, mut batch: Batch) -> i64 {
        batch.base_offset = self.end_offset();
        let base = batch.base_offset;
        self.batches.push(batch);
        base
    }

    fn flush(&mut self) {
        self.flushed = self.batches.len();
    }

    /// Loses a random suffix of the unflushed batches; returns how many were lost.
    pub fn crash(&mut self, rng: &mut Rng) -> usize {
        let before = self.batches.len();
        let keep = self.flushed + rng.below(self.unflushed() as u64 + 1) as usize;
        self.batches.truncate(keep);
        self.flushed = keep;
        before - keep
    }
}

/// Every partition of the node, by `topic-partition` name.
#[derive(Clone, Debug, Default)]
pub struct Disk {
    logs: BTreeMap<String, Log>,
    /// The producer-id allocator's persisted high-water mark (ids below it were handed out).
    pub next_producer_id: i64,
    /// The coordinator epoch of the last load.
    pub coordinator_epoch: i32,
    /// The appends and fsyncs of the current step, in order, with what each replaced.
    journal: Vec<Op>,
}

/// One journaled disk operation: (log, batch count before) for an append, (log, durable
/// batch count before) for an fsync.
#[derive(Clone, Debug)]
enum Op {
    Append(String, usize),
    Flush(String, usize),
}

pub fn log_name(topic: &str, partition: i32) -> String {
    format!("{topic}-{partition}")
}

impl Disk {
    pub fn log(&self, name: &str) -> &Log {
        static EMPTY: Log = Log {
            batches: Vec::new(),
            flushed: 0,
        };
        self.logs.get(name).unwrap_or(&EMPTY)
    }

    pub fn log_mut(&mut self, name: &str) -> &mut Log {
        self.logs.entry(name.to_string()).or_default()
    }

    pub fn logs(&self) -> impl Iterator<Item = (&String, &Log)> {
        self.logs.iter()
    }

    /// Appends a batch to log `name`; returns its base offset.
    pub fn append(&mut self, name: &str, batch: Batch) -> i64 {
        let log = self.log_mut(name);
        let before = log.batches.len();
        let offset = log.append(batch);
        self.journal.push(Op::Append(name.to_string(), before));
        offset
    }

    /// An fsync of one log: everything appended to it so far becomes durable.
    pub fn flush(&mut self, name: &str) {
        let log = self.log_mut(name);
        let before = log.flushed;
        log.flush();
        self.journal.push(Op::Flush(name.to_string(), before));
    }

    /// A new step begins: its appends and fsyncs are journaled from here.
    pub fn begin_step(&mut self) {
        self.journal.clear();
    }

    /// A crash in the middle of the step: the process stopped after a prefix of the step's
    /// operations (each fsync completes before the next operation starts), so the appends and
    /// fsyncs after that point never happened; then [`Disk::crash`] loses part of what is
    /// still unflushed. Returns how many of the step's operations did not happen.
    pub fn crash_mid_step(&mut self, rng: &mut Rng) -> usize {
        let done = rng.below(self.journal.len() as u64 + 1) as usize;
        let undone = self.journal.len() - done;
        while self.journal.len() > done {
            let Some(op) = self.journal.pop() else { break };
            match op {
                Op::Append(name, before) => {
                    if let Some(log) = self.logs.get_mut(&name) {
                        log.batches.truncate(before);
                        log.flushed = log.flushed.min(before);
                    }
                }
                Op::Flush(name, before) => {
                    if let Some(log) = self.logs.get_mut(&name) {
                        log.flushed = log.flushed.min(before);
                    }
                }
            }
        }
        undone
    }

    /// Marks every batch durable (a copy to replay as if nothing were lost).
    pub fn flush_all(&mut self) {
        for log in self.logs.values_mut() {
            log.flush();
        }
    }

    /// A crash: every log loses a random part of its unflushed suffix. Returns the batches
    /// lost per log (only logs that lost some).
    pub fn crash(&mut self, rng: &mut Rng) -> Vec<(String, usize)> {
        let mut lost = Vec::new();
        for (name, log) in &mut self.logs {
            let n = log.crash(rng);
            if n > 0 {
                lost.push((name.clone(), n));
            }
        }
        lost
    }
}
