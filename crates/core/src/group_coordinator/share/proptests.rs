//! Property tests: random interleavings of share consumers (join, rejoin, heartbeat, stale
//! epochs, subscription changes, leave), time passing session timeouts, topic creation,
//! deletion, re-creation and growth, share-state initialization, group deletion and restarts
//! (replaying the records emitted so far into a fresh coordinator), checking the invariants
//! after every step. Plus the assignor on its own.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;

use super::assignor::{assign, AssignmentMember};
use super::*;

const GROUPS: [&str; 2] = ["ga", "gb"];
/// An id a classic group holds: share requests for it must be refused.
const CLASSIC: &str = "classic";
const TOPICS: [&str; 3] = ["t0", "t1", "t2"];
const SLOTS: usize = 6;
const MAX_SIZE: usize = 2;
const SESSION_MS: i32 = 3_000;

fn config() -> ShareGroupConfig {
    ShareGroupConfig {
        max_size: MAX_SIZE,
        session_timeout_ms: SESSION_MS,
        heartbeat_interval_ms: 1_000,
        ..ShareGroupConfig::default()
    }
}

/// A slot's group: ga gets slots 0, 2, 4 (one more than it may hold), gb the others.
fn group_of(slot: usize) -> &'static str {
    GROUPS[slot % 2]
}

fn names(mask: u8) -> Vec<String> {
    (0..TOPICS.len())
        .filter(|i| mask & (1 << i) != 0)
        .map(|i| TOPICS[i].to_string())
        .collect()
}

#[derive(Clone, Debug)]
enum Op {
    Join { slot: usize, mask: u8 },
    Heartbeat { slot: usize },
    Subscribe { slot: usize, mask: u8 },
    Stale { slot: usize, delta: i32 },
    Leave { slot: usize },
    Classic { slot: usize },
    Advance { ms: i64 },
    CreateTopic { topic: usize, partitions: i32 },
    DeleteTopic { topic: usize },
    GrowTopic { topic: usize, more: i32 },
    Initialize { group: usize },
    DeleteGroup { group: usize },
    Restart,
}

fn op() -> impl Strategy<Value = Op> {
    let slot = 0..SLOTS;
    let topic = 0..TOPICS.len();
    prop_oneof![
        4 => (slot.clone(), 1u8..8).prop_map(|(slot, mask)| Op::Join { slot, mask }),
        5 => slot.clone().prop_map(|slot| Op::Heartbeat { slot }),
        2 => (slot.clone(), 0u8..8).prop_map(|(slot, mask)| Op::Subscribe { slot, mask }),
        1 => (slot.clone(), prop_oneof![Just(-2), Just(-1), Just(1)])
            .prop_map(|(slot, delta)| Op::Stale { slot, delta }),
        1 => slot.clone().prop_map(|slot| Op::Leave { slot }),
        1 => slot.prop_map(|slot| Op::Classic { slot }),
        3 => (0..2_500i64).prop_map(|ms| Op::Advance { ms }),
        2 => (topic.clone(), 0..5i32).prop_map(|(topic, partitions)| Op::CreateTopic { topic, partitions }),
        1 => topic.clone().prop_map(|topic| Op::DeleteTopic { topic }),
        1 => (topic, 1..3i32).prop_map(|(topic, more)| Op::GrowTopic { topic, more }),
        1 => (0..GROUPS.len()).prop_map(|group| Op::Initialize { group }),
        1 => (0..GROUPS.len()).prop_map(|group| Op::DeleteGroup { group }),
        1 => Just(Op::Restart),
    ]
}

#[derive(Clone, Debug, Default)]
struct Client {
    /// Generated once, kept for the client's lifetime (as KIP-932 clients do).
    member_id: String,
    /// Joined and not (knowingly) fenced.
    joined: bool,
    epoch: i32,
}

struct World {
    c: ShareGroupCoordinator,
    now: i64,
    image: TopicsImage,
    next_topic_id: u128,
    records: Vec<ShareGroupRecord>,
    clients: Vec<Client>,
    /// Highest group epoch seen per group (reset when the group is deleted).
    epochs: BTreeMap<String, i32>,
}

