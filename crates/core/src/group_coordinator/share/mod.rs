//! Share-group membership and assignment (KIP-932, Kafka 4.2 behaviour): ShareGroupHeartbeat,
//! session timeouts, the simple assignor, ShareGroupDescribe, ListGroups and DeleteGroups for
//! share groups, and the share-group records of `__consumer_offsets`.
//!
//! [`ShareGroupCoordinator`] owns every share group of one `__consumer_offsets` partition. It
//! is sans-IO: time comes in as `now_ms`, topic metadata as a [`TopicsImage`], and every call
//! that changes durable state returns the records (in Kafka's byte layout, see [`records`]) the
//! broker must append before replying. It coexists with the classic coordinator: both use one
//! group-id namespace, and the caller says whether a classic group holds an id ([`GroupIdUse`]).
//!
//! How a heartbeat moves a group, as in Kafka 4.2: a member joins with epoch 0 and its
//! subscription; the group epoch is bumped when a member joins or leaves, a subscription
//! changes, or the subscribed topics' metadata changes (a hash of it is persisted); a bump
//! recomputes the target assignment with the simple assignor (`assignor.rs`); a member's epoch
//! then jumps straight to the assignment epoch with its target assignment, because share
//! groups have no revocation phase (a partition may be shared, so nothing waits for release).
//! A member may heartbeat with its current or its previous epoch (the response carrying the
//! bump may have been lost); any other epoch is fenced.
//!
//! Invariants: the state changes only by applying a record, the same code [`replay`] runs, so
//! live durable state always equals the state rebuilt from the log; a refused request changes
//! nothing and returns no records; every subscribed, existing partition is in some member's
//! target assignment; group epochs never decrease; every collection has a limit.
//!
//! Must not: read clocks, perform I/O, panic on request or record bytes, or depend on the wire
//! codec crate.
//!
//! Deviations from Kafka 4.2, on purpose:
//! - The target assignment is recomputed as soon as the group epoch is bumped (a leave, a
//!   session expiry, a metadata change), not at the next member heartbeat; the records are
//!   the ones Kafka writes then, only earlier. An emptied group therefore gets its assignment
//!   epoch caught up at once (Kafka 4.3's KAFKA-20442 does the same).
//! - Partitions are assigned without waiting for their share-partition state to be
//!   initialized (Kafka 4.2 assigns only initialized partitions and asks the share coordinator
//!   itself): the broker initializes state on first assignment and reports it with
//!   [`ShareGroupCoordinator::mark_initialized`]; InitializingTopics is never written.
//! - The metadata hash is Shoal's own function of the same facts (name, id, partition count;
//!   no racks), so its values differ from Kafka's.
//! - [`GroupOverrides::max_size`] is a per-group member limit Kafka does not have.
//! - A heartbeat with the member's previous epoch is answered with the assignment; Kafka sends
//!   it only on a join or a change, so a member whose bump answer was lost (a coordinator
//!   killed after writing it) would keep its old partitions while counted as holding the new
//!   ones, and nobody would fetch them. A full heartbeat (one carrying the subscription) is
//!   answered with it too.
//! - The assignor follows Kafka's principles (coverage, sharing, balance, then stickiness) with
//!   deterministic tie-breaks of its own, so individual assignments can differ from Kafka's.
//!
//! [`replay`]: ShareGroupCoordinator::replay

mod assignor;
mod group;
pub mod records;
mod types;

#[cfg(test)]
mod proptests;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};

use assignor::AssignmentMember;
use group::{apply, metadata_hash};
pub use records::{
    is_share_record_type, record_type, Assignment, CurrentAssignmentValue, DecodeError,
    EncodeError, GroupMetadataValue, MemberMetadataValue, ShareGroupRecord,
    StatePartitionMetadataValue, TopicId, TopicPartitionsInfo,
};
pub use types::*;

use super::{ErrorCode, ListedGroup};

/// The share groups of one `__consumer_offsets` partition.
#[derive(Debug, Default)]
pub struct ShareGroupCoordinator {
    config: ShareGroupConfig,
    topics: TopicsImage,
    /// Durable state: changed only by [`apply`].
    groups: BTreeMap<String, DurableGroup>,
    overrides: BTreeMap<String, GroupOverrides>,
    /// (group, member) → session deadline.
    deadlines: BTreeMap<(String, String), i64>,
    /// The same deadlines ordered by time: (deadline, group, member).
    timers: BTreeSet<(i64, String, String)>,
}

impl ShareGroupCoordinator {
    pub fn new(config: ShareGroupConfig) -> Self {
        ShareGroupCoordinator {
            config,
            ..Default::default()
        }
    }

