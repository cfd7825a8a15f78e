//! The simulated broker's request handling, in the order of the broker's handlers and
//! share-partition leader: a share partition read back or initialized before it is created,
//! state writes answered once the share-state coordinator answered them, and a
//! TxnShareAcknowledge's member check, implicit add, staging on copies, persistence, then
//! answer. Loading a share partition and staging go through the broker's own orders
//! (`shoal_core::share_leader`).

use shoal_core::share_leader::{self, Loading, NotPersisted, Staging, Unpersisted};

use super::*;

/// The simulated broker never changes leader.
const LEADER_EPOCH: i32 = 0;

impl Broker {
    /// Whether a TxnShareAcknowledge of `parts` carries dead letters: the group has a
    /// dead-letter queue and a part REJECTs records.
    fn carries_dead_letters(&self, parts: &[(i32, Vec<AckBatch>)]) -> bool {
        self.layout.share.dead_letter && parts.iter().any(|(_, b)| dead_letters::has_reject(b))
    }

    /// Creates the machine of `key` if it has none, as the broker's share-partition leader
    /// does: from the state the share-state coordinator reads back, or, with none (or an
    /// uninitialized one), initialized there first at the input's start.
    pub(super) fn ensure_initialized(
        &mut self,
        disk: &mut Disk,
        key: &SharePartitionKey,
        now: i64,
    ) -> Result<(), i16> {
        if self.sps.contains_key(key) {
            return Ok(());
        }
        let read = ShareStateInput::Read {
            key: key.clone(),
            leader_epoch: 0,
        };
        let persisted = match self.state_call(disk, now, read) {
            Some(ShareStateReply::Read(read)) => read,
            Some(ShareStateReply::Refused(e)) => return Err(code(e.error_code())),
            _ => return Err(codes::KAFKA_STORAGE_ERROR),
        };
        let unusable = |e: ShareError| format!("persisted state of {key:?} unusable: {e}");
        let machine = match Loading::read(self.layout.share.clone(), persisted.as_ref()) {
            Err(e) => {
                self.notes.push(unusable(e));
                return Err(codes::UNKNOWN_SERVER_ERROR);
            }
            Ok(Loading::Ready(machine)) => machine,
            Ok(Loading::Persist(pending)) => self.persisted(disk, key, pending, now)?,
            // The simulated input's share partitions start at the beginning.
            Ok(Loading::PickStart(pick)) => {
                let initializing = pick.start_at(0);
                let initialize = ShareStateInput::Initialize {
                    key: key.clone(),
                    state: initializing.state(),
                };
                self.state_done(disk, now, initialize)?;
                initializing.initialized().map_err(|e| {
                    self.notes.push(format!("cannot create {key:?}: {e}"));
                    codes::UNKNOWN_SERVER_ERROR
                })?
            }
        };
        self.sps.insert(key.clone(), machine);
        Ok(())
    }

    /// A share-state write whose answer is done or refused.
    pub(super) fn state_done(
        &mut self,
        disk: &mut Disk,
        now: i64,
        input: ShareStateInput,
    ) -> Result<(), i16> {
        match self.state_call(disk, now, input) {
            Some(ShareStateReply::Done) => Ok(()),
            Some(ShareStateReply::Refused(e)) => {
                self.notes.push(format!("share state write refused: {e}"));
                Err(code(e.error_code()))
            }
            _ => Err(codes::KAFKA_STORAGE_ERROR),
        }
    }

    /// Persists the state write of a change to `key`'s machine through the share-state
    /// coordinator; the change's answer once it is durable (`share_leader::Unpersisted`).
    pub(super) fn persisted<T>(
        &mut self,
        disk: &mut Disk,
        key: &SharePartitionKey,
        change: Unpersisted<T>,
        now: i64,
    ) -> Result<T, i16> {
        let outcome = match change.write(LEADER_EPOCH) {
            Some(state) => {
                let input = ShareStateInput::Write {
                    key: key.clone(),
                    state,
                };
                self.state_done(disk, now, input)
            }
            None => Ok(()),
        };
        change.persisted(outcome)
    }