impl World {
    fn new() -> World {
        World {
            c: ShareGroupCoordinator::new(config()),
            now: 0,
            image: TopicsImage::default(),
            next_topic_id: 1,
            records: Vec::new(),
            clients: (0..SLOTS)
                .map(|slot| Client {
                    member_id: format!("member-{slot}"),
                    ..Client::default()
                })
                .collect(),
            epochs: BTreeMap::new(),
        }
    }

    fn log(&mut self, records: Vec<ShareGroupRecord>) -> Result<(), TestCaseError> {
        for record in records {
            let (key, value) = record
                .encode()
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            let back = ShareGroupRecord::decode(&key, value.as_deref());
            prop_assert_eq!(back.as_ref(), Ok(&record));
            self.records.push(record);
        }
        Ok(())
    }

    fn request(&self, slot: usize, epoch: i32, subs: Option<Vec<String>>) -> HeartbeatRequest {
        HeartbeatRequest {
            group_id: group_of(slot).to_string(),
            member_id: self.clients[slot].member_id.clone(),
            member_epoch: epoch,
            rack_id: None,
            subscribed_topic_names: subs,
            client_id: format!("client-{slot}"),
            client_host: "/10.0.0.1".to_string(),
        }
    }

    fn member(&self, slot: usize) -> Option<&DurableMember> {
        let client = &self.clients[slot];
        self.c
            .groups
            .get(group_of(slot))
            .and_then(|g| g.members.get(&client.member_id))
            .filter(|m| m.is_member())
    }

    /// Sends a heartbeat and checks the response against the coordinator's state.
    fn send(&mut self, slot: usize, req: HeartbeatRequest) -> Result<(), TestCaseError> {
        let group = self.c.groups.get(&req.group_id);
        let members = group.map_or(0, |g| g.member_count());
        let known = self.member(slot).is_some();
        let result = self.c.heartbeat(self.now, &req, GroupIdUse::Free);
        match result {
            Ok(out) => {
                self.log(out.records)?;
                let reply = out.reply;
                let client = &mut self.clients[slot];
                if req.member_epoch == LEAVE_GROUP_MEMBER_EPOCH {
                    prop_assert_eq!(reply.member_epoch, -1);
                    client.joined = false;
                    client.epoch = 0;
                    prop_assert!(self.member(slot).is_none());
                    return Ok(());
                }
                client.joined = true;
                client.epoch = reply.member_epoch;
                let member = self
                    .member(slot)
                    .ok_or_else(|| TestCaseError::fail("no member"))?;
                prop_assert_eq!(member.epoch(), reply.member_epoch);
                if let Some(assignment) = reply.assignment {
                    let sent: Assignment = assignment
                        .into_iter()
                        .map(|tp| (tp.topic_id, tp.partitions.into_iter().collect()))
                        .collect();
                    let held = member.assigned().cloned().unwrap_or_default();
                    prop_assert_eq!(sent, held);
                } else {
                    prop_assert!(req.member_epoch != 0 && req.subscribed_topic_names.is_none());
                }
            }
            Err(code) => {
                let client = &mut self.clients[slot];
                if code == ErrorCode::GROUP_MAX_SIZE_REACHED {
                    prop_assert!(!known && members >= MAX_SIZE);
                } else if code == ErrorCode::UNKNOWN_MEMBER_ID
                    || code == FENCED_MEMBER_EPOCH
                    || code == ErrorCode::GROUP_ID_NOT_FOUND
                {
                    // Fenced or gone: the client rejoins with its member id and epoch 0.
                    prop_assert!(req.member_epoch != 0);
                    client.joined = false;
                    client.epoch = 0;
                } else {
                    prop_assert!(false, "unexpected error {:?} for {:?}", code, req);
                }
            }
        }
        Ok(())
    }

