//! One simulated run: virtual time, the event queue, the network, the faults, the checks.
//!
//! Everything is chosen by the seed: the cluster's shape and settings, the input records, the
//! clients, every delay, drop, duplicate and crash. One step is one event taken from the queue
//! in (time, sequence) order; the checker runs after each. The run has two phases: `steps`
//! steps with faults, then a quiet phase without them (no drops, no crashes, zombies gone,
//! paused clients resumed) until every input record is settled or a step bound passes, and the
//! final check.

use std::collections::BTreeMap;

use shoal_core::faults::{self, Fault};
use shoal_core::share_partition::SharePartitionConfig;

use crate::broker::{Broker, Layout, Observed, Poison, INPUT};
use crate::check::{tx_pending, Model};
use crate::client::{Client, Role};
use crate::disk::{log_name, Batch, Disk, Record};
use crate::proto::{Addr, Req, Resp};
use crate::rng::Rng;

/// The bugs a run re-introduces (issue 13, point 5).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Bugs {
    pub exact_epoch_marker: bool,
    pub lock_expires_tx_pending: bool,
    pub marker_ignores_producer: bool,
    /// The next three are in the coordinator runtime's shipped order of work (`Passes`):
    /// every reply ahead of its records' append,
    pub reply_before_durable: bool,
    /// a TxnShareAcknowledge's staging answered before it is persisted,
    pub stage_before_persist: bool,
    /// a marker applied before it is appended.
    pub marker_before_append: bool,
    /// An InitProducerId with `KeepPreparedTxn` aborts the prepared transaction.
    pub keep_prepared_aborts: bool,
    /// The COMMIT of a REJECT that carried its dead letter makes it ARCHIVING (a second one).
    pub commit_archives_carried: bool,
}

impl Bugs {
    pub const NAMES: [&'static str; 8] = [
        "exact-epoch-marker",
        "lock-expires-tx-pending",
        "stage-before-persist",
        "marker-ignores-producer",
        "reply-before-durable",
        "marker-before-append",
        "keep-prepared-aborts",
        "commit-archives-carried",
    ];

    pub fn named(name: &str) -> Option<Bugs> {
        let mut b = Bugs::default();
        match name {
            "exact-epoch-marker" => b.exact_epoch_marker = true,
            "lock-expires-tx-pending" => b.lock_expires_tx_pending = true,
            "stage-before-persist" => b.stage_before_persist = true,
            "marker-ignores-producer" => b.marker_ignores_producer = true,
            "reply-before-durable" => b.reply_before_durable = true,
            "marker-before-append" => b.marker_before_append = true,
            "keep-prepared-aborts" => b.keep_prepared_aborts = true,
            "commit-archives-carried" => b.commit_archives_carried = true,
            _ => return None,
        }
        Some(b)
    }

    fn install(self) {
        faults::clear();
        faults::set(Fault::ExactEpochMarker, self.exact_epoch_marker);
        faults::set(Fault::LockExpiresTxPending, self.lock_expires_tx_pending);
        faults::set(Fault::MarkerIgnoresProducer, self.marker_ignores_producer);
        faults::set(Fault::ReplyBeforeDurable, self.reply_before_durable);
        faults::set(Fault::StageBeforePersist, self.stage_before_persist);
        faults::set(Fault::MarkerBeforeAppend, self.marker_before_append);
        faults::set(Fault::KeepPreparedAborts, self.keep_prepared_aborts);
        faults::set(Fault::CommitArchivesCarried, self.commit_archives_carried);
    }
}

#[derive(Clone, Copy, Debug)]
pub struct RunConfig {
    pub seed: u64,
    /// Steps with faults before the quiet phase.
    pub steps: u64,
    pub bugs: Bugs,
    /// Keep every trace line (else only the failure's context is printed).
    pub trace: bool,
    /// Compare a replay of the logs with the live state at every crash and at the end
    /// (switched off only to see what the other invariants catch alone).
    pub replay_check: bool,
    /// Make about half the workers two-phase-commit ones (KIP-939, see [`crate::client`]).
    /// Off, the run draws exactly what it drew before two-phase commit was modelled.
    pub two_phase: bool,
    /// Give about half the runs' share group a dead-letter queue (KIP-1191) and poison
    /// inputs (see [`crate::broker::Poison`]). Its choices come from a generator of their own,
    /// so a run without one draws exactly what it drew before dead letters were modelled.
    pub dead_letters: bool,
}

