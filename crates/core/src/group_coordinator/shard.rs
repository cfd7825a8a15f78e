//! The group coordinator as one [`CoordinatorShard`]: classic groups and share groups
//! (KIP-932) share one group-id namespace and `__consumer_offsets`, so one shard holds both
//! machines and settles what concerns both (a classic join of a share group's id, ListGroups
//! and DeleteGroups over both kinds).

use super::share::{
    self, DescribedGroup, GroupIdUse, GroupOverrides, HeartbeatRequest, HeartbeatResponse,
    ShareGroupConfig, ShareGroupCoordinator, ShareGroupRecord, TopicsImage,
};
use super::{
    partition_for, ErrorCode, GroupConfig, GroupCoordinator, GroupRecord, GroupRequest,
    GroupResponse, GroupResult, JoinGroupResponse, ListedGroup, Output, ReplyToken,
};
use crate::coordinator::{
    CoordinatorShard, Emitted, EncodedRecord, RecordError, ShardRecord, TxnMarker,
};

/// An input of the group coordinator.
#[derive(Debug, Clone)]
pub enum GroupInput {
    /// A classic-group or offsets request.
    Classic(GroupRequest),
    /// A share-group request.
    Share(ShareCall),
    /// The user topics as they are now (created, deleted, grown): moves share assignments
    /// when they changed. Answered with [`GroupReply::Done`].
    Topics(TopicsImage),
}

/// A share-group request.
#[derive(Debug, Clone)]
pub enum ShareCall {
    /// ShareGroupHeartbeat, with the group's config overrides as they are now.
    Heartbeat(HeartbeatRequest, GroupOverrides),
    Describe(Vec<String>),
    /// A member's current epoch (TxnShareAcknowledge's member check).
    MemberEpoch {
        group_id: String,
        member_id: String,
    },
}

/// The answer to a [`ShareCall`].
#[derive(Debug, Clone)]
pub enum ShareReply {
    Heartbeat(Result<HeartbeatResponse, ErrorCode>),
    Describe(Vec<DescribedGroup>),
    MemberEpoch(Result<i32, ErrorCode>),
}

/// The answer to a [`GroupInput`].
#[derive(Debug, Clone)]
pub enum GroupReply {
    Classic(GroupResponse),
    Share(ShareReply),
    Done,
}

/// A record of `__consumer_offsets`: a classic one or a share-group one (Kafka 4.2's types
/// 10-15), told apart by the record type in the key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OffsetsRecord {
    Classic(GroupRecord),
    Share(ShareGroupRecord),
}

impl ShardRecord for OffsetsRecord {
    fn partition(&self, partitions: u32) -> u32 {
        let group_id = match self {
            OffsetsRecord::Classic(r) => r.group_id(),
            OffsetsRecord::Share(r) => r.group_id(),
        };
        partition_for(group_id, partitions)
    }

    fn encode(&self) -> Result<EncodedRecord, RecordError> {
        match self {
            OffsetsRecord::Classic(r) => Ok(r.encode()),
            OffsetsRecord::Share(r) => r
                .encode()
                .map_err(|e| RecordError(format!("share group record cannot be encoded: {e}"))),
        }
    }

    fn decode(key: &[u8], value: Option<&[u8]>) -> Result<Self, RecordError> {
        if share::record_type(key).is_some_and(share::is_share_record_type) {
            ShareGroupRecord::decode(key, value)
                .map(OffsetsRecord::Share)
                .map_err(|e| RecordError(format!("share group record: {e}")))
        } else {
            GroupRecord::decode(key, value)
                .map(OffsetsRecord::Classic)
                .map_err(|e| RecordError(format!("group record: {e}")))
        }
    }
}

/// Both group machines, driven as one shard.
pub struct GroupShard {
    classic: GroupCoordinator,
    share: ShareGroupCoordinator,
}

impl GroupShard {
    pub fn new(config: GroupConfig, share_config: ShareGroupConfig) -> Self {
        Self {
            classic: GroupCoordinator::new(config),
            share: ShareGroupCoordinator::new(share_config),
        }
    }

    /// The classic machine, for inspection.
    pub fn classic(&self) -> &GroupCoordinator {
        &self.classic
    }

