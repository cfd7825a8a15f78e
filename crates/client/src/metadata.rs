//! The cluster metadata cache, sans-IO: brokers, topics with their ids and partition leaders,
//! and the decisions around it: whether a response is acceptable ([`Metadata::apply`]
//! validates it whole before changing anything), whether a partition's new leader is newer
//! than the cached one (leader epochs, KIP-320), and when the cache must be fetched again:
//! before it is used ([`Metadata::must_wait`]: never fetched, marked stale, a topic missing), or
//! in the background while it goes on being used ([`Metadata::update_wait`]: an update was
//! requested after a broker could not be reached, or the cache is older than
//! `metadata.max.age.ms`), as Kafka's `Metadata.requestUpdate` differs from a lookup of a topic
//! it does not know yet.
//!
//! Limits: a response naming more than [`BROKERS_MAX`] brokers, [`TOPICS_MAX`] topics or
//! [`PARTITIONS_MAX`] partitions of one topic is refused (a broken or hostile broker must not
//! grow the cache without bound).

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use kafka_protocol::messages::MetadataResponse;
use shoal_protocol::uuid::Uuid;
use shoal_protocol::ErrorCode;

/// Most brokers one metadata response may name.
pub const BROKERS_MAX: usize = 10_000;
/// Most topics one metadata response may carry.
pub const TOPICS_MAX: usize = 100_000;
/// Most partitions of one topic (Kafka's own limits are far lower in practice).
pub const PARTITIONS_MAX: usize = 1 << 20;
/// Longest host name accepted (DNS's limit).
pub const HOST_BYTES_MAX: usize = 255;

/// A broker as metadata names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Broker {
    pub node_id: i32,
    pub host: String,
    pub port: u16,
    pub rack: Option<String>,
}

impl Broker {
    pub fn addr(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

/// One partition's leader.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionInfo {
    pub partition: i32,
    /// `None` while the partition has no leader (LEADER_NOT_AVAILABLE, an election).
    pub leader: Option<i32>,
    pub leader_epoch: i32,
    pub error: ErrorCode,
}

/// A topic with its id and partitions, indexed by partition number.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicInfo {
    pub name: String,
    pub topic_id: Uuid,
    pub is_internal: bool,
    pub partitions: Vec<PartitionInfo>,
}

/// What [`Metadata::apply`] learned about the topics a request asked for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Applied {
    /// Topics answered with an error code (UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE,
    /// TOPIC_AUTHORIZATION_FAILED...): they are removed from the cache.
    pub topic_errors: Vec<(String, ErrorCode)>,
}

/// The metadata cache.
#[derive(Debug, Clone, Default)]
pub struct Metadata {
    cluster_id: Option<String>,
    controller_id: Option<i32>,
    brokers: BTreeMap<i32, Broker>,
    topics: HashMap<String, TopicInfo>,
    names_by_id: HashMap<Uuid, String>,
    /// The error each topic was last answered with, until it is answered without one.
    topic_errors: HashMap<String, ErrorCode>,
    updated_at: Option<Instant>,
    stale: bool,
    /// An update is wanted, but the cache stays usable meanwhile ([`Metadata::request_update`]).
    update_requested: bool,
}

impl Metadata {
    pub fn new() -> Self {
        Self::default()
    }

