//! Classic consumer-group coordinator: Kafka's `ClassicGroup` protocol (JoinGroup, SyncGroup,
//! Heartbeat, LeaveGroup) plus committed offsets and group administration.
//!
//! Owns every classic group of one `__consumer_offsets` partition. It is sans-IO: no clock, no
//! I/O, no locks; time comes in as `now_ms`. Each call returns an [`Output`] whose records the
//! broker must append (fsynced) to `__consumer_offsets` *before* delivering the replies. Replies
//! may be deferred: a JoinGroup is answered when the join phase completes, a follower's SyncGroup
//! when the leader's arrives; every [`ReplyToken`] is answered exactly once.
//!
//! Invariants: durable state (committed offsets, the last persisted group metadata) changes
//! only by applying an emitted record, the same code [`GroupCoordinator::replay`] runs, so live
//! durable state always equals the state rebuilt from the log; every collection is bounded by
//! a [`GroupConfig`] limit and hitting one returns a Kafka error code.
//!
//! Must not: read clocks, perform I/O, or panic on request or record bytes.
//!
//! Share groups (KIP-932) live in [`share`], a separate state machine in the same group-id
//! namespace.
//!
//! Deviations from Kafka, on purpose: `group.max.size` counts members plus members awaiting
//! their MEMBER_ID_REQUIRED rejoin, and is checked when a new member arrives (Kafka trims
//! oversize groups at the end of the join phase); a replaced static *leader* triggers a
//! rebalance rather than answering with `skipAssignment`; generated member ids are
//! `{client_id}-{now_ms:x}-{seq:x}` (unique in the group) rather than UUIDs.

mod group;
mod records;
mod shard;
pub mod share;
mod types;

#[cfg(test)]
mod proptests;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet, HashMap};

use bytes::Bytes;

use group::{answer_removed, Group, Member};
pub use records::{
    CommittedOffset, DecodeError, GroupMetadataValue, GroupRecord, MemberMetadataValue,
    RECORD_TYPE_GROUP_METADATA, RECORD_TYPE_OFFSET_COMMIT, RECORD_TYPE_PENDING_OFFSET_COMMIT,
    VALUE_VERSION,
};
pub use shard::{GroupInput, GroupReply, GroupShard, OffsetsRecord, ShareCall, ShareReply};
pub use types::*;

use crate::hash::{java_string_hash, kafka_abs};

/// The `__consumer_offsets` partition that coordinates `group_id` (Kafka's
/// `Utils.abs(groupId.hashCode()) % partitions`). `num_partitions` 0 is treated as 1.
pub fn partition_for(group_id: &str, num_partitions: u32) -> u32 {
    let hash = kafka_abs(java_string_hash(group_id)).unsigned_abs();
    hash % num_partitions.max(1)
}

/// Limits and timeouts, with Kafka's defaults where Kafka has the setting.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupConfig {
    /// `group.min.session.timeout.ms`.
    pub min_session_timeout_ms: i32,
    /// `group.max.session.timeout.ms`.
    pub max_session_timeout_ms: i32,
    /// `group.initial.rebalance.delay.ms`.
    pub initial_rebalance_delay_ms: i64,
    /// `group.max.size`: members plus pending members of one group.
    pub max_size: usize,
    /// `offsets.retention.minutes`, in ms.
    pub offsets_retention_ms: i64,
    /// `offsets.retention.check.interval.ms`.
    pub offsets_retention_check_interval_ms: i64,
    /// `offset.metadata.max.bytes`.
    pub offset_metadata_max_bytes: usize,
    /// Kafka's `group.classic.new.member.join.timeout.ms` (internal, 5 minutes).
    pub new_member_join_timeout_ms: i64,
    /// Groups this coordinator holds; a join or simple commit creating one more gets
    /// COORDINATOR_NOT_AVAILABLE (retriable: backpressure).
    pub groups_max: usize,
    /// Committed partitions per group; more gets INVALID_COMMIT_OFFSET_SIZE.
    pub offsets_per_group_max: usize,
    /// Protocols in one JoinGroup; more gets INVALID_REQUEST.
    pub protocols_per_member_max: usize,
}

impl Default for GroupConfig {
    fn default() -> Self {
        GroupConfig {
            min_session_timeout_ms: 6_000,
            max_session_timeout_ms: 1_800_000,
            initial_rebalance_delay_ms: 3_000,
            max_size: i32::MAX as usize,
            offsets_retention_ms: 7 * 24 * 60 * 60 * 1000,
            offsets_retention_check_interval_ms: 600_000,
            offset_metadata_max_bytes: 4096,
            new_member_join_timeout_ms: 300_000,
            groups_max: 100_000,
            offsets_per_group_max: 100_000,
            protocols_per_member_max: 64,
        }
    }
}

/// The durable part of one group: what survives a restart.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DurableGroup {
    pub metadata: Option<GroupMetadataValue>,
    pub offsets: BTreeMap<(String, i32), CommittedOffset>,
    pub pending: BTreeMap<i64, BTreeMap<(String, i32), CommittedOffset>>,
}

/// The durable part of the coordinator; equal for live state and state rebuilt by replay.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DurableState {
    pub groups: BTreeMap<String, DurableGroup>,
}

/// The classic group coordinator of one `__consumer_offsets` partition.
#[derive(Debug, Default)]
pub struct GroupCoordinator {
    config: GroupConfig,
    groups: BTreeMap<String, Group>,
    /// (deadline, group id) of every group with an armed timer.
    timers: BTreeSet<(i64, String)>,
    member_seq: u64,
    next_offset_expiry_ms: Option<i64>,
}

impl GroupCoordinator {
    pub fn new(config: GroupConfig) -> Self {
        GroupCoordinator {
            config,
            ..Default::default()
        }
    }

    pub fn config(&self) -> &GroupConfig {
        &self.config
    }