    /// The share-group machine, for inspection.
    pub fn share(&self) -> &ShareGroupCoordinator {
        &self.share
    }

    fn classic_output(out: &mut Emitted<Self>, output: Output) {
        out.records
            .extend(output.records.into_iter().map(OffsetsRecord::Classic));
        out.replies.extend(
            output
                .replies
                .into_iter()
                .map(|(t, r)| (t, GroupReply::Classic(r))),
        );
    }

    fn share_records(out: &mut Emitted<Self>, records: Vec<ShareGroupRecord>) {
        out.records
            .extend(records.into_iter().map(OffsetsRecord::Share));
    }

    /// Feeds one classic request, answering or amending what concerns share groups.
    fn handle_classic(
        &mut self,
        now_ms: i64,
        token: ReplyToken,
        request: GroupRequest,
        out: &mut Emitted<Self>,
    ) {
        match request {
            GroupRequest::JoinGroup(r) if self.share.contains_group(&r.group_id) => {
                // Kafka: a classic join of a group of another type.
                out.reply(
                    token,
                    GroupReply::Classic(GroupResponse::JoinGroup(JoinGroupResponse {
                        error_code: ErrorCode::INCONSISTENT_GROUP_PROTOCOL,
                        generation_id: -1,
                        protocol_type: None,
                        protocol_name: None,
                        leader: String::new(),
                        member_id: r.member_id,
                        members: Vec::new(),
                        skip_assignment: false,
                    })),
                );
            }
            GroupRequest::ListGroups(r) => {
                let listed = self.share.list_groups(&r.states_filter, &r.types_filter);
                let output = self
                    .classic
                    .handle(now_ms, token, GroupRequest::ListGroups(r));
                Self::classic_output(out, amend(output, token, Amend::List(listed)));
            }
            GroupRequest::DeleteGroups(mut r) => {
                let mut share_results = Vec::new();
                let mut classic_ids = Vec::new();
                for (i, id) in r.group_ids.drain(..).enumerate() {
                    if !self.share.contains_group(&id) {
                        classic_ids.push(id);
                        continue;
                    }
                    let error_code = match self.share.delete_group(&id) {
                        Ok(deleted) => {
                            Self::share_records(out, deleted.records);
                            ErrorCode::NONE
                        }
                        Err(code) => code,
                    };
                    share_results.push((
                        i,
                        GroupResult {
                            group_id: id,
                            error_code,
                        },
                    ));
                }
                r.group_ids = classic_ids;
                let output = self
                    .classic
                    .handle(now_ms, token, GroupRequest::DeleteGroups(r));
                Self::classic_output(out, amend(output, token, Amend::Delete(share_results)));
            }
            other => {
                let output = self.classic.handle(now_ms, token, other);
                Self::classic_output(out, output);
            }
        }
    }

    fn handle_share(
        &mut self,
        now_ms: i64,
        call: ShareCall,
        out: &mut Emitted<Self>,
    ) -> ShareReply {
        match call {
            ShareCall::Heartbeat(request, overrides) => {
                let group_use = if self.classic.contains_group(&request.group_id) {
                    GroupIdUse::Classic
                } else {
                    GroupIdUse::Free
                };
                self.share.set_group_overrides(&request.group_id, overrides);
                ShareReply::Heartbeat(match self.share.heartbeat(now_ms, &request, group_use) {
                    Ok(beat) => {
                        Self::share_records(out, beat.records);
                        Ok(beat.reply)
                    }
                    Err(code) => Err(code),
                })
            }
            ShareCall::Describe(ids) => ShareReply::Describe(self.share.describe(&ids)),
            ShareCall::MemberEpoch {
                group_id,
                member_id,
            } => ShareReply::MemberEpoch(self.share.member_epoch(&group_id, &member_id)),
        }
    }
}

/// What a classic ListGroups or DeleteGroups reply gets from the share groups.
enum Amend {
    List(Vec<ListedGroup>),
    /// Results for the share group ids of a DeleteGroups: `(index in request, result)`.
    Delete(Vec<(usize, GroupResult)>),
}