    /// Validates `response` whole, then merges it: brokers are replaced (the response lists
    /// them all), topics in the response are replaced or, when answered with an error,
    /// removed; topics not in the response stay. A partition whose cached leader epoch is
    /// newer than the response's keeps the cached leader (the response came from a broker
    /// that had not yet heard of the election).
    ///
    /// # Errors
    /// A description of what makes the response impossible; the cache is then unchanged.
    pub fn apply(&mut self, now: Instant, response: &MetadataResponse) -> Result<Applied, String> {
        if response.error_code != 0 {
            return Err(format!(
                "top-level error {}",
                ErrorCode(response.error_code)
            ));
        }
        let brokers = validate_brokers(response)?;
        let mut topics = Vec::with_capacity(response.topics.len());
        let mut applied = Applied::default();
        if response.topics.len() > TOPICS_MAX {
            return Err(format!(
                "{} topics, more than {TOPICS_MAX}",
                response.topics.len()
            ));
        }
        for topic in &response.topics {
            let name = topic
                .name
                .as_ref()
                .map(|n| n.0.to_string())
                .filter(|n| !n.is_empty())
                .ok_or("a topic without a name")?;
            if topic.error_code != 0 {
                applied
                    .topic_errors
                    .push((name, ErrorCode(topic.error_code)));
                continue;
            }
            topics.push(validate_topic(name, topic)?);
        }
        self.cluster_id = response.cluster_id.as_ref().map(|c| c.to_string());
        self.controller_id = (response.controller_id.0 >= 0).then_some(response.controller_id.0);
        self.brokers = brokers;
        for (name, code) in &applied.topic_errors {
            if let Some(old) = self.topics.remove(name) {
                self.names_by_id.remove(&old.topic_id);
            }
            self.topic_errors.insert(name.clone(), *code);
        }
        // Bounded: a broker naming ever new failing topics must not grow the map for good.
        if self.topic_errors.len() > TOPICS_MAX {
            self.topic_errors.clear();
        }
        for mut topic in topics {
            if let Some(old) = self.topics.get(&topic.name) {
                if old.topic_id == topic.topic_id {
                    keep_newer_leaders(&old.partitions, &mut topic.partitions);
                } else {
                    // Deleted and re-created under the same name: nothing carries over.
                    self.names_by_id.remove(&old.topic_id);
                }
            }
            self.topic_errors.remove(&topic.name);
            if !topic.topic_id.is_nil() {
                self.names_by_id.insert(topic.topic_id, topic.name.clone());
            }
            self.topics.insert(topic.name.clone(), topic);
        }
        self.updated_at = Some(now);
        self.stale = false;
        self.update_requested = false;
        Ok(applied)
    }

    /// Marks the cache stale: the next use fetches it again (after NOT_LEADER_OR_FOLLOWER,
    /// UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TOPIC_ID, or a broker gone from it).
    pub fn invalidate(&mut self) {
        self.stale = true;
    }

    /// Asks for an update without marking the cache stale: lookups go on using it (a known
    /// partition keeps its cached leader) until the update arrives. For a broker that cannot
    /// be reached — its partitions may have moved, which only new metadata tells.
    pub fn request_update(&mut self) {
        self.update_requested = true;
    }

    /// Whether an update was requested and has not arrived yet.
    pub fn update_requested(&self) -> bool {
        self.update_requested
    }

    /// Whether to fetch metadata at all: never fetched, marked stale, an update requested,
    /// older than `max_age`, or missing one of `topics`.
    pub fn needs_refresh(&self, now: Instant, max_age: Duration, topics: &[&str]) -> bool {
        self.must_wait(topics)
            || self.update_requested
            || self
                .updated_at
                .is_some_and(|at| now.saturating_duration_since(at) >= max_age)
    }

    /// Whether a lookup of `topics` must wait for a fetch rather than use the cache: never
    /// fetched, marked stale ([`Metadata::invalidate`]), or missing one of the topics. An
    /// update requested or an old cache do not make lookups wait (see
    /// [`Metadata::update_wait`]).
    pub fn must_wait(&self, topics: &[&str]) -> bool {
        self.updated_at.is_none()
            || self.stale
            || topics.iter().any(|t| !self.topics.contains_key(*t))
    }

    /// When a background update is due: `None` when none is wanted (no update requested, the
    /// cache younger than `max_age`), else how long to wait first — an update is fetched no
    /// sooner than `backoff` after the last one (`retry.backoff.ms`), so a broker refusing
    /// every connection does not make the client fetch metadata in a loop.
    pub fn update_wait(
        &self,
        now: Instant,
        max_age: Duration,
        backoff: Duration,
    ) -> Option<Duration> {
        let Some(updated_at) = self.updated_at else {
            return Some(Duration::ZERO);
        };
        let age = now.saturating_duration_since(updated_at);
        let wanted = self.stale || self.update_requested || age >= max_age;
        wanted.then(|| backoff.saturating_sub(age))
    }

