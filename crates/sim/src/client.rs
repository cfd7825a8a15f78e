//! Model clients: exactly-once pipeline workers and plain share consumers in explicit mode.
//!
//! A worker is what `crates/client/examples/exactly_once_pipeline.rs` does, reduced to its
//! requests: join the share group, InitProducerId, then loop ShareFetch → Produce the outputs
//! of the records it accepts (transactional, transaction version 2) → TxnShareAcknowledge
//! ACCEPT / REJECT → EndTxn. Any failure inside a transaction aborts it; an abort that fails,
//! or a fatal error, re-initializes the producer (which fences and aborts whatever is open).
//! A commit whose answer is lost is retried with the same epoch (transaction version 2's
//! retry), and a produce whose answer is lost is sent again with the same sequence.
//!
//! A two-phase-commit worker (KIP-939) is the same pipeline run by a checkpointing stream
//! processor: its producer enables two-phase commit and keeps a prepared transaction across
//! restarts (InitProducerId with `Enable2Pc` and `KeepPreparedTxn`). Deciding to commit, it
//! prepares (everything it produced and staged is answered, so flushed) and registers the
//! transaction's token, its producer id and epoch, in its external store — what a
//! checkpoint does; that store survives restarts. Sometimes it then "crashes" before
//! committing. A new incarnation that finds a prepared transaction kept for it completes it
//! as the store says: commit when the stored token names it, abort otherwise. A zombie never
//! registers a token nor completes a kept transaction (the external coordinator fences it as
//! the broker does; its copy of the store is stale), so the successor keeps it again.
//!
//! A plain consumer acquires and then releases, rejects or forgets records (never accepts: its
//! acknowledgements have no output).
//!
//! With a dead-letter queue (KIP-1191) some inputs are poison ([`Poison`]): a worker rejects
//! exactly those (its other inputs it accepts), and a plain consumer rejects only those (it
//! releases the others instead), so a good input reaches the dead-letter queue only through
//! the delivery limit. The world turns clients into zombies (a paused copy
//! that resumes after its successor fenced it), pauses them past their session, and kills
//! and restarts them.

use std::collections::{BTreeMap, VecDeque};

use shoal_core::share_partition::{AckBatch, AcknowledgeType};

use crate::broker::{Poison, GROUP};
use crate::proto::{codes, Delivered, Req, Resp};
use crate::rng::Rng;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Worker,
    Plain,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Join,
    Init,
    Fetch,
    Produce,
    Stage,
    Commit,
    Abort,
    Ack,
}

/// How often a two-phase-commit worker crashes right after registering its token, per mille.
const CRASH_AFTER_PREPARE: u32 = 300;

/// What the client is waiting for.
#[derive(Clone, Debug)]
struct Waiting {
    corr: u64,
    heartbeat: bool,
    attempts: u32,
}

#[derive(Clone, Debug)]
pub struct Client {
    pub index: usize,
    pub role: Role,
    pub incarnation: u32,
    pub zombie: bool,
    pub alive: bool,
    pub paused_until: i64,
    /// A two-phase-commit worker (see the module docs).
    pub two_phase: bool,
    /// The external store's token: the producer id and epoch of the last transaction this
    /// worker prepared and decided to commit. Survives restarts.
    stored_token: Option<(i64, i16)>,
    /// Tokens registered since the world last looked (for the checker).
    registered: Vec<(i64, i16)>,
    /// The worker just registered a token and dies before committing; the world kills and
    /// later restarts it.
    pub crash_requested: bool,
    txn_id: String,
    member: String,
    member_epoch: i32,
    assignment: Vec<i32>,
    producer_id: i64,
    producer_epoch: i16,
    phase: Phase,
    held: Vec<Delivered>,
    outputs: VecDeque<(i32, Vec<Vec<u8>>)>,
    stage: Vec<(i32, Vec<AckBatch>)>,
    plain_acks: Vec<(i32, AckBatch)>,
    sequences: BTreeMap<i32, i32>,
    waiting: Option<Waiting>,
    next_heartbeat_ms: i64,
    /// The last heartbeat failed: send the next one in full.
    heartbeat_full: bool,
    /// Timeouts of the request being retried.
    retry_attempts: u32,
    /// Earliest time of the next request (idle back-off).
    not_before_ms: i64,
    output_partitions: i32,
    /// The inputs this client cannot process (with a dead-letter queue only).
    poison: Poison,
    heartbeat_interval_ms: i64,
    rng: Rng,
    /// Transactions committed (answered NONE).
    pub commits: u64,
    pub aborts: u64,
}