#[derive(Clone, Debug)]
pub struct Failure {
    pub step: u64,
    pub time_ms: i64,
    pub message: String,
}

#[derive(Clone, Debug)]
pub struct Outcome {
    pub seed: u64,
    pub steps: u64,
    pub failure: Option<Failure>,
    pub trace: Vec<String>,
    pub crashes: u32,
    pub commits: u64,
    pub aborts: u64,
    pub inputs: i64,
    /// Dead letters visible at the end: (written after ARCHIVING, committed with a
    /// transaction).
    pub dead_letters: (usize, usize),
}

#[derive(Clone, Debug)]
enum Event {
    ToBroker { from: Addr, corr: u64, req: Req },
    ToClient { to: Addr, corr: u64, resp: Resp },
    Wake(usize),
    Timeout { to: Addr, corr: u64 },
    Tick,
    Markers,
    Flush,
    Chaos,
    Restart,
    ClientRestart(usize),
}

/// Fault rates, per mille.
#[derive(Clone, Copy, Debug)]
struct Faults {
    drop: u32,
    duplicate: u32,
    max_delay_ms: i64,
    /// Crashes in the middle of a broker step, between two of its fsyncs.
    mid_step_crash: u32,
}

const REQUEST_TIMEOUT_MS: i64 = 400;

pub struct World {
    rng: Rng,
    now: i64,
    seq: u64,
    queue: BTreeMap<(i64, u64), Event>,
    disk: Disk,
    broker: Option<Broker>,
    layout: Layout,
    clients: Vec<Client>,
    next_corr: u64,
    model: Model,
    faults: Faults,
    quiet: bool,
    trace: Vec<String>,
    keep_trace: bool,
    crashes: u32,
    inputs: i64,
    replay_check: bool,
}

impl World {
    pub fn new(config: &RunConfig) -> World {
        let mut rng = Rng::new(config.seed);
        let mut dlq_rng = Rng::new(config.seed ^ 0xD1A9_0000_0000_0000);
        let dead_letter = config.dead_letters && dlq_rng.chance(500);
        let poison = if dead_letter {
            Poison {
                per_mille: dlq_rng.range(50, 250) as u32,
                salt: dlq_rng.next_u64(),
            }
        } else {
            Poison::default()
        };
        let layout = Layout {
            input_partitions: rng.range(1, 2) as i32,
            output_partitions: rng.range(1, 2) as i32,
            state_partitions: rng.range(1, 3) as u32,
            share: SharePartitionConfig {
                record_lock_duration_ms: rng.range(150, 1500),
                delivery_count_limit: rng.range(3, 6) as i16,
                record_locks_max: rng.range(8, 200),
                dead_letter,
            },
            snapshot_every: rng.range(0, 4) as u32,
            session_timeout_ms: rng.range(300, 2000) as i32,
            txn_timeout_ms: rng.range(500, 5000) as i32,
            fetch_batches: rng.range(1, 4) as usize,
            poison,
        };
        let mut disk = Disk::default();
        disk.next_producer_id = 1000;
        let mut inputs = 0;
        for p in 0..layout.input_partitions {
            let records = rng.range(10, 40);
            let name = log_name(INPUT, p);
            let mut written = 0;
            while written < records {
                let n = rng.range(1, 4).min(records - written);
                disk.append(
                    &name,
                    Batch::plain(
                        (0..n)
                            .map(|i| Record {
                                key: format!("{p}:{}", written + i).into_bytes(),
                                value: None,
                            })
                            .collect(),
                    ),
                );
                written += n;
            }
            disk.flush(&name);
            inputs += records;
        }
        let faults = Faults {
            drop: rng.range(0, 40) as u32,
            duplicate: rng.range(0, 40) as u32,
            max_delay_ms: rng.range(1, 30),
            mid_step_crash: rng.range(0, 15) as u32,
        };
        let workers = rng.range(1, 4) as usize;
        let plain = rng.range(0, 1) as usize;
        let heartbeat = i64::from(layout.session_timeout_ms / 4).max(1);
        let mut clients = Vec::new();
        for i in 0..workers + plain {
            let role = if i < workers {
                Role::Worker
            } else {
                Role::Plain
            };
            let two_phase = config.two_phase && rng.chance(500);
            clients.push(Client::new(
                i,
                role,
                two_phase,
                (layout.output_partitions, layout.poison),
                heartbeat,
                rng.fork(),
            ));
        }
        let broker = Broker::start(&layout, &mut disk, 0);
        let mut w = World {
            rng,
            now: 0,
            seq: 0,
            queue: BTreeMap::new(),
            disk,
            broker: Some(broker),
            layout,
            clients,
            next_corr: 0,
            model: Model::default(),
            faults,
            quiet: false,
            trace: Vec::new(),
            keep_trace: config.trace,
            crashes: 0,
            inputs,
            replay_check: config.replay_check,
        };
        w.note(format!(
            "seed {}: {:?}, {workers} workers, {plain} plain consumers, {inputs} input records, faults {:?}",
            config.seed, w.layout, w.faults
        ));
        for i in 0..w.clients.len() {
            w.at(0, Event::Wake(i));
        }
        w.at(1, Event::Tick);
        w.at(5, Event::Flush);
        let first_chaos = w.rng.range(20, 300);
        w.at(first_chaos, Event::Chaos);
        w
    }