    pub fn cluster_id(&self) -> Option<&str> {
        self.cluster_id.as_deref()
    }
    pub fn controller_id(&self) -> Option<i32> {
        self.controller_id
    }
    pub fn broker(&self, node_id: i32) -> Option<&Broker> {
        self.brokers.get(&node_id)
    }
    pub fn brokers(&self) -> impl Iterator<Item = &Broker> {
        self.brokers.values()
    }
    pub fn topic(&self, name: &str) -> Option<&TopicInfo> {
        self.topics.get(name)
    }
    /// The error code `name` was last answered with, `None` once it is answered without one.
    pub fn topic_error(&self, name: &str) -> Option<ErrorCode> {
        self.topic_errors.get(name).copied()
    }
    /// When the cache was last filled.
    pub fn updated_at(&self) -> Option<Instant> {
        self.updated_at
    }
    pub fn topic_name(&self, topic_id: Uuid) -> Option<&str> {
        self.names_by_id.get(&topic_id).map(String::as_str)
    }
    /// The leader of a partition, `None` when the topic or partition is unknown or leaderless.
    pub fn leader(&self, topic: &str, partition: i32) -> Option<i32> {
        let p = usize::try_from(partition).ok()?;
        self.topics.get(topic)?.partitions.get(p)?.leader
    }
}

fn validate_brokers(response: &MetadataResponse) -> Result<BTreeMap<i32, Broker>, String> {
    if response.brokers.len() > BROKERS_MAX {
        return Err(format!(
            "{} brokers, more than {BROKERS_MAX}",
            response.brokers.len()
        ));
    }
    let mut brokers = BTreeMap::new();
    for b in &response.brokers {
        let node_id = b.node_id.0;
        if node_id < 0 {
            return Err(format!("broker id {node_id}"));
        }
        let host = b.host.to_string();
        if host.is_empty() || host.len() > HOST_BYTES_MAX {
            return Err(format!("broker {node_id} host of {} bytes", host.len()));
        }
        let port = u16::try_from(b.port)
            .ok()
            .filter(|p| *p != 0)
            .ok_or_else(|| format!("broker {node_id} port {}", b.port))?;
        let broker = Broker {
            node_id,
            host,
            port,
            rack: b.rack.as_ref().map(|r| r.to_string()),
        };
        if brokers.insert(node_id, broker).is_some() {
            return Err(format!("broker {node_id} listed twice"));
        }
    }
    Ok(brokers)
}

fn validate_topic(
    name: String,
    topic: &kafka_protocol::messages::metadata_response::MetadataResponseTopic,
) -> Result<TopicInfo, String> {
    let n = topic.partitions.len();
    if n > PARTITIONS_MAX {
        return Err(format!(
            "topic {name}: {n} partitions, more than {PARTITIONS_MAX}"
        ));
    }
    let mut partitions: Vec<Option<PartitionInfo>> = vec![None; n];
    for p in &topic.partitions {
        let slot = usize::try_from(p.partition_index)
            .ok()
            .and_then(|i| partitions.get_mut(i))
            .ok_or_else(|| format!("topic {name}: partition {} of {n}", p.partition_index))?;
        if slot.is_some() {
            return Err(format!(
                "topic {name}: partition {} twice",
                p.partition_index
            ));
        }
        *slot = Some(PartitionInfo {
            partition: p.partition_index,
            leader: (p.leader_id.0 >= 0).then_some(p.leader_id.0),
            leader_epoch: p.leader_epoch,
            error: ErrorCode(p.error_code),
        });
    }
    // n slots filled by n distinct indices below n: all are filled.
    let partitions = partitions.into_iter().flatten().collect::<Vec<_>>();
    assert_eq!(
        partitions.len(),
        n,
        "every partition index is distinct and below n"
    );
    Ok(TopicInfo {
        name,
        topic_id: topic.topic_id,
        is_internal: topic.is_internal,
        partitions,
    })
}