/// Amends the reply under `token` in `output` (both requests are answered at once).
fn amend(mut output: Output, token: ReplyToken, amend: Amend) -> Output {
    let Some((_, response)) = output.replies.iter_mut().find(|(t, _)| *t == token) else {
        return output;
    };
    match (response, amend) {
        (GroupResponse::ListGroups(r), Amend::List(share)) => r.groups.extend(share),
        (GroupResponse::DeleteGroups(r), Amend::Delete(share)) => {
            for (i, result) in share {
                let at = i.min(r.results.len());
                r.results.insert(at, result);
            }
        }
        _ => {}
    }
    output
}

impl CoordinatorShard for GroupShard {
    type Input = GroupInput;
    type Reply = GroupReply;
    type Record = OffsetsRecord;
    type Effect = std::convert::Infallible;

    fn handle(
        &mut self,
        now_ms: i64,
        token: ReplyToken,
        input: GroupInput,
        out: &mut Emitted<Self>,
    ) {
        match input {
            GroupInput::Classic(request) => self.handle_classic(now_ms, token, request, out),
            GroupInput::Share(call) => {
                let reply = self.handle_share(now_ms, call, out);
                out.reply(token, GroupReply::Share(reply));
            }
            GroupInput::Topics(image) => {
                if &image != self.share.topics() {
                    let moved = self.share.on_metadata_change(image);
                    Self::share_records(out, moved.records);
                }
                out.reply(token, GroupReply::Done);
            }
        }
    }

    fn tick(&mut self, now_ms: i64, out: &mut Emitted<Self>) {
        let output = self.classic.tick(now_ms);
        Self::classic_output(out, output);
        let expired = self.share.expire(now_ms);
        Self::share_records(out, expired.records);
    }