    fn note(&mut self, line: String) {
        self.trace.push(format!("[{:>7} ms] {line}", self.now));
    }

    fn at(&mut self, time: i64, event: Event) {
        self.seq += 1;
        self.queue.insert((time, self.seq), event);
    }

    fn send(&mut self, event: Event) {
        if !self.quiet && self.rng.chance(self.faults.drop) {
            return;
        }
        let delay = self.rng.range(1, self.faults.max_delay_ms);
        if !self.quiet && self.rng.chance(self.faults.duplicate) {
            let again = self.rng.range(1, self.faults.max_delay_ms * 3);
            self.at(self.now + again, event.clone());
        }
        self.at(self.now + delay, event);
    }

    fn addr(&self, i: usize) -> Addr {
        Addr {
            client: i,
            incarnation: self.clients[i].incarnation,
        }
    }

    /// Sends whatever client `i` wants to send now, and arms its next wake-up.
    fn drive_client(&mut self, i: usize) {
        let corr = self.next_corr + 1;
        let now = self.now;
        if let Some(req) = self.clients[i].next_request(now, corr) {
            self.next_corr = corr;
            let from = self.addr(i);
            if self.keep_trace {
                let line = format!("{} → {req:?}", self.clients[i].describe());
                self.note(line);
            }
            self.send(Event::ToBroker { from, corr, req });
            self.at(now + REQUEST_TIMEOUT_MS, Event::Timeout { to: from, corr });
        } else if self.clients[i].alive && !self.clients[i].is_waiting() {
            let next = now + self.rng.range(2, 25);
            self.at(next, Event::Wake(i));
        }
    }

    fn step(&mut self) -> Option<(i64, Event)> {
        let (&(time, seq), _) = self.queue.iter().next()?;
        let event = self.queue.remove(&(time, seq))?;
        self.now = time;
        Some((time, event))
    }

    fn deliver_to_broker(&mut self, from: Addr, corr: u64, req: Req) {
        let Some(broker) = self.broker.as_mut() else {
            return;
        };
        broker.handle(&mut self.disk, self.now, from, corr, req);
    }

    /// Tells the model of the prepared transactions the broker's pending answers say it kept.
    /// `sent`: the answers go out (their records are durable); otherwise a crash cut their
    /// step, and the keeps count only if their records survived it.
    fn note_kept(model: &mut Model, outbox: &[(Addr, u64, Resp)], sent: bool) {
        for (_, _, resp) in outbox {
            if let Resp::InitProducerId {
                code: 0,
                producer_id,
                producer_epoch,
                ongoing_producer_id,
                ongoing_producer_epoch,
            } = resp
            {
                if *ongoing_producer_id != *producer_id {
                    continue;
                }
                if sent {
                    model.kept(*producer_id, *ongoing_producer_epoch, *producer_epoch);
                } else {
                    model.kept_if_durable(*producer_id, *ongoing_producer_epoch, *producer_epoch);
                }
            }
        }
    }

