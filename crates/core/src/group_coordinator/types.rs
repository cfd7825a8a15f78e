//! Plain request, response and error types of the classic group coordinator.
//!
//! These mirror the Kafka wire messages field for field but carry no version logic: the broker
//! converts wire messages to and from them. Error codes are Kafka's i16 values.

use bytes::Bytes;

use super::records::GroupRecord;

pub use crate::ids::ReplyToken;

/// A Kafka error code as it goes on the wire: the one `ErrorCode` of `shoal-codec`, kept at
/// this path for the coordinators' callers.
pub use shoal_codec::ErrorCode;

/// Classic group lifecycle, with Kafka's state names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GroupState {
    Empty,
    PreparingRebalance,
    CompletingRebalance,
    Stable,
    Dead,
}

impl GroupState {
    /// Kafka's name, as returned by DescribeGroups / ListGroups.
    pub fn name(self) -> &'static str {
        match self {
            GroupState::Empty => "Empty",
            GroupState::PreparingRebalance => "PreparingRebalance",
            GroupState::CompletingRebalance => "CompletingRebalance",
            GroupState::Stable => "Stable",
            GroupState::Dead => "Dead",
        }
    }

    /// States from which a transition into `self` is legal (Kafka's `validPreviousStates`).
    pub(crate) fn valid_previous(self) -> &'static [GroupState] {
        use GroupState::*;
        match self {
            Empty => &[PreparingRebalance],
            PreparingRebalance => &[Stable, CompletingRebalance, Empty],
            CompletingRebalance => &[PreparingRebalance],
            Stable => &[CompletingRebalance],
            Dead => &[Stable, PreparingRebalance, CompletingRebalance, Empty, Dead],
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Requests
// ---------------------------------------------------------------------------------------------

/// Every input the coordinator handles.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum GroupRequest {
    JoinGroup(JoinGroupRequest),
    SyncGroup(SyncGroupRequest),
    Heartbeat(HeartbeatRequest),
    LeaveGroup(LeaveGroupRequest),
    OffsetCommit(OffsetCommitRequest),
    OffsetFetch(OffsetFetchRequest),
    ListGroups(ListGroupsRequest),
    DescribeGroups(DescribeGroupsRequest),
    DeleteGroups(DeleteGroupsRequest),
    OffsetDelete(OffsetDeleteRequest),
    TxnOffsetCommit(TxnOffsetCommitRequest),
    /// A transaction's marker reached `__consumer_offsets` (written and fsynced by the broker):
    /// resolve that producer's pending offsets. The marker in the log is the durable record.
    EndTxn(EndTxnMarker),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TxnOffsetCommitRequest {
    pub group_id: String,
    pub producer_id: i64,
    pub producer_epoch: i16,
    /// -1 when the client sends no group metadata (TxnOffsetCommit v0-2, or a standalone commit).
    pub generation_id: i32,
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub offsets: Vec<OffsetCommitPartition>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EndTxnMarker {
    pub producer_id: i64,
    pub commit: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JoinGroupRequest {
    pub group_id: String,
    /// "" for a member joining for the first time.
    pub member_id: String,
    /// Static membership (KIP-345).
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout_ms: i32,
    /// JoinGroup v0 has none: the broker passes the session timeout, as Kafka does.
    pub rebalance_timeout_ms: i32,
    pub protocol_type: String,
    /// (protocol name, subscription metadata), in the member's order of preference.
    pub protocols: Vec<(String, Bytes)>,
    pub reason: Option<String>,
    /// True for JoinGroup v4+: a new dynamic member first gets MEMBER_ID_REQUIRED.
    pub require_known_member_id: bool,
    /// True for JoinGroup v9+ (KIP-814): a static leader rejoining a stable group can be told
    /// it leads while skipping the assignment.
    pub skip_assignment_supported: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SyncGroupRequest {
    pub group_id: String,
    pub generation_id: i32,
    pub member_id: String,
    pub group_instance_id: Option<String>,
    /// v5+; None skips the consistency check.
    pub protocol_type: Option<String>,
    /// v5+; None skips the consistency check.
    pub protocol_name: Option<String>,
    /// (member id, assignment); only the leader sends any.
    pub assignments: Vec<(String, Bytes)>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeartbeatRequest {
    pub group_id: String,
    pub generation_id: i32,
    pub member_id: String,
    pub group_instance_id: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeavingMember {
    /// "" is allowed for a static member identified by its instance id.
    pub member_id: String,
    pub group_instance_id: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaveGroupRequest {
    pub group_id: String,
    /// v0-2 carry one member id: the broker passes it as a one-element batch.
    pub members: Vec<LeavingMember>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OffsetCommitPartition {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    /// -1 when unknown.
    pub leader_epoch: i32,
    pub metadata: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OffsetCommitRequest {
    pub group_id: String,
    /// -1 for a simple (standalone / admin) commit.
    pub generation_id: i32,
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub offsets: Vec<OffsetCommitPartition>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OffsetFetchRequest {
    pub group_id: String,
    /// None = every committed partition of the group.
    pub partitions: Option<Vec<(String, i32)>>,
    /// Always satisfied: this coordinator has no pending transactional offset commits.
    pub require_stable: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ListGroupsRequest {
    /// Kafka state names, case-insensitive; empty = all.
    pub states_filter: Vec<String>,
    /// Group types ("classic"), case-insensitive; empty = all.
    pub types_filter: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DescribeGroupsRequest {
    pub group_ids: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeleteGroupsRequest {
    pub group_ids: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OffsetDeleteRequest {
    pub group_id: String,
    pub partitions: Vec<(String, i32)>,
}

// ---------------------------------------------------------------------------------------------
// Responses
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum GroupResponse {
    JoinGroup(JoinGroupResponse),
    SyncGroup(SyncGroupResponse),
    Heartbeat(HeartbeatResponse),
    LeaveGroup(LeaveGroupResponse),
    OffsetCommit(OffsetCommitResponse),
    OffsetFetch(OffsetFetchResponse),
    ListGroups(ListGroupsResponse),
    DescribeGroups(DescribeGroupsResponse),
    DeleteGroups(DeleteGroupsResponse),
    OffsetDelete(OffsetDeleteResponse),
    TxnOffsetCommit(OffsetCommitResponse),
    EndTxn,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JoinGroupMember {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub metadata: Bytes,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JoinGroupResponse {
    pub error_code: ErrorCode,
    /// -1 on error.
    pub generation_id: i32,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    /// "" on error.
    pub leader: String,
    /// The member's id; the newly generated one with MEMBER_ID_REQUIRED.
    pub member_id: String,
    /// Every member's metadata for the chosen protocol: only in the leader's response.
    pub members: Vec<JoinGroupMember>,
    /// KIP-814: the leader must not run the assignor (a static leader rejoined a stable
    /// group; the assignment stands).
    pub skip_assignment: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SyncGroupResponse {
    pub error_code: ErrorCode,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub assignment: Bytes,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeartbeatResponse {
    pub error_code: ErrorCode,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaveMemberResponse {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub error_code: ErrorCode,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaveGroupResponse {
    /// Top-level error (v0-2 clients only see this; the broker folds the single member's error in).
    pub error_code: ErrorCode,
    pub members: Vec<LeaveMemberResponse>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionResult {
    pub topic: String,
    pub partition: i32,
    pub error_code: ErrorCode,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OffsetCommitResponse {
    pub partitions: Vec<PartitionResult>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FetchedOffset {
    pub topic: String,
    pub partition: i32,
    /// -1 when nothing is committed.
    pub offset: i64,
    /// -1 when unknown.
    pub leader_epoch: i32,
    pub metadata: String,
    pub error_code: ErrorCode,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OffsetFetchResponse {
    pub error_code: ErrorCode,
    pub partitions: Vec<FetchedOffset>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListedGroup {
    pub group_id: String,
    pub protocol_type: String,
    pub group_state: String,
    /// Always "classic" here.
    pub group_type: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListGroupsResponse {
    pub error_code: ErrorCode,
    pub groups: Vec<ListedGroup>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DescribedMember {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    /// Empty unless the group is Stable (as in Kafka).
    pub member_metadata: Bytes,
    /// Empty unless the group is Stable (as in Kafka).
    pub member_assignment: Bytes,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DescribedGroup {
    /// GROUP_ID_NOT_FOUND (with state "Dead") for an unknown group: DescribeGroups v6 behaviour.
    /// The broker answers NONE instead for v0-5, as Kafka does.
    pub error_code: ErrorCode,
    pub group_id: String,
    pub group_state: String,
    pub protocol_type: String,
    /// The chosen protocol's name when Stable, else "".
    pub protocol_data: String,
    pub members: Vec<DescribedMember>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DescribeGroupsResponse {
    pub groups: Vec<DescribedGroup>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupResult {
    pub group_id: String,
    pub error_code: ErrorCode,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeleteGroupsResponse {
    pub results: Vec<GroupResult>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OffsetDeleteResponse {
    pub error_code: ErrorCode,
    pub partitions: Vec<PartitionResult>,
}

/// What one call produced: records to append to `__consumer_offsets` (fsynced) *before* the
/// replies are delivered.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Output {
    pub records: Vec<GroupRecord>,
    pub replies: Vec<(ReplyToken, GroupResponse)>,
}

impl Output {
    pub(crate) fn reply(&mut self, token: ReplyToken, response: GroupResponse) {
        self.replies.push((token, response));
    }

    /// Appends another output after this one (records and replies keep their order).
    pub fn extend(&mut self, other: Output) {
        self.records.extend(other.records);
        self.replies.extend(other.replies);
    }
}

/// Read-only view of one group, for tests, metrics and admin tooling.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupSummary {
    pub group_id: String,
    pub state: GroupState,
    pub generation_id: i32,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub leader: Option<String>,
    /// Member ids in join order.
    pub members: Vec<String>,
    pub pending_members: usize,
    pub committed_offsets: usize,
}

pub(crate) fn join_error(member_id: &str, error_code: ErrorCode) -> GroupResponse {
    GroupResponse::JoinGroup(JoinGroupResponse {
        error_code,
        generation_id: -1,
        protocol_type: None,
        protocol_name: None,
        leader: String::new(),
        member_id: member_id.to_string(),
        members: Vec::new(),
        skip_assignment: false,
    })
}

pub(crate) fn sync_error(error_code: ErrorCode) -> GroupResponse {
    GroupResponse::SyncGroup(SyncGroupResponse {
        error_code,
        protocol_type: None,
        protocol_name: None,
        assignment: Bytes::new(),
    })
}

pub(crate) fn heartbeat_reply(error_code: ErrorCode) -> GroupResponse {
    GroupResponse::Heartbeat(HeartbeatResponse { error_code })
}
