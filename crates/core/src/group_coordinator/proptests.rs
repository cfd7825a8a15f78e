//! Property test: random interleavings of client actions and time across a few members of one
//! group, with restarts, checking the coordinator's invariants after every step.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;

use super::*;

const G: &str = "g";
const SLOTS: usize = 4;
const SESSION: i32 = 3_000;
const REBALANCE: i32 = 5_000;

#[derive(Clone, Debug)]
enum Op {
    Join {
        slot: usize,
        change_meta: bool,
    },
    Sync {
        slot: usize,
    },
    Heartbeat {
        slot: usize,
    },
    Leave {
        slot: usize,
    },
    Commit {
        slot: usize,
        partition: i32,
        simple: bool,
    },
    Advance {
        ms: i64,
    },
    Delete,
    OffsetDelete {
        partition: i32,
    },
    Fetch,
    Restart,
}

fn op() -> impl Strategy<Value = Op> {
    let slot = 0..SLOTS;
    prop_oneof![
        4 => (slot.clone(), any::<bool>()).prop_map(|(slot, change_meta)| Op::Join { slot, change_meta }),
        3 => slot.clone().prop_map(|slot| Op::Sync { slot }),
        3 => slot.clone().prop_map(|slot| Op::Heartbeat { slot }),
        1 => slot.clone().prop_map(|slot| Op::Leave { slot }),
        2 => (slot, 0..4i32, any::<bool>()).prop_map(|(slot, partition, simple)| Op::Commit { slot, partition, simple }),
        3 => (0..8_000i64).prop_map(|ms| Op::Advance { ms }),
        1 => Just(Op::Delete),
        1 => (0..4i32).prop_map(|partition| Op::OffsetDelete { partition }),
        1 => Just(Op::Fetch),
        1 => Just(Op::Restart),
    ]
}

#[derive(Clone, Debug, Default)]
struct Client {
    member_id: String,
    generation: i32,
    leader_members: Option<Vec<String>>,
    meta_version: u8,
}

struct World {
    c: GroupCoordinator,
    now: i64,
    next_token: u64,
    records: Vec<GroupRecord>,
    clients: Vec<Client>,
    /// token → (slot, member id the request was sent with)
    outstanding: BTreeMap<ReplyToken, (usize, String)>,
    answered: BTreeSet<ReplyToken>,
    /// member id → generation of its last successful JoinGroup response.
    joined: BTreeMap<String, i32>,
    static_ids: BTreeSet<String>,
    max_generation: Option<i32>,
}

fn config() -> GroupConfig {
    GroupConfig {
        min_session_timeout_ms: 1_000,
        max_session_timeout_ms: 100_000,
        initial_rebalance_delay_ms: 500,
        max_size: 3,
        offsets_retention_ms: 60_000,
        offsets_retention_check_interval_ms: 10_000,
        new_member_join_timeout_ms: 20_000,
        offsets_per_group_max: 3,
        ..GroupConfig::default()
    }
}

fn instance(slot: usize) -> Option<String> {
    (slot >= 2).then(|| format!("i{slot}"))
}

impl World {
    fn new() -> World {
        World {
            c: GroupCoordinator::new(config()),
            now: 0,
            next_token: 0,
            records: Vec::new(),
            clients: vec![Client::default(); SLOTS],
            outstanding: BTreeMap::new(),
            answered: BTreeSet::new(),
            joined: BTreeMap::new(),
            static_ids: BTreeSet::new(),
            max_generation: None,
        }
    }

    fn send(&mut self, slot: usize, req: GroupRequest) -> Result<(), TestCaseError> {
        self.next_token += 1;
        let token = ReplyToken(self.next_token);
        let sent_as = self.clients[slot].member_id.clone();
        self.outstanding.insert(token, (slot, sent_as));
        let out = self.c.handle(self.now, token, req);
        self.absorb(out)
    }

    fn absorb(&mut self, out: Output) -> Result<(), TestCaseError> {
        self.records.extend(out.records);
        for (token, resp) in out.replies {
            prop_assert!(self.answered.insert(token), "{token:?} answered twice");
            let Some((slot, sent_as)) = self.outstanding.remove(&token) else {
                return Err(TestCaseError::fail(format!("reply to unknown {token:?}")));
            };
            self.on_reply(slot, &sent_as, resp);
        }
        Ok(())
    }