/// The output record key of input `partition`/`offset`.
pub fn output_key(partition: i32, offset: i64) -> Vec<u8> {
    format!("{partition}/{offset}").into_bytes()
}

/// The input partition and offset an output key names.
pub fn parse_output_key(key: &[u8]) -> Option<(i32, i64)> {
    let s = std::str::from_utf8(key).ok()?;
    let (p, o) = s.split_once('/')?;
    Some((p.parse().ok()?, o.parse().ok()?))
}

impl Client {
    pub fn new(
        index: usize,
        role: Role,
        two_phase: bool,
        (output_partitions, poison): (i32, Poison),
        heartbeat_interval_ms: i64,
        rng: Rng,
    ) -> Client {
        let mut c = Client {
            index,
            role,
            incarnation: 0,
            zombie: false,
            alive: true,
            paused_until: 0,
            two_phase: two_phase && role == Role::Worker,
            stored_token: None,
            registered: Vec::new(),
            crash_requested: false,
            txn_id: format!("txn-{index}"),
            member: String::new(),
            member_epoch: 0,
            assignment: Vec::new(),
            producer_id: -1,
            producer_epoch: -1,
            phase: Phase::Join,
            held: Vec::new(),
            outputs: VecDeque::new(),
            stage: Vec::new(),
            plain_acks: Vec::new(),
            sequences: BTreeMap::new(),
            waiting: None,
            next_heartbeat_ms: 0,
            retry_attempts: 0,
            heartbeat_full: false,
            not_before_ms: 0,
            output_partitions,
            poison,
            heartbeat_interval_ms,
            rng,
            commits: 0,
            aborts: 0,
        };
        c.restart();
        c
    }

    /// A new process: new member id, no producer, nothing held.
    pub fn restart(&mut self) {
        self.incarnation += 1;
        self.alive = true;
        self.member = format!("m{}-{}", self.index, self.incarnation);
        self.member_epoch = 0;
        self.assignment.clear();
        self.producer_id = -1;
        self.producer_epoch = -1;
        self.phase = Phase::Join;
        self.clear_work();
        self.waiting = None;
        self.crash_requested = false;
    }

    /// The tokens registered in the external store since the last call.
    pub fn take_registered(&mut self) -> Vec<(i64, i16)> {
        std::mem::take(&mut self.registered)
    }

    /// A zombie copy at `index`: same member, producer and work, answers routed to it.
    pub fn zombie_copy(&self, index: usize, rng: Rng) -> Client {
        let mut z = self.clone();
        z.index = index;
        z.zombie = true;
        z.waiting = None;
        z.registered.clear();
        z.rng = rng;
        z
    }

    pub fn member(&self) -> &str {
        &self.member
    }

    pub fn txn_id(&self) -> &str {
        &self.txn_id
    }

    fn clear_work(&mut self) {
        self.held.clear();
        self.outputs.clear();
        self.stage.clear();
        self.plain_acks.clear();
    }

    pub fn is_waiting(&self) -> bool {
        self.waiting.is_some()
    }

    pub fn describe(&self) -> String {
        format!(
            "{}{}{} {} pid {}/{} {:?}{}",
            if self.zombie { "zombie " } else { "" },
            if self.two_phase { "2pc " } else { "" },
            self.member,
            self.txn_id,
            self.producer_id,
            self.producer_epoch,
            self.phase,
            if self.waiting.is_some() {
                " (waiting)"
            } else {
                ""
            }
        )
    }