    pub fn config(&self) -> &ShareGroupConfig {
        &self.config
    }

    /// The topic metadata the coordinator currently assigns from.
    pub fn topics(&self) -> &TopicsImage {
        &self.topics
    }

    /// Sets a group's dynamic configuration; takes effect at the members' next heartbeat.
    pub fn set_group_overrides(&mut self, group_id: &str, overrides: GroupOverrides) {
        if overrides == GroupOverrides::default() {
            self.overrides.remove(group_id);
        } else {
            self.overrides.insert(group_id.to_string(), overrides);
        }
    }

    /// The session timeout that applies to a group.
    pub fn session_timeout_ms(&self, group_id: &str) -> i32 {
        self.overrides
            .get(group_id)
            .and_then(|o| o.session_timeout_ms)
            .unwrap_or(self.config.session_timeout_ms)
    }

    /// The heartbeat interval that applies to a group.
    pub fn heartbeat_interval_ms(&self, group_id: &str) -> i32 {
        self.overrides
            .get(group_id)
            .and_then(|o| o.heartbeat_interval_ms)
            .unwrap_or(self.config.heartbeat_interval_ms)
    }

    /// The member limit that applies to a group.
    pub fn max_size(&self, group_id: &str) -> usize {
        self.overrides
            .get(group_id)
            .and_then(|o| o.max_size)
            .unwrap_or(self.config.max_size)
    }

    // -----------------------------------------------------------------------------------------
    // ShareGroupHeartbeat
    // -----------------------------------------------------------------------------------------

    /// Handles a ShareGroupHeartbeat: join (epoch 0), leave (epoch -1) or heartbeat.
    ///
    /// # Errors
    /// The Kafka error code, with no state change and no records: INVALID_REQUEST (bad member
    /// id, group id, rack id, epoch, or a join without subscription), GROUP_ID_NOT_FOUND (a
    /// classic group holds the id, or no such group unless joining), GROUP_MAX_SIZE_REACHED,
    /// UNKNOWN_MEMBER_ID, [`FENCED_MEMBER_EPOCH`], COORDINATOR_NOT_AVAILABLE (too many groups).
    pub fn heartbeat(
        &mut self,
        now_ms: i64,
        request: &HeartbeatRequest,
        id_use: GroupIdUse,
    ) -> Result<Output<HeartbeatResponse>, ErrorCode> {
        validate_request(request, self.config.subscribed_topics_max)?;
        if request.member_epoch == LEAVE_GROUP_MEMBER_EPOCH {
            return self.leave(request, id_use);
        }
        self.check_heartbeat(request, id_use)?;
        Ok(self.apply_heartbeat(now_ms, request))
    }

    fn check_heartbeat(&self, req: &HeartbeatRequest, id_use: GroupIdUse) -> Result<(), ErrorCode> {
        if id_use == GroupIdUse::Classic {
            return Err(ErrorCode::GROUP_ID_NOT_FOUND);
        }
        let joining = req.member_epoch == JOIN_GROUP_MEMBER_EPOCH;
        let group = self.groups.get(&req.group_id);
        if group.is_none() {
            if !joining {
                return Err(ErrorCode::GROUP_ID_NOT_FOUND);
            }
            if self.groups.len() >= self.config.groups_max {
                return Err(ErrorCode::COORDINATOR_NOT_AVAILABLE);
            }
        }
        let member = group
            .and_then(|g| g.members.get(&req.member_id))
            .filter(|m| m.is_member());
        let members = group.map_or(0, |g| g.member_count());
        if member.is_none() && members >= self.max_size(&req.group_id) {
            return Err(ErrorCode::GROUP_MAX_SIZE_REACHED);
        }
        let Some(member) = member else {
            return if joining {
                Ok(())
            } else {
                Err(ErrorCode::UNKNOWN_MEMBER_ID)
            };
        };
        // A rejoin (epoch 0) of a known member is accepted (KAFKA-19233); otherwise the
        // current epoch, or the previous one if the bump's response was lost.
        let epoch = req.member_epoch;
        let fenced = !joining
            && (epoch > member.epoch()
                || (epoch < member.epoch() && epoch != member.previous_epoch()));
        if fenced {
            return Err(FENCED_MEMBER_EPOCH);
        }
        Ok(())
    }

