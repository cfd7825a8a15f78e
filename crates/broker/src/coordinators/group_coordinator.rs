//! The group coordinator on the runtime: classic groups and share groups (KIP-932), one
//! [`GroupShard`] whose records live in `__consumer_offsets` (partition =
//! `abs(groupId.hashCode) % offsets.topic.num.partitions`). What is particular to it is
//! here: its configuration from the broker's, and the topics image fed to every pass.

use std::sync::Arc;

use shoal_core::coordinator::TxnMarker;
use shoal_core::group_coordinator::share::{GroupOverrides, ShareGroupConfig, TopicsImage};
use shoal_core::group_coordinator::{
    GroupConfig, GroupInput, GroupReply, GroupRequest, GroupResponse, GroupShard, ShareCall,
    ShareReply,
};

use super::runtime::{Host, Runtime, Unavailable};
use crate::node::{NodeState, CONSUMER_OFFSETS};

/// Handle to the group coordinator.
#[derive(Default)]
pub struct GroupService {
    runtime: Runtime<GroupShard>,
}

impl GroupService {
    pub fn new() -> Self {
        Self::default()
    }

    /// Replays `__consumer_offsets` and starts the coordinator.
    ///
    /// # Errors
    /// The log cannot be read.
    pub async fn start(&self, node: &Arc<NodeState>) -> anyhow::Result<()> {
        self.runtime.start(node, OffsetsHost).await
    }

    /// Sends one classic request and waits for its (possibly deferred) reply.
    ///
    /// # Errors
    /// [`Unavailable`] when the coordinator is not running or could not persist the change.
    pub async fn call(&self, request: GroupRequest) -> Result<GroupResponse, Unavailable> {
        self.submit(request).await?.await
    }

    /// Queues one classic request now, in the caller's order, and returns a future of its
    /// reply (see [`Runtime::submit`]).
    ///
    /// # Errors
    /// [`Unavailable`] when the coordinator is not running; the future fails the same way
    /// when the change could not be persisted.
    pub async fn submit(
        &self,
        request: GroupRequest,
    ) -> Result<
        impl std::future::Future<Output = Result<GroupResponse, Unavailable>> + Send + 'static,
        Unavailable,
    > {
        let reply = self.runtime.submit(GroupInput::Classic(request)).await?;
        Ok(async move {
            match reply.await? {
                GroupReply::Classic(response) => Ok(response),
                GroupReply::Share(_) | GroupReply::Done => Err(Unavailable),
            }
        })
    }

    /// Sends one share-group request and waits for its reply.
    ///
    /// # Errors
    /// [`Unavailable`] when the coordinator is not running or could not persist the change.
    pub async fn call_share(&self, call: ShareCall) -> Result<ShareReply, Unavailable> {
        match self.runtime.call(GroupInput::Share(call)).await? {
            GroupReply::Share(reply) => Ok(reply),
            GroupReply::Classic(_) | GroupReply::Done => Err(Unavailable),
        }
    }

    /// Applies a transaction marker just appended to a `__consumer_offsets` partition (the
    /// offsets participant, see `crate::participants`): the producer's pending offset commits
    /// become committed or vanish. Waits until it is applied.
    ///
    /// # Errors
    /// [`Unavailable`] when the coordinator is not running (the marker is in the log, so the
    /// next load applies it).
    pub async fn apply_marker(&self, marker: TxnMarker) -> Result<(), Unavailable> {
        self.runtime.apply_marker(marker).await
    }

    /// [`GroupService::apply_marker`] without waiting: queued ahead of every request sent
    /// after this returns.
    ///
    /// # Errors
    /// [`Unavailable`] when the coordinator is not running or its queue is full.
    pub fn queue_marker(&self, marker: TxnMarker) -> Result<(), Unavailable> {
        self.runtime.queue_marker(marker)
    }
}

/// The group coordinator's place in the broker.
struct OffsetsHost;

impl Host<GroupShard> for OffsetsHost {
    fn topic(&self) -> &'static str {
        CONSUMER_OFFSETS
    }

    async fn new_shard(&self, node: &NodeState) -> anyhow::Result<GroupShard> {
        Ok(GroupShard::new(
            group_config(node),
            share_group_config(node),
        ))
    }

    /// Topics created, deleted or grown since the last pass move share assignments.
    fn pass_inputs(
        &self,
        node: &NodeState,
        _shard: &GroupShard,
        _queued: &[&GroupInput],
    ) -> Vec<GroupInput> {
        vec![GroupInput::Topics(topics_image(node))]
    }

    fn effects(&self, _node: &Arc<NodeState>, effects: Vec<std::convert::Infallible>) {
        match effects.into_iter().next() {
            None => {}
            Some(never) => match never {},
        }
    }
}

fn group_config(node: &NodeState) -> GroupConfig {
    let c = &node.config;
    GroupConfig {
        min_session_timeout_ms: c.long("group.min.session.timeout.ms") as i32,
        max_session_timeout_ms: c.long("group.max.session.timeout.ms") as i32,
        initial_rebalance_delay_ms: c.long("group.initial.rebalance.delay.ms"),
        max_size: c.long("group.max.size") as usize,
        offsets_retention_ms: c.long("offsets.retention.minutes") * 60_000,
        ..GroupConfig::default()
    }
}

fn share_group_config(node: &NodeState) -> ShareGroupConfig {
    let c = &node.config;
    ShareGroupConfig {
        max_size: c.long("group.share.max.size") as usize,
        session_timeout_ms: c.long("group.share.session.timeout.ms") as i32,
        heartbeat_interval_ms: c.long("group.share.heartbeat.interval.ms") as i32,
        ..ShareGroupConfig::default()
    }
}

/// The user topics as the share coordinator sees them.
fn topics_image(node: &NodeState) -> TopicsImage {
    TopicsImage::new(
        node.topic_list()
            .into_iter()
            .filter(|t| !t.internal)
            .map(|t| (t.name.clone(), *t.id.as_bytes(), t.partition_count() as i32)),
    )
}

/// A share group's group-config overrides as they are now, sent with its heartbeat.
pub fn share_overrides(node: &NodeState, group_id: &str) -> GroupOverrides {
    let overrides = node.group_config_overrides(group_id);
    let int = |key: &str| overrides.get(key).and_then(|v| v.parse::<i32>().ok());
    GroupOverrides {
        session_timeout_ms: int(crate::group_configs::SHARE_SESSION_TIMEOUT_MS),
        heartbeat_interval_ms: int(crate::group_configs::SHARE_HEARTBEAT_INTERVAL_MS),
        max_size: None,
    }
}
