//! One classic group: its members, its lifecycle and the rebalance protocol's group-level steps.
//!
//! Mirrors Kafka's `ClassicGroup` and the group-level parts of `GroupMetadataManager`
//! (prepareRebalance, completeClassicGroupJoin, sync propagation, member removal). Functions
//! here never touch other groups, so the coordinator can hand out `&mut Group` alongside its
//! config. Durable fields (`offsets`, `persisted`) change only through [`Group::apply`].

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use indexmap::IndexMap;

use super::records::{CommittedOffset, GroupMetadataValue, GroupRecord, MemberMetadataValue};
use super::types::*;
use super::GroupConfig;

#[derive(Clone, Debug)]
pub(crate) struct Member {
    pub(crate) member_id: String,
    pub(crate) group_instance_id: Option<String>,
    pub(crate) client_id: String,
    pub(crate) client_host: String,
    pub(crate) rebalance_timeout_ms: i32,
    pub(crate) session_timeout_ms: i32,
    pub(crate) protocol_type: String,
    /// (name, metadata) in the member's order of preference.
    pub(crate) protocols: Vec<(String, Bytes)>,
    pub(crate) assignment: Bytes,
    pub(crate) awaiting_join: Option<ReplyToken>,
    pub(crate) awaiting_sync: Option<ReplyToken>,
    /// Joined but has not yet received a JoinGroup response: expires on the new-member timeout.
    pub(crate) is_new: bool,
    pub(crate) heartbeat_deadline_ms: i64,
    /// Generation of the last successful JoinGroup response this member got (invariant checks).
    pub(crate) joined_generation: Option<i32>,
}

impl Member {
    pub(crate) fn is_static(&self) -> bool {
        self.group_instance_id.is_some()
    }

    pub(crate) fn metadata(&self, protocol: &str) -> Option<&Bytes> {
        self.protocols
            .iter()
            .find(|(name, _)| name == protocol)
            .map(|(_, m)| m)
    }

    pub(crate) fn supports(&self, protocol: &str) -> bool {
        self.metadata(protocol).is_some()
    }

    /// Session deadline, unless a pending rebalance satisfies the heartbeat (Kafka's
    /// `hasSatisfiedHeartbeat`: members awaiting join or sync cannot heartbeat).
    pub(crate) fn session_deadline(&self) -> Option<i64> {
        if self.is_new || (self.awaiting_join.is_none() && self.awaiting_sync.is_none()) {
            Some(self.heartbeat_deadline_ms)
        } else {
            None
        }
    }
}

#[derive(Clone, Debug)]
pub(crate) struct InitialDelay {
    pub(crate) delay_ms: i64,
    pub(crate) remaining_ms: i64,
}

#[derive(Clone, Debug)]
pub(crate) struct Group {
    pub(crate) group_id: String,
    pub(crate) state: GroupState,
    pub(crate) previous_state: GroupState,
    pub(crate) state_timestamp_ms: i64,
    pub(crate) generation: i32,
    pub(crate) protocol_type: Option<String>,
    pub(crate) protocol_name: Option<String>,
    pub(crate) leader: Option<String>,
    pub(crate) members: IndexMap<String, Member>,
    /// group.instance.id → member id.
    pub(crate) static_members: BTreeMap<String, String>,
    /// Members told MEMBER_ID_REQUIRED, with their session deadline.
    pub(crate) pending_members: BTreeMap<String, i64>,
    /// Members that got a JoinGroup response but have not sent SyncGroup yet.
    pub(crate) pending_sync: BTreeSet<String>,
    pub(crate) sync_deadline_ms: Option<i64>,
    pub(crate) join_deadline_ms: Option<i64>,
    /// Set while the join phase is the delayed initial rebalance of an Empty group.
    pub(crate) initial_delay: Option<InitialDelay>,
    pub(crate) new_member_added: bool,
    // Durable part.
    pub(crate) offsets: BTreeMap<(String, i32), CommittedOffset>,
    /// Offsets committed by open transactions, by producer id (TxnOffsetCommit); they become
    /// `offsets` when that producer's COMMIT marker arrives and vanish on ABORT.
    pub(crate) pending: BTreeMap<i64, BTreeMap<(String, i32), CommittedOffset>>,
    pub(crate) persisted: Option<GroupMetadataValue>,
    /// Deadline currently registered in the coordinator's timer set.
    pub(crate) scheduled_ms: Option<i64>,
}