    /// The accepted heartbeat: update the member, maybe bump the group epoch and recompute
    /// the target assignment, reconcile the member, arm its session.
    fn apply_heartbeat(
        &mut self,
        now_ms: i64,
        req: &HeartbeatRequest,
    ) -> Output<HeartbeatResponse> {
        let gid = &req.group_id;
        let mid = &req.member_id;
        let mut records = Vec::new();
        let old = self
            .groups
            .get(gid)
            .and_then(|g| g.members.get(mid))
            .filter(|m| m.is_member());
        let known = old.is_some();
        let old_epoch = old.map(|m| m.epoch());
        let old_meta = old.and_then(|m| m.metadata.clone()).unwrap_or_default();
        let old_assigned = old.and_then(|m| m.assigned().cloned()).unwrap_or_default();
        let new_meta = MemberMetadataValue {
            rack_id: req.rack_id.clone().or_else(|| old_meta.rack_id.clone()),
            client_id: req.client_id.clone(),
            client_host: req.client_host.clone(),
            subscribed_topic_names: match &req.subscribed_topic_names {
                Some(names) => names.iter().cloned().collect(),
                None => old_meta.subscribed_topic_names.clone(),
            },
        };
        let subscription_changed =
            new_meta.subscribed_topic_names != old_meta.subscribed_topic_names;
        if !known || new_meta != old_meta {
            self.emit(
                ShareGroupRecord::MemberMetadata {
                    group_id: gid.clone(),
                    member_id: mid.clone(),
                    value: Some(new_meta),
                },
                &mut records,
            );
        }
        self.maybe_bump(gid, subscription_changed, &mut records);
        self.reconcile(gid, mid, subscription_changed, &mut records);
        self.arm_session(now_ms, gid, mid);

        let member = self.groups.get(gid).and_then(|g| g.members.get(mid));
        let epoch = member.map_or(0, |m| m.epoch());
        let assigned = member
            .and_then(|m| m.assigned().cloned())
            .unwrap_or_default();
        // Kafka sends the assignment on a join or a change only. A member heartbeating with
        // its previous epoch lost the answer that moved it (a broker killed after writing the
        // bump, a timeout): it is sent again, or the member would keep its old partitions
        // while the coordinator counts it as holding the new ones — nobody would fetch them.
        let send_assignment = req.member_epoch == JOIN_GROUP_MEMBER_EPOCH
            || old_epoch.is_some_and(|e| e != req.member_epoch)
            || req.subscribed_topic_names.is_some()
            || assigned != old_assigned;
        let reply = HeartbeatResponse {
            member_id: mid.clone(),
            member_epoch: epoch,
            heartbeat_interval_ms: self.heartbeat_interval_ms(gid),
            assignment: send_assignment.then(|| to_topic_partitions(&assigned)),
        };
        Output { reply, records }
    }

    fn leave(
        &mut self,
        req: &HeartbeatRequest,
        id_use: GroupIdUse,
    ) -> Result<Output<HeartbeatResponse>, ErrorCode> {
        if id_use == GroupIdUse::Classic {
            return Err(ErrorCode::GROUP_ID_NOT_FOUND);
        }
        let group = self
            .groups
            .get(&req.group_id)
            .ok_or(ErrorCode::GROUP_ID_NOT_FOUND)?;
        if !group.has_member(&req.member_id) {
            return Err(ErrorCode::UNKNOWN_MEMBER_ID);
        }
        let mut records = Vec::new();
        self.fence_member(&req.group_id, &req.member_id, &mut records);
        let reply = HeartbeatResponse {
            member_id: req.member_id.clone(),
            member_epoch: LEAVE_GROUP_MEMBER_EPOCH,
            heartbeat_interval_ms: 0,
            assignment: None,
        };
        Ok(Output { reply, records })
    }

    // -----------------------------------------------------------------------------------------
    // Group epoch, target assignment, reconciliation
    // -----------------------------------------------------------------------------------------

    /// Bumps the group epoch if `force`d or the subscribed topics' metadata changed, and
    /// recomputes the target assignment when it lags the group epoch.
    fn maybe_bump(&mut self, gid: &str, force: bool, records: &mut Vec<ShareGroupRecord>) {
        let Some(group) = self.groups.get(gid) else {
            return;
        };
        let hash = metadata_hash(group.subscribed_topics(), &self.topics);
        let mut epoch = group.group_epoch();
        if force || hash != group.metadata_hash() {
            epoch = epoch.saturating_add(1);
            self.emit(
                ShareGroupRecord::GroupMetadata {
                    group_id: gid.to_string(),
                    value: Some(GroupMetadataValue {
                        epoch,
                        metadata_hash: hash,
                    }),
                },
                records,
            );
        }
        let lagging = self
            .groups
            .get(gid)
            .is_some_and(|g| g.assignment_epoch != Some(epoch));
        if lagging {
            self.update_target(gid, epoch, records);
        }
    }