    fn apply(&mut self, op: &Op) -> Result<(), TestCaseError> {
        match *op {
            Op::Join { slot, mask } => {
                let req = self.request(slot, 0, Some(names(mask)));
                self.send(slot, req)?;
            }
            Op::Heartbeat { slot } => self.heartbeat(slot)?,
            Op::Subscribe { slot, mask } => {
                let client = &self.clients[slot];
                if client.joined {
                    let req = self.request(slot, client.epoch, Some(names(mask)));
                    self.send(slot, req)?;
                }
            }
            Op::Stale { slot, delta } => self.stale(slot, delta)?,
            Op::Leave { slot } => {
                if self.clients[slot].joined {
                    let req = self.request(slot, LEAVE_GROUP_MEMBER_EPOCH, None);
                    let present = self.member(slot).is_some();
                    let result = self.c.heartbeat(self.now, &req, GroupIdUse::Free);
                    prop_assert_eq!(result.is_ok(), present);
                    if let Ok(out) = result {
                        self.log(out.records)?;
                    }
                    self.clients[slot].joined = false;
                    self.clients[slot].epoch = 0;
                }
            }
            Op::Classic { slot } => {
                let mut req = self.request(slot, 0, Some(names(1)));
                req.group_id = CLASSIC.to_string();
                let before = self.c.durable_state();
                let result = self.c.heartbeat(self.now, &req, GroupIdUse::Classic);
                prop_assert_eq!(result.map(|o| o.reply), Err(ErrorCode::GROUP_ID_NOT_FOUND));
                prop_assert_eq!(self.c.durable_state(), before);
            }
            Op::Advance { ms } => {
                self.now += ms;
                let out = self.c.expire(self.now);
                for expired in &out.reply {
                    prop_assert!(self
                        .c
                        .groups
                        .get(&expired.group_id)
                        .is_none_or(|g| !g.has_member(&expired.member_id)));
                }
                self.log(out.records)?;
            }
            Op::CreateTopic { topic, partitions } => {
                if self.image.by_name(TOPICS[topic]).is_none() {
                    self.new_topic(topic, partitions)?;
                }
            }
            Op::DeleteTopic { topic } => {
                self.image.remove(TOPICS[topic]);
                self.publish()?;
            }
            Op::GrowTopic { topic, more } => {
                if let Some(meta) = self.image.by_name(TOPICS[topic]).copied() {
                    self.image.insert(
                        TOPICS[topic].to_string(),
                        meta.topic_id,
                        meta.partitions + more,
                    );
                    self.publish()?;
                } else {
                    // Re-create a deleted topic under a new id.
                    self.new_topic(topic, more)?;
                }
            }
            Op::Initialize { group } => {
                let gid = GROUPS[group];
                for (topic_id, parts) in self.c.uninitialized_partitions(gid) {
                    let parts: Vec<i32> = parts.into_iter().collect();
                    let out = self.c.mark_initialized(gid, topic_id, &parts);
                    let out = out.map_err(|e| TestCaseError::fail(format!("{e:?}")))?;
                    self.log(out.records)?;
                }
                prop_assert!(self.c.uninitialized_partitions(gid).is_empty());
            }
            Op::DeleteGroup { group } => {
                let gid = GROUPS[group];
                let members = self.c.groups.get(gid).map(|g| g.member_count());
                match (self.c.delete_group(gid), members) {
                    (Ok(out), Some(0)) => {
                        self.log(out.records)?;
                        self.epochs.remove(gid);
                        prop_assert!(!self.c.contains_group(gid));
                    }
                    (Err(ErrorCode::NON_EMPTY_GROUP), Some(n)) => prop_assert!(n > 0),
                    (Err(ErrorCode::GROUP_ID_NOT_FOUND), None) => {}
                    (other, members) => {
                        prop_assert!(
                            false,
                            "delete {:?} with {:?} members",
                            other.map(|o| o.reply),
                            members
                        )
                    }
                }
            }
            Op::Restart => self.restart()?,
        }
        Ok(())
    }

    fn heartbeat(&mut self, slot: usize) -> Result<(), TestCaseError> {
        let client = self.clients[slot].clone();
        if !client.joined {
            return Ok(());
        }
        let present = self.member(slot).is_some();
        let req = self.request(slot, client.epoch, None);
        let result = self.c.heartbeat(self.now, &req, GroupIdUse::Free);
        // A member's epoch changes only in its own heartbeats, so a present member's
        // heartbeat with the epoch it was last given always succeeds.
        prop_assert_eq!(result.is_ok(), present, "{:?}", result);
        if let Ok(out) = result {
            self.log(out.records.clone())?;
            // Re-check the reply through the common path's assertions.
            let member = self
                .member(slot)
                .ok_or_else(|| TestCaseError::fail("no member"))?;
            prop_assert_eq!(member.epoch(), out.reply.member_epoch);
            self.clients[slot].epoch = out.reply.member_epoch;
        } else {
            self.clients[slot].joined = false;
            self.clients[slot].epoch = 0;
        }
        Ok(())
    }