impl Group {
    pub(crate) fn new(group_id: &str, now_ms: i64) -> Group {
        Group {
            group_id: group_id.to_string(),
            state: GroupState::Empty,
            previous_state: GroupState::Empty,
            state_timestamp_ms: now_ms,
            generation: 0,
            protocol_type: None,
            protocol_name: None,
            leader: None,
            members: IndexMap::new(),
            static_members: BTreeMap::new(),
            pending_members: BTreeMap::new(),
            pending_sync: BTreeSet::new(),
            sync_deadline_ms: None,
            join_deadline_ms: None,
            initial_delay: None,
            new_member_added: false,
            offsets: BTreeMap::new(),
            pending: BTreeMap::new(),
            persisted: None,
            scheduled_ms: None,
        }
    }

    /// Carries no information: can be dropped (and is absent after a replay).
    pub(crate) fn is_trivial(&self) -> bool {
        self.state == GroupState::Empty
            && self.members.is_empty()
            && self.pending_members.is_empty()
            && self.persisted.is_none()
            && self.offsets.is_empty()
            && self.pending.is_empty()
    }

    pub(crate) fn transition(&mut self, to: GroupState, now_ms: i64) {
        assert!(
            to.valid_previous().contains(&self.state),
            "illegal group transition {:?} -> {:?}",
            self.state,
            to
        );
        self.previous_state = self.state;
        self.state = to;
        self.state_timestamp_ms = now_ms;
    }

    /// Resolves `producer_id`'s pending offsets: COMMIT makes them the committed offsets, ABORT
    /// drops them (Kafka matches on the producer id alone, whatever the marker's epoch).
    pub(crate) fn end_txn(&mut self, producer_id: i64, commit: bool) {
        if let Some(pending) = self.pending.remove(&producer_id) {
            if commit {
                self.offsets.extend(pending);
            }
        }
    }

    /// Whether an open transaction has a pending offset for this partition.
    pub(crate) fn has_pending(&self, topic: &str, partition: i32) -> bool {
        let key = (topic.to_string(), partition);
        self.pending.values().any(|p| p.contains_key(&key))
    }

    /// Applies a durable record to this group's durable part (live path and replay path).
    pub(crate) fn apply(&mut self, record: &GroupRecord) {
        match record {
            GroupRecord::OffsetCommit {
                topic,
                partition,
                offset,
                leader_epoch,
                metadata,
                commit_timestamp_ms,
                ..
            } => {
                self.offsets.insert(
                    (topic.clone(), *partition),
                    CommittedOffset {
                        offset: *offset,
                        leader_epoch: *leader_epoch,
                        metadata: metadata.clone(),
                        commit_timestamp_ms: *commit_timestamp_ms,
                    },
                );
            }
            GroupRecord::OffsetTombstone {
                topic, partition, ..
            } => {
                self.offsets.remove(&(topic.clone(), *partition));
            }
            GroupRecord::GroupMetadata { value, .. } => self.persisted = Some(value.clone()),
            GroupRecord::GroupTombstone { .. } => {
                self.persisted = None;
                self.offsets.clear();
                self.pending.clear();
            }
            GroupRecord::PendingOffsetCommit {
                producer_id,
                topic,
                partition,
                offset,
                leader_epoch,
                metadata,
                commit_timestamp_ms,
                ..
            } => {
                self.pending.entry(*producer_id).or_default().insert(
                    (topic.clone(), *partition),
                    CommittedOffset {
                        offset: *offset,
                        leader_epoch: *leader_epoch,
                        metadata: metadata.clone(),
                        commit_timestamp_ms: *commit_timestamp_ms,
                    },
                );
            }
        }
    }

    /// Emits `record` and applies it, so live durable state always equals replayed state.
    pub(crate) fn emit(&mut self, record: GroupRecord, out: &mut Output) {
        self.apply(&record);
        out.records.push(record);
    }