    /// The next request to send at `now`, if any (the caller gives it `corr`).
    pub fn next_request(&mut self, now: i64, corr: u64) -> Option<Req> {
        if !self.alive
            || self.waiting.is_some()
            || now < self.paused_until
            || now < self.not_before_ms
        {
            return None;
        }
        if self.member_epoch > 0 && now >= self.next_heartbeat_ms && !self.zombie {
            let req = Req::Heartbeat {
                group: GROUP.into(),
                member: self.member.clone(),
                epoch: self.member_epoch,
                full: self.heartbeat_full,
            };
            return Some(self.wait(corr, req, true));
        }
        let req = match self.phase {
            Phase::Join => Req::Heartbeat {
                group: GROUP.into(),
                member: self.member.clone(),
                epoch: 0,
                full: true,
            },
            Phase::Init => Req::InitProducerId {
                txn_id: self.txn_id.clone(),
                producer_id: self.producer_id,
                producer_epoch: self.producer_epoch,
                // A two-phase-commit worker always keeps a prepared transaction: only its
                // store may decide it, never a restart.
                enable_2pc: self.two_phase,
                keep_prepared: self.two_phase,
            },
            Phase::Fetch if self.member_epoch <= 0 && !self.zombie => {
                // Fenced from the group meanwhile: rejoin before fetching.
                self.phase = Phase::Join;
                Req::Heartbeat {
                    group: GROUP.into(),
                    member: self.member.clone(),
                    epoch: 0,
                    full: true,
                }
            }
            Phase::Fetch => {
                if self.zombie {
                    // Its transaction is over: a zombie does nothing more.
                    self.alive = false;
                    return None;
                }
                if self.assignment.is_empty() {
                    self.not_before_ms = now + 20;
                    return None;
                }
                Req::ShareFetch {
                    group: GROUP.into(),
                    member: self.member.clone(),
                    partitions: self.assignment.clone(),
                    max_records: self.rng.range(1, 8) as i32,
                }
            }
            Phase::Produce => {
                let (partition, keys) = self.outputs.front()?.clone();
                Req::Produce {
                    txn_id: self.txn_id.clone(),
                    producer_id: self.producer_id,
                    producer_epoch: self.producer_epoch,
                    partition,
                    base_sequence: *self.sequences.get(&partition).unwrap_or(&0),
                    keys,
                }
            }
            Phase::Stage => Req::TxnShareAck {
                txn_id: self.txn_id.clone(),
                producer_id: self.producer_id,
                producer_epoch: self.producer_epoch,
                group: GROUP.into(),
                member: self.member.clone(),
                member_epoch: self.member_epoch,
                parts: self.stage.clone(),
            },
            Phase::Commit | Phase::Abort => Req::EndTxn {
                txn_id: self.txn_id.clone(),
                producer_id: self.producer_id,
                producer_epoch: self.producer_epoch,
                commit: self.phase == Phase::Commit,
            },
            Phase::Ack => Req::ShareAck {
                group: GROUP.into(),
                member: self.member.clone(),
                acks: self.plain_acks.clone(),
            },
        };
        Some(self.wait(corr, req, false))
    }

    fn wait(&mut self, corr: u64, req: Req, heartbeat: bool) -> Req {
        let attempts = self.retry_attempts;
        self.waiting = Some(Waiting {
            corr,
            heartbeat,
            attempts,
        });
        req
    }