fn keep_newer_leaders(old: &[PartitionInfo], new: &mut [PartitionInfo]) {
    for (old, new) in old.iter().zip(new.iter_mut()) {
        if old.leader_epoch >= 0 && new.leader_epoch >= 0 && old.leader_epoch > new.leader_epoch {
            *new = *old;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::metadata_response::{
        MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
    };
    use kafka_protocol::messages::{BrokerId, TopicName};
    use kafka_protocol::protocol::StrBytes;

    fn broker(id: i32, port: i32) -> MetadataResponseBroker {
        MetadataResponseBroker::default()
            .with_node_id(BrokerId(id))
            .with_host(StrBytes::from_static_str("localhost"))
            .with_port(port)
    }

    fn topic(name: &'static str, id: u128, leaders: &[(i32, i32)]) -> MetadataResponseTopic {
        MetadataResponseTopic::default()
            .with_name(Some(TopicName(StrBytes::from_static_str(name))))
            .with_topic_id(Uuid::from_u128(id))
            .with_partitions(
                leaders
                    .iter()
                    .enumerate()
                    .map(|(i, &(leader, epoch))| {
                        MetadataResponsePartition::default()
                            .with_partition_index(i as i32)
                            .with_leader_id(BrokerId(leader))
                            .with_leader_epoch(epoch)
                    })
                    .collect(),
            )
    }

    fn response(topics: Vec<MetadataResponseTopic>) -> MetadataResponse {
        MetadataResponse::default()
            .with_brokers(vec![broker(1, 9092), broker(2, 9093)])
            .with_controller_id(BrokerId(1))
            .with_topics(topics)
    }

    #[test]
    fn caches_brokers_topics_ids_and_leaders() {
        let now = Instant::now();
        let mut m = Metadata::new();
        assert!(m.needs_refresh(now, Duration::from_secs(300), &[]));
        m.apply(now, &response(vec![topic("t", 7, &[(1, 0), (2, 0)])]))
            .unwrap();
        assert_eq!(m.broker(2).unwrap().addr(), "localhost:9093");
        assert_eq!(m.leader("t", 1), Some(2));
        assert_eq!(m.leader("t", 2), None);
        assert_eq!(m.leader("t", -1), None);
        assert_eq!(m.topic_name(Uuid::from_u128(7)), Some("t"));
        assert!(!m.needs_refresh(now, Duration::from_secs(300), &["t"]));
        assert!(m.needs_refresh(now, Duration::from_secs(300), &["u"]));
        assert!(m.needs_refresh(
            now + Duration::from_secs(300),
            Duration::from_secs(300),
            &[]
        ));
        m.invalidate();
        assert!(m.needs_refresh(now, Duration::from_secs(300), &["t"]));
        assert!(m.must_wait(&["t"]));
    }

    /// A requested update leaves the cache usable, and is due no sooner than the backoff
    /// after the last fetch; an old cache is updated in the background too.
    #[test]
    fn a_requested_update_does_not_make_lookups_wait() {
        let now = Instant::now();
        let (max_age, backoff) = (Duration::from_secs(300), Duration::from_millis(100));
        let mut m = Metadata::new();
        assert!(m.must_wait(&[]));
        assert_eq!(m.update_wait(now, max_age, backoff), Some(Duration::ZERO));
        m.apply(now, &response(vec![topic("t", 7, &[(1, 0)])]))
            .unwrap();
        assert_eq!(m.update_wait(now, max_age, backoff), None);
        m.request_update();
        assert!(m.update_requested());
        assert!(
            !m.must_wait(&["t"]),
            "a known topic is served from the cache"
        );
        assert!(m.must_wait(&["u"]), "an unknown one is waited for");
        assert!(m.needs_refresh(now, max_age, &["t"]));
        assert_eq!(m.leader("t", 0), Some(1));
        let later = now + Duration::from_millis(30);
        assert_eq!(
            m.update_wait(later, max_age, backoff),
            Some(Duration::from_millis(70))
        );
        assert_eq!(
            m.update_wait(now + backoff * 2, max_age, backoff),
            Some(Duration::ZERO)
        );
        m.apply(later, &response(vec![topic("t", 7, &[(2, 1)])]))
            .unwrap();
        assert!(!m.update_requested());
        assert_eq!(m.leader("t", 0), Some(2));
        assert_eq!(m.update_wait(later, max_age, backoff), None);
        assert!(!m.must_wait(&["t"]));
        assert_eq!(
            m.update_wait(later + max_age, max_age, backoff),
            Some(Duration::ZERO),
            "an old cache is updated in the background"
        );
    }

    #[test]
    fn an_older_leader_epoch_does_not_replace_a_newer_one() {
        let now = Instant::now();
        let mut m = Metadata::new();
        m.apply(now, &response(vec![topic("t", 7, &[(2, 5)])]))
            .unwrap();
        m.apply(now, &response(vec![topic("t", 7, &[(1, 4)])]))
            .unwrap();
        assert_eq!(m.leader("t", 0), Some(2));
        m.apply(now, &response(vec![topic("t", 7, &[(1, 6)])]))
            .unwrap();
        assert_eq!(m.leader("t", 0), Some(1));
        // Re-created topic (new id): epochs start over.
        m.apply(now, &response(vec![topic("t", 8, &[(2, 0)])]))
            .unwrap();
        assert_eq!(m.leader("t", 0), Some(2));
        assert_eq!(m.topic_name(Uuid::from_u128(7)), None);
        assert_eq!(m.topic_name(Uuid::from_u128(8)), Some("t"));
    }

    #[test]
    fn topic_errors_remove_the_topic() {
        let now = Instant::now();
        let mut m = Metadata::new();
        m.apply(now, &response(vec![topic("t", 7, &[(1, 0)])]))
            .unwrap();
        let applied = m
            .apply(now, &response(vec![topic("t", 0, &[]).with_error_code(3)]))
            .unwrap();
        assert_eq!(
            applied.topic_errors,
            vec![("t".to_string(), ErrorCode::UNKNOWN_TOPIC_OR_PARTITION)]
        );
        assert!(m.topic("t").is_none());
        assert_eq!(
            m.topic_error("t"),
            Some(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION)
        );
        assert_eq!(m.topic_name(Uuid::from_u128(7)), None);
        m.apply(now, &response(vec![topic("t", 9, &[(1, 0)])]))
            .unwrap();
        assert_eq!(m.topic_error("t"), None);
    }

    #[test]
    fn impossible_responses_leave_the_cache_unchanged() {
        let now = Instant::now();
        let mut m = Metadata::new();
        m.apply(now, &response(vec![topic("t", 7, &[(1, 0)])]))
            .unwrap();
        let mut gap = topic("u", 9, &[(1, 0), (1, 0)]);
        gap.partitions[1].partition_index = 5;
        let mut twice = topic("u", 9, &[(1, 0), (1, 0)]);
        twice.partitions[1].partition_index = 0;
        let bad = [
            response(vec![gap]),
            response(vec![twice]),
            response(vec![]).with_brokers(vec![broker(1, 0)]),
            response(vec![]).with_brokers(vec![broker(1, 70_000)]),
            response(vec![]).with_brokers(vec![broker(1, 1), broker(1, 2)]),
            response(vec![]).with_brokers(vec![broker(-3, 1)]),
            response(vec![MetadataResponseTopic::default()]),
        ];
        for r in &bad {
            assert!(m.apply(now, r).is_err(), "{r:?}");
            assert_eq!(m.leader("t", 0), Some(1));
            assert!(m.topic("u").is_none());
            assert_eq!(m.broker(1).unwrap().port, 9092);
        }
    }

    proptest::proptest! {
        /// Whatever order answers arrive in, a partition's cached leader epoch never goes
        /// back while the topic keeps its id, and the cache always holds the newest epoch
        /// seen since the id last changed.
        #[test]
        fn leader_epochs_never_go_back(
            answers in proptest::collection::vec(
                (0u128..3, proptest::collection::vec((1i32..3, 0i32..10), 1..4)),
                1..30,
            ),
        ) {
            let now = Instant::now();
            let mut m = Metadata::new();
            let mut newest: Option<(u128, Vec<i32>)> = None;
            for (id, leaders) in &answers {
                let mut t = topic("t", *id + 1, leaders);
                t.partitions.truncate(leaders.len());
                m.apply(now, &response(vec![t])).unwrap();
                let epochs: Vec<i32> = leaders.iter().map(|&(_, e)| e).collect();
                newest = Some(match newest.take() {
                    Some((old_id, old)) if old_id == *id => (
                        old_id,
                        epochs
                            .iter()
                            .enumerate()
                            .map(|(i, e)| old.get(i).map_or(*e, |o| (*o).max(*e)))
                            .collect(),
                    ),
                    _ => (*id, epochs),
                });
                let (_, want) = newest.as_ref().unwrap();
                let cached: Vec<i32> =
                    m.topic("t").unwrap().partitions.iter().map(|p| p.leader_epoch).collect();
                proptest::prop_assert_eq!(&cached, want);
            }
        }
    }
}