    fn stale(&mut self, slot: usize, delta: i32) -> Result<(), TestCaseError> {
        let client = self.clients[slot].clone();
        let Some(member) = self.member(slot) else {
            return Ok(());
        };
        let epoch = client.epoch + delta;
        if epoch <= 0 {
            return Ok(());
        }
        let accepted = epoch == member.epoch() || epoch == member.previous_epoch();
        let before = self.c.durable_state();
        let req = self.request(slot, epoch, None);
        let result = self.c.heartbeat(self.now, &req, GroupIdUse::Free);
        prop_assert_eq!(result.is_ok(), accepted, "{:?}", result);
        match result {
            Ok(out) => {
                self.log(out.records)?;
                self.clients[slot].epoch = out.reply.member_epoch;
            }
            Err(code) => {
                prop_assert_eq!(code, FENCED_MEMBER_EPOCH);
                prop_assert_eq!(self.c.durable_state(), before);
            }
        }
        Ok(())
    }

    fn new_topic(&mut self, topic: usize, partitions: i32) -> Result<(), TestCaseError> {
        let id = self.next_topic_id.to_be_bytes();
        self.next_topic_id += 1;
        self.image.insert(TOPICS[topic].to_string(), id, partitions);
        self.publish()
    }

    fn publish(&mut self) -> Result<(), TestCaseError> {
        let out = self.c.on_metadata_change(self.image.clone());
        self.log(out.records)
    }

    /// Replays every record emitted so far into a fresh coordinator.
    fn replayed(&self) -> ShareGroupCoordinator {
        let mut fresh = ShareGroupCoordinator::new(config());
        for record in &self.records {
            fresh.replay(record);
        }
        fresh
    }

    fn restart(&mut self) -> Result<(), TestCaseError> {
        let mut fresh = self.replayed();
        prop_assert_eq!(fresh.durable_state(), self.c.durable_state());
        fresh.loaded(self.now);
        let out = fresh.on_metadata_change(self.image.clone());
        // The image did not change while "down": nothing to write.
        prop_assert!(out.records.is_empty(), "{:?}", out.records);
        self.c = fresh;
        // The members heartbeat again.
        for slot in 0..SLOTS {
            self.heartbeat(slot)?;
        }
        Ok(())
    }

    fn check(&mut self, step: usize) -> Result<(), TestCaseError> {
        self.c.check_invariants().map_err(TestCaseError::fail)?;
        let fresh = self.replayed();
        prop_assert_eq!(
            fresh.durable_state(),
            self.c.durable_state(),
            "step {}",
            step
        );
        let ids: Vec<String> = self.c.group_ids().map(str::to_string).collect();
        let listed: Vec<String> = self
            .c
            .list_groups(&[], &[])
            .into_iter()
            .map(|g| g.group_id)
            .collect();
        prop_assert_eq!(&listed, &ids);
        for (gid, described) in ids.iter().zip(self.c.describe(&ids)) {
            let group = self
                .c
                .groups
                .get(gid)
                .ok_or_else(|| TestCaseError::fail("group"))?;
            self.check_group(gid, group)?;
            prop_assert_eq!(described.members.len(), group.member_count());
            prop_assert_eq!(described.assignment_epoch, described.group_epoch);
            let last = self.epochs.insert(gid.clone(), described.group_epoch);
            prop_assert!(
                last.is_none_or(|e| e <= described.group_epoch),
                "epoch went back"
            );
            let expected = if group.member_count() == 0 {
                ShareGroupState::Empty
            } else {
                ShareGroupState::Stable
            };
            prop_assert_eq!(described.state, expected);
        }
        // Every member has a session.
        let members: usize = self.c.groups.values().map(|g| g.member_count()).sum();
        prop_assert_eq!(self.c.deadlines.len(), members);
        Ok(())
    }