    /// Flushes the broker's outbox onto the network.
    fn broker_outbox(&mut self) {
        let Some(broker) = self.broker.as_mut() else {
            return;
        };
        let out = std::mem::take(&mut broker.outbox);
        let notes = std::mem::take(&mut broker.notes);
        for n in notes {
            self.note(n);
        }
        for (to, corr, resp) in out {
            if self.keep_trace {
                self.note(format!("broker → {} {resp:?}", to.client));
            }
            self.send(Event::ToClient { to, corr, resp });
        }
    }

    /// The broker dies: at a step boundary, or (`mid_step`) in the middle of the step just
    /// taken, after only a prefix of its fsyncs completed. Its answers not yet sent die with
    /// it. First the live state is compared with a replay of the logs.
    fn crash(&mut self, mid_step: bool) -> Result<(), String> {
        self.crashes += 1;
        if let Some(mut broker) = self.broker.take() {
            Self::note_kept(&mut self.model, &broker.outbox, false);
            if self.replay_check {
                self.model.check_replay(&broker, &self.disk, self.now)?;
            }
            // What it did before dying still counts (markers on the disk, for as long as they
            // survive; records rejected or delivered), except stagings: a staging's answer
            // never went out, so no client relies on it.
            let done: Vec<Observed> = std::mem::take(&mut broker.observed)
                .into_iter()
                .filter(|o| !matches!(o, Observed::Staged { .. }))
                .collect();
            self.model
                .observe(self.now, &self.layout, &self.disk, &done)?;
        }
        let undone = if mid_step {
            self.disk.crash_mid_step(&mut self.rng)
        } else {
            0
        };
        let lost = self.disk.crash(&mut self.rng);
        self.model.crashed();
        // Connections die: nothing in flight to or from the broker arrives.
        self.queue
            .retain(|_, e| !matches!(e, Event::ToBroker { .. } | Event::ToClient { .. }));
        for i in 0..self.clients.len() {
            if self.clients[i].alive {
                self.at(self.now + 1, Event::Wake(i));
            }
        }
        if mid_step {
            self.note(format!(
                "broker crashed mid-step ({undone} of its fsyncs not done); unflushed batches lost: {lost:?}"
            ));
        } else {
            self.note(format!("broker crashed; unflushed batches lost: {lost:?}"));
        }
        let back = self.now + self.rng.range(5, 400);
        self.at(back, Event::Restart);
        Ok(())
    }

    /// A two-phase-commit worker dies right after registering its token; a new incarnation
    /// comes later to complete the prepared transaction.
    fn crash_after_prepare(&mut self, i: usize) {
        self.note(format!(
            "client {} crashed after preparing",
            self.clients[i].describe()
        ));
        self.clients[i].alive = false;
        let back = self.now + self.rng.range(10, 1500);
        self.at(back, Event::ClientRestart(i));
    }

    fn chaos(&mut self) -> Result<(), String> {
        let roll = self.rng.below(100);
        let workers: Vec<usize> = (0..self.clients.len())
            .filter(|&i| self.clients[i].alive && !self.clients[i].zombie)
            .collect();
        let pick = if workers.is_empty() {
            None
        } else {
            Some(workers[self.rng.below(workers.len() as u64) as usize])
        };
        match (roll, pick) {
            (0..=24, _) if self.broker.is_some() => self.crash(false)?,
            (25..=44, Some(i)) => {
                self.note(format!("client {} killed", self.clients[i].describe()));
                self.clients[i].alive = false;
                let back = self.now + self.rng.range(10, 1500);
                self.at(back, Event::ClientRestart(i));
            }
            (45..=69, Some(i)) => {
                let pause = self
                    .rng
                    .range(50, i64::from(self.layout.session_timeout_ms) * 2);
                self.clients[i].paused_until = self.now + pause;
                self.note(format!(
                    "client {} paused for {pause} ms",
                    self.clients[i].describe()
                ));
                self.at(self.now + pause, Event::Wake(i));
            }
            (70..=89, Some(i)) if self.clients[i].role == Role::Worker => {
                // A zombie: the old process stalls mid-work; its successor starts afresh.
                let index = self.clients.len();
                let rng = self.rng.fork();
                let mut zombie = self.clients[i].zombie_copy(index, rng);
                let stall = self.rng.range(50, 2000);
                zombie.paused_until = self.now + stall;
                self.note(format!(
                    "client {} becomes a zombie for {stall} ms; its successor restarts",
                    self.clients[i].describe()
                ));
                self.clients.push(zombie);
                self.at(self.now + stall, Event::Wake(index));
                self.clients[i].restart();
                self.at(self.now + 1, Event::Wake(i));
            }
            _ => {}
        }
        let next = self.now + self.rng.range(20, 600);
        self.at(next, Event::Chaos);
        Ok(())
    }