    /// The answer to `corr` arrived; false if it was not awaited (late, duplicated).
    pub fn on_response(&mut self, now: i64, corr: u64, resp: Resp) -> bool {
        if self.waiting.as_ref().is_none_or(|w| w.corr != corr) {
            return false;
        }
        let Some(w) = self.waiting.take() else {
            return false;
        };
        if w.heartbeat {
            self.on_heartbeat(now, resp);
            return true;
        }
        self.retry_attempts = 0;
        match (self.phase, resp) {
            (Phase::Join, r @ Resp::Heartbeat { .. }) => self.on_heartbeat(now, r),
            (
                Phase::Init,
                Resp::InitProducerId {
                    code,
                    producer_id,
                    producer_epoch,
                    ongoing_producer_id,
                    ongoing_producer_epoch,
                },
            ) => {
                if code == codes::NONE && ongoing_producer_id >= 0 && self.zombie {
                    // A prepared transaction kept for a zombie: only the external store may
                    // decide it, and the zombie's copy of the store is stale (its successor
                    // may have registered a later token). The external coordinator fences the
                    // zombie, as it does when the zombie prepares: the process gives up, and
                    // the successor keeps the transaction again and completes it.
                    self.alive = false;
                    return true;
                }
                if code == codes::NONE {
                    self.producer_id = producer_id;
                    self.producer_epoch = producer_epoch;
                    self.sequences.clear();
                    self.phase = if ongoing_producer_id < 0 {
                        Phase::Fetch
                    } else {
                        // A prepared transaction kept for this incarnation: complete it as
                        // the store decided.
                        self.clear_work();
                        let token = (ongoing_producer_id, ongoing_producer_epoch);
                        if self.stored_token == Some(token) {
                            Phase::Commit
                        } else {
                            Phase::Abort
                        }
                    };
                } else {
                    if matches!(
                        code,
                        codes::PRODUCER_FENCED
                            | codes::INVALID_PRODUCER_EPOCH
                            | codes::INVALID_PRODUCER_ID_MAPPING
                    ) {
                        // Fatal for this producer instance: the application makes a new one.
                        self.producer_id = -1;
                        self.producer_epoch = -1;
                        if self.zombie && self.two_phase {
                            // A new producer would read the external store afresh, which
                            // is the successor's to use: the zombie process gives up.
                            self.alive = false;
                            return true;
                        }
                    }
                    self.not_before_ms = now + 20;
                }
            }
            (Phase::Fetch, Resp::ShareFetch { code, records }) => {
                if code != codes::NONE {
                    if code == codes::UNKNOWN_MEMBER_ID {
                        self.rejoin();
                    }
                    self.not_before_ms = now + 20;
                } else if records.is_empty() {
                    self.not_before_ms = now + self.rng.range(5, 40);
                } else {
                    self.plan(records);
                }
            }
            (Phase::Produce, Resp::Produce { code }) => {
                if code == codes::NONE {
                    if let Some((partition, keys)) = self.outputs.pop_front() {
                        *self.sequences.entry(partition).or_insert(0) += keys.len() as i32;
                    }
                    if self.outputs.is_empty() {
                        self.phase = Phase::Stage;
                    }
                } else {
                    self.phase = Phase::Abort;
                }
            }
            (Phase::Stage, Resp::TxnShareAck { code }) => {
                self.phase = if code == codes::NONE && !self.rng.chance(80) {
                    Phase::Commit
                } else {
                    Phase::Abort
                };
                if self.two_phase && self.phase == Phase::Commit {
                    self.prepare();
                }
            }
            (
                Phase::Commit | Phase::Abort,
                Resp::EndTxn {
                    code,
                    producer_id,
                    producer_epoch,
                },
            ) => {
                if code == codes::NONE {
                    if self.phase == Phase::Commit {
                        self.commits += 1;
                    } else {
                        self.aborts += 1;
                    }
                    self.producer_id = producer_id;
                    self.producer_epoch = producer_epoch;
                    self.sequences.clear();
                    self.clear_work();
                    self.phase = Phase::Fetch;
                } else if code == codes::CONCURRENT_TRANSACTIONS {
                    // The previous end is still completing.
                    self.waiting = None;
                    self.not_before_ms = now + 10;
                } else {
                    self.clear_work();
                    self.phase = Phase::Init;
                }
            }
            (Phase::Ack, Resp::ShareAck { .. }) => {
                self.clear_work();
                self.phase = Phase::Fetch;
            }
            _ => {}
        }
        true
    }

    /// A two-phase-commit worker decided to commit: everything it produced and staged is
    /// answered (flushed), so it registers the transaction's token, and may crash before
    /// committing. A zombie is refused by the external coordinator and aborts instead.
    fn prepare(&mut self) {
        if self.zombie {
            self.phase = Phase::Abort;
            return;
        }
        let token = (self.producer_id, self.producer_epoch);
        self.stored_token = Some(token);
        self.registered.push(token);
        if self.rng.chance(CRASH_AFTER_PREPARE) {
            self.crash_requested = true;
        }
    }

    fn rejoin(&mut self) {
        self.member_epoch = 0;
        self.assignment.clear();
        self.clear_work();
        self.phase = match self.phase {
            // A decided two-phase commit is carried out whatever the group says.
            Phase::Commit if self.two_phase => Phase::Commit,
            Phase::Produce | Phase::Stage | Phase::Commit | Phase::Abort => Phase::Abort,
            _ => Phase::Join,
        };
        if self.phase == Phase::Abort && self.producer_id < 0 {
            self.phase = Phase::Join;
        }
    }