    fn check_group(&self, gid: &str, group: &DurableGroup) -> Result<(), TestCaseError> {
        prop_assert!(group.member_count() <= MAX_SIZE, "{} over its limit", gid);
        let image = &self.image;
        let subs: BTreeMap<&String, &BTreeSet<String>> = group
            .members
            .iter()
            .filter_map(|(id, m)| Some((id, m.subscription()?)))
            .collect();
        let empty = Assignment::new();
        let targets: BTreeMap<&String, &Assignment> = subs
            .keys()
            .map(|id| (*id, group.members[*id].target.as_ref().unwrap_or(&empty)))
            .collect();
        // Members only get partitions of topics they subscribe to, and that exist.
        for (id, target) in &targets {
            for (topic_id, parts) in target.iter() {
                let (name, meta) = image
                    .by_id(topic_id)
                    .ok_or_else(|| TestCaseError::fail(format!("{id} holds a deleted topic")))?;
                prop_assert!(
                    subs[id].contains(name),
                    "{} holds unsubscribed {}",
                    id,
                    name
                );
                prop_assert!(parts.iter().all(|p| (0..meta.partitions).contains(p)));
            }
            // A member's current assignment is within its subscription too (topics deleted
            // or re-created since its last heartbeat aside).
            let m = &group.members[*id];
            for topic_id in m.assigned().into_iter().flatten().map(|(t, _)| t) {
                if let Some((name, _)) = image.by_id(topic_id) {
                    prop_assert!(subs[id].contains(name));
                }
            }
        }
        // Every partition of a subscribed topic has an assignee.
        let subscribed: BTreeSet<&String> = subs.values().flat_map(|s| s.iter()).collect();
        for name in subscribed {
            if let Some(meta) = image.by_name(name) {
                for p in 0..meta.partitions {
                    let covered = targets
                        .values()
                        .any(|t| t.get(&meta.topic_id).is_some_and(|ps| ps.contains(&p)));
                    prop_assert!(covered, "{}: {}-{} unassigned", gid, name, p);
                }
            }
        }
        // Balance with one subscription and no more members than partitions.
        let first = subs.values().next();
        let homogeneous = first.is_some_and(|f| subs.values().all(|s| s == f));
        if let (true, Some(f)) = (homogeneous, first) {
            let partitions: i32 = f
                .iter()
                .filter_map(|n| image.by_name(n))
                .map(|m| m.partitions)
                .sum();
            if subs.len() <= usize::try_from(partitions).unwrap_or(0) {
                let sizes: Vec<usize> = targets
                    .values()
                    .map(|t| t.values().map(BTreeSet::len).sum())
                    .collect();
                let max = sizes.iter().max().copied().unwrap_or(0);
                let min = sizes.iter().min().copied().unwrap_or(0);
                prop_assert!(max - min <= 1, "{}: unbalanced {:?}", gid, sizes);
            }
        }
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 256,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn share_groups_keep_their_invariants(ops in proptest::collection::vec(op(), 1..60)) {
        let mut w = World::new();
        for (step, op) in ops.iter().enumerate() {
            w.apply(op)?;
            w.check(step)?;
        }
        let fresh = w.replayed();
        prop_assert_eq!(fresh.durable_state(), w.c.durable_state());
    }
}

// ---------------------------------------------------------------------------------------------
// The assignor alone
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Debug)]
struct AssignCase {
    partitions: Vec<i32>,
    /// Per member: subscription mask and previous assignment (topic index → partitions).
    members: Vec<(u8, BTreeMap<usize, BTreeSet<i32>>)>,
}

fn assign_case() -> impl Strategy<Value = AssignCase> {
    let previous = proptest::collection::btree_map(
        0..TOPICS.len(),
        proptest::collection::btree_set(0..6i32, 0..4),
        0..3,
    );
    (
        proptest::collection::vec(0..6i32, TOPICS.len()),
        proptest::collection::vec((0u8..8, previous), 1..7),
    )
        .prop_map(|(partitions, members)| AssignCase {
            partitions,
            members,
        })
}

fn topic_id(i: usize) -> TopicId {
    [u8::try_from(i + 1).unwrap_or(0); 16]
}