    pub(super) fn release_member(&mut self, disk: &mut Disk, member: &str, now: i64) {
        self.observed.push(Observed::Released {
            member: member.to_string(),
        });
        let keys: Vec<SharePartitionKey> = self.sps.keys().cloned().collect();
        for key in keys {
            let released = self
                .sps
                .get_mut(&key)
                .and_then(|sp| sp.release_member(member, now).ok());
            if let Some(write) = released {
                let _ = self.persisted(disk, &key, share_leader::changed(write), now);
            }
        }
    }

    pub(super) fn heartbeat(
        &mut self,
        disk: &mut Disk,
        now: i64,
        group: String,
        member: String,
        epoch: i32,
        full: bool,
    ) -> Resp {
        let request = HeartbeatRequest {
            group_id: group,
            member_id: member.clone(),
            member_epoch: epoch,
            rack_id: None,
            subscribed_topic_names: (epoch == 0 || full).then(|| vec![INPUT.to_string()]),
            client_id: "sim".into(),
            client_host: "/127.0.0.1".into(),
        };
        let call = ShareCall::Heartbeat(request, GroupOverrides::default());
        let reply = match self.share_call(disk, now, call) {
            Some(ShareReply::Heartbeat(reply)) => reply,
            _ => {
                return Resp::Heartbeat {
                    code: codes::COORDINATOR_NOT_AVAILABLE,
                    member_epoch: -1,
                    assignment: None,
                }
            }
        };
        match reply {
            Ok(reply) => {
                if epoch == -1 {
                    self.release_member(disk, &member, now);
                }
                let assignment = reply.assignment.map(|topics| {
                    topics
                        .iter()
                        .filter(|t| t.topic_id == INPUT_ID.0)
                        .flat_map(|t| t.partitions.iter().copied())
                        .collect()
                });
                Resp::Heartbeat {
                    code: codes::NONE,
                    member_epoch: reply.member_epoch,
                    assignment,
                }
            }
            Err(e) => Resp::Heartbeat {
                code: code(e),
                member_epoch: -1,
                assignment: None,
            },
        }
    }

    pub(super) fn share_fetch(
        &mut self,
        disk: &mut Disk,
        now: i64,
        group: &str,
        member: &str,
        partitions: &[i32],
        max_records: i32,
    ) -> Resp {
        if let Err(e) = self.member_epoch(disk, now, group, member) {
            return Resp::ShareFetch {
                code: code(e),
                records: Vec::new(),
            };
        }
        let mut records = Vec::new();
        for &p in partitions {
            if !(0..self.layout.input_partitions).contains(&p) {
                continue;
            }
            let key = share_key(p);
            if let Err(c) = self.ensure_initialized(disk, &key, now) {
                self.notes
                    .push(format!("share partition {p} not created: {c}"));
                continue;
            }
            let Some(sp) = self.sps.get_mut(&key) else {
                continue;
            };
            let from = sp.next_fetch_offset();
            let fetched: Vec<FetchedBatch> = disk
                .log(&log_name(INPUT, p))
                .batches()
                .iter()
                .filter(|b| b.last_offset() >= from)
                .take(self.layout.fetch_batches)
                .map(|b| FetchedBatch {
                    base_offset: b.base_offset,
                    last_offset: b.last_offset(),
                    is_control: b.is_control(),
                    producer_id: b.producer_id,
                    is_transactional: b.transactional,
                })
                .collect();
            let fetched = if sp.can_acquire_records() {
                fetched
            } else {
                Vec::new()
            };
            let acquisition = match share_leader::acquire(
                sp,
                &AcquireRequest {
                    member_id: member,
                    fetch_offset: from,
                    fetched: &fetched,
                    max_records,
                    batch_size: max_records,
                    mode: AcquireMode::BatchOptimized,
                    isolation: Isolation::ReadUncommitted,
                    now_ms: now,
                },
            ) {
                Ok(a) => a,
                Err(e) => {
                    self.notes.push(format!("acquire refused: {e}"));
                    continue;
                }
            };
            let acquired = match self.persisted(disk, &key, acquisition, now) {
                Ok(acquired) => acquired,
                Err(c) => {
                    return Resp::ShareFetch {
                        code: c,
                        records: Vec::new(),
                    }
                }
            };
            let deadline_ms = now + self.layout.share.record_lock_duration_ms;
            for r in &acquired {
                self.observed.push(Observed::Acquired {
                    member: member.to_string(),
                    partition: p,
                    first: r.first_offset,
                    last: r.last_offset,
                    delivery_count: r.delivery_count,
                    deadline_ms,
                });
                for offset in r.first_offset..=r.last_offset {
                    records.push(Delivered {
                        partition: p,
                        offset,
                        delivery_count: r.delivery_count,
                    });
                }
            }
        }
        Resp::ShareFetch {
            code: codes::NONE,
            records,
        }
    }