    /// Runs the assignor and writes the members whose target changed, then the epoch.
    fn update_target(&mut self, gid: &str, epoch: i32, records: &mut Vec<ShareGroupRecord>) {
        let Some(group) = self.groups.get(gid) else {
            return;
        };
        let members: BTreeMap<String, AssignmentMember<'_>> = group
            .members
            .iter()
            .filter_map(|(id, m)| {
                let subscribed_topic_names = m.subscription()?;
                let member = AssignmentMember {
                    subscribed_topic_names,
                    previous: m.target.as_ref(),
                };
                Some((id.clone(), member))
            })
            .collect();
        let targets = assignor::assign(&members, &self.topics);
        let empty = Assignment::new();
        let changed: Vec<ShareGroupRecord> = targets
            .into_iter()
            .filter(|(id, target)| {
                let old = group.members.get(id).and_then(|m| m.target.as_ref());
                target != old.unwrap_or(&empty)
            })
            .map(
                |(member_id, target)| ShareGroupRecord::TargetAssignmentMember {
                    group_id: gid.to_string(),
                    member_id,
                    value: Some(target),
                },
            )
            .collect();
        for record in changed {
            self.emit(record, records);
        }
        self.emit(
            ShareGroupRecord::TargetAssignmentMetadata {
                group_id: gid.to_string(),
                value: Some(epoch),
            },
            records,
        );
    }

    /// Moves the member to the target assignment epoch with its target assignment (limited
    /// to its subscription), as Kafka's ShareGroupAssignmentBuilder does.
    fn reconcile(
        &mut self,
        gid: &str,
        mid: &str,
        subscription_changed: bool,
        records: &mut Vec<ShareGroupRecord>,
    ) {
        let Some(group) = self.groups.get(gid) else {
            return;
        };
        let Some(member) = group.members.get(mid) else {
            return;
        };
        let target_epoch = group.target_epoch();
        let reconciled = member.epoch() == target_epoch && member.is_stable();
        if reconciled && !subscription_changed {
            return;
        }
        let subscribed = member.subscription().cloned().unwrap_or_default();
        let assigned: Assignment = member
            .target
            .iter()
            .flatten()
            .filter(|(topic_id, _)| {
                self.topics
                    .by_id(topic_id)
                    .is_some_and(|(name, _)| subscribed.contains(name))
            })
            .map(|(t, p)| (*t, p.clone()))
            .collect();
        let (member_epoch, previous_member_epoch) = if member.epoch() == target_epoch {
            (member.epoch(), member.previous_epoch())
        } else {
            (target_epoch, member.epoch())
        };
        let current = CurrentAssignmentValue {
            member_epoch,
            previous_member_epoch,
            state: records::MEMBER_STATE_STABLE,
            assigned_partitions: assigned,
        };
        if member.current.as_ref() != Some(&current) {
            self.emit(
                ShareGroupRecord::CurrentMemberAssignment {
                    group_id: gid.to_string(),
                    member_id: mid.to_string(),
                    value: Some(current),
                },
                records,
            );
        }
    }

    /// Removes a member (leave or expiry): its three records go, the group epoch is bumped
    /// and the remaining members' target assignment recomputed.
    fn fence_member(&mut self, gid: &str, mid: &str, records: &mut Vec<ShareGroupRecord>) {
        let (g, m) = (gid.to_string(), mid.to_string());
        for record in [
            ShareGroupRecord::CurrentMemberAssignment {
                group_id: g.clone(),
                member_id: m.clone(),
                value: None,
            },
            ShareGroupRecord::TargetAssignmentMember {
                group_id: g.clone(),
                member_id: m.clone(),
                value: None,
            },
            ShareGroupRecord::MemberMetadata {
                group_id: g,
                member_id: m,
                value: None,
            },
        ] {
            self.emit(record, records);
        }
        self.disarm_session(gid, mid);
        self.maybe_bump(gid, true, records);
    }

    fn emit(&mut self, record: ShareGroupRecord, records: &mut Vec<ShareGroupRecord>) {
        apply(&mut self.groups, &record);
        records.push(record);
    }

    // -----------------------------------------------------------------------------------------
    // Session timeouts
    // -----------------------------------------------------------------------------------------

    fn arm_session(&mut self, now_ms: i64, gid: &str, mid: &str) {
        self.disarm_session(gid, mid);
        let timeout = i64::from(self.session_timeout_ms(gid).max(1));
        let deadline = now_ms.saturating_add(timeout);
        self.deadlines
            .insert((gid.to_string(), mid.to_string()), deadline);
        self.timers
            .insert((deadline, gid.to_string(), mid.to_string()));
    }