    /// Writes the current membership as a GroupMetadata record.
    pub(crate) fn persist(&mut self, out: &mut Output) {
        let value = self.metadata_value();
        let record = GroupRecord::GroupMetadata {
            group_id: self.group_id.clone(),
            value,
        };
        self.emit(record, out);
    }

    pub(crate) fn metadata_value(&self) -> GroupMetadataValue {
        let protocol = self.protocol_name.as_deref().unwrap_or("");
        GroupMetadataValue {
            protocol_type: self.protocol_type.clone(),
            generation: self.generation,
            protocol_name: self.protocol_name.clone(),
            leader: self.leader.clone(),
            current_state_timestamp_ms: self.state_timestamp_ms,
            members: self
                .members
                .values()
                .map(|m| MemberMetadataValue {
                    member_id: m.member_id.clone(),
                    group_instance_id: m.group_instance_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    rebalance_timeout_ms: m.rebalance_timeout_ms,
                    session_timeout_ms: m.session_timeout_ms,
                    subscription: m.metadata(protocol).cloned().unwrap_or_default(),
                    assignment: m.assignment.clone(),
                })
                .collect(),
        }
    }

    /// Rebuilds membership from the persisted snapshot (loading). Heartbeat deadlines are set
    /// by the coordinator's `loaded`.
    pub(crate) fn materialize(&mut self) {
        self.members.clear();
        self.static_members.clear();
        self.pending_members.clear();
        self.pending_sync.clear();
        self.sync_deadline_ms = None;
        self.join_deadline_ms = None;
        self.initial_delay = None;
        self.new_member_added = false;
        let Some(value) = self.persisted.clone() else {
            self.state = GroupState::Empty;
            self.previous_state = GroupState::Empty;
            self.generation = 0;
            self.protocol_type = None;
            self.protocol_name = None;
            self.leader = None;
            return;
        };
        self.generation = value.generation;
        self.protocol_type = value.protocol_type.clone();
        self.protocol_name = value.protocol_name.clone();
        self.state_timestamp_ms = value.current_state_timestamp_ms;
        let protocol = value.protocol_name.clone().unwrap_or_default();
        for m in &value.members {
            if let Some(instance) = &m.group_instance_id {
                self.static_members
                    .insert(instance.clone(), m.member_id.clone());
            }
            self.members.insert(
                m.member_id.clone(),
                Member {
                    member_id: m.member_id.clone(),
                    group_instance_id: m.group_instance_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    rebalance_timeout_ms: m.rebalance_timeout_ms,
                    session_timeout_ms: m.session_timeout_ms,
                    protocol_type: value.protocol_type.clone().unwrap_or_default(),
                    protocols: vec![(protocol.clone(), m.subscription.clone())],
                    assignment: m.assignment.clone(),
                    awaiting_join: None,
                    awaiting_sync: None,
                    is_new: false,
                    heartbeat_deadline_ms: i64::MAX,
                    joined_generation: Some(value.generation),
                },
            );
        }
        self.leader = value
            .leader
            .clone()
            .filter(|l| self.members.contains_key(l))
            .or_else(|| self.members.keys().next().cloned());
        self.state = if self.members.is_empty() {
            GroupState::Empty
        } else {
            GroupState::Stable
        };
        self.previous_state = self.state;
    }

    pub(crate) fn is_leader(&self, member_id: &str) -> bool {
        self.leader.as_deref() == Some(member_id)
    }

    pub(crate) fn rebalance_timeout_ms(&self) -> i64 {
        self.members
            .values()
            .map(|m| i64::from(m.rebalance_timeout_ms))
            .max()
            .unwrap_or(0)
    }

    pub(crate) fn add_member(&mut self, member: Member) {
        if self.members.is_empty() {
            self.protocol_type = Some(member.protocol_type.clone());
        }
        if self.leader.is_none() {
            self.leader = Some(member.member_id.clone());
        }
        if let Some(instance) = &member.group_instance_id {
            self.static_members
                .insert(instance.clone(), member.member_id.clone());
        }
        self.members.insert(member.member_id.clone(), member);
    }

