//! The simulated broker's calls to its three coordinators — share-state, group, transaction —
//! each a pass in the runtime's shipped order over the simulated disk ([`crate::runtime`]),
//! and the transaction markers: written one partition per step, on `__share_group_state`
//! through its coordinator (then applied to the live share partitions), elsewhere appended
//! and listed until flushed, then reported to the transaction coordinator.

use super::*;

impl Broker {
    /// The share-state coordinator's shard rebuilt from its logs, its fence seeded with what
    /// each state partition's producer state knows (as the broker's host does after the
    /// replay), and what its load emitted.
    pub(super) fn load_state(
        layout: &Layout,
        disk: &Disk,
        producers: &Producers,
        now: i64,
        notes: &mut Vec<String>,
    ) -> (ShareStateShard, Emitted<ShareStateShard>) {
        let mut shard = state_shard(layout);
        runtime::replay(
            &mut shard,
            SHARE_STATE,
            layout.state_partitions,
            disk,
            notes,
        );
        for p in 0..layout.state_partitions as i32 {
            if let Some(ps) = producers.get(&log_name(SHARE_STATE, p)) {
                for (id, entry) in ps.entries() {
                    shard.seed_producer(p, id.0, entry.epoch().0, entry.coordinator_epoch());
                }
            }
        }
        let mut loaded = Emitted::default();
        shard.loaded(now, &mut loaded);
        (shard, loaded)
    }

    /// Makes what the share-state coordinator's load emitted durable (its first pass).
    pub(super) fn resume_state(&mut self, disk: &mut Disk, loaded: Emitted<ShareStateShard>) {
        match self.state.resume(disk, &mut self.producers, loaded) {
            Ok(appended) => self.observe_markers(appended.markers),
            Err(_) => self
                .notes
                .push("share-state coordinator resume failed".into()),
        }
    }

    /// One pass of the share-state coordinator; its replies by waiter, or None when its
    /// append failed (the coordinator is then rebuilt from the logs, as the broker's runtime
    /// rebuilds it, and every waiter gets nothing: unavailable).
    pub(super) fn state_pass(
        &mut self,
        disk: &mut Disk,
        now: i64,
        queued: Vec<Queued<ShareStateShard, CallId>>,
    ) -> Option<Vec<(CallId, ShareStateReply)>> {
        self.state_passed_at = now;
        match self
            .state
            .pass(disk, &mut self.producers, now, Vec::new(), queued)
        {
            Ok(appended) => {
                self.observe_markers(appended.markers);
                Some(appended.delivered.replies)
            }
            Err(_) => {
                self.notes
                    .push("share-state write failed; reloading from the log".into());
                let (shard, loaded) =
                    Self::load_state(&self.layout, disk, &self.producers, now, &mut self.notes);
                self.state.replace(shard);
                self.resume_state(disk, loaded);
                None
            }
        }
    }

    /// Calls the share-state coordinator: its reply, or None when it is unavailable.
    pub(super) fn state_call(
        &mut self,
        disk: &mut Disk,
        now: i64,
        input: ShareStateInput,
    ) -> Option<ShareStateReply> {
        self.last_call += 1;
        let id = self.last_call;
        let replies = self.state_pass(disk, now, vec![Queued::Input(input, Some(id))])?;
        replies
            .into_iter()
            .find_map(|(waiter, reply)| (waiter == id).then_some(reply))
    }

    /// One pass of the group coordinator, fed the topics first as the broker's host feeds
    /// them; its replies by waiter (its plain batches on the simulated disk are never
    /// refused, so there is always an answer).
    pub(super) fn group_pass(
        &mut self,
        disk: &mut Disk,
        now: i64,
        queued: Vec<Queued<GroupShard, CallId>>,
    ) -> Vec<(CallId, GroupReply)> {
        let fed = vec![GroupInput::Topics(topics_image(&self.layout))];
        match self
            .groups
            .pass(disk, &mut self.producers, now, fed, queued)
        {
            Ok(appended) => appended.delivered.replies,
            Err(_) => {
                self.notes.push("group coordinator write failed".into());
                Vec::new()
            }
        }
    }

    /// Calls the group coordinator with a share-group call.
    pub(super) fn share_call(
        &mut self,
        disk: &mut Disk,
        now: i64,
        call: ShareCall,
    ) -> Option<ShareReply> {
        self.last_call += 1;
        let id = self.last_call;
        let input = Queued::Input(GroupInput::Share(call), Some(id));
        self.group_pass(disk, now, vec![input])
            .into_iter()
            .find_map(|(waiter, reply)| match reply {
                GroupReply::Share(reply) if waiter == id => Some(reply),
                _ => None,
            })
    }

    /// A member's current epoch in `group` (the handlers' member check).
    pub(super) fn member_epoch(
        &mut self,
        disk: &mut Disk,
        now: i64,
        group: &str,
        member: &str,
    ) -> Result<i32, ErrorCode> {
        let call = ShareCall::MemberEpoch {
            group_id: group.to_string(),
            member_id: member.to_string(),
        };
        match self.share_call(disk, now, call) {
            Some(ShareReply::MemberEpoch(epoch)) => epoch,
            _ => Err(ErrorCode::COORDINATOR_NOT_AVAILABLE),
        }
    }