    fn disarm_session(&mut self, gid: &str, mid: &str) {
        if let Some(old) = self.deadlines.remove(&(gid.to_string(), mid.to_string())) {
            self.timers.remove(&(old, gid.to_string(), mid.to_string()));
        }
    }

    /// Removes every member whose session deadline is at or before `now_ms`, as a leave does.
    pub fn expire(&mut self, now_ms: i64) -> Output<Vec<ExpiredMember>> {
        let due: Vec<(String, String)> = self
            .timers
            .iter()
            .take_while(|(deadline, _, _)| *deadline <= now_ms)
            .map(|(_, g, m)| (g.clone(), m.clone()))
            .collect();
        let mut records = Vec::new();
        let mut expired = Vec::with_capacity(due.len());
        for (group_id, member_id) in due {
            self.disarm_session(&group_id, &member_id);
            let present = self
                .groups
                .get(&group_id)
                .is_some_and(|g| g.has_member(&member_id));
            if present {
                self.fence_member(&group_id, &member_id, &mut records);
                expired.push(ExpiredMember {
                    group_id,
                    member_id,
                });
            }
        }
        Output {
            reply: expired,
            records,
        }
    }

    /// When [`expire`](Self::expire) next has work to do.
    pub fn next_deadline(&self) -> Option<i64> {
        self.timers.first().map(|(d, _, _)| *d)
    }

    // -----------------------------------------------------------------------------------------
    // Topic metadata
    // -----------------------------------------------------------------------------------------

    /// Installs new topic metadata (created, deleted, re-created topics, partition growth):
    /// groups whose subscribed topics changed get a new epoch and target assignment, and
    /// share-partition state of topic ids that no longer exist is forgotten.
    pub fn on_metadata_change(&mut self, topics: TopicsImage) -> Output<()> {
        self.topics = topics;
        let mut records = Vec::new();
        let ids: Vec<String> = self.groups.keys().cloned().collect();
        for gid in ids {
            let has_members = self.groups.get(&gid).is_some_and(|g| g.member_count() > 0);
            if has_members {
                self.maybe_bump(&gid, false, &mut records);
            }
            self.prune_state_partitions(&gid, &mut records);
        }
        Output { reply: (), records }
    }

    fn prune_state_partitions(&mut self, gid: &str, records: &mut Vec<ShareGroupRecord>) {
        let Some(old) = self
            .groups
            .get(gid)
            .and_then(|g| g.state_partitions.as_ref())
        else {
            return;
        };
        let mut value = old.clone();
        let exists = |id: &TopicId| self.topics.by_id(id).is_some();
        value.initializing_topics.retain(|id, _| exists(id));
        value.initialized_topics.retain(|id, _| exists(id));
        value.deleting_topics.retain(|id, _| exists(id));
        if &value != old {
            self.emit(
                ShareGroupRecord::StatePartitionMetadata {
                    group_id: gid.to_string(),
                    value: Some(value),
                },
                records,
            );
        }
    }

    // -----------------------------------------------------------------------------------------
    // Share-partition state
    // -----------------------------------------------------------------------------------------

    /// Records that the share coordinator now holds state for these partitions of the group.
    ///
    /// # Errors
    /// GROUP_ID_NOT_FOUND, [`UNKNOWN_TOPIC_ID`] (not in the current image), INVALID_REQUEST (a
    /// partition the topic does not have). Nothing changes then.
    pub fn mark_initialized(
        &mut self,
        group_id: &str,
        topic_id: TopicId,
        partitions: &[i32],
    ) -> Result<Output<()>, ErrorCode> {
        let group = self
            .groups
            .get(group_id)
            .ok_or(ErrorCode::GROUP_ID_NOT_FOUND)?;
        let (name, meta) = self.topics.by_id(&topic_id).ok_or(UNKNOWN_TOPIC_ID)?;
        if partitions.iter().any(|p| !(0..meta.partitions).contains(p)) {
            return Err(ErrorCode::INVALID_REQUEST);
        }
        if partitions.is_empty() {
            return Ok(Output {
                reply: (),
                records: Vec::new(),
            });
        }
        let old = group.state_partitions.clone().unwrap_or_default();
        let mut value = old.clone();
        let info = value.initialized_topics.entry(topic_id).or_default();
        info.topic_name = name.to_string();
        info.partitions.extend(partitions.iter().copied());
        if let Some(initializing) = value.initializing_topics.get_mut(&topic_id) {
            for p in partitions {
                initializing.partitions.remove(p);
            }
            if initializing.partitions.is_empty() {
                value.initializing_topics.remove(&topic_id);
            }
        }
        value.deleting_topics.remove(&topic_id);
        let mut records = Vec::new();
        if group.state_partitions.is_none() || value != old {
            self.emit(
                ShareGroupRecord::StatePartitionMetadata {
                    group_id: group_id.to_string(),
                    value: Some(value),
                },
                &mut records,
            );
        }
        Ok(Output { reply: (), records })
    }