fn run(
    case: &AssignCase,
    previous: Option<&BTreeMap<String, Assignment>>,
) -> BTreeMap<String, Assignment> {
    let image = TopicsImage::new(
        case.partitions
            .iter()
            .enumerate()
            .map(|(i, p)| (TOPICS[i].to_string(), topic_id(i), *p)),
    );
    let subs: Vec<BTreeSet<String>> = case
        .members
        .iter()
        .map(|(mask, _)| names(*mask).into_iter().collect())
        .collect();
    let prev_from_case: Vec<Assignment> = case
        .members
        .iter()
        .map(|(_, prev)| {
            prev.iter()
                .map(|(t, ps)| (topic_id(*t), ps.clone()))
                .collect()
        })
        .collect();
    let members: BTreeMap<String, AssignmentMember<'_>> = subs
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let id = format!("m{i}");
            let previous = match previous {
                Some(p) => p.get(&id),
                None => prev_from_case.get(i),
            };
            let member = AssignmentMember {
                subscribed_topic_names: s,
                previous,
            };
            (id, member)
        })
        .collect();
    assign(&members, &image)
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 512,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn simple_assignor_properties(case in assign_case()) {
        let out = run(&case, None);
        prop_assert_eq!(out.len(), case.members.len());
        // Deterministic.
        prop_assert_eq!(&run(&case, None), &out);
        for (i, partitions) in case.partitions.iter().enumerate() {
            let subscribers: Vec<String> = case
                .members
                .iter()
                .enumerate()
                .filter(|(_, (mask, _))| mask & (1 << i) != 0)
                .map(|(m, _)| format!("m{m}"))
                .collect();
            for p in 0..*partitions {
                let holders: Vec<&String> = out
                    .iter()
                    .filter(|(_, a)| a.get(&topic_id(i)).is_some_and(|ps| ps.contains(&p)))
                    .map(|(id, _)| id)
                    .collect();
                // Covered iff subscribed, and only by subscribers.
                prop_assert_eq!(holders.is_empty(), subscribers.is_empty());
                prop_assert!(holders.iter().all(|h| subscribers.contains(h)));
            }
        }
        for a in out.values() {
            for (t, ps) in a {
                let i = case.partitions.iter().enumerate().position(|(i, _)| topic_id(i) == *t);
                let count = i.map_or(0, |i| case.partitions[i]);
                prop_assert!(ps.iter().all(|p| (0..count).contains(p)));
            }
        }
        // Homogeneous and members ≤ partitions: balanced, every partition exactly once.
        let first = case.members[0].0;
        if case.members.iter().all(|(m, _)| *m == first) {
            let total: i32 = names(first)
                .iter()
                .filter_map(|n| TOPICS.iter().position(|t| t == n))
                .map(|i| case.partitions[i])
                .sum();
            let total = usize::try_from(total).unwrap_or(0);
            if case.members.len() <= total {
                let sizes: Vec<usize> = out.values().map(|a| a.values().map(BTreeSet::len).sum()).collect();
                let max = sizes.iter().max().copied().unwrap_or(0);
                let min = sizes.iter().min().copied().unwrap_or(0);
                prop_assert!(max - min <= 1, "unbalanced {:?}", sizes);
                prop_assert_eq!(sizes.iter().sum::<usize>(), total);
            } else if total > 0 {
                // More members than partitions: each partition is shared ceil(M / P) ways
                // and members hold one or two partitions.
                let sharing = case.members.len().div_ceil(total);
                let mut holders: BTreeMap<(TopicId, i32), usize> = BTreeMap::new();
                for a in out.values() {
                    let held: usize = a.values().map(BTreeSet::len).sum();
                    prop_assert!((1..=2).contains(&held), "member holds {}", held);
                    for (t, ps) in a {
                        for p in ps {
                            *holders.entry((*t, *p)).or_default() += 1;
                        }
                    }
                }
                prop_assert_eq!(holders.len(), total);
                prop_assert!(holders.values().all(|h| *h == sharing), "{:?}", holders);
            }
        }
        // Stable: feeding the result back changes nothing.
        prop_assert_eq!(&run(&case, Some(&out)), &out);
    }
}

// ---------------------------------------------------------------------------------------------
// Record encoding
// ---------------------------------------------------------------------------------------------

fn any_assignment() -> impl Strategy<Value = Assignment> {
    proptest::collection::btree_map(
        any::<[u8; 16]>(),
        proptest::collection::btree_set(any::<i32>(), 0..4),
        0..3,
    )
}

