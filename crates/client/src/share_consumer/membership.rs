//! Share group membership over ShareGroupHeartbeat (KIP-932): the member id this client
//! generates (KIP-1082, as Java does), the member epoch, the assignment, and the heartbeat
//! interval the coordinator asks for.
//!
//! [`Membership`] decides without I/O: [`request`](Membership::request) builds the next
//! heartbeat and [`on_response`](Membership::on_response) applies the answer. FENCED_MEMBER_EPOCH
//! and UNKNOWN_MEMBER_ID drop the assignment and rejoin with epoch 0 under the same member id;
//! [`leave`](Membership::leave) builds the epoch -1 heartbeat of close. The heartbeat task
//! ([`run`]) owns the timing: one heartbeat per interval, sooner when the subscription changes.

use std::collections::{BTreeMap, BTreeSet};
use std::hash::{BuildHasher, Hasher};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kafka_protocol::messages::{
    GroupId, ShareGroupHeartbeatRequest, ShareGroupHeartbeatResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use shoal_protocol::uuid::Uuid;
use shoal_protocol::{ApiKey, ErrorCode};
use tokio::sync::Notify;

use crate::cluster::{Cluster, CoordinatorType};
use crate::error::Error;

/// Most partitions an assignment may hold (an answer is untrusted).
pub const ASSIGNED_PARTITIONS_MAX: usize = 1 << 16;
/// Bounds on the heartbeat interval the coordinator may ask for.
const HEARTBEAT_INTERVAL_MIN: Duration = Duration::from_millis(10);
const HEARTBEAT_INTERVAL_MAX: Duration = Duration::from_secs(60);

/// A member id as Java's `Uuid.randomUuid().toString()` writes one: 16 random bytes in
/// URL-safe base64 without padding, 22 characters.
pub fn generate_member_id() -> String {
    let state = std::collections::hash_map::RandomState::new();
    let mut bytes = [0u8; 16];
    for (i, chunk) in bytes.chunks_mut(8).enumerate() {
        let mut h = state.build_hasher();
        h.write_usize(i);
        h.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or_default(),
        );
        chunk.copy_from_slice(&h.finish().to_be_bytes());
    }
    base64_url(&bytes)
}

fn base64_url(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..=chunk.len() {
            out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
        }
    }
    out
}

/// The member's state (see the module docs).
#[derive(Clone, Debug)]
pub struct Membership {
    group_id: String,
    member_id: String,
    /// 0 until the coordinator answers the join; -1 once left.
    epoch: i32,
    subscription: BTreeSet<String>,
    /// Whether the next heartbeat must carry the subscription (a join, or a change).
    send_subscription: bool,
    assignment: BTreeMap<Uuid, BTreeSet<i32>>,
    interval: Duration,
}

impl Membership {
    pub fn new(group_id: &str, member_id: String) -> Self {
        Membership {
            group_id: group_id.to_owned(),
            member_id,
            epoch: 0,
            subscription: BTreeSet::new(),
            send_subscription: true,
            assignment: BTreeMap::new(),
            interval: Duration::from_secs(5),
        }
    }

    pub fn group_id(&self) -> &str {
        &self.group_id
    }
    pub fn member_id(&self) -> &str {
        &self.member_id
    }
    pub fn epoch(&self) -> i32 {
        self.epoch
    }
    pub fn interval(&self) -> Duration {
        self.interval
    }
    pub fn subscription(&self) -> &BTreeSet<String> {
        &self.subscription
    }
    /// The partitions assigned, by topic id.
    pub fn assignment(&self) -> &BTreeMap<Uuid, BTreeSet<i32>> {
        &self.assignment
    }

    pub fn subscribe(&mut self, topics: BTreeSet<String>) {
        if topics != self.subscription {
            self.subscription = topics;
            self.send_subscription = true;
        }
    }