    /// Removes a member, moving leadership to the first remaining member if needed.
    pub(crate) fn remove_member(&mut self, member_id: &str) -> Option<Member> {
        let member = self.members.shift_remove(member_id)?;
        if let Some(instance) = &member.group_instance_id {
            if self.static_members.get(instance).map(String::as_str) == Some(member_id) {
                self.static_members.remove(instance);
            }
        }
        if self.is_leader(member_id) {
            self.leader = self.members.keys().next().cloned();
        }
        self.pending_sync.remove(member_id);
        if self.pending_sync.is_empty() {
            self.sync_deadline_ms = None;
        }
        Some(member)
    }

    /// Kafka's `validateMember`: static identity first, then membership.
    pub(crate) fn validate_member(
        &self,
        member_id: &str,
        group_instance_id: Option<&str>,
    ) -> Result<(), ErrorCode> {
        if let Some(instance) = group_instance_id {
            match self.static_members.get(instance) {
                None => return Err(ErrorCode::UNKNOWN_MEMBER_ID),
                Some(existing) if existing != member_id => {
                    return Err(ErrorCode::FENCED_INSTANCE_ID)
                }
                Some(_) => {}
            }
        }
        if !self.members.contains_key(member_id) {
            return Err(ErrorCode::UNKNOWN_MEMBER_ID);
        }
        Ok(())
    }

    /// Kafka's `supportsProtocols`: an Empty group takes any non-empty protocol set; otherwise
    /// the type must match and one protocol must be supported by every current member.
    pub(crate) fn supports_protocols(
        &self,
        protocol_type: &str,
        protocols: &[(String, Bytes)],
    ) -> bool {
        if self.state == GroupState::Empty {
            return !protocol_type.is_empty() && !protocols.is_empty();
        }
        self.protocol_type.as_deref() == Some(protocol_type)
            && protocols
                .iter()
                .any(|(name, _)| self.members.values().all(|m| m.supports(name)))
    }

    /// Protocol voting: each member votes for its most preferred protocol among those every
    /// member supports; most votes wins, ties go to the earliest in the first member's order.
    pub(crate) fn select_protocol(&self) -> Option<String> {
        let first = self.members.values().next()?;
        let candidates: Vec<&str> = first
            .protocols
            .iter()
            .map(|(name, _)| name.as_str())
            .filter(|name| self.members.values().all(|m| m.supports(name)))
            .collect();
        let mut votes = vec![0usize; candidates.len()];
        for m in self.members.values() {
            if let Some(vote) = m
                .protocols
                .iter()
                .find_map(|(name, _)| candidates.iter().position(|c| c == name))
            {
                votes[vote] += 1;
            }
        }
        let mut best: Option<(usize, usize)> = None;
        for (i, v) in votes.iter().enumerate() {
            if best.is_none_or(|(_, bv)| *v > bv) {
                best = Some((i, *v));
            }
        }
        best.map(|(i, _)| candidates[i].to_string())
    }

    pub(crate) fn has_all_members_joined(&self) -> bool {
        self.pending_members.is_empty() && self.members.values().all(|m| m.awaiting_join.is_some())
    }

    pub(crate) fn current_member_metadata(&self) -> Vec<JoinGroupMember> {
        let protocol = self.protocol_name.as_deref().unwrap_or("");
        self.members
            .values()
            .map(|m| JoinGroupMember {
                member_id: m.member_id.clone(),
                group_instance_id: m.group_instance_id.clone(),
                metadata: m.metadata(protocol).cloned().unwrap_or_default(),
            })
            .collect()
    }

    /// JoinGroup response for `member_id` at the current generation.
    pub(crate) fn join_response(&self, member_id: &str) -> GroupResponse {
        GroupResponse::JoinGroup(JoinGroupResponse {
            error_code: ErrorCode::NONE,
            generation_id: self.generation,
            protocol_type: self.protocol_type.clone(),
            protocol_name: self.protocol_name.clone(),
            leader: self.leader.clone().unwrap_or_default(),
            member_id: member_id.to_string(),
            members: if self.is_leader(member_id) {
                self.current_member_metadata()
            } else {
                Vec::new()
            },
            skip_assignment: false,
        })
    }

    pub(crate) fn sync_response(&self, assignment: Bytes) -> GroupResponse {
        GroupResponse::SyncGroup(SyncGroupResponse {
            error_code: ErrorCode::NONE,
            protocol_type: self.protocol_type.clone(),
            protocol_name: self.protocol_name.clone(),
            assignment,
        })
    }

