//! Unit tests of the standard classic-group flows, with explicit timestamps.

use super::*;

const SESSION: i32 = 10_000;
const REBALANCE: i32 = 30_000;
const G: &str = "g";

struct H {
    c: GroupCoordinator,
    next_token: u64,
    records: Vec<GroupRecord>,
    now: i64,
}

fn consumer_subscription(topics: &[&str]) -> Bytes {
    let mut b = Vec::new();
    b.extend_from_slice(&0i16.to_be_bytes());
    b.extend_from_slice(&(topics.len() as i32).to_be_bytes());
    for t in topics {
        b.extend_from_slice(&(t.len() as i16).to_be_bytes());
        b.extend_from_slice(t.as_bytes());
    }
    b.extend_from_slice(&(-1i32).to_be_bytes());
    Bytes::from(b)
}

fn join_req(member_id: &str, instance: Option<&str>) -> JoinGroupRequest {
    JoinGroupRequest {
        group_id: G.into(),
        member_id: member_id.into(),
        group_instance_id: instance.map(Into::into),
        client_id: "client".into(),
        client_host: "/127.0.0.1".into(),
        session_timeout_ms: SESSION,
        rebalance_timeout_ms: REBALANCE,
        protocol_type: "consumer".into(),
        protocols: vec![("range".into(), consumer_subscription(&["t"]))],
        reason: None,
        require_known_member_id: false,
        skip_assignment_supported: true,
    }
}

impl H {
    fn new() -> H {
        H::with_config(GroupConfig::default())
    }

    fn with_config(config: GroupConfig) -> H {
        H {
            c: GroupCoordinator::new(config),
            next_token: 0,
            records: Vec::new(),
            now: 0,
        }
    }

    fn send(&mut self, req: GroupRequest) -> (ReplyToken, Output) {
        self.next_token += 1;
        let token = ReplyToken(self.next_token);
        let out = self.c.handle(self.now, token, req);
        self.records.extend(out.records.iter().cloned());
        self.c.check_invariants().expect("invariants");
        (token, out)
    }

    /// Fires every timer up to `now` at its own deadline, as the broker's timer would.
    fn tick(&mut self, now: i64) -> Output {
        let mut all = Output::default();
        for _ in 0..10_000 {
            let at = match self.c.next_deadline() {
                Some(d) if d < now => d.max(self.now),
                _ => now,
            };
            self.now = at;
            let out = self.c.tick(at);
            self.records.extend(out.records.iter().cloned());
            self.c.check_invariants().expect("invariants");
            all.extend(out);
            if at == now {
                return all;
            }
        }
        panic!("timers do not advance");
    }

    fn join(&mut self, req: JoinGroupRequest) -> (ReplyToken, Output) {
        self.send(GroupRequest::JoinGroup(req))
    }

    fn sync(
        &mut self,
        member: &str,
        generation: i32,
        assignments: Vec<(&str, &str)>,
    ) -> (ReplyToken, Output) {
        self.send(GroupRequest::SyncGroup(SyncGroupRequest {
            group_id: G.into(),
            generation_id: generation,
            member_id: member.into(),
            group_instance_id: None,
            protocol_type: Some("consumer".into()),
            protocol_name: Some("range".into()),
            assignments: assignments
                .into_iter()
                .map(|(m, a)| (m.to_string(), Bytes::from(a.to_string())))
                .collect(),
        }))
    }

    fn heartbeat(&mut self, member: &str, instance: Option<&str>, generation: i32) -> ErrorCode {
        let (t, out) = self.send(GroupRequest::Heartbeat(HeartbeatRequest {
            group_id: G.into(),
            generation_id: generation,
            member_id: member.into(),
            group_instance_id: instance.map(Into::into),
        }));
        match reply(&out, t) {
            GroupResponse::Heartbeat(h) => h.error_code,
            other => panic!("unexpected {other:?}"),
        }
    }

    fn leave(&mut self, members: Vec<(&str, Option<&str>)>) -> LeaveGroupResponse {
        let (t, out) = self.send(GroupRequest::LeaveGroup(LeaveGroupRequest {
            group_id: G.into(),
            members: members
                .into_iter()
                .map(|(m, i)| LeavingMember {
                    member_id: m.into(),
                    group_instance_id: i.map(Into::into),
                })
                .collect(),
        }));
        match reply(&out, t) {
            GroupResponse::LeaveGroup(r) => r.clone(),
            other => panic!("unexpected {other:?}"),
        }
    }

    fn commit(
        &mut self,
        member: &str,
        generation: i32,
        topic: &str,
        partition: i32,
        offset: i64,
    ) -> ErrorCode {
        let (t, out) = self.send(GroupRequest::OffsetCommit(OffsetCommitRequest {
            group_id: G.into(),
            generation_id: generation,
            member_id: member.into(),
            group_instance_id: None,
            offsets: vec![OffsetCommitPartition {
                topic: topic.into(),
                partition,
                offset,
                leader_epoch: 3,
                metadata: Some("m".into()),
            }],
        }));
        match reply(&out, t) {
            GroupResponse::OffsetCommit(r) => r.partitions[0].error_code,
            other => panic!("unexpected {other:?}"),
        }
    }

    fn fetch(&mut self, partitions: Option<Vec<(&str, i32)>>) -> Vec<FetchedOffset> {
        let (t, out) = self.send(GroupRequest::OffsetFetch(OffsetFetchRequest {
            group_id: G.into(),
            partitions: partitions
                .map(|v| v.into_iter().map(|(t, p)| (t.to_string(), p)).collect()),
            require_stable: true,
        }));
        match reply(&out, t) {
            GroupResponse::OffsetFetch(r) => r.partitions.clone(),
            other => panic!("unexpected {other:?}"),
        }
    }