    fn settled(&self) -> bool {
        let Some(broker) = self.broker.as_ref() else {
            return false;
        };
        if broker.has_marker_work() {
            return false;
        }
        for p in 0..self.layout.input_partitions {
            let end = self.disk.log(&log_name(INPUT, p)).end_offset();
            let Some(sp) = broker.share_partitions().get(&crate::broker::share_key(p)) else {
                return false;
            };
            if sp.start_offset() < end {
                return false;
            }
        }
        true
    }

    /// The clients and share partitions, for a failure message.
    fn summary(&self) -> String {
        let clients: Vec<String> = self
            .clients
            .iter()
            .filter(|c| c.alive)
            .map(Client::describe)
            .collect();
        let partitions: Vec<String> = self
            .broker
            .iter()
            .flat_map(|b| b.share_partitions().iter())
            .map(|(k, sp)| {
                format!(
                    "in-{}: start {} end {} {:?}",
                    k.partition,
                    sp.start_offset(),
                    sp.end_offset(),
                    sp.counts()
                )
            })
            .collect();
        format!(
            "clients [{}]; share partitions [{}]",
            clients.join(", "),
            partitions.join("; ")
        )
    }

    fn quiet_down(&mut self) {
        self.quiet = true;
        self.note("quiet phase: no more faults".into());
        self.queue.retain(|_, e| !matches!(e, Event::Chaos));
        for i in 0..self.clients.len() {
            if self.clients[i].zombie {
                self.clients[i].alive = false;
            }
            self.clients[i].paused_until = 0;
        }
        if self.broker.is_none() {
            self.queue.retain(|_, e| !matches!(e, Event::Restart));
            self.at(self.now + 1, Event::Restart);
        }
        let dead: Vec<usize> = (0..self.clients.len())
            .filter(|&i| !self.clients[i].alive && !self.clients[i].zombie)
            .collect();
        for i in dead {
            self.queue
                .retain(|_, e| !matches!(e, Event::ClientRestart(j) if *j == i));
            self.at(self.now + 1, Event::ClientRestart(i));
        }
    }
}