    /// Earliest timer of this group.
    pub(crate) fn next_deadline(&self) -> Option<i64> {
        let members = self.members.values().filter_map(Member::session_deadline);
        let pending = self.pending_members.values().copied();
        let join = match self.state {
            GroupState::PreparingRebalance => self.join_deadline_ms,
            _ => None,
        };
        let sync = match self.state {
            GroupState::CompletingRebalance | GroupState::Stable
                if !self.pending_sync.is_empty() =>
            {
                self.sync_deadline_ms
            }
            _ => None,
        };
        members.chain(pending).chain(join).chain(sync).min()
    }

    // -----------------------------------------------------------------------------------------
    // Rebalance protocol steps
    // -----------------------------------------------------------------------------------------

    /// Kafka's `prepareRebalance`.
    pub(crate) fn prepare_rebalance(&mut self, cfg: &GroupConfig, now_ms: i64, out: &mut Output) {
        if self.state == GroupState::CompletingRebalance {
            self.reset_and_propagate_assignment_error(
                ErrorCode::REBALANCE_IN_PROGRESS,
                now_ms,
                out,
            );
        }
        self.pending_sync.clear();
        self.sync_deadline_ms = None;
        let initial = self.state == GroupState::Empty;
        self.transition(GroupState::PreparingRebalance, now_ms);
        if initial {
            // A new group: give other members time to join before the first generation.
            let delay_ms = cfg.initial_rebalance_delay_ms;
            self.initial_delay = Some(InitialDelay {
                delay_ms,
                remaining_ms: (self.rebalance_timeout_ms() - delay_ms).max(0),
            });
            self.new_member_added = false;
            self.join_deadline_ms = Some(now_ms.saturating_add(delay_ms));
        } else {
            self.initial_delay = None;
            if self.has_all_members_joined() {
                self.complete_join(cfg, now_ms, out);
            } else {
                self.join_deadline_ms = Some(now_ms.saturating_add(self.rebalance_timeout_ms()));
            }
        }
    }

    /// Kafka's `maybePrepareRebalanceOrCompleteJoin`.
    pub(crate) fn maybe_prepare_rebalance_or_complete_join(
        &mut self,
        cfg: &GroupConfig,
        now_ms: i64,
        out: &mut Output,
    ) {
        match self.state {
            GroupState::Stable | GroupState::CompletingRebalance | GroupState::Empty => {
                self.prepare_rebalance(cfg, now_ms, out)
            }
            GroupState::PreparingRebalance => {
                // The delayed initial rebalance only completes on its timer.
                if self.has_all_members_joined() && self.previous_state != GroupState::Empty {
                    self.complete_join(cfg, now_ms, out);
                }
            }
            GroupState::Dead => {}
        }
    }

    /// The join timer fired: extend the initial delay if members keep arriving, else complete.
    pub(crate) fn on_join_deadline(&mut self, cfg: &GroupConfig, now_ms: i64, out: &mut Output) {
        if let Some(delay) = &self.initial_delay {
            if self.new_member_added && delay.remaining_ms != 0 {
                self.new_member_added = false;
                let new_delay = cfg.initial_rebalance_delay_ms.min(delay.remaining_ms);
                let new_remaining = (delay.remaining_ms - delay.delay_ms).max(0);
                self.initial_delay = Some(InitialDelay {
                    delay_ms: new_delay,
                    remaining_ms: new_remaining,
                });
                self.join_deadline_ms = Some(now_ms.saturating_add(new_delay));
                return;
            }
        }
        self.complete_join(cfg, now_ms, out);
    }