fn any_infos() -> impl Strategy<Value = BTreeMap<TopicId, TopicPartitionsInfo>> {
    proptest::collection::btree_map(
        any::<[u8; 16]>(),
        (
            ".{0,6}",
            proptest::collection::btree_set(any::<i32>(), 0..4),
        )
            .prop_map(|(topic_name, partitions)| TopicPartitionsInfo {
                topic_name,
                partitions,
            }),
        0..3,
    )
}

fn any_record() -> impl Strategy<Value = ShareGroupRecord> {
    let id = ".{0,8}";
    let member = (
        proptest::option::of(".{0,6}"),
        ".{0,6}",
        ".{0,6}",
        proptest::collection::btree_set(".{0,6}", 0..4),
    )
        .prop_map(
            |(rack_id, client_id, client_host, names)| MemberMetadataValue {
                rack_id,
                client_id,
                client_host,
                subscribed_topic_names: names,
            },
        );
    let current = (any::<i32>(), any::<i32>(), any::<i8>(), any_assignment()).prop_map(
        |(member_epoch, previous_member_epoch, state, assigned_partitions)| {
            CurrentAssignmentValue {
                member_epoch,
                previous_member_epoch,
                state,
                assigned_partitions,
            }
        },
    );
    let state = (
        any_infos(),
        any_infos(),
        proptest::collection::btree_map(any::<[u8; 16]>(), ".{0,6}", 0..3),
    )
        .prop_map(
            |(initializing_topics, initialized_topics, deleting_topics)| {
                StatePartitionMetadataValue {
                    initializing_topics,
                    initialized_topics,
                    deleting_topics,
                }
            },
        );
    prop_oneof![
        (id, id, proptest::option::of(member)).prop_map(|(g, m, value)| {
            ShareGroupRecord::MemberMetadata {
                group_id: g,
                member_id: m,
                value,
            }
        }),
        (id, proptest::option::of((any::<i32>(), any::<i64>()))).prop_map(|(g, v)| {
            ShareGroupRecord::GroupMetadata {
                group_id: g,
                value: v.map(|(epoch, metadata_hash)| GroupMetadataValue {
                    epoch,
                    metadata_hash,
                }),
            }
        }),
        (id, proptest::option::of(any::<i32>())).prop_map(|(g, value)| {
            ShareGroupRecord::TargetAssignmentMetadata { group_id: g, value }
        }),
        (id, id, proptest::option::of(any_assignment())).prop_map(|(g, m, value)| {
            ShareGroupRecord::TargetAssignmentMember {
                group_id: g,
                member_id: m,
                value,
            }
        }),
        (id, id, proptest::option::of(current)).prop_map(|(g, m, value)| {
            ShareGroupRecord::CurrentMemberAssignment {
                group_id: g,
                member_id: m,
                value,
            }
        }),
        (id, proptest::option::of(state)).prop_map(|(g, value)| {
            ShareGroupRecord::StatePartitionMetadata { group_id: g, value }
        }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 512,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn records_round_trip(record in any_record()) {
        let (key, value) = record.encode().map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(record_type(&key), Some(record.record_type()));
        prop_assert_eq!(value.is_none(), record.is_tombstone());
        prop_assert_eq!(ShareGroupRecord::decode(&key, value.as_deref()), Ok(record));
    }

    #[test]
    fn decode_arbitrary_bytes_never_panics(
        record_type in 8i16..17,
        key in proptest::collection::vec(any::<u8>(), 0..48),
        value in proptest::option::of(proptest::collection::vec(any::<u8>(), 0..96)),
    ) {
        let mut full_key = record_type.to_be_bytes().to_vec();
        full_key.extend(key);
        let _ = ShareGroupRecord::decode(&full_key, value.as_deref());
    }

    #[test]
    fn decode_mutated_records_never_panics(
        record in any_record(),
        flip in any::<usize>(),
        byte in any::<u8>(),
        cut in any::<usize>(),
    ) {
        let (key, value) = record.encode().map_err(|e| TestCaseError::fail(e.to_string()))?;
        if let Some(mut value) = value {
            if !value.is_empty() {
                let i = flip % value.len();
                value[i] = byte;
                value.truncate(cut % (value.len() + 1));
            }
            let _ = ShareGroupRecord::decode(&key, Some(&value));
        }
        let mut key = key;
        let i = flip % key.len();
        key[i] = byte;
        let _ = ShareGroupRecord::decode(&key, None);
    }
}