    fn on_reply(&mut self, slot: usize, sent_as: &str, resp: GroupResponse) {
        if let GroupResponse::JoinGroup(j) = &resp {
            if j.error_code == ErrorCode::NONE {
                // What the coordinator told this member id, whatever the client does with it.
                self.joined.insert(j.member_id.clone(), j.generation_id);
                if slot >= 2 {
                    self.static_ids.insert(j.member_id.clone());
                }
            }
        }
        let client = &mut self.clients[slot];
        if client.member_id != sent_as {
            return; // a stale reply: the client has moved on
        }
        let reset = |client: &mut Client| {
            client.member_id.clear();
            client.generation = -1;
            client.leader_members = None;
        };
        match resp {
            GroupResponse::JoinGroup(j) => match j.error_code {
                ErrorCode::NONE => {
                    client.member_id = j.member_id.clone();
                    client.generation = j.generation_id;
                    client.leader_members = (j.leader == j.member_id)
                        .then(|| j.members.iter().map(|m| m.member_id.clone()).collect());
                }
                ErrorCode::MEMBER_ID_REQUIRED => client.member_id = j.member_id,
                ErrorCode::UNKNOWN_MEMBER_ID | ErrorCode::FENCED_INSTANCE_ID => reset(client),
                _ => {}
            },
            GroupResponse::SyncGroup(s) => {
                if matches!(
                    s.error_code,
                    ErrorCode::UNKNOWN_MEMBER_ID | ErrorCode::FENCED_INSTANCE_ID
                ) {
                    reset(client);
                }
            }
            GroupResponse::Heartbeat(h) => {
                if matches!(
                    h.error_code,
                    ErrorCode::UNKNOWN_MEMBER_ID | ErrorCode::FENCED_INSTANCE_ID
                ) {
                    reset(client);
                }
            }
            GroupResponse::LeaveGroup(_) => reset(client),
            _ => {}
        }
    }

    fn tick_to(&mut self, to: i64) -> Result<(), TestCaseError> {
        for _ in 0..1_000 {
            let at = match self.c.next_deadline() {
                Some(d) if d < to => d.max(self.now),
                _ => to,
            };
            self.now = at;
            let out = self.c.tick(at);
            self.absorb(out)?;
            self.check()?;
            if at == to {
                return Ok(());
            }
        }
        Err(TestCaseError::fail("timers do not advance"))
    }

    fn rebuilt(&self) -> Result<GroupCoordinator, TestCaseError> {
        let mut c = GroupCoordinator::new(config());
        for r in &self.records {
            let (k, v) = r.encode();
            let decoded = GroupRecord::decode(&k, v.as_deref())
                .map_err(|e| TestCaseError::fail(format!("decode: {e}")))?;
            prop_assert_eq!(&decoded, r);
            c.replay(&decoded);
        }
        c.loaded(self.now);
        Ok(c)
    }

    fn check(&mut self) -> Result<(), TestCaseError> {
        self.c.check_invariants().map_err(TestCaseError::fail)?;
        match self.c.group_summary(G) {
            None => self.max_generation = None,
            Some(s) => {
                if let Some(max) = self.max_generation {
                    prop_assert!(s.generation_id >= max, "generation went back");
                }
                self.max_generation = Some(s.generation_id);
                prop_assert!(s.members.len() + s.pending_members <= config().max_size);
                if s.state == GroupState::Stable {
                    for m in &s.members {
                        if !self.static_ids.contains(m) {
                            prop_assert_eq!(
                                self.joined.get(m),
                                Some(&s.generation_id),
                                "member {}",
                                m
                            );
                        }
                    }
                }
                if let Some(l) = &s.leader {
                    prop_assert!(s.members.contains(l));
                }
            }
        }
        let rebuilt = self.rebuilt()?;
        rebuilt.check_invariants().map_err(TestCaseError::fail)?;
        prop_assert_eq!(rebuilt.durable_state(), self.c.durable_state());
        Ok(())
    }

    fn protocols(&self, slot: usize) -> Vec<(String, Bytes)> {
        let meta = Bytes::from(vec![slot as u8, self.clients[slot].meta_version]);
        if slot == 3 {
            vec![("rr".into(), meta)]
        } else {
            vec![("range".into(), meta.clone()), ("rr".into(), meta)]
        }
    }