    fn on_heartbeat(&mut self, now: i64, resp: Resp) {
        let Resp::Heartbeat {
            code,
            member_epoch,
            assignment,
        } = resp
        else {
            return;
        };
        if code == codes::NONE {
            // A new epoch without its assignment: the answer that carried it was overtaken
            // (a duplicated request's later answer came first); ask for it in full.
            self.heartbeat_full = assignment.is_none() && member_epoch != self.member_epoch;
            self.member_epoch = member_epoch;
            if let Some(a) = assignment {
                self.assignment = a;
            }
            self.next_heartbeat_ms = now + self.heartbeat_interval_ms;
            if self.phase == Phase::Join {
                self.phase = match self.role {
                    Role::Worker if self.producer_id < 0 => Phase::Init,
                    _ => Phase::Fetch,
                };
            }
        } else if code == codes::UNKNOWN_MEMBER_ID || code == codes::FENCED_MEMBER_EPOCH {
            // Fenced: rejoin with the same id (a transaction in progress will fail).
            self.member_epoch = 0;
            self.assignment.clear();
            if matches!(self.phase, Phase::Fetch | Phase::Ack) {
                self.clear_work();
                self.phase = Phase::Join;
            } else if self.phase != Phase::Init && self.phase != Phase::Join {
                // Finish the transaction attempt first; staging will be refused.
            }
            if self.phase == Phase::Join {
                self.next_heartbeat_ms = now;
            }
        } else {
            self.heartbeat_full = true;
            self.not_before_ms = now + 20;
        }
    }

    /// Decides what to do with fetched records.
    fn plan(&mut self, records: Vec<Delivered>) {
        self.held = records;
        match self.role {
            Role::Plain => {
                for d in &self.held {
                    let ack = match self.rng.below(10) {
                        0..=5 => AcknowledgeType::Release,
                        // With a dead-letter queue, only poison is rejected.
                        6..=7
                            if self.poison.enabled() && !self.poison.is(d.partition, d.offset) =>
                        {
                            AcknowledgeType::Release
                        }
                        6..=7 => AcknowledgeType::Reject,
                        _ => continue,
                    };
                    self.plain_acks.push((
                        d.partition,
                        AckBatch::new(d.offset, d.offset, vec![ack.id()]),
                    ));
                }
                self.phase = if self.plain_acks.is_empty() {
                    Phase::Fetch
                } else {
                    Phase::Ack
                };
                if self.phase == Phase::Fetch {
                    self.held.clear();
                }
            }
            Role::Worker => {
                let mut stage: BTreeMap<i32, Vec<AckBatch>> = BTreeMap::new();
                let mut outputs: BTreeMap<i32, Vec<Vec<u8>>> = BTreeMap::new();
                let mut sorted = self.held.clone();
                sorted.sort_by_key(|d| (d.partition, d.offset));
                for d in &sorted {
                    let accept = !self.rng.chance(100);
                    // With a dead-letter queue, exactly the poison is rejected.
                    let accept = if self.poison.enabled() {
                        !self.poison.is(d.partition, d.offset)
                    } else {
                        accept
                    };
                    let ack = if accept {
                        AcknowledgeType::Accept
                    } else {
                        AcknowledgeType::Reject
                    };
                    stage.entry(d.partition).or_default().push(AckBatch::new(
                        d.offset,
                        d.offset,
                        vec![ack.id()],
                    ));
                    if accept {
                        let out =
                            ((d.offset as i32) ^ d.partition).rem_euclid(self.output_partitions);
                        outputs
                            .entry(out)
                            .or_default()
                            .push(output_key(d.partition, d.offset));
                    }
                }
                self.stage = stage.into_iter().collect();
                for (p, keys) in outputs {
                    for chunk in keys.chunks(3) {
                        self.outputs.push_back((p, chunk.to_vec()));
                    }
                }
                self.phase = if self.outputs.is_empty() {
                    Phase::Stage
                } else {
                    Phase::Produce
                };
            }
        }
    }

    /// The request `corr` got no answer in time.
    pub fn on_timeout(&mut self, now: i64, corr: u64) {
        if self.waiting.as_ref().is_none_or(|w| w.corr != corr) {
            return;
        }
        let Some(mut w) = self.waiting.take() else {
            return;
        };
        w.attempts += 1;
        if w.heartbeat {
            self.heartbeat_full = true;
            return;
        }
        match self.phase {
            // Retries with the same sequence / the same epoch are safe.
            Phase::Produce | Phase::Commit if w.attempts < 3 => {
                self.retry_attempts = w.attempts;
                self.not_before_ms = now + 5;
            }
            Phase::Produce | Phase::Stage => self.phase = Phase::Abort,
            Phase::Commit | Phase::Abort => {
                self.clear_work();
                self.phase = Phase::Init;
            }
            Phase::Ack => {
                self.clear_work();
                self.phase = Phase::Fetch;
            }
            Phase::Join | Phase::Init | Phase::Fetch => self.not_before_ms = now + 10,
        }
    }
}