    /// Kafka's `completeClassicGroupJoin`.
    pub(crate) fn complete_join(&mut self, cfg: &GroupConfig, now_ms: i64, out: &mut Output) {
        let _ = cfg;
        if self.state != GroupState::PreparingRebalance {
            return;
        }
        self.join_deadline_ms = None;
        self.initial_delay = None;
        // Dynamic members that did not rejoin within the rebalance timeout are removed; static
        // members stay until their session expires.
        let failed: Vec<String> = self
            .members
            .values()
            .filter(|m| m.awaiting_join.is_none() && !m.is_static())
            .map(|m| m.member_id.clone())
            .collect();
        for id in failed {
            if let Some(m) = self.remove_member(&id) {
                answer_removed(&m, ErrorCode::UNKNOWN_MEMBER_ID, out);
            }
        }
        if !self.maybe_elect_new_joined_leader() && !self.members.is_empty() {
            // Only static members that have not rejoined: wait for them or their session expiry.
            self.join_deadline_ms = Some(now_ms.saturating_add(self.rebalance_timeout_ms()));
            return;
        }
        self.generation = self.generation.wrapping_add(1).max(1);
        if self.members.is_empty() {
            self.protocol_name = None;
            self.leader = None;
            self.transition(GroupState::Empty, now_ms);
            self.persist(out);
            return;
        }
        self.protocol_name = self.select_protocol();
        self.transition(GroupState::CompletingRebalance, now_ms);
        let leader = self.leader.clone().unwrap_or_default();
        let leader_members = self.current_member_metadata();
        let generation = self.generation;
        for m in self.members.values_mut() {
            if let Some(token) = m.awaiting_join.take() {
                out.reply(
                    token,
                    GroupResponse::JoinGroup(JoinGroupResponse {
                        error_code: ErrorCode::NONE,
                        generation_id: generation,
                        protocol_type: self.protocol_type.clone(),
                        protocol_name: self.protocol_name.clone(),
                        leader: leader.clone(),
                        member_id: m.member_id.clone(),
                        members: if m.member_id == leader {
                            leader_members.clone()
                        } else {
                            Vec::new()
                        },
                        skip_assignment: false,
                    }),
                );
                m.joined_generation = Some(generation);
            }
            m.heartbeat_deadline_ms = now_ms.saturating_add(i64::from(m.session_timeout_ms));
            m.is_new = false;
            self.pending_sync.insert(m.member_id.clone());
        }
        self.sync_deadline_ms = Some(now_ms.saturating_add(self.rebalance_timeout_ms()));
    }

    /// Keeps a leader that rejoined, else picks any member that did. False when none did.
    fn maybe_elect_new_joined_leader(&mut self) -> bool {
        let Some(leader) = self.leader.clone() else {
            return false;
        };
        if self
            .members
            .get(&leader)
            .is_some_and(|m| m.awaiting_join.is_some())
        {
            return true;
        }
        match self.members.values().find(|m| m.awaiting_join.is_some()) {
            Some(m) => {
                self.leader = Some(m.member_id.clone());
                true
            }
            None => false,
        }
    }

    /// Clears assignments and fails every SyncGroup waiting in CompletingRebalance.
    /// Its members' sessions restart now: while parked they could not heartbeat.
    pub(crate) fn reset_and_propagate_assignment_error(
        &mut self,
        error: ErrorCode,
        now_ms: i64,
        out: &mut Output,
    ) {
        for m in self.members.values_mut() {
            m.assignment = Bytes::new();
            if let Some(token) = m.awaiting_sync.take() {
                out.reply(token, sync_error(error));
                m.heartbeat_deadline_ms = now_ms.saturating_add(i64::from(m.session_timeout_ms));
            }
        }
    }

    /// Kafka's `removeMemberAndUpdateClassicGroup`.
    pub(crate) fn remove_member_and_update(
        &mut self,
        cfg: &GroupConfig,
        now_ms: i64,
        member_id: &str,
        out: &mut Output,
    ) {
        let Some(m) = self.remove_member(member_id) else {
            return;
        };
        answer_removed(&m, ErrorCode::UNKNOWN_MEMBER_ID, out);
        match self.state {
            GroupState::Stable | GroupState::CompletingRebalance => {
                self.maybe_prepare_rebalance_or_complete_join(cfg, now_ms, out)
            }
            GroupState::PreparingRebalance => {
                if self.has_all_members_joined() {
                    self.complete_join(cfg, now_ms, out);
                }
            }
            GroupState::Empty | GroupState::Dead => {}
        }
    }