    /// The transaction coordinator's description of `txn_id` (None: no answer).
    pub(super) fn describe_txn(
        &mut self,
        disk: &mut Disk,
        now: i64,
        txn_id: &str,
    ) -> Option<TransactionDescription> {
        self.last_call += 1;
        let id = self.last_call;
        let input = TxnInput::Describe(vec![txn_id.to_string()]);
        self.txn_pass(disk, now, vec![(input, Some(TxnWaiter::Call(id)))]);
        let at = self.txn_calls.iter().position(|(c, _)| *c == id)?;
        match self.txn_calls.remove(at).1 {
            TxnReply::Describe(described) => described.into_iter().next(),
            _ => None,
        }
    }

    pub(super) fn observe_markers(&mut self, markers: Vec<AppendedMarker>) {
        for (log, offset, m) in markers {
            self.observed.push(Observed::Marker {
                log,
                offset,
                producer_id: m.producer_id,
                producer_epoch: m.producer_epoch,
                commit: m.commit,
            });
        }
    }

    /// The share-state participant's second half, once the coordinator answered that the
    /// marker is durable and which share partitions it resolved: the live machines resolve
    /// the producer's stagings (as `ShareManager::write_marker` does).
    pub(super) fn apply_marker_live(
        &mut self,
        marker: TxnMarker,
        resolved: Vec<SharePartitionKey>,
    ) {
        for key in resolved {
            if let Some(sp) = self.sps.get_mut(&key) {
                if let Err(e) =
                    sp.apply_marker(marker.producer_id, marker.producer_epoch, marker.commit)
                {
                    self.notes.push(format!("marker refused: {e}"));
                }
                self.observed.push(Observed::MarkerApplied {
                    partition: key.partition,
                    producer_id: marker.producer_id,
                    producer_epoch: marker.producer_epoch,
                    commit: marker.commit,
                });
            }
        }
    }

    /// One pass of the transaction coordinator in the runtime's order (`Passes`, the code
    /// the broker runs): fresh producer ids for the requests that may need one (from the
    /// durable allocator), the inputs, a tick; the pass's records appended and fsynced; only
    /// then its replies and effects.
    pub(super) fn txn_pass(
        &mut self,
        disk: &mut Disk,
        now: i64,
        queued: Vec<(TxnInput, Option<TxnWaiter>)>,
    ) {
        let wanted = self
            .txn
            .shard()
            .fresh_ids_wanted(queued.iter().map(|(input, _)| input));
        let mut fed = Vec::new();
        if wanted > 0 {
            let ids = (0..wanted)
                .map(|_| {
                    disk.next_producer_id += 1;
                    ProducerId(disk.next_producer_id - 1)
                })
                .collect();
            fed.push(TxnInput::FreshIds(ids));
        }
        let queued = queued
            .into_iter()
            .map(|(input, waiter)| Queued::Input(input, waiter))
            .collect();
        match self.txn.pass(disk, &mut self.producers, now, fed, queued) {
            Ok(appended) => self.txn_delivered(disk, appended),
            // Plain batches on the simulated disk are never refused.
            Err(_) => self
                .notes
                .push("transaction coordinator write failed".into()),
        }
    }

    /// A durable pass of the transaction coordinator: its replies and effects.
    pub(super) fn txn_delivered(
        &mut self,
        disk: &mut Disk,
        appended: runtime::Appended<TxnShard, TxnWaiter>,
    ) {
        let delivered = appended.delivered;
        for (waiter, reply) in delivered.replies {
            match waiter {
                TxnWaiter::Client(addr, corr) => {
                    let resp = match reply {
                        TxnReply::Response(TxnResponse::InitProducerId(r)) => {
                            Resp::InitProducerId {
                                code: r.error_code.0,
                                producer_id: r.producer_id.0,
                                producer_epoch: r.producer_epoch.0,
                                ongoing_producer_id: r.ongoing_txn_producer_id.0,
                                ongoing_producer_epoch: r.ongoing_txn_producer_epoch.0,
                            }
                        }
                        TxnReply::Response(TxnResponse::EndTxn(r)) => Resp::EndTxn {
                            code: r.error_code.0,
                            producer_id: r.producer_id.0,
                            producer_epoch: r.producer_epoch.0,
                        },
                        other => {
                            self.notes
                                .push(format!("unexpected parked reply {other:?}"));
                            continue;
                        }
                    };
                    self.outbox.push((addr, corr, resp));
                }
                TxnWaiter::Add(wait) => self.adds.push((wait, reply)),
                TxnWaiter::Call(id) => self.txn_calls.push((id, reply)),
            }
        }
        for effect in delivered.effects {
            match effect {
                TxnEffect::WriteMarkers { markers, listed } => {
                    self.tasks.push_back(MarkerWriting::new(markers, listed))
                }
                TxnEffect::Flush(partitions) => {
                    for tp in partitions {
                        disk.flush(&log_name(&tp.topic, tp.partition));
                    }
                }
                TxnEffect::Stopped(violation) => self
                    .notes
                    .push(format!("transaction coordinator stopped: {violation}")),
            }
        }
    }