    pub(super) fn share_ack(
        &mut self,
        disk: &mut Disk,
        now: i64,
        group: &str,
        member: &str,
        acks: Vec<(i32, AckBatch)>,
    ) -> Resp {
        if let Err(e) = self.member_epoch(disk, now, group, member) {
            return Resp::ShareAck { code: code(e) };
        }
        let mut by_partition: BTreeMap<i32, Vec<AckBatch>> = BTreeMap::new();
        for (p, b) in acks {
            by_partition.entry(p).or_default().push(b);
        }
        let mut result = codes::NONE;
        for (p, batches) in by_partition {
            let key = share_key(p);
            let acknowledged =
                match share_leader::acknowledge(self.sps.get_mut(&key), member, &batches, now) {
                    Ok(acknowledged) => acknowledged,
                    Err(refused) => {
                        result = code(refused.error_code());
                        continue;
                    }
                };
            if let Err(c) = self.persisted(disk, &key, acknowledged, now) {
                result = c;
                continue;
            }
            for batch in batches {
                self.observed.push(Observed::Acked {
                    partition: p,
                    batch,
                });
            }
        }
        Resp::ShareAck { code: result }
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn produce(
        &mut self,
        disk: &mut Disk,
        now: i64,
        txn_id: String,
        pid: i64,
        epoch: i16,
        partition: i32,
        base_sequence: i32,
        keys: Vec<Vec<u8>>,
        again: (Addr, u64, Req),
    ) -> Option<Resp> {
        let name = log_name(OUTPUT, partition);
        let ongoing = self
            .producers
            .get(&name)
            .is_some_and(|ps| ps.has_ongoing_txn(ProducerId(pid), ProducerEpoch(epoch)));
        if !ongoing {
            let c = self.implicit_add(
                disk,
                now,
                txn_id,
                (pid, epoch),
                vec![TopicPartition::new(OUTPUT, partition)],
                again,
            )?;
            if c != codes::NONE {
                return Some(Resp::Produce { code: c });
            }
        }
        let batch = Batch {
            base_offset: 0,
            producer_id: pid,
            producer_epoch: epoch,
            base_sequence,
            transactional: true,
            body: Body::Data(
                keys.into_iter()
                    .map(|key| Record { key, value: None })
                    .collect(),
            ),
        };
        let info = batch_info(&batch);
        let ps = self
            .producers
            .entry(name.clone())
            .or_insert_with(|| ProducerStateManager::new(ProducerStateConfig::default()));
        Some(match ps.check(&[info]) {
            Err(e) => Resp::Produce {
                code: e.error_code(),
            },
            Ok(Decision::Duplicate(_)) => Resp::Produce { code: codes::NONE },
            Ok(Decision::Append) => {
                let offset = disk.append(&name, batch);
                disk.flush(&name);
                ps.on_append(&info, offset);
                Resp::Produce { code: codes::NONE }
            }
        })
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn txn_share_ack(
        &mut self,
        disk: &mut Disk,
        now: i64,
        txn_id: String,
        (pid, epoch): (i64, i16),
        group: &str,
        member: &str,
        member_epoch: i32,
        parts: Vec<(i32, Vec<AckBatch>)>,
        again: (Addr, u64, Req),
    ) -> Option<Resp> {
        // Steps 5–8 in the order the broker's handler runs them (`TxnShareAck`).
        let keys: Vec<SharePartitionKey> = parts.iter().map(|(p, _)| share_key(*p)).collect();
        let (mut flow, mut step) = TxnShareAck::start(
            pid,
            epoch,
            member_epoch,
            &keys,
            self.layout.state_partitions,
        );
        let mut again = Some(again);
        loop {
            step = match step {
                Step::MemberEpoch => {
                    let current = self.member_epoch(disk, now, group, member);
                    flow.member(current)
                }
                Step::DescribeProducer => {
                    let described = self.describe_txn(disk, now, &txn_id);
                    flow.described(described.as_ref())
                }
                // One input topic, always led here.
                Step::CheckPartitions => flow.partitions_checked(Ok(())),
                Step::Register(state_partitions) => {
                    let mut partitions: Vec<TopicPartition> = state_partitions
                        .into_iter()
                        .map(|p| TopicPartition::new(SHARE_STATE, p))
                        .collect();
                    // The transaction carries its REJECTs' dead letters.
                    if self.carries_dead_letters(&parts) {
                        partitions.push(TopicPartition::new(DLQ, 0));
                    }
                    let again = again.take().expect("one registration per request");
                    let c = self.implicit_add(
                        disk,
                        now,
                        txn_id.clone(),
                        (pid, epoch),
                        partitions,
                        again,
                    )?;
                    flow.registered(ErrorCode(c))
                }
                Step::Stage => {
                    let staged = self.stage(disk, now, (pid, epoch), member, &keys, &parts);
                    flow.staged(staged)
                }
                Step::Answer(Err(refusal)) => {
                    return Some(Resp::TxnShareAck {
                        code: refusal.code.0,
                    })
                }
                Step::Answer(Ok(())) => break,
            };
        }
        self.observed.push(Observed::Staged {
            producer_id: pid,
            producer_epoch: epoch,
            ranges: parts
                .into_iter()
                .flat_map(|(p, bs)| bs.into_iter().map(move |b| (p, b)))
                .collect(),
        });
        Some(Resp::TxnShareAck { code: codes::NONE })
    }

    /// Step 8, in the broker's share-partition leader's order (`share_leader::Staging`): on
    /// copies, all or nothing; persisted by the share-state coordinator (or refused, fenced);
    /// only then the copies put in place.
    fn stage(
        &mut self,
        disk: &mut Disk,
        now: i64,
        (pid, epoch): (i64, i16),
        member: &str,
        keys: &[SharePartitionKey],
        parts: &[(i32, Vec<AckBatch>)],
    ) -> Result<(), Refusal> {
        let dead_letter = self.layout.share.dead_letter;
        let request = keys.iter().zip(parts).map(|(key, (_, batches))| {
            let carried = dead_letter && dead_letters::has_reject(batches);
            (key, self.sps.get(key), &batches[..], carried)
        });
        let staging = match Staging::on_copies(request, now, member, pid, epoch) {
            Ok(staging) => staging,
            Err(refused) => {
                // A copy that broke an invariant stops the original, as the broker does.
                if let (Some(v), Some(sp)) = (refused.violation(), self.sps.get_mut(&refused.key)) {
                    sp.stop(v.clone());
                }
                return Err(refused.refusal());
            }
        };
        // The dead letters the transaction carries, durable before the staging that says so.
        if self.carries_dead_letters(parts) {
            let letters: Vec<_> = staging
                .copies()
                .zip(parts)
                .map(|((key, copy), (_, batches))| (key.partition, copy.dead_letters_of(batches)))
                .collect();
            if let Err(e) = self.write_carried(disk, (pid, epoch), &letters) {
                self.notes.push(format!("dead letters refused: {e}"));
                return Err(Refusal::request(ErrorCode(codes::PRODUCER_FENCED), e));
            }
        }
        let writes = staging.writes(LEADER_EPOCH);
        let outcome = if writes.is_empty() {
            Ok(())
        } else {
            let input = ShareStateInput::Stage {
                producer_id: pid,
                producer_epoch: epoch,
                writes,
            };
            match self.state_call(disk, now, input) {
                Some(ShareStateReply::Done) => Ok(()),
                Some(ShareStateReply::StageRefused(refused)) => Err(NotPersisted::Refused(refused)),
                _ => Err(NotPersisted::Unavailable),
            }
        };
        for (key, copy) in staging.persisted(outcome)? {
            self.sps.insert(key, copy);
        }
        Ok(())
    }
}