    /// Handles one request. The reply may be in this output or in a later one.
    pub fn handle(&mut self, now_ms: i64, token: ReplyToken, request: GroupRequest) -> Output {
        let mut out = Output::default();
        if self.next_offset_expiry_ms.is_none() {
            self.next_offset_expiry_ms =
                Some(now_ms.saturating_add(self.config.offsets_retention_check_interval_ms));
        }
        match request {
            GroupRequest::JoinGroup(r) => self.join_group(now_ms, token, r, &mut out),
            GroupRequest::SyncGroup(r) => self.sync_group(now_ms, token, r, &mut out),
            GroupRequest::Heartbeat(r) => self.heartbeat(now_ms, token, r, &mut out),
            GroupRequest::LeaveGroup(r) => self.leave_group(now_ms, token, r, &mut out),
            GroupRequest::OffsetCommit(r) => self.offset_commit(now_ms, token, r, &mut out),
            GroupRequest::OffsetFetch(r) => self.offset_fetch(token, r, &mut out),
            GroupRequest::ListGroups(r) => self.list_groups(token, r, &mut out),
            GroupRequest::DescribeGroups(r) => self.describe_groups(token, r, &mut out),
            GroupRequest::DeleteGroups(r) => self.delete_groups(token, r, &mut out),
            GroupRequest::OffsetDelete(r) => self.offset_delete(token, r, &mut out),
            GroupRequest::TxnOffsetCommit(r) => self.txn_offset_commit(now_ms, token, r, &mut out),
            GroupRequest::EndTxn(marker) => {
                self.replay_end_txn(marker.producer_id, marker.commit);
                out.reply(token, GroupResponse::EndTxn);
            }
        }
        out
    }

    /// Fires every timer due at `now_ms`: session expiry, join and sync timeouts, the initial
    /// rebalance delay, and offset expiration.
    pub fn tick(&mut self, now_ms: i64) -> Output {
        let mut out = Output::default();
        let due: Vec<String> = self
            .timers
            .iter()
            .take_while(|(deadline, _)| *deadline <= now_ms)
            .map(|(_, id)| id.clone())
            .collect();
        for id in due {
            if let Some(g) = self.groups.get_mut(&id) {
                g.expire(&self.config, now_ms, &mut out);
            }
            self.touch(&id);
        }
        match self.next_offset_expiry_ms {
            Some(d) if d <= now_ms => {
                self.expire_offsets(now_ms, &mut out);
                self.next_offset_expiry_ms =
                    Some(now_ms.saturating_add(self.config.offsets_retention_check_interval_ms));
            }
            Some(_) => {}
            None => {
                self.next_offset_expiry_ms =
                    Some(now_ms.saturating_add(self.config.offsets_retention_check_interval_ms));
            }
        }
        out
    }