    fn state(&self) -> GroupState {
        self.c.group_summary(G).expect("group exists").state
    }

    /// Rebuilds a coordinator from every emitted record (through the binary encoding).
    fn rebuilt(&self, now: i64) -> GroupCoordinator {
        let mut c = GroupCoordinator::new(self.c.config().clone());
        for r in &self.records {
            let (k, v) = r.encode();
            c.replay(&GroupRecord::decode(&k, v.as_deref()).expect("decodes"));
        }
        c.loaded(now);
        c.check_invariants().expect("rebuilt invariants");
        c
    }

    fn assert_replay_matches(&self) {
        assert_eq!(
            self.rebuilt(self.now).durable_state(),
            self.c.durable_state()
        );
    }

    /// Joins `n` dynamic members (ids returned in join order) and completes generation 1.
    fn stable_group(&mut self, n: usize) -> Vec<String> {
        let mut tokens = Vec::new();
        for _ in 0..n {
            let (t, out) = self.join(join_req("", None));
            assert!(out.replies.is_empty(), "join is deferred");
            tokens.push(t);
        }
        let out = self.tick(self.now + 6_000);
        let ids: Vec<String> = tokens
            .iter()
            .map(|t| join_of(&out, *t).member_id.clone())
            .collect();
        let assignments: Vec<(&str, &str)> = ids.iter().map(|id| (id.as_str(), "a")).collect();
        let (_, out) = self.sync(&ids[0], 1, assignments);
        assert_eq!(out.replies.len(), 1);
        for id in &ids[1..] {
            let (t, out) = self.sync(id, 1, vec![]);
            assert_eq!(sync_of(&out, t).error_code, ErrorCode::NONE);
        }
        assert_eq!(self.state(), GroupState::Stable);
        ids
    }
}

fn reply(out: &Output, token: ReplyToken) -> &GroupResponse {
    let mut it = out.replies.iter().filter(|(t, _)| *t == token);
    let r = &it
        .next()
        .unwrap_or_else(|| panic!("no reply for {token:?} in {out:?}"))
        .1;
    assert!(it.next().is_none(), "two replies for {token:?}");
    r
}

fn join_of(out: &Output, token: ReplyToken) -> &JoinGroupResponse {
    match reply(out, token) {
        GroupResponse::JoinGroup(j) => j,
        other => panic!("unexpected {other:?}"),
    }
}