    /// Kafka's `removePendingMemberAndUpdateClassicGroup`.
    pub(crate) fn remove_pending_member_and_update(
        &mut self,
        cfg: &GroupConfig,
        now_ms: i64,
        member_id: &str,
        out: &mut Output,
    ) {
        if self.pending_members.remove(member_id).is_some()
            && self.state == GroupState::PreparingRebalance
            && self.has_all_members_joined()
        {
            self.complete_join(cfg, now_ms, out);
        }
    }

    /// Fires every expired timer of this group.
    pub(crate) fn expire(&mut self, cfg: &GroupConfig, now_ms: i64, out: &mut Output) {
        let expired: Vec<String> = self
            .members
            .values()
            .filter(|m| m.session_deadline().is_some_and(|d| d <= now_ms))
            .map(|m| m.member_id.clone())
            .collect();
        for id in expired {
            // Re-check: an earlier removal may have completed a join and re-armed this session.
            let still_expired = self
                .members
                .get(&id)
                .and_then(Member::session_deadline)
                .is_some_and(|d| d <= now_ms);
            if still_expired {
                self.remove_member_and_update(cfg, now_ms, &id, out);
            }
        }
        let expired_pending: Vec<String> = self
            .pending_members
            .iter()
            .filter(|(_, d)| **d <= now_ms)
            .map(|(id, _)| id.clone())
            .collect();
        for id in expired_pending {
            self.remove_pending_member_and_update(cfg, now_ms, &id, out);
        }
        if matches!(
            self.state,
            GroupState::CompletingRebalance | GroupState::Stable
        ) && !self.pending_sync.is_empty()
            && self.sync_deadline_ms.is_some_and(|d| d <= now_ms)
        {
            // Members that never sent SyncGroup within the rebalance timeout are removed.
            let pending: Vec<String> = std::mem::take(&mut self.pending_sync).into_iter().collect();
            self.sync_deadline_ms = None;
            for id in pending {
                if let Some(m) = self.remove_member(&id) {
                    answer_removed(&m, ErrorCode::UNKNOWN_MEMBER_ID, out);
                }
            }
            self.prepare_rebalance(cfg, now_ms, out);
        }
        if self.state == GroupState::PreparingRebalance
            && self.join_deadline_ms.is_some_and(|d| d <= now_ms)
        {
            self.on_join_deadline(cfg, now_ms, out);
        }
    }

    /// Topics the members of a "consumer" group subscribe to, or None when unknown (any
    /// unparsable subscription makes every topic count as subscribed, as in Kafka).
    pub(crate) fn subscribed_topics(&self) -> Option<BTreeSet<String>> {
        let protocol = self.protocol_name.as_deref()?;
        let mut topics = BTreeSet::new();
        for m in self.members.values() {
            topics.extend(parse_subscription_topics(m.metadata(protocol)?)?);
        }
        Some(topics)
    }
}

/// Answers a removed member's outstanding requests so no reply token is left hanging.
pub(crate) fn answer_removed(member: &Member, error: ErrorCode, out: &mut Output) {
    if let Some(token) = member.awaiting_join {
        out.reply(token, join_error(&member.member_id, error));
    }
    if let Some(token) = member.awaiting_sync {
        out.reply(token, sync_error(error));
    }
}

/// Topics of a ConsumerProtocolSubscription (any version): `[i16 version][i32 n][n × i16 string]`.
pub(crate) fn parse_subscription_topics(metadata: &[u8]) -> Option<Vec<String>> {
    let mut pos = 0usize;
    let mut take = |n: usize| -> Option<&[u8]> {
        let end = pos.checked_add(n)?;
        let out = metadata.get(pos..end)?;
        pos = end;
        Some(out)
    };
    let version = i16::from_be_bytes(take(2)?.try_into().ok()?);
    if version < 0 {
        return None;
    }
    let count = i32::from_be_bytes(take(4)?.try_into().ok()?);
    let count = usize::try_from(count).ok()?;
    if count > metadata.len() / 2 {
        return None;
    }
    let mut topics = Vec::with_capacity(count);
    for _ in 0..count {
        let len = i16::from_be_bytes(take(2)?.try_into().ok()?);
        let len = usize::try_from(len).ok()?;
        topics.push(std::str::from_utf8(take(len)?).ok()?.to_string());
    }
    Some(topics)
}