    /// The next heartbeat.
    pub fn request(&self) -> ShareGroupHeartbeatRequest {
        let topics = self.send_subscription.then(|| {
            self.subscription
                .iter()
                .map(|t| TopicName(StrBytes::from_string(t.clone())))
                .collect()
        });
        ShareGroupHeartbeatRequest::default()
            .with_group_id(GroupId(StrBytes::from_string(self.group_id.clone())))
            .with_member_id(StrBytes::from_string(self.member_id.clone()))
            .with_member_epoch(self.epoch)
            .with_subscribed_topic_names(topics)
    }

    /// The heartbeat of close (epoch -1); the member is gone after it.
    pub fn leave(&mut self) -> ShareGroupHeartbeatRequest {
        self.epoch = -1;
        self.assignment.clear();
        self.send_subscription = false;
        self.request()
    }

    /// A heartbeat failed (no answer, or an error): the next one is a full heartbeat that
    /// carries the subscription, as Java's client sends after a failure, and the coordinator
    /// answers a full heartbeat with the whole assignment. An answer lost after the
    /// coordinator moved this member to a new assignment is thereby recovered.
    pub fn on_failure(&mut self) {
        self.send_subscription = true;
    }

    /// Applies an answer to [`request`](Self::request).
    ///
    /// # Errors
    /// The answer's error ([`Error::Kafka`]); fencing is handled (rejoin with epoch 0), so
    /// its error is only informative. An assignment over [`ASSIGNED_PARTITIONS_MAX`] is
    /// [`Error::IncompleteResponse`]-free: it is refused as a malformed answer.
    pub fn on_response(&mut self, response: &ShareGroupHeartbeatResponse) -> Result<(), Error> {
        let code = ErrorCode(response.error_code);
        if code == ErrorCode::FENCED_MEMBER_EPOCH || code == ErrorCode::UNKNOWN_MEMBER_ID {
            self.epoch = 0;
            self.assignment.clear();
            self.send_subscription = true;
        }
        if let Some(e) = Error::from_code(
            ApiKey::ShareGroupHeartbeat,
            response.error_code,
            response.error_message.as_deref(),
        ) {
            return Err(e);
        }
        if let Some(id) = response.member_id.as_deref().filter(|id| !id.is_empty()) {
            self.member_id = id.to_owned();
        }
        self.epoch = response.member_epoch;
        self.send_subscription = false;
        self.interval = u64::try_from(response.heartbeat_interval_ms)
            .map(Duration::from_millis)
            .unwrap_or(HEARTBEAT_INTERVAL_MAX)
            .clamp(HEARTBEAT_INTERVAL_MIN, HEARTBEAT_INTERVAL_MAX);
        if let Some(assignment) = &response.assignment {
            let total: usize = assignment
                .topic_partitions
                .iter()
                .map(|t| t.partitions.len())
                .sum();
            if total > ASSIGNED_PARTITIONS_MAX {
                return Err(Error::Kafka {
                    code: ErrorCode::UNKNOWN_SERVER_ERROR,
                    api: ApiKey::ShareGroupHeartbeat,
                    message: Some(format!("an assignment of {total} partitions")),
                });
            }
            self.assignment = assignment
                .topic_partitions
                .iter()
                .map(|t| (t.topic_id, t.partitions.iter().copied().collect()))
                .filter(|(_, p): &(Uuid, BTreeSet<i32>)| !p.is_empty())
                .collect();
        }
        Ok(())
    }
}

/// What the consumer and the heartbeat task share.
#[derive(Debug)]
pub struct Shared {
    pub membership: Mutex<Membership>,
    /// Wakes the task early: a subscription changed, or close.
    pub wake: Notify,
    /// The last heartbeat error that is not fencing or a moving coordinator, for poll.
    pub error: Mutex<Option<(ErrorCode, String)>>,
}