    /// The partitions of a group whose share-partition state is initialized.
    pub fn initialized_partitions(&self, group_id: &str) -> Assignment {
        self.groups
            .get(group_id)
            .and_then(|g| g.state_partitions.as_ref())
            .map(|v| {
                v.initialized_topics
                    .iter()
                    .map(|(id, info)| (*id, info.partitions.clone()))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The existing partitions some member of the group has (in its current or its target
    /// assignment).
    pub fn assigned_partitions(&self, group_id: &str) -> Assignment {
        let mut out = Assignment::new();
        let Some(group) = self.groups.get(group_id) else {
            return out;
        };
        for member in group.members.values().filter(|m| m.is_member()) {
            for (topic_id, parts) in member.target.iter().chain(member.assigned()).flatten() {
                for p in parts {
                    if self.topics.has_partition(topic_id, *p) {
                        out.entry(*topic_id).or_default().insert(*p);
                    }
                }
            }
        }
        out
    }

    /// Assigned partitions whose share-partition state is not initialized yet: what the
    /// broker must initialize (then report with [`mark_initialized`](Self::mark_initialized)).
    pub fn uninitialized_partitions(&self, group_id: &str) -> Assignment {
        let initialized = self.initialized_partitions(group_id);
        let mut out = self.assigned_partitions(group_id);
        for (topic_id, parts) in &mut out {
            if let Some(done) = initialized.get(topic_id) {
                parts.retain(|p| !done.contains(p));
            }
        }
        out.retain(|_, parts| !parts.is_empty());
        out
    }

    /// Every (group, topic id, partition) with at least one assignee: the share partitions
    /// that exist as far as this coordinator knows.
    pub fn assigned_share_partitions(&self) -> BTreeSet<SharePartitionKey> {
        let mut out = BTreeSet::new();
        for group_id in self.groups.keys() {
            for (topic_id, parts) in self.assigned_partitions(group_id) {
                for p in parts {
                    out.insert((group_id.clone(), topic_id, p));
                }
            }
        }
        out
    }

    // -----------------------------------------------------------------------------------------
    // Administration
    // -----------------------------------------------------------------------------------------

    /// True if a share group holds this id (the classic coordinator must then refuse it).
    pub fn contains_group(&self, group_id: &str) -> bool {
        self.groups.contains_key(group_id)
    }

    pub fn group_ids(&self) -> impl Iterator<Item = &str> {
        self.groups.keys().map(String::as_str)
    }

    /// The current epoch of `member_id` in share group `group_id`: what a transactional
    /// acknowledgement (KIP-1289) checks its member epoch against.
    ///
    /// # Errors
    /// GROUP_ID_NOT_FOUND when no share group has the id; UNKNOWN_MEMBER_ID when the group has
    /// no such member.
    pub fn member_epoch(&self, group_id: &str, member_id: &str) -> Result<i32, ErrorCode> {
        let group = self
            .groups
            .get(group_id)
            .ok_or(ErrorCode::GROUP_ID_NOT_FOUND)?;
        group
            .members
            .get(member_id)
            .map(DurableMember::epoch)
            .ok_or(ErrorCode::UNKNOWN_MEMBER_ID)
    }

    /// ShareGroupDescribe v1 for each id, in request order.
    pub fn describe(&self, group_ids: &[String]) -> Vec<DescribedGroup> {
        group_ids
            .iter()
            .map(|group_id| match self.groups.get(group_id) {
                None => DescribedGroup {
                    error_code: ErrorCode::GROUP_ID_NOT_FOUND,
                    group_id: group_id.clone(),
                    state: ShareGroupState::Dead,
                    group_epoch: 0,
                    assignment_epoch: 0,
                    assignor_name: String::new(),
                    members: Vec::new(),
                },
                Some(group) => DescribedGroup {
                    error_code: ErrorCode::NONE,
                    group_id: group_id.clone(),
                    state: group.state(),
                    group_epoch: group.group_epoch(),
                    assignment_epoch: group.target_epoch(),
                    assignor_name: ASSIGNOR_NAME.to_string(),
                    members: group
                        .members
                        .iter()
                        .filter_map(|(id, m)| self.describe_member(id, m))
                        .collect(),
                },
            })
            .collect()
    }

    fn describe_member(&self, member_id: &str, m: &DurableMember) -> Option<DescribedMember> {
        let meta = m.metadata.as_ref()?;
        let assignment = m
            .assigned()
            .into_iter()
            .flatten()
            .filter_map(|(topic_id, parts)| {
                let (name, _) = self.topics.by_id(topic_id)?;
                Some(DescribedTopicPartitions {
                    topic_id: *topic_id,
                    topic_name: name.to_string(),
                    partitions: parts.iter().copied().collect(),
                })
            })
            .collect();
        Some(DescribedMember {
            member_id: member_id.to_string(),
            rack_id: meta.rack_id.clone(),
            member_epoch: m.epoch(),
            client_id: meta.client_id.clone(),
            client_host: meta.client_host.clone(),
            subscribed_topic_names: meta.subscribed_topic_names.iter().cloned().collect(),
            assignment,
        })
    }

    /// The share groups for ListGroups. Filters are case-insensitive; an empty filter matches
    /// everything; a type filter without "share" matches no share group.
    pub fn list_groups(
        &self,
        states_filter: &[String],
        types_filter: &[String],
    ) -> Vec<ListedGroup> {
        let type_ok = types_filter.is_empty()
            || types_filter
                .iter()
                .any(|t| t.trim().eq_ignore_ascii_case(SHARE_GROUP_TYPE));
        if !type_ok {
            return Vec::new();
        }
        self.groups
            .iter()
            .filter(|(_, g)| {
                let state = g.state().name();
                states_filter.is_empty()
                    || states_filter
                        .iter()
                        .any(|s| s.trim().eq_ignore_ascii_case(state))
            })
            .map(|(id, g)| ListedGroup {
                group_id: id.clone(),
                protocol_type: SHARE_GROUP_TYPE.to_string(),
                group_state: g.state().name().to_string(),
                group_type: SHARE_GROUP_TYPE.to_string(),
            })
            .collect()
    }

    /// Deletes an Empty share group (DeleteGroups). The reply lists the share-partition state
    /// the group leaves behind, which the broker asks the share coordinator to delete.
    ///
    /// # Errors
    /// GROUP_ID_NOT_FOUND, or NON_EMPTY_GROUP while it has members; nothing changes then.
    pub fn delete_group(
        &mut self,
        group_id: &str,
    ) -> Result<Output<Vec<ShareStateTopic>>, ErrorCode> {
        let group = self
            .groups
            .get(group_id)
            .ok_or(ErrorCode::GROUP_ID_NOT_FOUND)?;
        if group.member_count() > 0 {
            return Err(ErrorCode::NON_EMPTY_GROUP);
        }
        let state_topics = share_state_topics(group.state_partitions.as_ref());
        let members: Vec<String> = group.members.keys().cloned().collect();
        let g = group_id.to_string();
        let mut plan = Vec::new();
        for m in &members {
            plan.push(ShareGroupRecord::CurrentMemberAssignment {
                group_id: g.clone(),
                member_id: m.clone(),
                value: None,
            });
        }
        for m in &members {
            plan.push(ShareGroupRecord::TargetAssignmentMember {
                group_id: g.clone(),
                member_id: m.clone(),
                value: None,
            });
        }
        plan.push(ShareGroupRecord::TargetAssignmentMetadata {
            group_id: g.clone(),
            value: None,
        });
        for m in members {
            plan.push(ShareGroupRecord::MemberMetadata {
                group_id: g.clone(),
                member_id: m,
                value: None,
            });
        }
        plan.push(ShareGroupRecord::StatePartitionMetadata {
            group_id: g.clone(),
            value: None,
        });
        plan.push(ShareGroupRecord::GroupMetadata {
            group_id: g,
            value: None,
        });
        let mut records = Vec::with_capacity(plan.len());
        for record in plan {
            self.emit(record, &mut records);
        }
        Ok(Output {
            reply: state_topics,
            records,
        })
    }

    // -----------------------------------------------------------------------------------------
    // Loading and inspection
    // -----------------------------------------------------------------------------------------

    /// Applies one record read back from `__consumer_offsets` while loading. Call for every
    /// share-group record in log order, then [`loaded`](Self::loaded) and
    /// [`on_metadata_change`](Self::on_metadata_change); not meant for a coordinator that is
    /// already serving requests (session timers are left alone).
    pub fn replay(&mut self, record: &ShareGroupRecord) {
        apply(&mut self.groups, record);
    }

    /// Loading finished at `now_ms`: every member must heartbeat within its session timeout
    /// from now, as in Kafka.
    pub fn loaded(&mut self, now_ms: i64) {
        self.deadlines.clear();
        self.timers.clear();
        let members: Vec<(String, String)> = self
            .groups
            .iter()
            .flat_map(|(g, group)| group.member_ids().map(move |m| (g.clone(), m.clone())))
            .collect();
        for (g, m) in members {
            self.arm_session(now_ms, &g, &m);
        }
    }

    /// The durable part of the state.
    pub fn durable_state(&self) -> DurableState {
        DurableState {
            groups: self.groups.clone(),
        }
    }

    /// Checks the structural invariants (O(size); for tests and the simulator).
    ///
    /// # Errors
    /// A description of the first violated invariant.
    pub fn check_invariants(&self) -> Result<(), String> {
        if self.deadlines.len() != self.timers.len()
            || self
                .timers
                .iter()
                .any(|(d, g, m)| self.deadlines.get(&(g.clone(), m.clone())) != Some(d))
        {
            return Err("session timers out of sync".into());
        }
        for (g, m) in self.deadlines.keys() {
            if !self.groups.get(g).is_some_and(|group| group.has_member(m)) {
                return Err(format!("session armed for {g}/{m}, not a member"));
            }
        }
        for (id, g) in &self.groups {
            let fail = |msg: String| Err(format!("share group {id}: {msg}"));
            if g.target_epoch() > g.group_epoch() {
                return fail("assignment epoch ahead of the group epoch".into());
            }
            for (mid, m) in &g.members {
                if !m.is_member() {
                    return fail(format!("{mid} has assignment records but no metadata"));
                }
                if m.epoch() > g.target_epoch() {
                    return fail(format!("{mid} is ahead of the assignment epoch"));
                }
                // The target only changes with a new assignment epoch, so a member at that
                // epoch holds (the subscribed part of) its target.
                let target = m.target.clone().unwrap_or_default();
                let beyond_target = m.epoch() == g.target_epoch()
                    && m.assigned()
                        .into_iter()
                        .flatten()
                        .any(|(t, parts)| target.get(t).is_none_or(|have| !parts.is_subset(have)));
                if beyond_target {
                    return fail(format!("{mid} holds partitions outside its target"));
                }
            }
        }
        Ok(())
    }
}

/// Checks what Kafka's KafkaApis and GroupCoordinatorService check before the coordinator.
fn validate_request(req: &HeartbeatRequest, subscribed_topics_max: usize) -> Result<(), ErrorCode> {
    let invalid = Err(ErrorCode::INVALID_REQUEST);
    if req.member_id.is_empty() || req.member_id.chars().count() > MEMBER_ID_MAX_CHARS {
        return invalid;
    }
    // Group ids go into record keys with an i16 length.
    if req.group_id.is_empty() || req.group_id.len() > i16::MAX as usize {
        return invalid;
    }
    if req.rack_id.as_deref() == Some("") {
        return invalid;
    }
    let subscription = req.subscribed_topic_names.as_deref();
    if req.member_epoch == JOIN_GROUP_MEMBER_EPOCH && subscription.is_none_or(<[String]>::is_empty)
    {
        return invalid;
    }
    if req.member_epoch < LEAVE_GROUP_MEMBER_EPOCH {
        return invalid;
    }
    if subscription.is_some_and(|s| s.len() > subscribed_topics_max) {
        return invalid;
    }
    Ok(())
}

fn to_topic_partitions(assignment: &Assignment) -> Vec<TopicPartitions> {
    assignment
        .iter()
        .map(|(topic_id, parts)| TopicPartitions {
            topic_id: *topic_id,
            partitions: parts.iter().copied().collect(),
        })
        .collect()
}

/// Everything a group's state-partition metadata lists, for deletion of its share state.
fn share_state_topics(value: Option<&StatePartitionMetadataValue>) -> Vec<ShareStateTopic> {
    let mut out: BTreeMap<TopicId, ShareStateTopic> = BTreeMap::new();
    let Some(value) = value else {
        return Vec::new();
    };
    for (topic_id, info) in value
        .initialized_topics
        .iter()
        .chain(&value.initializing_topics)
    {
        let entry = out.entry(*topic_id).or_insert_with(|| ShareStateTopic {
            topic_id: *topic_id,
            topic_name: info.topic_name.clone(),
            partitions: BTreeSet::new(),
        });
        entry.partitions.extend(info.partitions.iter().copied());
    }
    for (topic_id, name) in &value.deleting_topics {
        out.entry(*topic_id).or_insert_with(|| ShareStateTopic {
            topic_id: *topic_id,
            topic_name: name.clone(),
            partitions: BTreeSet::new(),
        });
    }
    out.into_values().collect()
}