fn sync_of(out: &Output, token: ReplyToken) -> &SyncGroupResponse {
    match reply(out, token) {
        GroupResponse::SyncGroup(s) => s,
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn partition_for_matches_kafka() {
    assert_eq!(partition_for("hello", 50), 99_162_322 % 50);
    assert_eq!(partition_for("polygenelubricants", 50), 0);
    assert_eq!(partition_for("", 50), 0);
    assert_eq!(partition_for("x", 0), 0);
}

#[test]
fn single_member_join_sync_heartbeat() {
    let mut h = H::new();
    let mut req = join_req("", None);
    req.require_known_member_id = true;
    let (t, out) = h.join(req.clone());
    let first = join_of(&out, t);
    assert_eq!(first.error_code, ErrorCode::MEMBER_ID_REQUIRED);
    let id = first.member_id.clone();
    assert!(id.starts_with("client-"));

    req.member_id = id.clone();
    let (t, out) = h.join(req);
    assert!(
        out.replies.is_empty(),
        "initial rebalance delay defers the response"
    );
    assert_eq!(h.c.next_deadline(), Some(3_000));
    let out = h.tick(2_999);
    assert!(out.replies.is_empty());
    let out = h.tick(6_000);
    let j = join_of(&out, t);
    assert_eq!(j.error_code, ErrorCode::NONE);
    assert_eq!(j.generation_id, 1);
    assert_eq!(j.leader, id);
    assert_eq!(j.protocol_name.as_deref(), Some("range"));
    assert_eq!(j.members.len(), 1);
    assert_eq!(j.members[0].metadata, consumer_subscription(&["t"]));
    assert!(
        out.records.is_empty(),
        "nothing durable before the assignment"
    );
    assert_eq!(h.state(), GroupState::CompletingRebalance);

    let (t, out) = h.sync(&id, 1, vec![(&id, "assign")]);
    assert_eq!(sync_of(&out, t).assignment, Bytes::from("assign"));
    assert_eq!(out.records.len(), 1);
    assert_eq!(h.state(), GroupState::Stable);
    assert_eq!(h.heartbeat(&id, None, 1), ErrorCode::NONE);
    h.assert_replay_matches();
}

#[test]
fn three_members_leader_gets_metadata_and_distributes_assignment() {
    let mut h = H::new();
    let tokens: Vec<ReplyToken> = (0..3).map(|_| h.join(join_req("", None)).0).collect();
    let out = h.tick(6_000);
    let joins: Vec<&JoinGroupResponse> = tokens.iter().map(|t| join_of(&out, *t)).collect();
    let leader = joins[0].member_id.clone();
    for j in &joins {
        assert_eq!(j.generation_id, 1);
        assert_eq!(j.leader, leader);
    }
    assert_eq!(joins[0].members.len(), 3);
    assert!(joins[1].members.is_empty() && joins[2].members.is_empty());
    let ids: Vec<String> = joins.iter().map(|j| j.member_id.clone()).collect();

    let (t1, out) = h.sync(&ids[1], 1, vec![]);
    assert!(out.replies.is_empty(), "followers wait for the leader");
    let (t0, out) = h.sync(&leader, 1, vec![(&ids[0], "p0"), (&ids[1], "p1")]);
    assert_eq!(sync_of(&out, t0).assignment, Bytes::from("p0"));
    assert_eq!(sync_of(&out, t1).assignment, Bytes::from("p1"));
    assert_eq!(out.records.len(), 1);
    // The member the leader left out gets an empty assignment.
    let (t2, out) = h.sync(&ids[2], 1, vec![]);
    assert_eq!(sync_of(&out, t2).assignment, Bytes::new());
    h.assert_replay_matches();
}

#[test]
fn leave_triggers_rebalance_and_others_rejoin() {
    let mut h = H::new();
    let ids = h.stable_group(3);
    let r = h.leave(vec![(&ids[2], None)]);
    assert_eq!(r.members[0].error_code, ErrorCode::NONE);
    assert_eq!(h.state(), GroupState::PreparingRebalance);
    assert_eq!(
        h.heartbeat(&ids[0], None, 1),
        ErrorCode::REBALANCE_IN_PROGRESS
    );
    assert_eq!(
        h.heartbeat(&ids[1], None, 1),
        ErrorCode::REBALANCE_IN_PROGRESS
    );
    let (ta, out) = h.join(join_req(&ids[0], None));
    assert!(out.replies.is_empty());
    let (tb, out) = h.join(join_req(&ids[1], None));
    // Everyone rejoined: no delay outside the initial rebalance.
    assert_eq!(join_of(&out, ta).generation_id, 2);
    assert_eq!(join_of(&out, tb).generation_id, 2);
    assert_eq!(join_of(&out, ta).members.len(), 2);
    assert_eq!(h.heartbeat(&ids[2], None, 2), ErrorCode::UNKNOWN_MEMBER_ID);
    // Last members leaving empties the group and persists the Empty generation.
    let r = h.leave(vec![(&ids[0], None), (&ids[1], None)]);
    assert!(r.members.iter().all(|m| m.error_code == ErrorCode::NONE));
    assert_eq!(h.state(), GroupState::Empty);
    assert_eq!(h.c.group_summary(G).map(|s| s.generation_id), Some(3));
    h.assert_replay_matches();
}

#[test]
fn session_timeout_evicts_member() {
    let mut h = H::new();
    let ids = h.stable_group(2);
    h.now = 8_000;
    assert_eq!(h.heartbeat(&ids[0], None, 1), ErrorCode::NONE);
    // ids[1]'s session (armed at its sync, t=6000) ends at 16000.
    h.tick(15_999);
    assert_eq!(h.state(), GroupState::Stable);
    h.tick(16_000);
    assert_eq!(h.state(), GroupState::PreparingRebalance);
    assert_eq!(h.heartbeat(&ids[1], None, 1), ErrorCode::UNKNOWN_MEMBER_ID);
    assert_eq!(
        h.heartbeat(&ids[0], None, 1),
        ErrorCode::REBALANCE_IN_PROGRESS
    );
    let (t, out) = h.join(join_req(&ids[0], None));
    let j = join_of(&out, t);
    assert_eq!((j.generation_id, j.members.len()), (2, 1));
    h.assert_replay_matches();
}

#[test]
fn rebalance_timeout_kicks_members_that_did_not_rejoin() {
    let mut h = H::new();
    let ids = h.stable_group(2);
    h.now = 7_000;
    let mut req = join_req(&ids[0], None);
    req.protocols = vec![("range".into(), consumer_subscription(&["t", "u"]))];
    let (t, out) = h.join(req);
    assert!(out.replies.is_empty());
    // ids[1] keeps heartbeating, learns about the rebalance but never rejoins.
    for at in [13_000, 20_000, 27_000, 34_000] {
        assert!(h.tick(at).replies.is_empty());
        assert_eq!(
            h.heartbeat(&ids[1], None, 1),
            ErrorCode::REBALANCE_IN_PROGRESS
        );
    }
    let out = h.tick(7_000 + i64::from(REBALANCE));
    let j = join_of(&out, t);
    assert_eq!(j.generation_id, 2);
    assert_eq!(j.members.len(), 1);
    assert_eq!(h.heartbeat(&ids[1], None, 1), ErrorCode::UNKNOWN_MEMBER_ID);
}

#[test]
fn sync_timeout_removes_members_that_never_sync() {
    let mut h = H::new();
    let ta = h.join(join_req("", None)).0;
    let tb = h.join(join_req("", None)).0;
    let out = h.tick(6_000);
    let a = join_of(&out, ta).member_id.clone();
    let b = join_of(&out, tb).member_id.clone();
    let (ts, out) = h.sync(&b, 1, vec![]);
    assert!(out.replies.is_empty());
    // The leader heartbeats (allowed in CompletingRebalance) but never syncs.
    for at in [13_000, 20_000, 27_000, 34_000] {
        assert!(h.tick(at).replies.is_empty());
        assert_eq!(h.heartbeat(&a, None, 1), ErrorCode::NONE);
    }
    // The leader never syncs: after the rebalance timeout it is removed and b must rejoin.
    let out = h.tick(6_000 + i64::from(REBALANCE));
    assert_eq!(
        sync_of(&out, ts).error_code,
        ErrorCode::REBALANCE_IN_PROGRESS
    );
    assert_eq!(h.state(), GroupState::PreparingRebalance);
    assert_eq!(h.heartbeat(&a, None, 1), ErrorCode::UNKNOWN_MEMBER_ID);
}

#[test]
fn initial_rebalance_delay_extends_while_members_arrive() {
    let mut h = H::new();
    let ta = h.join(join_req("", None)).0;
    h.now = 2_000;
    let tb = h.join(join_req("", None)).0;
    let out = h.tick(3_000);
    assert!(
        out.replies.is_empty(),
        "a new member arrived: delay extended"
    );
    assert_eq!(h.c.next_deadline(), Some(6_000));
    let out = h.tick(6_000);
    assert_eq!(join_of(&out, ta).generation_id, 1);
    assert_eq!(join_of(&out, tb).generation_id, 1);
}

#[test]
fn static_member_replacement_fences_old_id() {
    let mut h = H::new();
    let td = h.join(join_req("", None)).0;
    let ts = h.join(join_req("", Some("i1"))).0;
    let out = h.tick(6_000);
    let d = join_of(&out, td).member_id.clone();
    let s = join_of(&out, ts).member_id.clone();
    h.sync(&d, 1, vec![(&d, "pd"), (&s, "ps")]);
    h.sync(&s, 1, vec![]);
    assert_eq!(h.state(), GroupState::Stable);

    // The static member restarts: same instance id, no member id.
    h.now = 7_000;
    let (t, out) = h.join(join_req("", Some("i1")));
    let j = join_of(&out, t);
    assert_eq!(j.error_code, ErrorCode::NONE);
    assert_eq!(
        j.generation_id, 1,
        "no rebalance for a follower with unchanged metadata"
    );
    let s2 = j.member_id.clone();
    assert_ne!(s2, s);
    assert_eq!(out.records.len(), 1, "new member id persisted");
    assert_eq!(h.state(), GroupState::Stable);
    assert_eq!(
        h.heartbeat(&s, Some("i1"), 1),
        ErrorCode::FENCED_INSTANCE_ID
    );
    assert_eq!(h.heartbeat(&s, None, 1), ErrorCode::UNKNOWN_MEMBER_ID);
    assert_eq!(h.heartbeat(&s2, Some("i1"), 1), ErrorCode::NONE);
    let (t, out) = h.sync(&s2, 1, vec![]);
    assert_eq!(
        sync_of(&out, t).assignment,
        Bytes::from("ps"),
        "assignment kept"
    );
    h.assert_replay_matches();

    // Static member leaves by instance id only.
    let r = h.leave(vec![("", Some("i1"))]);
    assert_eq!(r.members[0].error_code, ErrorCode::NONE);
    assert_eq!(h.state(), GroupState::PreparingRebalance);
    let r = h.leave(vec![("", Some("nope"))]);
    assert_eq!(r.members[0].error_code, ErrorCode::UNKNOWN_MEMBER_ID);
}

/// A stable group whose leader is the static member "i1" (joined first) with follower d:
/// returns (static id, follower id) with assignments "ps" / "pd".
fn static_leader_group(h: &mut H) -> (String, String) {
    let ts = h.join(join_req("", Some("i1"))).0;
    let td = h.join(join_req("", None)).0;
    let out = h.tick(6_000);
    let s = join_of(&out, ts).member_id.clone();
    let d = join_of(&out, td).member_id.clone();
    assert_eq!(join_of(&out, ts).leader, s);
    h.sync(&s, 1, vec![(&d, "pd"), (&s, "ps")]);
    h.sync(&d, 1, vec![]);
    assert_eq!(h.state(), GroupState::Stable);
    (s, d)
}

#[test]
fn static_leader_restart_skips_the_assignment_without_a_rebalance() {
    let mut h = H::new();
    let (s, d) = static_leader_group(&mut h);
    h.now = 7_000;
    let (t, out) = h.join(join_req("", Some("i1")));
    let j = join_of(&out, t).clone();
    assert_eq!((j.error_code, j.generation_id), (ErrorCode::NONE, 1));
    assert_ne!(j.member_id, s);
    assert!(
        j.skip_assignment,
        "KIP-814: the leader keeps the assignment"
    );
    assert_eq!(j.leader, j.member_id, "still the leader, under its new id");
    assert_eq!(
        j.members.len(),
        2,
        "the leader gets every member's metadata"
    );
    assert_eq!(h.state(), GroupState::Stable);
    assert_eq!(
        h.heartbeat(&d, None, 1),
        ErrorCode::NONE,
        "no rebalance: no revoke"
    );
    assert_eq!(
        h.heartbeat(&s, Some("i1"), 1),
        ErrorCode::FENCED_INSTANCE_ID
    );
    let (t, out) = h.sync(&j.member_id, 1, vec![]);
    assert_eq!(sync_of(&out, t).assignment, Bytes::from("ps"));
    let (t, out) = h.sync(&d, 1, vec![]);
    assert_eq!(sync_of(&out, t).assignment, Bytes::from("pd"));
    h.assert_replay_matches();
}

#[test]
fn static_leader_restart_on_an_old_client_looks_like_a_follower() {
    let mut h = H::new();
    let (s, d) = static_leader_group(&mut h);
    h.now = 7_000;
    let mut req = join_req("", Some("i1"));
    req.skip_assignment_supported = false; // JoinGroup v5 (librdkafka)
    let (t, out) = h.join(req);
    let j = join_of(&out, t).clone();
    assert_eq!((j.error_code, j.generation_id), (ErrorCode::NONE, 1));
    assert!(!j.skip_assignment);
    assert_eq!(j.leader, s, "the previous leader id, as Kafka answers");
    assert!(j.members.is_empty(), "so the client runs no assignment");
    assert_eq!(h.heartbeat(&d, None, 1), ErrorCode::NONE);
    let (t, out) = h.sync(&j.member_id, 1, vec![]);
    assert_eq!(sync_of(&out, t).assignment, Bytes::from("ps"));
    h.assert_replay_matches();
}

#[test]
fn static_member_restart_with_a_new_subscription_keeps_the_generation() {
    let mut h = H::new();
    let (_, d) = static_leader_group(&mut h);
    h.now = 7_000;
    let mut req = join_req("", Some("i1"));
    req.protocols = vec![("range".into(), consumer_subscription(&["t", "u"]))];
    let (t, out) = h.join(req);
    let j = join_of(&out, t).clone();
    assert_eq!((j.error_code, j.generation_id), (ErrorCode::NONE, 1));
    assert_eq!(h.state(), GroupState::Stable);
    assert_eq!(h.heartbeat(&d, None, 1), ErrorCode::NONE);
    let stored = j
        .members
        .iter()
        .find(|m| m.member_id == j.member_id)
        .map(|m| m.metadata.clone());
    assert_eq!(stored, Some(consumer_subscription(&["t", "u"])));
    h.assert_replay_matches();
}

#[test]
fn static_member_restart_that_changes_the_protocol_rebalances() {
    let mut h = H::new();
    let both = |first: &str, second: &str| {
        vec![
            (first.to_string(), consumer_subscription(&["t"])),
            (second.to_string(), consumer_subscription(&["t"])),
        ]
    };
    let mut tokens = Vec::new();
    for (instance, protocols) in [
        (Some("i1"), both("range", "roundrobin")),
        (None, both("roundrobin", "range")),
        (None, both("range", "roundrobin")),
    ] {
        let mut req = join_req("", instance);
        req.protocols = protocols;
        tokens.push(h.join(req).0);
    }
    let out = h.tick(6_000);
    assert_eq!(
        join_of(&out, tokens[0]).protocol_name.as_deref(),
        Some("range")
    );
    let ids: Vec<String> = tokens
        .iter()
        .map(|t| join_of(&out, *t).member_id.clone())
        .collect();
    let leader = join_of(&out, tokens[0]).leader.clone();
    h.sync(&leader, 1, vec![]);
    for id in &ids {
        h.sync(id, 1, vec![]);
    }
    assert_eq!(h.state(), GroupState::Stable);
    // The static member now prefers roundrobin: two votes of three, the protocol changes.
    h.now = 7_000;
    let mut req = join_req("", Some("i1"));
    req.protocols = both("roundrobin", "range");
    h.join(req);
    assert_eq!(h.state(), GroupState::PreparingRebalance);
    assert_eq!(
        h.heartbeat(&ids[1], None, 1),
        ErrorCode::REBALANCE_IN_PROGRESS
    );
}

#[test]
fn static_member_survives_rebalance_but_expires_on_session() {
    let mut h = H::new();
    let td = h.join(join_req("", None)).0;
    let ts = h.join(join_req("", Some("i1"))).0;
    let out = h.tick(6_000);
    let d = join_of(&out, td).member_id.clone();
    let s = join_of(&out, ts).member_id.clone();
    h.sync(&d, 1, vec![]);
    h.sync(&s, 1, vec![]);
    // d triggers a rebalance; the static member does not rejoin but is kept at completion.
    h.now = 7_000;
    let mut req = join_req(&d, None);
    req.protocols = vec![("range".into(), consumer_subscription(&["x"]))];
    let (t, _) = h.join(req);
    for at in [13_000, 20_000, 27_000, 34_000] {
        assert!(h.tick(at).replies.is_empty());
        assert_eq!(
            h.heartbeat(&s, Some("i1"), 1),
            ErrorCode::REBALANCE_IN_PROGRESS
        );
    }
    let out = h.tick(7_000 + i64::from(REBALANCE));
    assert_eq!(join_of(&out, t).members.len(), 2);
    let summary = h.c.group_summary(G).expect("group");
    assert!(summary.members.contains(&s));
    // Its session then lapses: removal triggers another rebalance.
    h.now = 40_000;
    h.sync(&d, 2, vec![]);
    h.tick(7_000 + i64::from(REBALANCE) + i64::from(SESSION));
    assert_eq!(h.state(), GroupState::PreparingRebalance);
    assert!(!h.c.group_summary(G).expect("group").members.contains(&s));
}

#[test]
fn static_single_leader_replacement_keeps_the_generation() {
    let mut h = H::new();
    let ts = h.join(join_req("", Some("i1"))).0;
    let out = h.tick(6_000);
    let s = join_of(&out, ts).member_id.clone();
    h.sync(&s, 1, vec![(&s, "x")]);
    let (t, out) = h.join(join_req("", Some("i1")));
    // Single member, leader, stable group: no rebalance, as in Kafka (KIP-345).
    let j = join_of(&out, t).clone();
    assert_eq!(j.generation_id, 1);
    assert_eq!(j.leader, j.member_id);
    assert!(j.skip_assignment);
    assert_eq!(
        h.heartbeat(&s, Some("i1"), 1),
        ErrorCode::FENCED_INSTANCE_ID
    );
    let (t, out) = h.sync(&j.member_id, 1, vec![]);
    assert_eq!(sync_of(&out, t).assignment, Bytes::from("x"));
}

#[test]
fn offsets_commit_and_fetch() {
    let mut h = H::new();
    // Simple commit creates a group.
    assert_eq!(h.commit("", -1, "t", 0, 42), ErrorCode::NONE);
    let f = h.fetch(Some(vec![("t", 0), ("t", 1)]));
    assert_eq!(
        (f[0].offset, f[0].leader_epoch, f[0].metadata.as_str()),
        (42, 3, "m")
    );
    assert_eq!((f[1].offset, f[1].leader_epoch), (-1, -1));
    assert_eq!(h.fetch(None).len(), 1);
    h.assert_replay_matches();

    // Unknown group with a real generation.
    let (t, out) = h.send(GroupRequest::OffsetCommit(OffsetCommitRequest {
        group_id: "other".into(),
        generation_id: 3,
        member_id: "m".into(),
        group_instance_id: None,
        offsets: vec![OffsetCommitPartition {
            topic: "t".into(),
            partition: 0,
            offset: 1,
            leader_epoch: -1,
            metadata: None,
        }],
    }));
    match reply(&out, t) {
        GroupResponse::OffsetCommit(r) => {
            assert_eq!(r.partitions[0].error_code, ErrorCode::ILLEGAL_GENERATION)
        }
        other => panic!("{other:?}"),
    }

    let ids = h.stable_group(1);
    assert_eq!(h.commit(&ids[0], 1, "t", 0, 50), ErrorCode::NONE);
    assert_eq!(
        h.commit(&ids[0], 0, "t", 0, 51),
        ErrorCode::ILLEGAL_GENERATION
    );
    assert_eq!(
        h.commit("ghost", 1, "t", 0, 51),
        ErrorCode::UNKNOWN_MEMBER_ID
    );
    assert_eq!(h.commit("", -1, "t", 0, 51), ErrorCode::UNKNOWN_MEMBER_ID);
    // During CompletingRebalance.
    h.join(join_req(&ids[0], None)); // leader rejoin: new generation at once
    assert_eq!(h.state(), GroupState::CompletingRebalance);
    assert_eq!(
        h.commit(&ids[0], 2, "t", 0, 52),
        ErrorCode::REBALANCE_IN_PROGRESS
    );
    assert_eq!(h.fetch(Some(vec![("t", 0)]))[0].offset, 50);

    let (t, out) = h.send(GroupRequest::OffsetCommit(OffsetCommitRequest {
        group_id: G.into(),
        generation_id: 2,
        member_id: ids[0].clone(),
        group_instance_id: None,
        offsets: vec![OffsetCommitPartition {
            topic: "t".into(),
            partition: 0,
            offset: 1,
            leader_epoch: -1,
            metadata: Some("x".repeat(5000)),
        }],
    }));
    assert!(
        matches!(reply(&out, t), GroupResponse::OffsetCommit(r) if r.partitions[0].error_code == ErrorCode::REBALANCE_IN_PROGRESS)
    );
    h.sync(&ids[0], 2, vec![]);
    let (t, out) = h.send(GroupRequest::OffsetCommit(OffsetCommitRequest {
        group_id: G.into(),
        generation_id: 2,
        member_id: ids[0].clone(),
        group_instance_id: None,
        offsets: vec![OffsetCommitPartition {
            topic: "t".into(),
            partition: 0,
            offset: 1,
            leader_epoch: -1,
            metadata: Some("x".repeat(5000)),
        }],
    }));
    assert!(
        matches!(reply(&out, t), GroupResponse::OffsetCommit(r) if r.partitions[0].error_code == ErrorCode::OFFSET_METADATA_TOO_LARGE)
    );
    h.assert_replay_matches();
}

#[test]
fn offsets_per_group_limit_is_an_error_code() {
    let mut h = H::with_config(GroupConfig {
        offsets_per_group_max: 2,
        ..GroupConfig::default()
    });
    assert_eq!(h.commit("", -1, "t", 0, 1), ErrorCode::NONE);
    assert_eq!(h.commit("", -1, "t", 1, 1), ErrorCode::NONE);
    assert_eq!(
        h.commit("", -1, "t", 2, 1),
        ErrorCode::INVALID_COMMIT_OFFSET_SIZE
    );
    assert_eq!(
        h.commit("", -1, "t", 1, 2),
        ErrorCode::NONE,
        "updates still allowed"
    );
}

#[test]
fn generation_and_member_checks() {
    let mut h = H::new();
    let ids = h.stable_group(2);
    assert_eq!(h.heartbeat(&ids[0], None, 7), ErrorCode::ILLEGAL_GENERATION);
    assert_eq!(h.heartbeat("nobody", None, 1), ErrorCode::UNKNOWN_MEMBER_ID);
    let (t, out) = h.sync(&ids[1], 9, vec![]);
    assert_eq!(sync_of(&out, t).error_code, ErrorCode::ILLEGAL_GENERATION);
    h.leave(vec![(&ids[1], None)]);
    let (t, out) = h.sync(&ids[0], 1, vec![]);
    assert_eq!(
        sync_of(&out, t).error_code,
        ErrorCode::REBALANCE_IN_PROGRESS
    );
    let (t, out) = h.join(join_req("unknown-id", None));
    assert_eq!(join_of(&out, t).error_code, ErrorCode::UNKNOWN_MEMBER_ID);
}

#[test]
fn join_validation_errors() {
    let mut h = H::with_config(GroupConfig {
        max_size: 1,
        ..GroupConfig::default()
    });
    let mut req = join_req("", None);
    req.session_timeout_ms = 1_000;
    let (t, out) = h.join(req);
    assert_eq!(
        join_of(&out, t).error_code,
        ErrorCode::INVALID_SESSION_TIMEOUT
    );
    let mut req = join_req("", None);
    req.group_id = String::new();
    let (t, out) = h.join(req);
    assert_eq!(join_of(&out, t).error_code, ErrorCode::INVALID_GROUP_ID);
    let mut req = join_req("", None);
    req.protocols.clear();
    let (t, out) = h.join(req);
    assert_eq!(
        join_of(&out, t).error_code,
        ErrorCode::INCONSISTENT_GROUP_PROTOCOL
    );
    assert!(
        h.c.group_summary(G).is_none(),
        "failed joins leave no group behind"
    );

    h.join(join_req("", None));
    let (t, out) = h.join(join_req("", None));
    assert_eq!(
        join_of(&out, t).error_code,
        ErrorCode::GROUP_MAX_SIZE_REACHED
    );
    let mut req = join_req("", None);
    req.protocols = vec![("roundrobin".into(), Bytes::new())];
    let mut h2 = H::new();
    h2.join(join_req("", None));
    let (t, out) = h2.join(req);
    assert_eq!(
        join_of(&out, t).error_code,
        ErrorCode::INCONSISTENT_GROUP_PROTOCOL
    );
}

#[test]
fn protocol_voting_picks_common_preference() {
    let mut h = H::new();
    let mut a = join_req("", None);
    a.protocols = vec![("range".into(), Bytes::new()), ("rr".into(), Bytes::new())];
    let mut b = join_req("", None);
    b.protocols = vec![("rr".into(), Bytes::new()), ("range".into(), Bytes::new())];
    let mut c = join_req("", None);
    c.protocols = vec![("rr".into(), Bytes::new()), ("sticky".into(), Bytes::new())];
    let ta = h.join(a).0;
    h.join(b);
    h.join(c);
    let out = h.tick(6_000);
    assert_eq!(join_of(&out, ta).protocol_name.as_deref(), Some("rr"));
}

#[test]
fn delete_groups() {
    let mut h = H::new();
    let ids = h.stable_group(1);
    h.commit(&ids[0], 1, "t", 0, 5);
    let del = |h: &mut H, ids: Vec<&str>| {
        let (t, out) = h.send(GroupRequest::DeleteGroups(DeleteGroupsRequest {
            group_ids: ids.into_iter().map(Into::into).collect(),
        }));
        match reply(&out, t) {
            GroupResponse::DeleteGroups(r) => (r.results.clone(), out.records.clone()),
            other => panic!("{other:?}"),
        }
    };
    let (r, _) = del(&mut h, vec![G, "missing"]);
    assert_eq!(r[0].error_code, ErrorCode::NON_EMPTY_GROUP);
    assert_eq!(r[1].error_code, ErrorCode::GROUP_ID_NOT_FOUND);
    h.leave(vec![(&ids[0], None)]);
    assert_eq!(h.state(), GroupState::Empty);
    let (r, records) = del(&mut h, vec![G]);
    assert_eq!(r[0].error_code, ErrorCode::NONE);
    assert_eq!(records.len(), 2, "offset tombstone + group tombstone");
    assert!(h.c.group_summary(G).is_none());
    assert_eq!(h.fetch(Some(vec![("t", 0)]))[0].offset, -1);
    h.assert_replay_matches();
}

#[test]
fn offset_delete_refuses_subscribed_topics() {
    let mut h = H::new();
    let ids = h.stable_group(1);
    h.commit(&ids[0], 1, "t", 0, 5);
    h.commit(&ids[0], 1, "u", 0, 5);
    let (t, out) = h.send(GroupRequest::OffsetDelete(OffsetDeleteRequest {
        group_id: G.into(),
        partitions: vec![("t".into(), 0), ("u".into(), 0)],
    }));
    match reply(&out, t) {
        GroupResponse::OffsetDelete(r) => {
            assert_eq!(
                r.partitions[0].error_code,
                ErrorCode::GROUP_SUBSCRIBED_TO_TOPIC
            );
            assert_eq!(r.partitions[1].error_code, ErrorCode::NONE);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(out.records.len(), 1);
    assert_eq!(h.fetch(None).len(), 1);
    h.assert_replay_matches();
}

#[test]
fn offsets_of_empty_groups_expire() {
    let mut h = H::new();
    h.commit("", -1, "t", 0, 5);
    let retention = h.c.config().offsets_retention_ms;
    let interval = h.c.config().offsets_retention_check_interval_ms;
    let out = h.tick(retention - 1);
    assert!(out.records.is_empty());
    let mut t = 0;
    while t < retention + interval {
        t += interval;
        h.tick(t);
    }
    assert!(
        h.c.group_summary(G).is_none(),
        "expired simple group is deleted"
    );
    assert!(matches!(
        h.records.last(),
        Some(GroupRecord::GroupTombstone { .. })
    ));
    h.assert_replay_matches();
}

#[test]
fn restart_restores_group_and_sessions_start_at_load() {
    let mut h = H::new();
    let ids = h.stable_group(2);
    h.commit(&ids[0], 1, "t", 0, 9);
    let mut c = h.rebuilt(100_000);
    let s = c.group_summary(G).expect("loaded");
    assert_eq!(
        (s.state, s.generation_id, s.members.len()),
        (GroupState::Stable, 1, 2)
    );
    assert_eq!(c.durable_state(), h.c.durable_state());
    let out = c.handle(
        105_000,
        ReplyToken(1),
        GroupRequest::Heartbeat(HeartbeatRequest {
            group_id: G.into(),
            generation_id: 1,
            member_id: ids[0].clone(),
            group_instance_id: None,
        }),
    );
    assert!(
        matches!(&out.replies[0].1, GroupResponse::Heartbeat(r) if r.error_code == ErrorCode::NONE)
    );
    c.tick(110_000);
    let s = c.group_summary(G).expect("loaded");
    assert_eq!(
        s.state,
        GroupState::PreparingRebalance,
        "ids[1] never heartbeat after load"
    );
    assert_eq!(s.members, vec![ids[0].clone()]);
}

#[test]
fn list_and_describe() {
    let mut h = H::new();
    let ids = h.stable_group(1);
    let (t, out) = h.send(GroupRequest::ListGroups(ListGroupsRequest {
        states_filter: vec!["stable".into()],
        types_filter: vec![],
    }));
    match reply(&out, t) {
        GroupResponse::ListGroups(r) => {
            assert_eq!(r.groups.len(), 1);
            assert_eq!(r.groups[0].group_state, "Stable");
            assert_eq!(r.groups[0].protocol_type, "consumer");
        }
        other => panic!("{other:?}"),
    }
    let (t, out) = h.send(GroupRequest::DescribeGroups(DescribeGroupsRequest {
        group_ids: vec![G.into(), "nope".into()],
    }));
    match reply(&out, t) {
        GroupResponse::DescribeGroups(r) => {
            assert_eq!(r.groups[0].protocol_data, "range");
            assert_eq!(r.groups[0].members[0].member_id, ids[0]);
            assert_eq!(r.groups[0].members[0].member_assignment, Bytes::from("a"));
            assert_eq!(r.groups[1].error_code, ErrorCode::GROUP_ID_NOT_FOUND);
            assert_eq!(r.groups[1].group_state, "Dead");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn pending_member_expires_and_duplicate_join_is_answered() {
    let mut h = H::new();
    let mut req = join_req("", None);
    req.require_known_member_id = true;
    let (t, out) = h.join(req);
    assert_eq!(join_of(&out, t).error_code, ErrorCode::MEMBER_ID_REQUIRED);
    assert_eq!(h.c.group_summary(G).map(|s| s.pending_members), Some(1));
    h.tick(i64::from(SESSION));
    assert!(
        h.c.group_summary(G).is_none(),
        "pending member expired, group dropped"
    );

    let ids = h.stable_group(2);
    let mut req = join_req(&ids[0], None);
    req.protocols = vec![("range".into(), Bytes::from("new"))];
    let (t2, out) = h.join(req.clone());
    assert!(out.replies.is_empty(), "waits for ids[1]");
    let (t3, out) = h.join(req);
    assert_eq!(
        join_of(&out, t2).error_code,
        ErrorCode::REBALANCE_IN_PROGRESS
    );
    assert!(out.replies.iter().all(|(t, _)| *t != t3));
    let (t4, out) = h.join(join_req(&ids[1], None));
    assert_eq!(join_of(&out, t3).generation_id, 2);
    assert_eq!(join_of(&out, t4).generation_id, 2);
}

// ---------------------------------------------------------------------------------------------
// Transactional offset commits
// ---------------------------------------------------------------------------------------------

fn txn_commit(h: &mut H, producer_id: i64, partition: i32, offset: i64) -> ErrorCode {
    let (t, out) = h.send(GroupRequest::TxnOffsetCommit(TxnOffsetCommitRequest {
        group_id: G.into(),
        producer_id,
        producer_epoch: 0,
        generation_id: -1,
        member_id: String::new(),
        group_instance_id: None,
        offsets: vec![OffsetCommitPartition {
            topic: "t".into(),
            partition,
            offset,
            leader_epoch: -1,
            metadata: None,
        }],
    }));
    match reply(&out, t) {
        GroupResponse::TxnOffsetCommit(r) => r.partitions[0].error_code,
        other => panic!("unexpected {other:?}"),
    }
}

fn end_txn(h: &mut H, producer_id: i64, commit: bool) {
    let (t, out) = h.send(GroupRequest::EndTxn(EndTxnMarker {
        producer_id,
        commit,
    }));
    assert_eq!(reply(&out, t), &GroupResponse::EndTxn);
}

#[test]
fn transactional_offsets_are_pending_until_the_commit_marker() {
    let mut h = H::new();
    assert_eq!(h.commit("", -1, "t", 0, 5), ErrorCode::NONE);
    assert_eq!(txn_commit(&mut h, 7, 0, 10), ErrorCode::NONE);
    assert_eq!(txn_commit(&mut h, 8, 1, 20), ErrorCode::NONE);
    // Readers asking for stable offsets are told to retry; the committed offset is unchanged.
    let fetched = h.fetch(Some(vec![("t", 0), ("t", 1)]));
    assert_eq!(fetched[0].error_code, ErrorCode::UNSTABLE_OFFSET_COMMIT);
    assert_eq!(fetched[1].error_code, ErrorCode::UNSTABLE_OFFSET_COMMIT);
    h.assert_replay_matches();

    end_txn(&mut h, 7, true);
    end_txn(&mut h, 8, false);
    let fetched = h.fetch(Some(vec![("t", 0), ("t", 1)]));
    assert_eq!(
        (fetched[0].error_code, fetched[0].offset),
        (ErrorCode::NONE, 10)
    );
    assert_eq!(
        (fetched[1].error_code, fetched[1].offset),
        (ErrorCode::NONE, -1)
    );
    // A duplicate marker changes nothing.
    end_txn(&mut h, 7, false);
    assert_eq!(h.fetch(Some(vec![("t", 0)]))[0].offset, 10);

    // Replay: the pending records, then the markers the broker found in the log.
    let mut rebuilt = GroupCoordinator::new(h.c.config().clone());
    for r in &h.records {
        rebuilt.replay(r);
    }
    rebuilt.replay_end_txn(7, true);
    rebuilt.replay_end_txn(8, false);
    rebuilt.loaded(h.now);
    assert_eq!(rebuilt.durable_state(), h.c.durable_state());
}

#[test]
fn transactional_offset_commit_checks_member_and_generation_when_given() {
    let mut h = H::new();
    let members = h.stable_group(1);
    let (t, out) = h.send(GroupRequest::TxnOffsetCommit(TxnOffsetCommitRequest {
        group_id: G.into(),
        producer_id: 1,
        producer_epoch: 0,
        generation_id: 99,
        member_id: members[0].clone(),
        group_instance_id: None,
        offsets: vec![OffsetCommitPartition {
            topic: "t".into(),
            partition: 0,
            offset: 1,
            leader_epoch: -1,
            metadata: None,
        }],
    }));
    match reply(&out, t) {
        GroupResponse::TxnOffsetCommit(r) => {
            assert_eq!(r.partitions[0].error_code, ErrorCode::ILLEGAL_GENERATION)
        }
        other => panic!("unexpected {other:?}"),
    }
    let (t, out) = h.send(GroupRequest::TxnOffsetCommit(TxnOffsetCommitRequest {
        group_id: G.into(),
        producer_id: 1,
        producer_epoch: 0,
        generation_id: 1,
        member_id: "stranger".into(),
        group_instance_id: None,
        offsets: vec![],
    }));
    assert!(matches!(reply(&out, t), GroupResponse::TxnOffsetCommit(_)));
    assert_eq!(
        txn_commit(&mut h, 1, 0, 3),
        ErrorCode::NONE,
        "no member given: not checked"
    );
}