    /// Transaction version 2's implicit add of `partitions` to the producer's transaction
    /// (Produce v12+, and TxnShareAcknowledge for the share-state partitions) for the client
    /// request `(from, corr, req)`: its error code, or None when the coordinator held it (the
    /// request is handled again once the add is answered, see [`Broker::resume_requests`]).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn implicit_add(
        &mut self,
        disk: &mut Disk,
        now: i64,
        txn_id: String,
        (pid, epoch): (i64, i16),
        partitions: Vec<TopicPartition>,
        (from, corr, req): (Addr, u64, Req),
    ) -> Option<i16> {
        self.next_add += 1;
        let id = self.next_add;
        let request = TxnRequest::AddPartitionsImplicit(AddPartitionsImplicitRequest {
            transactional_id: txn_id,
            producer_id: ProducerId(pid),
            producer_epoch: ProducerEpoch(epoch),
            partitions,
        });
        let waiter = TxnWaiter::Add(AddWait {
            id,
            from,
            corr,
            req,
        });
        self.txn_pass(disk, now, vec![(TxnInput::Request(request), Some(waiter))]);
        let at = self.adds.iter().position(|(w, _)| w.id == id)?;
        let (_, reply) = self.adds.remove(at);
        Some(match reply {
            TxnReply::Response(r) => r.error_code().0,
            _ => codes::CONCURRENT_TRANSACTIONS,
        })
    }

    /// Handles again the client requests whose held implicit add was answered since.
    pub(super) fn resume_requests(&mut self, disk: &mut Disk, now: i64) {
        while !self.adds.is_empty() {
            let (wait, _) = self.adds.remove(0);
            self.notes
                .push(format!("request {} resumed after its held add", wait.corr));
            self.handle(disk, now, wait.from, wait.corr, wait.req);
        }
    }

    /// A coordinator request answered through its waiter (InitProducerId, EndTxn).
    pub(super) fn parked_call(
        &mut self,
        disk: &mut Disk,
        now: i64,
        from: Addr,
        corr: u64,
        request: TxnRequest,
    ) {
        self.txn_pass(
            disk,
            now,
            vec![(
                TxnInput::Request(request),
                Some(TxnWaiter::Client(from, corr)),
            )],
        );
    }

    /// Writes `marker` to `tp`, as the broker's participants path does: on
    /// `__share_group_state` through its coordinator (durable when it answers; then the live
    /// share partitions resolve), elsewhere appended (producer-state check first) and left for
    /// the Markers record to cover until flushed.
    pub(super) fn write_marker(
        &mut self,
        disk: &mut Disk,
        tp: &TopicPartition,
        marker: TxnMarker,
        coordinator_epoch: i32,
        now: i64,
    ) -> Result<MarkerOutcome, String> {
        if tp.topic == SHARE_STATE {
            let input = ShareStateInput::WriteMarker {
                marker,
                coordinator_epoch,
            };
            return match self.state_call(disk, now, input) {
                Some(ShareStateReply::Marker(Ok(resolved))) => {
                    self.apply_marker_live(marker, resolved);
                    Ok(MarkerOutcome::Durable)
                }
                Some(ShareStateReply::Marker(Err(refused))) => Err(format!("{refused:?}")),
                _ => Err("share-state coordinator unavailable".into()),
            };
        }
        let name = log_name(&tp.topic, tp.partition);
        let offset =
            runtime::append_marker(disk, &mut self.producers, &name, marker, coordinator_epoch)?;
        self.observe_markers(vec![(name, offset, marker)]);
        Ok(MarkerOutcome::Appended(offset))
    }

    /// One step of marker writing: the next partition of the oldest transaction
    /// (`MarkerWriting`, the broker's marker task's order); once all are written, the
    /// completion with the flushed offsets read now. Returns false when there was nothing to
    /// do.
    pub fn marker_step(&mut self, disk: &mut Disk, now: i64) -> bool {
        let Some(mut task) = self.tasks.pop_front() else {
            return false;
        };
        if let Some((tp, marker)) = task.take_next() {
            let outcome = self
                .write_marker(disk, &tp, marker, task.coordinator_epoch(), now)
                .unwrap_or_else(|e| {
                    self.notes
                        .push(format!("marker on {tp:?} refused: {e}; retrying"));
                    MarkerOutcome::Failed
                });
            task.written(tp, outcome);
        }
        if !task.is_done() {
            self.tasks.push_front(task);
            return true;
        }
        let flushed = task
            .partitions_to_read()
            .into_iter()
            .map(|tp| {
                let offset = disk
                    .log(&log_name(&tp.topic, tp.partition))
                    .flushed_offset();
                (tp, offset)
            })
            .collect();
        self.txn_pass(disk, now, vec![(task.finish(flushed), None)]);
        self.resume_requests(disk, now);
        true
    }
}