    fn apply(&mut self, op: Op) -> Result<(), TestCaseError> {
        match op {
            Op::Join { slot, change_meta } => {
                if change_meta {
                    self.clients[slot].meta_version =
                        self.clients[slot].meta_version.wrapping_add(1);
                }
                let req = JoinGroupRequest {
                    group_id: G.into(),
                    member_id: self.clients[slot].member_id.clone(),
                    group_instance_id: instance(slot),
                    client_id: format!("c{slot}"),
                    client_host: "h".into(),
                    session_timeout_ms: SESSION,
                    rebalance_timeout_ms: REBALANCE,
                    protocol_type: "consumer".into(),
                    protocols: self.protocols(slot),
                    reason: None,
                    require_known_member_id: slot == 0,
                    skip_assignment_supported: slot % 2 == 0,
                };
                self.send(slot, GroupRequest::JoinGroup(req))?;
            }
            Op::Sync { slot } => {
                let client = self.clients[slot].clone();
                let assignments = client
                    .leader_members
                    .unwrap_or_default()
                    .into_iter()
                    .map(|m| {
                        let a = Bytes::from(m.clone().into_bytes());
                        (m, a)
                    })
                    .collect();
                let req = SyncGroupRequest {
                    group_id: G.into(),
                    generation_id: client.generation,
                    member_id: client.member_id,
                    group_instance_id: instance(slot),
                    protocol_type: Some("consumer".into()),
                    protocol_name: None,
                    assignments,
                };
                self.send(slot, GroupRequest::SyncGroup(req))?;
            }
            Op::Heartbeat { slot } => {
                let client = self.clients[slot].clone();
                let req = HeartbeatRequest {
                    group_id: G.into(),
                    generation_id: client.generation,
                    member_id: client.member_id,
                    group_instance_id: instance(slot),
                };
                self.send(slot, GroupRequest::Heartbeat(req))?;
            }
            Op::Leave { slot } => {
                let req = LeaveGroupRequest {
                    group_id: G.into(),
                    members: vec![LeavingMember {
                        member_id: self.clients[slot].member_id.clone(),
                        group_instance_id: instance(slot),
                    }],
                };
                self.send(slot, GroupRequest::LeaveGroup(req))?;
            }
            Op::Commit {
                slot,
                partition,
                simple,
            } => {
                let client = self.clients[slot].clone();
                let req = OffsetCommitRequest {
                    group_id: G.into(),
                    generation_id: if simple { -1 } else { client.generation },
                    member_id: if simple {
                        String::new()
                    } else {
                        client.member_id
                    },
                    group_instance_id: None,
                    offsets: vec![OffsetCommitPartition {
                        topic: "t".into(),
                        partition,
                        offset: self.now,
                        leader_epoch: -1,
                        metadata: None,
                    }],
                };
                self.send(slot, GroupRequest::OffsetCommit(req))?;
            }
            Op::Advance { ms } => self.tick_to(self.now + ms)?,
            Op::Delete => self.send(
                0,
                GroupRequest::DeleteGroups(DeleteGroupsRequest {
                    group_ids: vec![G.into()],
                }),
            )?,
            Op::OffsetDelete { partition } => self.send(
                0,
                GroupRequest::OffsetDelete(OffsetDeleteRequest {
                    group_id: G.into(),
                    partitions: vec![("t".into(), partition)],
                }),
            )?,
            Op::Fetch => self.send(
                0,
                GroupRequest::OffsetFetch(OffsetFetchRequest {
                    group_id: G.into(),
                    partitions: None,
                    require_stable: false,
                }),
            )?,
            Op::Restart => {
                // Connections drop with the broker: outstanding replies are lost.
                self.c = self.rebuilt()?;
                self.outstanding.clear();
                // Generations handed out but not yet persisted are forgotten, as in Kafka; the
                // persisted generation itself never goes back (checked by the durable equality).
                self.max_generation = None;
                // Loaded members are at the persisted generation (a client holding a newer,
                // unpersisted one gets ILLEGAL_GENERATION and rejoins).
                if let Some(s) = self.c.group_summary(G) {
                    for m in s.members {
                        self.joined.insert(m, s.generation_id);
                    }
                }
            }
        }
        self.check()
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 256,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn random_interleavings_keep_invariants(ops in proptest::collection::vec(op(), 1..60)) {
        let mut w = World::new();
        for op in ops {
            w.apply(op)?;
        }
        // With enough time every parked request is answered.
        for _ in 0..100 {
            if w.outstanding.is_empty() {
                break;
            }
            let Some(next) = w.c.next_deadline() else { break };
            w.tick_to(next.max(w.now) + 1)?;
        }
        prop_assert!(w.outstanding.is_empty(), "unanswered: {:?}", w.outstanding);
    }
}