    fn next_deadline(&self) -> Option<i64> {
        match (self.classic.next_deadline(), self.share.next_deadline()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn replay(&mut self, record: OffsetsRecord) {
        match record {
            OffsetsRecord::Classic(r) => self.classic.replay(&r),
            OffsetsRecord::Share(r) => self.share.replay(&r),
        }
    }

    /// The offsets participant's application of a transaction marker: the producer's pending
    /// offset commits in every group become committed (COMMIT) or vanish (ABORT). Pending
    /// offsets are matched on the producer id alone, as Kafka matches them.
    fn replay_marker(&mut self, marker: TxnMarker) {
        self.classic
            .replay_end_txn(marker.producer_id, marker.commit);
    }

    fn loaded(&mut self, now_ms: i64, _out: &mut Emitted<Self>) {
        self.classic.loaded(now_ms);
        self.share.loaded(now_ms);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::group_coordinator::{DeleteGroupsRequest, JoinGroupRequest, ListGroupsRequest};

    fn shard_with_share_group(group_id: &str) -> GroupShard {
        let mut shard = GroupShard::new(GroupConfig::default(), ShareGroupConfig::default());
        let mut out = Emitted::default();
        let topics = TopicsImage::new([("orders".to_string(), [7u8; 16], 2)]);
        shard.handle(0, ReplyToken(0), GroupInput::Topics(topics), &mut out);
        let beat = HeartbeatRequest {
            group_id: group_id.to_string(),
            member_id: "m1".to_string(),
            member_epoch: 0,
            rack_id: None,
            subscribed_topic_names: Some(vec!["orders".to_string()]),
            client_id: "c".to_string(),
            client_host: "/127.0.0.1".to_string(),
        };
        let call = ShareCall::Heartbeat(beat, GroupOverrides::default());
        shard.handle(0, ReplyToken(1), GroupInput::Share(call), &mut out);
        assert!(matches!(
            out.replies.last(),
            Some((
                ReplyToken(1),
                GroupReply::Share(ShareReply::Heartbeat(Ok(_)))
            ))
        ));
        assert!(!out.records.is_empty(), "a join writes share group records");
        shard
    }

    fn replies(shard: &mut GroupShard, token: u64, request: GroupRequest) -> Vec<GroupResponse> {
        let mut out = Emitted::default();
        shard.handle(1, ReplyToken(token), GroupInput::Classic(request), &mut out);
        out.replies
            .into_iter()
            .filter(|(t, _)| *t == ReplyToken(token))
            .filter_map(|(_, r)| match r {
                GroupReply::Classic(r) => Some(r),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_classic_join_of_a_share_group_id_is_refused() {
        let mut shard = shard_with_share_group("queue");
        let join = JoinGroupRequest {
            group_id: "queue".to_string(),
            member_id: String::new(),
            group_instance_id: None,
            client_id: "c".to_string(),
            client_host: "/127.0.0.1".to_string(),
            session_timeout_ms: 10_000,
            rebalance_timeout_ms: 10_000,
            protocol_type: "consumer".to_string(),
            protocols: vec![("range".to_string(), bytes::Bytes::new())],
            reason: None,
            require_known_member_id: false,
            skip_assignment_supported: false,
        };
        let answers = replies(&mut shard, 5, GroupRequest::JoinGroup(join));
        let [GroupResponse::JoinGroup(r)] = &answers[..] else {
            panic!("one JoinGroup reply expected, got {answers:?}");
        };
        assert_eq!(r.error_code, ErrorCode::INCONSISTENT_GROUP_PROTOCOL);
    }

    #[test]
    fn list_and_delete_groups_cover_share_groups_in_request_order() {
        let mut shard = shard_with_share_group("queue");
        let listed = replies(
            &mut shard,
            5,
            GroupRequest::ListGroups(ListGroupsRequest::default()),
        );
        let [GroupResponse::ListGroups(list)] = &listed[..] else {
            panic!("one ListGroups reply expected, got {listed:?}");
        };
        assert!(list.groups.iter().any(|g| g.group_id == "queue"));

        // The share group has a member: NON_EMPTY_GROUP; the unknown classic id around it
        // keeps its place in the answer.
        let deleted = replies(
            &mut shard,
            6,
            GroupRequest::DeleteGroups(DeleteGroupsRequest {
                group_ids: vec!["nobody".to_string(), "queue".to_string()],
            }),
        );
        let [GroupResponse::DeleteGroups(d)] = &deleted[..] else {
            panic!("one DeleteGroups reply expected, got {deleted:?}");
        };
        let ids: Vec<&str> = d.results.iter().map(|r| r.group_id.as_str()).collect();
        assert_eq!(ids, ["nobody", "queue"]);
        assert_eq!(d.results[1].error_code, ErrorCode::NON_EMPTY_GROUP);
    }

    #[test]
    fn offsets_records_decode_as_the_kind_they_were() {
        let mut shard = GroupShard::new(GroupConfig::default(), ShareGroupConfig::default());
        let mut out = Emitted::default();
        let topics = TopicsImage::new([("orders".to_string(), [7u8; 16], 1)]);
        shard.handle(0, ReplyToken(0), GroupInput::Topics(topics), &mut out);
        let beat = HeartbeatRequest {
            group_id: "q".to_string(),
            member_id: "m".to_string(),
            member_epoch: 0,
            rack_id: None,
            subscribed_topic_names: Some(vec!["orders".to_string()]),
            client_id: "c".to_string(),
            client_host: "/h".to_string(),
        };
        let call = ShareCall::Heartbeat(beat, GroupOverrides::default());
        shard.handle(0, ReplyToken(1), GroupInput::Share(call), &mut out);
        let commit = GroupRequest::OffsetCommit(crate::group_coordinator::OffsetCommitRequest {
            group_id: "c".to_string(),
            generation_id: -1,
            member_id: String::new(),
            group_instance_id: None,
            offsets: vec![crate::group_coordinator::OffsetCommitPartition {
                topic: "orders".to_string(),
                partition: 0,
                offset: 3,
                leader_epoch: -1,
                metadata: None,
            }],
        });
        shard.handle(0, ReplyToken(2), GroupInput::Classic(commit), &mut out);
        assert!(out
            .records
            .iter()
            .any(|r| matches!(r, OffsetsRecord::Share(_))));
        assert!(out
            .records
            .iter()
            .any(|r| matches!(r, OffsetsRecord::Classic(_))));
        for record in &out.records {
            let (key, value) = record.encode().unwrap();
            assert_eq!(
                &OffsetsRecord::decode(&key, value.as_deref()).unwrap(),
                record
            );
            assert_eq!(record.partition(5), {
                let id = match record {
                    OffsetsRecord::Classic(r) => r.group_id(),
                    OffsetsRecord::Share(r) => r.group_id(),
                };
                partition_for(id, 5)
            });
        }
    }
}