    /// When [`tick`](Self::tick) next has work to do.
    pub fn next_deadline(&self) -> Option<i64> {
        let group = self.timers.first().map(|(d, _)| *d);
        match (group, self.next_offset_expiry_ms) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Applies one record read back from `__consumer_offsets` while loading. Call for every
    /// record in log order, then [`loaded`](Self::loaded); not meant for a coordinator that is
    /// already serving requests (outstanding replies of a replaced group would be dropped).
    pub fn replay(&mut self, record: &GroupRecord) {
        let id = record.group_id();
        if let GroupRecord::GroupTombstone { .. } = record {
            self.remove_group(id);
            return;
        }
        let g = self
            .groups
            .entry(id.to_string())
            .or_insert_with(|| Group::new(id, 0));
        g.apply(record);
        if let GroupRecord::GroupMetadata { .. } = record {
            g.materialize();
        }
        self.touch(id);
    }

    /// Applies a transaction marker read back from `__consumer_offsets` (a control batch):
    /// the producer's pending offsets in every group become committed (COMMIT) or vanish.
    pub fn replay_end_txn(&mut self, producer_id: i64, commit: bool) {
        let ids: Vec<String> = self
            .groups
            .iter()
            .filter(|(_, g)| g.pending.contains_key(&producer_id))
            .map(|(id, _)| id.clone())
            .collect();
        for id in ids {
            if let Some(g) = self.groups.get_mut(&id) {
                g.end_txn(producer_id, commit);
            }
            self.touch(&id);
        }
    }

    /// Whether a classic group (or a group of committed offsets only) holds `group_id`.
    pub fn contains_group(&self, group_id: &str) -> bool {
        self.groups.contains_key(group_id)
    }

    /// Loading finished at `now_ms`: loaded members must heartbeat within their session
    /// timeout from now, as in Kafka.
    pub fn loaded(&mut self, now_ms: i64) {
        for g in self.groups.values_mut() {
            for m in g.members.values_mut() {
                m.heartbeat_deadline_ms = now_ms.saturating_add(i64::from(m.session_timeout_ms));
            }
        }
        self.next_offset_expiry_ms =
            Some(now_ms.saturating_add(self.config.offsets_retention_check_interval_ms));
        let ids: Vec<String> = self.groups.keys().cloned().collect();
        for id in ids {
            self.touch(&id);
        }
    }

    /// The durable part of the state (groups' persisted metadata and offsets).
    pub fn durable_state(&self) -> DurableState {
        DurableState {
            groups: self
                .groups
                .iter()
                .filter(|(_, g)| {
                    g.persisted.is_some() || !g.offsets.is_empty() || !g.pending.is_empty()
                })
                .map(|(id, g)| {
                    (
                        id.clone(),
                        DurableGroup {
                            metadata: g.persisted.clone(),
                            offsets: g.offsets.clone(),
                            pending: g.pending.clone(),
                        },
                    )
                })
                .collect(),
        }
    }

    pub fn group_summary(&self, group_id: &str) -> Option<GroupSummary> {
        let g = self.groups.get(group_id)?;
        Some(GroupSummary {
            group_id: g.group_id.clone(),
            state: g.state,
            generation_id: g.generation,
            protocol_type: g.protocol_type.clone(),
            protocol_name: g.protocol_name.clone(),
            leader: g.leader.clone(),
            members: g.members.keys().cloned().collect(),
            pending_members: g.pending_members.len(),
            committed_offsets: g.offsets.len(),
        })
    }

    pub fn group_ids(&self) -> impl Iterator<Item = &str> {
        self.groups.keys().map(String::as_str)
    }

    /// Checks the structural invariants (O(size); for tests and the simulator).
    ///
    /// # Errors
    /// A description of the first violated invariant.
    pub fn check_invariants(&self) -> Result<(), String> {
        for (id, g) in &self.groups {
            let fail = |msg: String| Err(format!("group {id}: {msg}"));
            if g.members.is_empty() != g.leader.is_none() {
                return fail(format!(
                    "leader {:?} with {} members",
                    g.leader,
                    g.members.len()
                ));
            }
            if let Some(l) = &g.leader {
                if !g.members.contains_key(l) {
                    return fail(format!("leader {l} is not a member"));
                }
            }
            let statics = g.members.values().filter(|m| m.is_static()).count();
            if statics != g.static_members.len()
                || g.members.values().any(|m| {
                    m.group_instance_id
                        .as_ref()
                        .is_some_and(|i| g.static_members.get(i) != Some(&m.member_id))
                })
            {
                return fail("static member index out of sync".into());
            }
            if g.pending_members.keys().any(|p| g.members.contains_key(p)) {
                return fail("pending member is also a member".into());
            }
            if g.members.len() + g.pending_members.len() > self.config.max_size {
                return fail("group.max.size exceeded".into());
            }
            if g.offsets.len() > self.config.offsets_per_group_max {
                return fail("offsets_per_group_max exceeded".into());
            }
            if g.scheduled_ms != g.next_deadline() {
                return fail("timer not re-armed".into());
            }
            match g.state {
                GroupState::Empty => {
                    if !g.members.is_empty() {
                        return fail("Empty group with members".into());
                    }
                    match &g.persisted {
                        Some(p) if p.generation != g.generation || !p.members.is_empty() => {
                            return fail("Empty group differs from its persisted metadata".into())
                        }
                        None if g.generation != 0 => {
                            return fail("unpersisted Empty group has a generation".into())
                        }
                        _ => {}
                    }
                }
                GroupState::Stable => {
                    if let Some(m) = g
                        .members
                        .values()
                        .find(|m| !m.is_static() && m.joined_generation != Some(g.generation))
                    {
                        return fail(format!(
                            "Stable member {} joined generation {:?}, group is at {}",
                            m.member_id, m.joined_generation, g.generation
                        ));
                    }
                    if g.members
                        .values()
                        .any(|m| m.awaiting_join.is_some() || m.awaiting_sync.is_some())
                    {
                        return fail("Stable member awaiting a reply".into());
                    }
                    if g.persisted.as_ref() != Some(&g.metadata_value()) {
                        return fail("Stable group differs from its persisted metadata".into());
                    }
                }
                GroupState::PreparingRebalance => {
                    if g.join_deadline_ms.is_none() {
                        return fail("PreparingRebalance without join timer".into());
                    }
                    if g.members.values().any(|m| m.awaiting_sync.is_some()) {
                        return fail("awaiting sync during PreparingRebalance".into());
                    }
                }
                GroupState::CompletingRebalance => {
                    if g.members.values().any(|m| m.awaiting_join.is_some()) {
                        return fail("awaiting join during CompletingRebalance".into());
                    }
                }
                GroupState::Dead => return fail("Dead group kept".into()),
            }
        }
        Ok(())
    }

    // -----------------------------------------------------------------------------------------
    // Bookkeeping
    // -----------------------------------------------------------------------------------------

    /// Re-arms a group's timer after any change, and drops it if it carries nothing.
    fn touch(&mut self, group_id: &str) {
        let Some(g) = self.groups.get_mut(group_id) else {
            return;
        };
        if g.is_trivial() {
            self.remove_group(group_id);
            return;
        }
        let next = g.next_deadline();
        if next != g.scheduled_ms {
            if let Some(old) = g.scheduled_ms {
                self.timers.remove(&(old, group_id.to_string()));
            }
            if let Some(new) = next {
                self.timers.insert((new, group_id.to_string()));
            }
            g.scheduled_ms = next;
        }
    }

    fn remove_group(&mut self, group_id: &str) {
        if let Some(g) = self.groups.remove(group_id) {
            if let Some(d) = g.scheduled_ms {
                self.timers.remove(&(d, group_id.to_string()));
            }
        }
    }

    fn create_group_if_absent(&mut self, group_id: &str, now_ms: i64) -> Result<(), ErrorCode> {
        if !self.groups.contains_key(group_id) {
            if self.groups.len() >= self.config.groups_max {
                return Err(ErrorCode::COORDINATOR_NOT_AVAILABLE);
            }
            self.groups
                .insert(group_id.to_string(), Group::new(group_id, now_ms));
        }
        Ok(())
    }

    // -----------------------------------------------------------------------------------------
    // JoinGroup
    // -----------------------------------------------------------------------------------------

    fn join_group(
        &mut self,
        now_ms: i64,
        token: ReplyToken,
        req: JoinGroupRequest,
        out: &mut Output,
    ) {
        if let Err(code) = self.try_join_group(now_ms, token, &req, out) {
            out.reply(token, join_error(&req.member_id, code));
        }
        self.touch(&req.group_id);
    }

    fn try_join_group(
        &mut self,
        now_ms: i64,
        token: ReplyToken,
        req: &JoinGroupRequest,
        out: &mut Output,
    ) -> Result<(), ErrorCode> {
        if req.group_id.is_empty() {
            return Err(ErrorCode::INVALID_GROUP_ID);
        }
        if req.session_timeout_ms < self.config.min_session_timeout_ms
            || req.session_timeout_ms > self.config.max_session_timeout_ms
        {
            return Err(ErrorCode::INVALID_SESSION_TIMEOUT);
        }
        if req.protocols.len() > self.config.protocols_per_member_max {
            return Err(ErrorCode::INVALID_REQUEST);
        }
        let is_new = req.member_id.is_empty();
        if !self.groups.contains_key(&req.group_id) && !is_new {
            return Err(ErrorCode::UNKNOWN_MEMBER_ID);
        }
        self.create_group_if_absent(&req.group_id, now_ms)?;
        let cfg = &self.config;
        let Some(g) = self.groups.get_mut(&req.group_id) else {
            return Err(ErrorCode::COORDINATOR_NOT_AVAILABLE);
        };
        if g.state == GroupState::Dead {
            return Err(ErrorCode::COORDINATOR_NOT_AVAILABLE);
        }
        let replaces_static = req
            .group_instance_id
            .as_ref()
            .is_some_and(|i| g.static_members.contains_key(i));
        if is_new && !replaces_static && g.members.len() + g.pending_members.len() >= cfg.max_size {
            return Err(ErrorCode::GROUP_MAX_SIZE_REACHED);
        }
        if !g.supports_protocols(&req.protocol_type, &req.protocols) {
            return Err(ErrorCode::INCONSISTENT_GROUP_PROTOCOL);
        }
        if is_new {
            let member_id = generate_member_id(&mut self.member_seq, g, &req.client_id, now_ms);
            let old_static = req
                .group_instance_id
                .as_ref()
                .and_then(|i| g.static_members.get(i))
                .cloned();
            if let Some(old_id) = old_static {
                replace_static_member(g, cfg, now_ms, token, req, &old_id, member_id, out);
            } else if req.group_instance_id.is_none() && req.require_known_member_id {
                // KIP-394: the member must come back with this id before it counts.
                let deadline = now_ms.saturating_add(i64::from(req.session_timeout_ms));
                g.pending_members.insert(member_id.clone(), deadline);
                out.reply(token, join_error(&member_id, ErrorCode::MEMBER_ID_REQUIRED));
            } else {
                add_member_and_rebalance(g, cfg, now_ms, token, req, member_id, out);
            }
            return Ok(());
        }
        let member_id = req.member_id.clone();
        if req.group_instance_id.is_none() && g.pending_members.remove(&member_id).is_some() {
            add_member_and_rebalance(g, cfg, now_ms, token, req, member_id, out);
            return Ok(());
        }
        g.validate_member(&member_id, req.group_instance_id.as_deref())?;
        let (same_protocols, is_leader) = match g.members.get(&member_id) {
            Some(m) => (m.protocols == req.protocols, g.is_leader(&member_id)),
            None => return Err(ErrorCode::UNKNOWN_MEMBER_ID),
        };
        match g.state {
            GroupState::PreparingRebalance => {
                update_member_and_rebalance(g, cfg, now_ms, token, req, &member_id, out)
            }
            // Same metadata: the member probably lost the JoinGroup response; resend it.
            GroupState::CompletingRebalance if same_protocols => {
                reply_current_generation(g, token, &member_id, out)
            }
            GroupState::Stable if same_protocols && !is_leader => {
                reply_current_generation(g, token, &member_id, out)
            }
            GroupState::CompletingRebalance | GroupState::Stable => {
                update_member_and_rebalance(g, cfg, now_ms, token, req, &member_id, out)
            }
            GroupState::Empty | GroupState::Dead => return Err(ErrorCode::UNKNOWN_MEMBER_ID),
        }
        Ok(())
    }

    // -----------------------------------------------------------------------------------------
    // SyncGroup, Heartbeat, LeaveGroup
    // -----------------------------------------------------------------------------------------

    fn sync_group(
        &mut self,
        now_ms: i64,
        token: ReplyToken,
        req: SyncGroupRequest,
        out: &mut Output,
    ) {
        if let Err(code) = self.try_sync_group(now_ms, token, &req, out) {
            out.reply(token, sync_error(code));
        }
        self.touch(&req.group_id);
    }

    fn try_sync_group(
        &mut self,
        now_ms: i64,
        token: ReplyToken,
        req: &SyncGroupRequest,
        out: &mut Output,
    ) -> Result<(), ErrorCode> {
        if req.group_id.is_empty() {
            return Err(ErrorCode::INVALID_GROUP_ID);
        }
        let Some(g) = self.groups.get_mut(&req.group_id) else {
            return Err(ErrorCode::UNKNOWN_MEMBER_ID);
        };
        if g.state == GroupState::Dead {
            return Err(ErrorCode::COORDINATOR_NOT_AVAILABLE);
        }
        g.validate_member(&req.member_id, req.group_instance_id.as_deref())?;
        if req.generation_id != g.generation {
            return Err(ErrorCode::ILLEGAL_GENERATION);
        }
        if req
            .protocol_type
            .as_ref()
            .is_some_and(|t| g.protocol_type.as_ref() != Some(t))
            || req
                .protocol_name
                .as_ref()
                .is_some_and(|n| g.protocol_name.as_ref() != Some(n))
        {
            return Err(ErrorCode::INCONSISTENT_GROUP_PROTOCOL);
        }
        match g.state {
            GroupState::Empty => Err(ErrorCode::UNKNOWN_MEMBER_ID),
            GroupState::PreparingRebalance => Err(ErrorCode::REBALANCE_IN_PROGRESS),
            GroupState::Dead => Err(ErrorCode::COORDINATOR_NOT_AVAILABLE),
            GroupState::Stable => {
                let Some(m) = g.members.get_mut(&req.member_id) else {
                    return Err(ErrorCode::UNKNOWN_MEMBER_ID);
                };
                m.heartbeat_deadline_ms = now_ms.saturating_add(i64::from(m.session_timeout_ms));
                let assignment = m.assignment.clone();
                remove_pending_sync(g, &req.member_id);
                out.reply(token, g.sync_response(assignment));
                Ok(())
            }
            GroupState::CompletingRebalance => {
                let Some(m) = g.members.get_mut(&req.member_id) else {
                    return Err(ErrorCode::UNKNOWN_MEMBER_ID);
                };
                m.heartbeat_deadline_ms = now_ms.saturating_add(i64::from(m.session_timeout_ms));
                if let Some(old) = m.awaiting_sync.replace(token) {
                    out.reply(old, sync_error(ErrorCode::REBALANCE_IN_PROGRESS));
                }
                remove_pending_sync(g, &req.member_id);
                if g.is_leader(&req.member_id) {
                    complete_sync(g, now_ms, &req.assignments, out);
                }
                Ok(())
            }
        }
    }

    fn heartbeat(
        &mut self,
        now_ms: i64,
        token: ReplyToken,
        req: HeartbeatRequest,
        out: &mut Output,
    ) {
        let code = self.try_heartbeat(now_ms, &req);
        out.reply(token, heartbeat_reply(code));
        self.touch(&req.group_id);
    }

    fn try_heartbeat(&mut self, now_ms: i64, req: &HeartbeatRequest) -> ErrorCode {
        if req.group_id.is_empty() {
            return ErrorCode::INVALID_GROUP_ID;
        }
        let Some(g) = self.groups.get_mut(&req.group_id) else {
            return ErrorCode::UNKNOWN_MEMBER_ID;
        };
        if g.state == GroupState::Dead {
            return ErrorCode::COORDINATOR_NOT_AVAILABLE;
        }
        if let Err(code) = g.validate_member(&req.member_id, req.group_instance_id.as_deref()) {
            return code;
        }
        if req.generation_id != g.generation {
            return ErrorCode::ILLEGAL_GENERATION;
        }
        let state = g.state;
        let Some(m) = g.members.get_mut(&req.member_id) else {
            return ErrorCode::UNKNOWN_MEMBER_ID;
        };
        match state {
            GroupState::Empty | GroupState::Dead => ErrorCode::UNKNOWN_MEMBER_ID,
            GroupState::PreparingRebalance => {
                m.heartbeat_deadline_ms = now_ms.saturating_add(i64::from(m.session_timeout_ms));
                ErrorCode::REBALANCE_IN_PROGRESS
            }
            GroupState::CompletingRebalance | GroupState::Stable => {
                m.heartbeat_deadline_ms = now_ms.saturating_add(i64::from(m.session_timeout_ms));
                ErrorCode::NONE
            }
        }
    }

    fn leave_group(
        &mut self,
        now_ms: i64,
        token: ReplyToken,
        req: LeaveGroupRequest,
        out: &mut Output,
    ) {
        let reply = |error_code: ErrorCode, members: Vec<LeaveMemberResponse>| {
            GroupResponse::LeaveGroup(LeaveGroupResponse {
                error_code,
                members,
            })
        };
        if req.group_id.is_empty() {
            out.reply(token, reply(ErrorCode::INVALID_GROUP_ID, Vec::new()));
            return;
        }
        let cfg = &self.config;
        let Some(g) = self.groups.get_mut(&req.group_id) else {
            let members = req
                .members
                .iter()
                .map(|m| LeaveMemberResponse {
                    member_id: m.member_id.clone(),
                    group_instance_id: m.group_instance_id.clone(),
                    error_code: ErrorCode::UNKNOWN_MEMBER_ID,
                })
                .collect();
            out.reply(token, reply(ErrorCode::NONE, members));
            return;
        };
        if g.state == GroupState::Dead {
            out.reply(
                token,
                reply(ErrorCode::COORDINATOR_NOT_AVAILABLE, Vec::new()),
            );
            return;
        }
        let mut results = Vec::with_capacity(req.members.len());
        for lm in &req.members {
            let error_code = if lm.member_id.is_empty() {
                // Only a static member may leave without its member id.
                let id = lm
                    .group_instance_id
                    .as_ref()
                    .and_then(|i| g.static_members.get(i))
                    .cloned();
                match id {
                    Some(id) => {
                        g.remove_member_and_update(cfg, now_ms, &id, out);
                        ErrorCode::NONE
                    }
                    None => ErrorCode::UNKNOWN_MEMBER_ID,
                }
            } else if g.pending_members.contains_key(&lm.member_id) {
                g.remove_pending_member_and_update(cfg, now_ms, &lm.member_id, out);
                ErrorCode::NONE
            } else {
                match g.validate_member(&lm.member_id, lm.group_instance_id.as_deref()) {
                    Ok(()) => {
                        g.remove_member_and_update(cfg, now_ms, &lm.member_id, out);
                        ErrorCode::NONE
                    }
                    Err(code) => code,
                }
            };
            results.push(LeaveMemberResponse {
                member_id: lm.member_id.clone(),
                group_instance_id: lm.group_instance_id.clone(),
                error_code,
            });
        }
        out.reply(token, reply(ErrorCode::NONE, results));
        self.touch(&req.group_id);
    }

    // -----------------------------------------------------------------------------------------
    // Offsets
    // -----------------------------------------------------------------------------------------

    fn offset_commit(
        &mut self,
        now_ms: i64,
        token: ReplyToken,
        req: OffsetCommitRequest,
        out: &mut Output,
    ) {
        let results = match self.validate_offset_commit(now_ms, &req) {
            Err(code) => req
                .offsets
                .iter()
                .map(|p| PartitionResult {
                    topic: p.topic.clone(),
                    partition: p.partition,
                    error_code: code,
                })
                .collect(),
            Ok(()) => {
                let cfg = &self.config;
                let mut results = Vec::with_capacity(req.offsets.len());
                if let Some(g) = self.groups.get_mut(&req.group_id) {
                    for p in req.offsets {
                        let metadata = p.metadata.unwrap_or_default();
                        let key = (p.topic, p.partition);
                        let error_code = if metadata.len() > cfg.offset_metadata_max_bytes {
                            ErrorCode::OFFSET_METADATA_TOO_LARGE
                        } else if !g.offsets.contains_key(&key)
                            && g.offsets.len() >= cfg.offsets_per_group_max
                        {
                            ErrorCode::INVALID_COMMIT_OFFSET_SIZE
                        } else {
                            let record = GroupRecord::OffsetCommit {
                                group_id: req.group_id.clone(),
                                topic: key.0.clone(),
                                partition: key.1,
                                offset: p.offset,
                                leader_epoch: p.leader_epoch,
                                metadata,
                                commit_timestamp_ms: now_ms,
                            };
                            g.emit(record, out);
                            ErrorCode::NONE
                        };
                        results.push(PartitionResult {
                            topic: key.0,
                            partition: key.1,
                            error_code,
                        });
                    }
                }
                results
            }
        };
        out.reply(
            token,
            GroupResponse::OffsetCommit(OffsetCommitResponse {
                partitions: results,
            }),
        );
        self.touch(&req.group_id);
    }

    /// TxnOffsetCommit: validated like Kafka's `validateTransactionalOffsetCommit` (member and
    /// generation checked only when the client sent them), written as pending records.
    fn txn_offset_commit(
        &mut self,
        now_ms: i64,
        token: ReplyToken,
        req: TxnOffsetCommitRequest,
        out: &mut Output,
    ) {
        let validated = self.validate_txn_offset_commit(now_ms, &req);
        let cfg = &self.config;
        let mut results = Vec::with_capacity(req.offsets.len());
        let group = self.groups.get_mut(&req.group_id);
        match (validated, group) {
            (Ok(()), Some(g)) => {
                for p in req.offsets {
                    let metadata = p.metadata.unwrap_or_default();
                    let pending_count = g.pending.get(&req.producer_id).map_or(0, BTreeMap::len);
                    let error_code = if metadata.len() > cfg.offset_metadata_max_bytes {
                        ErrorCode::OFFSET_METADATA_TOO_LARGE
                    } else if pending_count >= cfg.offsets_per_group_max {
                        ErrorCode::INVALID_COMMIT_OFFSET_SIZE
                    } else {
                        let record = GroupRecord::PendingOffsetCommit {
                            group_id: req.group_id.clone(),
                            producer_id: req.producer_id,
                            producer_epoch: req.producer_epoch,
                            topic: p.topic.clone(),
                            partition: p.partition,
                            offset: p.offset,
                            leader_epoch: p.leader_epoch,
                            metadata,
                            commit_timestamp_ms: now_ms,
                        };
                        g.emit(record, out);
                        ErrorCode::NONE
                    };
                    results.push(PartitionResult {
                        topic: p.topic,
                        partition: p.partition,
                        error_code,
                    });
                }
            }
            (validated, _) => {
                let code = validated
                    .err()
                    .unwrap_or(ErrorCode::COORDINATOR_NOT_AVAILABLE);
                results.extend(req.offsets.into_iter().map(|p| PartitionResult {
                    topic: p.topic,
                    partition: p.partition,
                    error_code: code,
                }));
            }
        }
        out.reply(
            token,
            GroupResponse::TxnOffsetCommit(OffsetCommitResponse {
                partitions: results,
            }),
        );
        self.touch(&req.group_id);
    }

    fn validate_txn_offset_commit(
        &mut self,
        now_ms: i64,
        req: &TxnOffsetCommitRequest,
    ) -> Result<(), ErrorCode> {
        if req.group_id.is_empty() {
            return Err(ErrorCode::INVALID_GROUP_ID);
        }
        if !self.groups.contains_key(&req.group_id) {
            if req.generation_id >= 0 {
                return Err(ErrorCode::ILLEGAL_GENERATION);
            }
            self.create_group_if_absent(&req.group_id, now_ms)?;
        }
        let Some(g) = self.groups.get(&req.group_id) else {
            return Err(ErrorCode::COORDINATOR_NOT_AVAILABLE);
        };
        if g.state == GroupState::Dead {
            return Err(ErrorCode::COORDINATOR_NOT_AVAILABLE);
        }
        if req.generation_id < 0 && req.member_id.is_empty() && req.group_instance_id.is_none() {
            return Ok(());
        }
        g.validate_member(&req.member_id, req.group_instance_id.as_deref())?;
        if req.generation_id >= 0 && req.generation_id != g.generation {
            return Err(ErrorCode::ILLEGAL_GENERATION);
        }
        Ok(())
    }

    /// Kafka's classic `validateOffsetCommit`; creates a simple group for a generation -1 commit.
    fn validate_offset_commit(
        &mut self,
        now_ms: i64,
        req: &OffsetCommitRequest,
    ) -> Result<(), ErrorCode> {
        if !self.groups.contains_key(&req.group_id) {
            if req.generation_id >= 0 {
                // OffsetCommit v9+ would say GROUP_ID_NOT_FOUND: the broker maps it.
                return Err(ErrorCode::ILLEGAL_GENERATION);
            }
            self.create_group_if_absent(&req.group_id, now_ms)?;
        }
        let Some(g) = self.groups.get(&req.group_id) else {
            return Err(ErrorCode::COORDINATOR_NOT_AVAILABLE);
        };
        if g.state == GroupState::Dead {
            return Err(ErrorCode::COORDINATOR_NOT_AVAILABLE);
        }
        if req.generation_id < 0 && g.state == GroupState::Empty {
            return Ok(());
        }
        if req.generation_id >= 0 || !req.member_id.is_empty() || req.group_instance_id.is_some() {
            g.validate_member(&req.member_id, req.group_instance_id.as_deref())?;
            if req.generation_id != g.generation {
                return Err(ErrorCode::ILLEGAL_GENERATION);
            }
        } else if g.state != GroupState::Empty {
            return Err(ErrorCode::UNKNOWN_MEMBER_ID);
        }
        if g.state == GroupState::CompletingRebalance {
            return Err(ErrorCode::REBALANCE_IN_PROGRESS);
        }
        Ok(())
    }

    fn offset_fetch(&mut self, token: ReplyToken, req: OffsetFetchRequest, out: &mut Output) {
        let g = self.groups.get(&req.group_id);
        let require_stable = req.require_stable;
        let fetched = |topic: String, partition: i32, o: Option<&CommittedOffset>| {
            // Kafka: a partition with an open transactional commit is unstable for readers that
            // ask for stable offsets (read_committed consumers).
            if require_stable && g.is_some_and(|g| g.has_pending(&topic, partition)) {
                return FetchedOffset {
                    topic,
                    partition,
                    offset: -1,
                    leader_epoch: -1,
                    metadata: String::new(),
                    error_code: ErrorCode::UNSTABLE_OFFSET_COMMIT,
                };
            }
            FetchedOffset {
                topic,
                partition,
                offset: o.map_or(-1, |o| o.offset),
                leader_epoch: o.map_or(-1, |o| o.leader_epoch),
                metadata: o.map(|o| o.metadata.clone()).unwrap_or_default(),
                error_code: ErrorCode::NONE,
            }
        };
        let partitions = match req.partitions {
            Some(list) => list
                .into_iter()
                .map(|(topic, partition)| {
                    let o = g.and_then(|g| g.offsets.get(&(topic.clone(), partition)));
                    fetched(topic, partition, o)
                })
                .collect(),
            None => g
                .map(|g| {
                    g.offsets
                        .iter()
                        .map(|((t, p), o)| fetched(t.clone(), *p, Some(o)))
                        .collect()
                })
                .unwrap_or_default(),
        };
        out.reply(
            token,
            GroupResponse::OffsetFetch(OffsetFetchResponse {
                error_code: ErrorCode::NONE,
                partitions,
            }),
        );
    }

    /// OffsetDelete. For a non-Empty "consumer" group a partition is refused with
    /// GROUP_SUBSCRIBED_TO_TOPIC when a member's subscription (ConsumerProtocolSubscription,
    /// topics only) names its topic, or when any subscription cannot be parsed; a non-Empty
    /// group of another protocol type gets NON_EMPTY_GROUP.
    fn offset_delete(&mut self, token: ReplyToken, req: OffsetDeleteRequest, out: &mut Output) {
        let reply = |error_code, partitions| {
            GroupResponse::OffsetDelete(OffsetDeleteResponse {
                error_code,
                partitions,
            })
        };
        let Some(g) = self.groups.get_mut(&req.group_id) else {
            out.reply(token, reply(ErrorCode::GROUP_ID_NOT_FOUND, Vec::new()));
            return;
        };
        let subscribed: Option<Option<BTreeSet<String>>> = match g.state {
            GroupState::Empty => None,
            GroupState::Dead => {
                out.reply(token, reply(ErrorCode::GROUP_ID_NOT_FOUND, Vec::new()));
                return;
            }
            _ if g.protocol_type.as_deref() == Some("consumer") => Some(g.subscribed_topics()),
            _ => {
                out.reply(token, reply(ErrorCode::NON_EMPTY_GROUP, Vec::new()));
                return;
            }
        };
        let mut results = Vec::with_capacity(req.partitions.len());
        for (topic, partition) in req.partitions {
            let is_subscribed = subscribed
                .as_ref()
                .is_some_and(|s| s.as_ref().is_none_or(|s| s.contains(&topic)));
            let error_code = if is_subscribed {
                ErrorCode::GROUP_SUBSCRIBED_TO_TOPIC
            } else {
                if g.offsets.contains_key(&(topic.clone(), partition)) {
                    let record = GroupRecord::OffsetTombstone {
                        group_id: req.group_id.clone(),
                        topic: topic.clone(),
                        partition,
                    };
                    g.emit(record, out);
                }
                ErrorCode::NONE
            };
            results.push(PartitionResult {
                topic,
                partition,
                error_code,
            });
        }
        out.reply(token, reply(ErrorCode::NONE, results));
        self.touch(&req.group_id);
    }

    /// Kafka's offset expiration: offsets of an Empty group expire `offsets_retention_ms` after
    /// the group became Empty (after their commit for a group that never had members); an
    /// Empty group left without offsets is deleted. Unsubscribed topics of active consumer
    /// groups are not expired (Kafka does).
    fn expire_offsets(&mut self, now_ms: i64, out: &mut Output) {
        let retention = self.config.offsets_retention_ms;
        let ids: Vec<String> = self
            .groups
            .iter()
            .filter(|(_, g)| g.state == GroupState::Empty)
            .map(|(id, _)| id.clone())
            .collect();
        for id in ids {
            let Some(g) = self.groups.get_mut(&id) else {
                continue;
            };
            let since_empty = g.protocol_type.is_some();
            let expired: Vec<(String, i32)> = g
                .offsets
                .iter()
                .filter(|(_, o)| {
                    let base = if since_empty {
                        g.state_timestamp_ms
                    } else {
                        o.commit_timestamp_ms
                    };
                    now_ms.saturating_sub(base) >= retention
                })
                .map(|(k, _)| k.clone())
                .collect();
            for (topic, partition) in expired {
                let record = GroupRecord::OffsetTombstone {
                    group_id: id.clone(),
                    topic,
                    partition,
                };
                g.emit(record, out);
            }
            if g.offsets.is_empty() && g.members.is_empty() && g.pending_members.is_empty() {
                let record = GroupRecord::GroupTombstone {
                    group_id: id.clone(),
                };
                g.emit(record, out);
                self.remove_group(&id);
            } else {
                self.touch(&id);
            }
        }
    }

    // -----------------------------------------------------------------------------------------
    // Administration
    // -----------------------------------------------------------------------------------------

    fn list_groups(&mut self, token: ReplyToken, req: ListGroupsRequest, out: &mut Output) {
        let type_ok = req.types_filter.is_empty()
            || req
                .types_filter
                .iter()
                .any(|t| t.eq_ignore_ascii_case("classic"));
        let groups = if type_ok {
            self.groups
                .values()
                .filter(|g| {
                    req.states_filter.is_empty()
                        || req
                            .states_filter
                            .iter()
                            .any(|s| s.eq_ignore_ascii_case(g.state.name()))
                })
                .map(|g| ListedGroup {
                    group_id: g.group_id.clone(),
                    protocol_type: g.protocol_type.clone().unwrap_or_default(),
                    group_state: g.state.name().to_string(),
                    group_type: "classic".to_string(),
                })
                .collect()
        } else {
            Vec::new()
        };
        out.reply(
            token,
            GroupResponse::ListGroups(ListGroupsResponse {
                error_code: ErrorCode::NONE,
                groups,
            }),
        );
    }

    fn describe_groups(&mut self, token: ReplyToken, req: DescribeGroupsRequest, out: &mut Output) {
        let groups = req
            .group_ids
            .into_iter()
            .map(|group_id| match self.groups.get(&group_id) {
                None => DescribedGroup {
                    error_code: ErrorCode::GROUP_ID_NOT_FOUND,
                    group_id,
                    group_state: GroupState::Dead.name().to_string(),
                    protocol_type: String::new(),
                    protocol_data: String::new(),
                    members: Vec::new(),
                },
                Some(g) => {
                    let stable = g.state == GroupState::Stable;
                    let protocol = g.protocol_name.clone().unwrap_or_default();
                    DescribedGroup {
                        error_code: ErrorCode::NONE,
                        group_id,
                        group_state: g.state.name().to_string(),
                        protocol_type: g.protocol_type.clone().unwrap_or_default(),
                        protocol_data: if stable {
                            protocol.clone()
                        } else {
                            String::new()
                        },
                        members: g
                            .members
                            .values()
                            .map(|m| DescribedMember {
                                member_id: m.member_id.clone(),
                                group_instance_id: m.group_instance_id.clone(),
                                client_id: m.client_id.clone(),
                                client_host: m.client_host.clone(),
                                member_metadata: if stable {
                                    m.metadata(&protocol).cloned().unwrap_or_default()
                                } else {
                                    Bytes::new()
                                },
                                member_assignment: if stable {
                                    m.assignment.clone()
                                } else {
                                    Bytes::new()
                                },
                            })
                            .collect(),
                    }
                }
            })
            .collect();
        out.reply(
            token,
            GroupResponse::DescribeGroups(DescribeGroupsResponse { groups }),
        );
    }

    fn delete_groups(&mut self, token: ReplyToken, req: DeleteGroupsRequest, out: &mut Output) {
        let mut results = Vec::with_capacity(req.group_ids.len());
        for group_id in req.group_ids {
            let error_code = match self.groups.get_mut(&group_id) {
                None => ErrorCode::GROUP_ID_NOT_FOUND,
                Some(g) if g.state != GroupState::Empty => ErrorCode::NON_EMPTY_GROUP,
                Some(g) => {
                    let keys: Vec<(String, i32)> = g.offsets.keys().cloned().collect();
                    for (topic, partition) in keys {
                        let record = GroupRecord::OffsetTombstone {
                            group_id: group_id.clone(),
                            topic,
                            partition,
                        };
                        g.emit(record, out);
                    }
                    let record = GroupRecord::GroupTombstone {
                        group_id: group_id.clone(),
                    };
                    g.emit(record, out);
                    self.remove_group(&group_id);
                    ErrorCode::NONE
                }
            };
            results.push(GroupResult {
                group_id,
                error_code,
            });
        }
        out.reply(
            token,
            GroupResponse::DeleteGroups(DeleteGroupsResponse { results }),
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Member-level steps (free functions so they can borrow the config and one group together)
// ---------------------------------------------------------------------------------------------

fn generate_member_id(seq: &mut u64, g: &Group, client_id: &str, now_ms: i64) -> String {
    loop {
        *seq = seq.wrapping_add(1);
        let id = format!("{client_id}-{now_ms:x}-{:x}", *seq);
        if !g.members.contains_key(&id) && !g.pending_members.contains_key(&id) {
            return id;
        }
    }
}

fn add_member_and_rebalance(
    g: &mut Group,
    cfg: &GroupConfig,
    now_ms: i64,
    token: ReplyToken,
    req: &JoinGroupRequest,
    member_id: String,
    out: &mut Output,
) {
    let member = Member {
        member_id,
        group_instance_id: req.group_instance_id.clone(),
        client_id: req.client_id.clone(),
        client_host: req.client_host.clone(),
        rebalance_timeout_ms: req.rebalance_timeout_ms,
        session_timeout_ms: req.session_timeout_ms,
        protocol_type: req.protocol_type.clone(),
        protocols: req.protocols.clone(),
        assignment: Bytes::new(),
        awaiting_join: Some(token),
        awaiting_sync: None,
        is_new: true,
        // A member parked in JoinGroup cannot heartbeat: bound its wait instead.
        heartbeat_deadline_ms: now_ms.saturating_add(cfg.new_member_join_timeout_ms),
        joined_generation: None,
    };
    if g.state == GroupState::PreparingRebalance && g.previous_state == GroupState::Empty {
        g.new_member_added = true;
    }
    g.add_member(member);
    g.maybe_prepare_rebalance_or_complete_join(cfg, now_ms, out);
}

fn update_member_and_rebalance(
    g: &mut Group,
    cfg: &GroupConfig,
    now_ms: i64,
    token: ReplyToken,
    req: &JoinGroupRequest,
    member_id: &str,
    out: &mut Output,
) {
    if let Some(m) = g.members.get_mut(member_id) {
        m.protocols = req.protocols.clone();
        m.rebalance_timeout_ms = req.rebalance_timeout_ms;
        m.session_timeout_ms = req.session_timeout_ms;
        if let Some(old) = m.awaiting_join.replace(token) {
            // A duplicate JoinGroup supersedes the parked one.
            out.reply(old, join_error(member_id, ErrorCode::REBALANCE_IN_PROGRESS));
        }
    } else {
        out.reply(token, join_error(member_id, ErrorCode::UNKNOWN_MEMBER_ID));
        return;
    }
    g.maybe_prepare_rebalance_or_complete_join(cfg, now_ms, out);
}

fn reply_current_generation(g: &mut Group, token: ReplyToken, member_id: &str, out: &mut Output) {
    out.reply(token, g.join_response(member_id));
    let generation = g.generation;
    if let Some(m) = g.members.get_mut(member_id) {
        m.joined_generation = Some(generation);
    }
}

/// A known group.instance.id joined with a new member id: the new id takes over the old
/// member (whose outstanding requests get FENCED_INSTANCE_ID).
#[allow(clippy::too_many_arguments)]
fn replace_static_member(
    g: &mut Group,
    cfg: &GroupConfig,
    now_ms: i64,
    token: ReplyToken,
    req: &JoinGroupRequest,
    old_id: &str,
    new_id: String,
    out: &mut Output,
) {
    let was_leader = g.is_leader(old_id);
    let was_pending_sync = g.pending_sync.contains(old_id);
    let sync_deadline_ms = g.sync_deadline_ms;
    let Some(old) = g.remove_member(old_id) else {
        out.reply(token, join_error("", ErrorCode::UNKNOWN_MEMBER_ID));
        return;
    };
    answer_removed(&old, ErrorCode::FENCED_INSTANCE_ID, out);
    let mut member = old;
    member.member_id = new_id.clone();
    member.client_id = req.client_id.clone();
    member.client_host = req.client_host.clone();
    member.awaiting_join = None;
    member.awaiting_sync = None;
    member.is_new = false;
    member.heartbeat_deadline_ms = now_ms.saturating_add(i64::from(req.session_timeout_ms));
    // remove_member may have moved leadership to another member; keep it with the instance.
    g.add_member(member);
    if was_leader {
        g.leader = Some(new_id.clone());
    }
    if was_pending_sync {
        g.pending_sync.insert(new_id.clone());
        g.sync_deadline_ms = sync_deadline_ms;
    }
    if g.state == GroupState::Stable {
        // KIP-345, as Kafka does it: the restart of a static member (leader or not, its
        // subscription changed or not) does not rebalance a stable group as long as the
        // group's protocol stays the one selected. The member's new id and protocols are
        // persisted and the member carries on with the current generation and assignment.
        let kept = g.members.get_mut(&new_id).map(|m| {
            let kept = (
                m.protocols.clone(),
                m.rebalance_timeout_ms,
                m.session_timeout_ms,
            );
            m.protocols = req.protocols.clone();
            m.rebalance_timeout_ms = req.rebalance_timeout_ms;
            m.session_timeout_ms = req.session_timeout_ms;
            kept
        });
        if g.select_protocol() == g.protocol_name {
            g.persist(out);
            reply_static_rejoin(g, token, &new_id, was_leader.then_some(old_id), req, out);
            return;
        }
        // The protocol would change: back to what the rebalance starts from.
        if let (Some(m), Some((protocols, rebalance, session))) = (g.members.get_mut(&new_id), kept)
        {
            m.protocols = protocols;
            m.rebalance_timeout_ms = rebalance;
            m.session_timeout_ms = session;
        }
    }
    update_member_and_rebalance(g, cfg, now_ms, token, req, &new_id, out);
}

/// The JoinGroup answer of a static member that took over its instance in a stable group. A
/// leader (`old_leader_id` is its previous id) is told to skip the assignment (JoinGroup v9+,
/// KIP-814, with every member's metadata); older clients get the previous leader id, so that
/// they act as followers and fetch the standing assignment with SyncGroup, as Kafka answers.
fn reply_static_rejoin(
    g: &mut Group,
    token: ReplyToken,
    member_id: &str,
    old_leader_id: Option<&str>,
    req: &JoinGroupRequest,
    out: &mut Output,
) {
    let mut response = g.join_response(member_id);
    if let (GroupResponse::JoinGroup(join), Some(old_id)) = (&mut response, old_leader_id) {
        if req.skip_assignment_supported {
            join.skip_assignment = true;
        } else {
            join.leader = old_id.to_string();
            join.members = Vec::new();
        }
    }
    out.reply(token, response);
    let generation = g.generation;
    if let Some(m) = g.members.get_mut(member_id) {
        m.joined_generation = Some(generation);
    }
}

fn remove_pending_sync(g: &mut Group, member_id: &str) {
    g.pending_sync.remove(member_id);
    if g.pending_sync.is_empty() {
        g.sync_deadline_ms = None;
    }
}

/// The leader's SyncGroup: store the assignment (one GroupMetadata record), go Stable and
/// answer every member waiting in SyncGroup.
fn complete_sync(g: &mut Group, now_ms: i64, assignments: &[(String, Bytes)], out: &mut Output) {
    let by_member: HashMap<&str, &Bytes> =
        assignments.iter().map(|(id, a)| (id.as_str(), a)).collect();
    for m in g.members.values_mut() {
        // Members the leader left out get an empty assignment, as in Kafka.
        m.assignment = by_member
            .get(m.member_id.as_str())
            .map(|a| (*a).clone())
            .unwrap_or_default();
    }
    g.transition(GroupState::Stable, now_ms);
    g.persist(out);
    let protocol_type = g.protocol_type.clone();
    let protocol_name = g.protocol_name.clone();
    for m in g.members.values_mut() {
        if let Some(token) = m.awaiting_sync.take() {
            out.reply(
                token,
                GroupResponse::SyncGroup(SyncGroupResponse {
                    error_code: ErrorCode::NONE,
                    protocol_type: protocol_type.clone(),
                    protocol_name: protocol_name.clone(),
                    assignment: m.assignment.clone(),
                }),
            );
        }
    }
}