pub fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The heartbeat task: one heartbeat per interval until `stop` is set. Errors are logged in
/// `shared.error` and retried after the retry backoff; fencing rejoins at once.
pub async fn run(cluster: Cluster, shared: Arc<Shared>, stop: Arc<std::sync::atomic::AtomicBool>) {
    use std::sync::atomic::Ordering;
    let backoff = cluster.config().retry_backoff();
    while !stop.load(Ordering::Acquire) {
        let (request, group_id) = {
            let m = lock(&shared.membership);
            if m.subscription.is_empty() {
                (None, m.group_id.clone())
            } else {
                (Some(m.request()), m.group_id.clone())
            }
        };
        let mut wait = lock(&shared.membership).interval;
        if let Some(request) = request {
            let result = cluster
                .send_to_coordinator(CoordinatorType::Group, &group_id, &request)
                .await;
            if stop.load(Ordering::Acquire) {
                return;
            }
            let outcome = match result {
                Ok(response) => lock(&shared.membership).on_response(&response),
                Err(e) => Err(e),
            };
            match outcome {
                Ok(()) => *lock(&shared.error) = None,
                Err(e) => {
                    lock(&shared.membership).on_failure();
                    let code = e.code();
                    let fenced = code == ErrorCode::FENCED_MEMBER_EPOCH
                        || code == ErrorCode::UNKNOWN_MEMBER_ID;
                    wait = if fenced { Duration::ZERO } else { backoff };
                    if !fenced && !e.is_retriable() {
                        *lock(&shared.error) = Some((code, e.to_string()));
                    }
                }
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = shared.wake.notified() => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::share_group_heartbeat_response::{Assignment, TopicPartitions};

    fn answer(epoch: i32, parts: &[i32]) -> ShareGroupHeartbeatResponse {
        ShareGroupHeartbeatResponse::default()
            .with_member_epoch(epoch)
            .with_heartbeat_interval_ms(250)
            .with_assignment(Some(Assignment::default().with_topic_partitions(vec![
                TopicPartitions::default()
                    .with_topic_id(Uuid::from_u128(7))
                    .with_partitions(parts.to_vec()),
            ])))
    }

    #[test]
    fn member_ids_look_like_javas() {
        let a = generate_member_id();
        let b = generate_member_id();
        assert_eq!(a.len(), 22);
        assert_ne!(a, b);
        assert!(a
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'));
        assert_eq!(base64_url(&[0xfb, 0xff]), "-_8");
    }

    #[test]
    fn join_heartbeat_fence_rejoin_leave() {
        let mut m = Membership::new("g", "m1".into());
        m.subscribe(["t".to_owned()].into());
        let join = m.request();
        assert_eq!(join.member_epoch, 0);
        assert_eq!(join.subscribed_topic_names.as_ref().map(Vec::len), Some(1));
        m.on_response(&answer(3, &[0, 1])).unwrap();
        assert_eq!(m.epoch(), 3);
        assert_eq!(m.interval(), Duration::from_millis(250));
        assert_eq!(m.assignment()[&Uuid::from_u128(7)].len(), 2);
        // A steady heartbeat leaves the subscription out.
        assert!(m.request().subscribed_topic_names.is_none());
        let fenced = ShareGroupHeartbeatResponse::default()
            .with_error_code(ErrorCode::FENCED_MEMBER_EPOCH.0);
        assert!(m.on_response(&fenced).is_err());
        assert_eq!(m.epoch(), 0);
        assert!(m.assignment().is_empty());
        let rejoin = m.request();
        assert_eq!((rejoin.member_epoch, rejoin.member_id.as_str()), (0, "m1"));
        assert!(rejoin.subscribed_topic_names.is_some());
        assert_eq!(m.leave().member_epoch, -1);
    }

    #[test]
    fn a_failed_heartbeat_is_followed_by_a_full_one() {
        let mut m = Membership::new("g", "m1".into());
        m.subscribe(["t".to_owned()].into());
        m.on_response(&answer(3, &[0])).unwrap();
        assert!(m.request().subscribed_topic_names.is_none());
        // The answer to the next heartbeat is lost (the broker was killed after moving the
        // member to epoch 4 with partitions 0 and 1).
        m.on_failure();
        let full = m.request();
        assert_eq!(full.member_epoch, 3);
        assert_eq!(full.subscribed_topic_names.as_ref().map(Vec::len), Some(1));
        // The coordinator answers a full heartbeat with the assignment.
        m.on_response(&answer(4, &[0, 1])).unwrap();
        assert_eq!(m.assignment()[&Uuid::from_u128(7)].len(), 2);
        assert!(m.request().subscribed_topic_names.is_none());
    }
}