impl World {
    /// Processes one event and checks; returns false when the queue is empty.
    fn advance(&mut self) -> Result<bool, String> {
        self.disk.begin_step();
        let before = self.broker.as_ref().map(tx_pending);
        let Some((_, event)) = self.step() else {
            return Ok(false);
        };
        let mut broker_acted = false;
        match event {
            Event::ToBroker { from, corr, req } => {
                if self.broker.is_some() {
                    self.deliver_to_broker(from, corr, req);
                    broker_acted = true;
                }
            }
            Event::ToClient { to, corr, resp } => {
                let c = &mut self.clients[to.client];
                if c.incarnation == to.incarnation && c.alive {
                    if c.paused_until > self.now {
                        let at = c.paused_until;
                        self.at(at, Event::ToClient { to, corr, resp });
                    } else if c.on_response(self.now, corr, resp) {
                        for token in c.take_registered() {
                            self.model.registered(token);
                        }
                        if c.crash_requested {
                            self.crash_after_prepare(to.client);
                        } else {
                            self.drive_client(to.client);
                        }
                    }
                }
            }
            Event::Wake(i) => {
                if self.clients[i].alive && self.clients[i].paused_until <= self.now {
                    self.drive_client(i);
                }
            }
            Event::Timeout { to, corr } => {
                let c = &mut self.clients[to.client];
                if c.incarnation == to.incarnation && c.alive {
                    c.on_timeout(self.now, corr);
                    if !c.is_waiting() {
                        self.drive_client(to.client);
                    }
                }
            }
            Event::Tick => {
                if let Some(b) = self.broker.as_mut() {
                    b.tick(&mut self.disk, self.now);
                    broker_acted = true;
                }
                let next = self.now + self.rng.range(5, 30);
                self.at(next, Event::Tick);
            }
            Event::Markers => {
                if let Some(b) = self.broker.as_mut() {
                    b.marker_step(&mut self.disk, self.now);
                    broker_acted = true;
                }
            }
            Event::Flush => {
                if self.broker.is_some() {
                    for (name, _) in self
                        .disk
                        .logs()
                        .map(|(n, l)| (n.clone(), l.unflushed()))
                        .collect::<Vec<_>>()
                    {
                        if self.rng.chance(500) {
                            self.disk.flush(&name);
                        }
                    }
                }
                let next = self.now + self.rng.range(5, 200);
                self.at(next, Event::Flush);
            }
            Event::Chaos => {
                if !self.quiet {
                    self.chaos()?;
                }
            }
            Event::Restart => {
                if self.broker.is_none() {
                    let b = Broker::start(&self.layout, &mut self.disk, self.now);
                    self.model.restarted(&b);
                    self.broker = Some(b);
                    self.note("broker restarted".into());
                    broker_acted = true;
                }
            }
            Event::ClientRestart(i) => {
                self.clients[i].restart();
                self.note(format!("client {} restarted", self.clients[i].describe()));
                self.at(self.now + 1, Event::Wake(i));
            }
        }
        if broker_acted
            && !self.quiet
            && self.broker.is_some()
            && self.rng.chance(self.faults.mid_step_crash)
        {
            self.crash(true)?;
            return Ok(true);
        }
        if broker_acted {
            let observed = self
                .broker
                .as_mut()
                .map(|b| std::mem::take(&mut b.observed))
                .unwrap_or_default();
            if let (Some(before), Some(b)) = (before.as_ref(), self.broker.as_ref()) {
                Model::check_tx_pending_moves(before, b, &observed)?;
            }
            if self.keep_trace {
                for o in &observed {
                    self.note(format!("  {o:?}"));
                }
            }
            self.model
                .observe(self.now, &self.layout, &self.disk, &observed)?;
            let mut wants_markers = false;
            if let Some(b) = self.broker.as_ref() {
                Self::note_kept(&mut self.model, &b.outbox, true);
                self.model.check_state(b, &self.disk)?;
                wants_markers = b.has_marker_work();
            }
            if wants_markers && !self.queue.values().any(|e| matches!(e, Event::Markers)) {
                let at = self.now + self.rng.range(1, 15);
                self.at(at, Event::Markers);
            }
            self.broker_outbox();
        }
        Ok(true)
    }
}

/// Runs one seed: `steps` steps with faults, then the quiet phase and the final check.
pub fn run(config: &RunConfig) -> Outcome {
    config.bugs.install();
    let mut w = World::new(config);
    let mut step = 0u64;
    let mut failure = None;
    let quiet_limit = config.steps + 200_000;
    loop {
        if step == config.steps && !w.quiet {
            w.quiet_down();
        }
        if w.quiet && step.is_multiple_of(64) && w.settled() {
            break;
        }
        if step >= quiet_limit {
            failure = Some(Failure {
                step,
                time_ms: w.now,
                message: format!(
                    "the quiet phase did not settle every input record: {}",
                    w.summary()
                ),
            });
            break;
        }
        match w.advance() {
            Ok(true) => step += 1,
            Ok(false) => break,
            Err(message) => {
                failure = Some(Failure {
                    step,
                    time_ms: w.now,
                    message,
                });
                break;
            }
        }
    }
    if failure.is_none() {
        if let Some(b) = w.broker.as_ref() {
            let checked = w.model.check_final(b, &w.disk).and_then(|()| {
                if config.replay_check {
                    w.model.check_replay(b, &w.disk, w.now)
                } else {
                    Ok(())
                }
            });
            if let Err(message) = checked {
                failure = Some(Failure {
                    step,
                    time_ms: w.now,
                    message,
                });
            }
        }
    }
    faults::clear();
    let dead_letters = crate::check::visible_dead_letters(&w.disk)
        .values()
        .flatten()
        .fold((0, 0), |(plain, carried), &pid| {
            if pid < 0 {
                (plain + 1, carried)
            } else {
                (plain, carried + 1)
            }
        });
    let (commits, aborts) = w
        .clients
        .iter()
        .fold((0, 0), |(c, a), cl| (c + cl.commits, a + cl.aborts));
    Outcome {
        seed: config.seed,
        steps: step,
        failure,
        trace: w.trace,
        crashes: w.crashes,
        commits,
        aborts,
        inputs: w.inputs,
        dead_letters,
    }
}
