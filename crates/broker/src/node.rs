//! The node's shared state: what every part of the broker reads and the coordinators build
//! on — the configuration (static and dynamic), the node's identity and data directory, the
//! topic registry and its partition logs, the metadata log and the admin operations that change
//! topics, configs and feature levels, the seams (clock, ownership, commit point), the metrics
//! registry and the producer id allocator — and the names of the internal topics it creates at
//! start for the coordinators.
//!
//! [`NodeState`] sits below the coordinators and the share partitions, which take it (never the
//! [`crate::broker::Broker`] that composes them with it); it is opened first, by
//! [`NodeState::open`], and the services start on it.
//!
//! Must not: import a coordinator, the share partitions, a handler or the broker (arrows point
//! down to here); hold a partition lock across an await.

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use fs2::FileExt;
use shoal_protocol::api::ApiTable;
use shoal_protocol::messages::ApiKey;
use shoal_protocol::ErrorCode;
use tokio::sync::Mutex as AsyncMutex;
use tracing::{info, warn};
use uuid::Uuid;

use crate::cluster_metadata::{MetaRecord, MetadataImage, TopicMeta};
use crate::config::{BrokerConfig, ConfigMap};
use crate::metrics::Metrics;
use crate::producer_state::ProducerIdAllocator;
use crate::seams::clock::{Clock, SystemClock};
use crate::seams::durability::{Durability, LocalDisk};
use crate::seams::metadata_store::{
    AppendError, CoordinatorEpochs, EpochFile, LocalMetadataLog, MetadataStore,
};
use crate::seams::ownership::{Node, Ownership, SingleNode};
use crate::seams::SeamOverrides;
use crate::topic_registry::{self, grow_topic, open_topic, Opening, Topic, TopicMaps};
use shoal_core::acl::{Authorizer, AuthorizerConfig};
use shoal_core::sasl::scram::{ScramCredential, ScramMechanism};

/// Name of the internal topic holding group membership and committed offsets.
pub const CONSUMER_OFFSETS: &str = "__consumer_offsets";
/// Name of the internal topic holding transaction state.
pub const TRANSACTION_STATE: &str = "__transaction_state";
/// The internal topic of share-group state.
pub const SHARE_GROUP_STATE: &str = "__share_group_state";
/// Directory of the metadata log (not a topic clients can see).
const METADATA_LOG_DIR: &str = "__cluster_metadata-0";
/// Decompression budget for internal records (they are written uncompressed by us).
pub const INTERNAL_DECODE_BYTES_MAX: usize = 64 * 1024 * 1024;

/// An admin failure with the Kafka error a client expects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdminError {
    pub code: ErrorCode,
    pub message: String,
}

impl AdminError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }
}

/// The metadata records and the image they describe; changed only under the admin lock.
struct MetaStore {
    store: Arc<dyn MetadataStore>,
    image: MetadataImage,
    /// How many of the store's records the image (and the node) applied.
    applied: u64,
}

/// Broker-wide settings decided at start.
#[derive(Debug, Clone)]
pub struct BrokerOptions {
    pub data_dir: PathBuf,
    /// Host and port clients are told to connect to.
    pub advertised_host: String,
    pub advertised_port: u16,
    /// Implementations of the clock, ownership, commit point and metadata store to use
    /// instead of the single node's.
    pub seams: SeamOverrides,
}

/// An internal topic created at start when missing: its broker keys for the partition count
/// and segment size, and its own configs.
struct InternalTopic {
    name: &'static str,
    partitions_key: &'static str,
    segment_key: &'static str,
    configs: &'static [(&'static str, &'static str)],
}

/// The node's shared state (see the module docs).
pub struct NodeState {
    pub config: BrokerConfig,
    pub node_id: i32,
    pub cluster_id: String,
    pub data_dir: PathBuf,
    pub advertised_host: String,
    pub advertised_port: u16,
    pub metrics: Metrics,
    /// Where time comes from.
    pub clock: Arc<dyn Clock>,
    /// Who owns which partition (and so which coordinator and share partition).
    pub ownership: Arc<dyn Ownership>,
    /// The commit point of every partition write.
    pub durability: Arc<dyn Durability>,
    /// Producer ids for InitProducerId.
    pub producer_ids: ProducerIdAllocator,
    /// Epochs of the transaction coordinator's loads.
    pub coordinator_epochs: Arc<dyn CoordinatorEpochs>,
    /// Connections to the other brokers of a cluster.
    pub peers: crate::peers::Peers,
    /// The epoch under which each internal partition's coordinator state was loaded (set by
    /// `coordinators::runtime`): a coordinator serves a partition only once its state was
    /// replayed under the epoch the partition is owned under (`crate::leadership`).
    pub coordinator_loads: RwLock<std::collections::BTreeMap<(&'static str, i32), i32>>,
    topics: RwLock<TopicMaps>,
    admin: AsyncMutex<MetaStore>,
    /// Woken when another broker may have changed the metadata (see
    /// [`NodeState::follow_metadata`]); `None` on a single node, the only writer.
    pub metadata_changes: Option<Arc<tokio::sync::Notify>>,
    /// Static configuration with the dynamic broker overrides applied.
    current: RwLock<Arc<BrokerConfig>>,
    dynamic: RwLock<ConfigMap>,
    /// Overrides of groups that have any (GROUP config resources), mirrored from the image.
    group_configs: RwLock<std::collections::BTreeMap<String, ConfigMap>>,
    /// SCRAM credentials, as the metadata image holds them (read without the admin lock by
    /// every SCRAM authentication).
    scram: RwLock<std::collections::BTreeMap<(String, ScramMechanism), ScramCredential>>,
    /// Whether `authorizer.class.name` names the authorizer: every request is then checked
    /// against the ACLs (`crate::authorization`).
    pub authorization_enabled: bool,
    /// The ACLs, as the metadata image holds them, indexed for checks (read by every request
    /// when authorization is on; written by CreateAcls and DeleteAcls).
    acls: RwLock<Authorizer>,
    /// Finalized `share.version`, mirrored for the ApiVersions table.
    share_version: std::sync::atomic::AtomicI16,
    /// Orders feature-level changes against staging (spec §3.5): a TxnShareAcknowledge holds
    /// it shared from its `share.version` check until its staging is written, UpdateFeatures
    /// holds it exclusively from reading the levels (and counting TX_PENDING records) until
    /// the new levels are set. No staging can then land under a level below 3.
    pub feature_gate: tokio::sync::RwLock<()>,
    _dir_lock: File,
}

impl std::fmt::Debug for NodeState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "NodeState(node {}, {:?})", self.node_id, self.data_dir)
    }
}

/// Kafka's base64 (URL-safe, unpadded) form of a UUID, as used for cluster and topic ids.
pub fn uuid_base64(id: Uuid) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let bytes = id.as_bytes();
    let mut out = String::with_capacity(22);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        let chars = chunk.len() + 1;
        for i in 0..chars {
            out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
        }
    }
    out
}

fn lock_data_dir(data_dir: &Path) -> anyhow::Result<File> {
    fs::create_dir_all(data_dir)
        .map_err(|e| anyhow::anyhow!("cannot create data directory {data_dir:?}: {e}"))?;
    let path = data_dir.join(".lock");
    let file = File::create(&path).map_err(|e| anyhow::anyhow!("cannot open {path:?}: {e}"))?;
    file.try_lock_exclusive().map_err(|_| {
        anyhow::anyhow!(
            "data directory {data_dir:?} is in use by another Shoal broker (lock {path:?} is held)"
        )
    })?;
    Ok(file)
}

/// Reads or creates `meta.properties` (cluster id and node id), as Kafka's storage format does.
fn load_meta_properties(data_dir: &Path, node_id: i32) -> anyhow::Result<String> {
    let path = data_dir.join("meta.properties");
    if let Ok(text) = fs::read_to_string(&path) {
        let pairs = crate::config::parse_properties(&text);
        let get = |k: &str| {
            pairs
                .iter()
                .find(|(key, _)| key == k)
                .map(|(_, v)| v.clone())
        };
        let cluster_id =
            get("cluster.id").ok_or_else(|| anyhow::anyhow!("{path:?} has no cluster.id"))?;
        if let Some(stored) = get("node.id") {
            if stored != node_id.to_string() {
                anyhow::bail!(
                    "{path:?} belongs to node {stored}, but this broker is node {node_id}"
                );
            }
        }
        return Ok(cluster_id);
    }
    let cluster_id = uuid_base64(Uuid::new_v4());
    let text = format!("version=1\ncluster.id={cluster_id}\nnode.id={node_id}\n");
    let tmp = data_dir.join("meta.properties.tmp");
    fs::write(&tmp, text)?;
    File::open(&tmp)?.sync_all()?;
    fs::rename(&tmp, &path)?;
    File::open(data_dir)?.sync_all()?;
    Ok(cluster_id)
}

/// The image of every record in `store`, and how many records that is.
async fn replay_metadata(store: &dyn MetadataStore) -> anyhow::Result<(MetadataImage, u64)> {
    let mut image = MetadataImage::default();
    let records = store.read_from(0).await?;
    let applied = records.len() as u64;
    for record in records.iter().flatten() {
        image.replay(record);
    }
    Ok((image, applied))
}

/// Kafka's answer to an admin change decided on a stale image (another broker changed the
/// metadata first): retriable, clients send the request again.
fn stale_metadata() -> AdminError {
    AdminError::new(
        ErrorCode::NOT_CONTROLLER,
        "The metadata was changed meanwhile by another broker; retry.",
    )
}

/// Attempts of a start-up metadata change that another broker's start keeps overtaking.
const START_ATTEMPTS: usize = 20;

impl NodeState {
    /// Opens the data directory: locks it, replays the metadata log, opens every partition
    /// (recovering torn tails) and creates the internal topics and the default feature levels
    /// on first start. No coordinator runs yet.
    ///
    /// # Errors
    /// Another broker holds the directory, or a log cannot be opened.
    pub async fn open(
        config: BrokerConfig,
        options: BrokerOptions,
    ) -> anyhow::Result<Arc<NodeState>> {
        let data_dir = options.data_dir.clone();
        let dir_lock = lock_data_dir(&data_dir)?;
        let node_id = config.long("node.id") as i32;
        let dir_cluster_id = load_meta_properties(&data_dir, node_id)?;
        remove_deleted_dirs(&data_dir);
        let SeamOverrides {
            clock,
            ownership,
            durability,
            metadata,
            producer_ids,
            coordinator_epochs,
        } = options.seams;
        let clock = clock.unwrap_or_else(|| Arc::new(SystemClock));
        let ownership = ownership.unwrap_or_else(|| {
            Arc::new(SingleNode::new(Node {
                node_id,
                host: options.advertised_host.clone(),
                port: options.advertised_port,
                rack: None,
            }))
        });
        let durability = durability.unwrap_or_else(|| Arc::new(LocalDisk::new(ownership.clone())));
        let metadata = match metadata {
            Some(m) => m,
            None => Arc::new(LocalMetadataLog::open(&data_dir.join(METADATA_LOG_DIR))?),
        };
        let cluster_id = metadata.cluster_id().unwrap_or(dir_cluster_id);
        let (image, applied) = replay_metadata(metadata.as_ref()).await?;
        let mut maps = TopicMaps::default();
        let startup_config = with_overrides(&config, &image.broker_configs);
        let opening = std::time::Instant::now();
        let metas: Vec<&TopicMeta> = image.topics.values().collect();
        let threads = startup_config.long("num.recovery.threads.per.data.dir") as usize;
        for topic in topic_registry::open_topics(
            &data_dir,
            &startup_config,
            &|topic, index| ownership.epoch_to_open(topic, index),
            &metas,
            threads,
        )? {
            maps.by_id.insert(topic.id, topic.clone());
            maps.by_name.insert(topic.name.clone(), topic);
        }
        let scanned: u64 = maps
            .by_name
            .values()
            .flat_map(|t| t.partitions())
            .map(|p| p.lock().recovery_scanned_bytes())
            .sum();
        info!(
            topics = maps.by_name.len(),
            %cluster_id,
            open_ms = opening.elapsed().as_millis() as u64,
            recovery_scanned_bytes = scanned,
            "metadata loaded, logs opened"
        );
        let dynamic = image.broker_configs.clone();
        let group_configs = image.group_configs.clone();
        let scram = image.scram_credentials.clone();
        let authorization_enabled = !config.get("authorizer.class.name").is_empty();
        let mut acls = Authorizer::new(AuthorizerConfig {
            super_users: AuthorizerConfig::parse_super_users(config.get("super.users")),
            allow_everyone_if_no_acl_found: config.bool("allow.everyone.if.no.acl.found"),
        });
        for binding in &image.acls {
            acls.add(binding.clone());
        }
        let share_version = image
            .features
            .get(crate::feature_levels::SHARE_VERSION)
            .copied()
            .unwrap_or(0);
        let current = Arc::new(with_overrides(&config, &dynamic));
        let producer_ids = match producer_ids {
            Some(blocks) => ProducerIdAllocator::shared(blocks).await?,
            None => ProducerIdAllocator::open(&data_dir)?,
        };
        let coordinator_epochs = coordinator_epochs
            .unwrap_or_else(|| Arc::new(EpochFile::new(&data_dir, clock.clone())));
        let node = Arc::new(NodeState {
            node_id,
            cluster_id,
            data_dir,
            advertised_host: options.advertised_host,
            advertised_port: options.advertised_port,
            metrics: Metrics::default(),
            clock,
            ownership,
            durability,
            producer_ids,
            coordinator_epochs,
            peers: crate::peers::Peers::new(),
            coordinator_loads: RwLock::new(std::collections::BTreeMap::new()),
            topics: RwLock::new(maps),
            current: RwLock::new(current),
            dynamic: RwLock::new(dynamic),
            group_configs: RwLock::new(group_configs),
            scram: RwLock::new(scram),
            authorization_enabled,
            acls: RwLock::new(acls),
            share_version: std::sync::atomic::AtomicI16::new(share_version),
            feature_gate: tokio::sync::RwLock::new(()),
            metadata_changes: metadata.appended_elsewhere(),
            admin: AsyncMutex::new(MetaStore {
                store: metadata,
                image,
                applied,
            }),
            _dir_lock: dir_lock,
            config,
        });
        node.ensure_internal_topics().await?;
        node.ensure_default_features().await?;
        let share_version = node
            .feature_level(crate::feature_levels::SHARE_VERSION)
            .await;
        node.share_version
            .store(share_version, std::sync::atomic::Ordering::Relaxed);
        Ok(node)
    }

    async fn ensure_internal_topics(&self) -> anyhow::Result<()> {
        let internal = [
            InternalTopic {
                name: CONSUMER_OFFSETS,
                partitions_key: "offsets.topic.num.partitions",
                segment_key: "offsets.topic.segment.bytes",
                configs: &[("cleanup.policy", "compact")],
            },
            InternalTopic {
                name: TRANSACTION_STATE,
                partitions_key: "transaction.state.log.num.partitions",
                segment_key: "transaction.state.log.segment.bytes",
                configs: &[("cleanup.policy", "compact")],
            },
            InternalTopic {
                name: SHARE_GROUP_STATE,
                partitions_key: "share.coordinator.state.topic.num.partitions",
                segment_key: "share.coordinator.state.topic.segment.bytes",
                // Never by time: a share partition's latest snapshot may be old. Superseded
                // records are pruned by the share manager (share.coordinator.state.topic.prune.*).
                configs: &[("cleanup.policy", "delete"), ("retention.ms", "-1")],
            },
        ];
        for topic in internal {
            if self.topic(topic.name).is_some() {
                continue;
            }
            let mut configs = ConfigMap::new();
            for (key, value) in topic.configs {
                configs.insert(*key, *value);
            }
            self.internal_segment_bytes(&mut configs, topic.segment_key);
            let partitions = self.config.long(topic.partitions_key) as u32;
            // In a cluster, brokers starting together race to create them: one wins, the
            // others see its topic once they catch up.
            let mut attempts = 0;
            loop {
                match self
                    .create_topic_inner(topic.name, partitions, configs.clone(), true)
                    .await
                {
                    Ok(_) => break,
                    Err(e) if e.code == ErrorCode::TOPIC_ALREADY_EXISTS => break,
                    Err(e) if e.code == ErrorCode::NOT_CONTROLLER && attempts < START_ATTEMPTS => {
                        attempts += 1;
                    }
                    Err(e) => anyhow::bail!("creating {}: {}", topic.name, e.message),
                }
            }
        }
        Ok(())
    }

    /// Sizes an internal topic's segments by its broker key (`offsets.topic.segment.bytes`, …),
    /// as Kafka does at creation. The value is stored as `internal.segment.bytes` because these
    /// keys, unlike `segment.bytes`, have no 1 MiB lower bound; small segments let the cleaner
    /// reach all but the newest records of a compacted internal topic.
    fn internal_segment_bytes(&self, configs: &mut ConfigMap, broker_key: &str) {
        configs.insert(
            "internal.segment.bytes",
            self.config.long(broker_key).to_string(),
        );
    }

    /// The APIs advertised and served now (feature levels change it at run time).
    pub fn api_table(&self) -> ApiTable {
        use crate::api_table::{broker_api_table, SHARE_APIS, TXN_SHARE_APIS};
        let mut table = broker_api_table();
        if self.share_groups_enabled() {
            table = SHARE_APIS.iter().fold(table, |t, api| t.with(*api));
        }
        if self.txn_share_acks_enabled() {
            table = TXN_SHARE_APIS.iter().fold(table, |t, api| t.with(*api));
        }
        table
    }

    /// APIs decoded even when not advertised, because a feature level turns them off and they
    /// must then answer UNSUPPORTED_VERSION rather than close the connection (as in Kafka).
    pub fn feature_gated_apis(&self) -> ApiTable {
        use crate::api_table::{SHARE_APIS, TXN_SHARE_APIS};
        SHARE_APIS
            .iter()
            .chain(TXN_SHARE_APIS)
            .fold(ApiTable::new(), |t, api| t.with(*api))
    }

    fn share_version(&self) -> i16 {
        self.share_version
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Whether `share.version` is at least 1 (share groups).
    pub fn share_groups_enabled(&self) -> bool {
        self.share_version() >= crate::feature_levels::SHARE_VERSION_SHARE_GROUPS
    }

    /// Whether `share.version` is at least 2 (share-group dead-letter queues, KIP-1191).
    pub fn dead_letter_queues_enabled(&self) -> bool {
        self.share_version() >= crate::feature_levels::SHARE_VERSION_DLQ
    }

    /// Whether `share.version` is at least 3 (transactional acknowledgements, KIP-1289):
    /// TxnShareAcknowledge is advertised and served only then.
    pub fn txn_share_acks_enabled(&self) -> bool {
        self.share_version() >= crate::feature_levels::SHARE_VERSION_TXN_ACKS
    }

    pub fn topic(&self, name: &str) -> Option<Arc<Topic>> {
        self.topics
            .read()
            .expect("topic map lock poisoned")
            .by_name
            .get(name)
            .cloned()
    }

    pub fn topic_by_id(&self, id: Uuid) -> Option<Arc<Topic>> {
        self.topics
            .read()
            .expect("topic map lock poisoned")
            .by_id
            .get(&id)
            .cloned()
    }

    /// Every topic, sorted by name.
    pub fn topic_list(&self) -> Vec<Arc<Topic>> {
        let mut list: Vec<_> = self
            .topics
            .read()
            .expect("topic map lock poisoned")
            .by_name
            .values()
            .cloned()
            .collect();
        list.sort_by(|a, b| a.name.cmp(&b.name));
        list
    }

    /// An existing topic whose name differs from `name` only by '.' versus '_': Kafka refuses
    /// such pairs because their metric names would be the same.
    pub fn colliding_topic(&self, name: &str) -> Option<String> {
        let canonical = |n: &str| n.replace('.', "_");
        let wanted = canonical(name);
        self.topics
            .read()
            .expect("topic map lock poisoned")
            .by_name
            .keys()
            .find(|existing| existing.as_str() != name && canonical(existing) == wanted)
            .cloned()
    }

    /// The configuration in force: static values with the dynamic broker overrides applied.
    pub fn current_config(&self) -> Arc<BrokerConfig> {
        self.current.read().expect("config lock poisoned").clone()
    }

    /// The dynamic broker overrides alone.
    pub fn dynamic_broker_overrides(&self) -> ConfigMap {
        self.dynamic.read().expect("config lock poisoned").clone()
    }

    /// Appends `record` to the metadata store durably, then applies it to the image.
    /// The metadata, locked for an admin change (or a read that must be current). In a cluster
    /// it first applies what other brokers appended, so the change is decided on the newest
    /// image; the append then fails as stale if another broker still got in between.
    async fn admin(&self) -> tokio::sync::MutexGuard<'_, MetaStore> {
        let mut store = self.admin.lock().await;
        if self.metadata_changes.is_some() {
            if let Err(e) = self.catch_up(&mut store).await {
                warn!(error = %e, "cannot read the metadata other brokers appended");
            }
        }
        store
    }

    /// Applies the records appended to the store since this node last read it (by other
    /// brokers of a cluster); returns how many.
    ///
    /// # Errors
    /// The store cannot be read (nothing of this call applied).
    async fn catch_up(&self, store: &mut MetaStore) -> anyhow::Result<usize> {
        let records = store.store.read_from(store.applied).await?;
        for record in &records {
            store.applied += 1;
            if let Some(record) = record {
                store.image.replay(record);
                if let Err(e) = self.apply(record) {
                    warn!(error = %e.message, ?record, "cannot apply a metadata record");
                }
            }
        }
        Ok(records.len())
    }

    /// Applies, under the admin lock, what other brokers appended to the metadata since the
    /// last call; a no-op on a single node.
    ///
    /// # Errors
    /// The store cannot be read.
    pub async fn follow_metadata(&self) -> anyhow::Result<usize> {
        let mut store = self.admin.lock().await;
        self.catch_up(&mut store).await
    }

    /// Appends `record` durably after every record applied, then applies it: to the image and
    /// to the node ([`NodeState::apply`]) — the one way a metadata change takes effect, here
    /// or, through [`NodeState::catch_up`], on every other broker of a cluster.
    async fn append_meta(
        &self,
        store: &mut MetaStore,
        record: MetaRecord,
    ) -> Result<(), AdminError> {
        match store
            .store
            .append(&record, store.applied, self.now_ms())
            .await
        {
            Ok(()) => {}
            Err(AppendError::Stale) => {
                if let Err(e) = self.catch_up(store).await {
                    warn!(error = %e, "cannot read the metadata other brokers appended");
                }
                return Err(stale_metadata());
            }
            Err(AppendError::Failed(e)) => {
                return Err(AdminError::new(ErrorCode::KAFKA_STORAGE_ERROR, e))
            }
        }
        store.applied += 1;
        store.image.replay(&record);
        self.apply(&record)
    }

    /// What a metadata record changes on this node besides the image: open topics, their
    /// configs, the mirrors read without the admin lock.
    ///
    /// # Errors
    /// A log could not be opened or reconfigured (the record stays applied to the image).
    fn apply(&self, record: &MetaRecord) -> Result<(), AdminError> {
        match record {
            MetaRecord::Topic(meta) => match self.topic(&meta.name) {
                Some(topic) if topic.id == meta.id => self.change_topic(&topic, meta),
                Some(topic) => {
                    self.remove_deleted_topic(&topic.name, topic.id);
                    self.open_created_topic(meta)
                }
                None => self.open_created_topic(meta),
            },
            MetaRecord::RemoveTopic { name, id } => {
                self.remove_deleted_topic(name, *id);
                Ok(())
            }
            MetaRecord::BrokerConfigs(configs) => {
                let current = with_overrides(&self.config, configs);
                *self.dynamic.write().expect("config lock poisoned") = configs.clone();
                *self.current.write().expect("config lock poisoned") = Arc::new(current);
                for topic in self.topic_list() {
                    self.apply_log_configs(&topic)?;
                }
                Ok(())
            }
            MetaRecord::FeatureLevel { name, level } => {
                if name == crate::feature_levels::SHARE_VERSION {
                    self.share_version
                        .store(*level, std::sync::atomic::Ordering::Relaxed);
                }
                Ok(())
            }
            MetaRecord::GroupConfigs { group, configs } => {
                let mut all = self
                    .group_configs
                    .write()
                    .expect("group config lock poisoned");
                if configs.is_empty() {
                    all.remove(group);
                } else {
                    all.insert(group.clone(), configs.clone());
                }
                Ok(())
            }
            MetaRecord::ScramCredential {
                user,
                mechanism,
                credential,
            } => {
                let mut scram = self.scram.write().expect("scram lock poisoned");
                scram.insert((user.clone(), *mechanism), credential.clone());
                Ok(())
            }
            MetaRecord::RemoveScramCredential { user, mechanism } => {
                let mut scram = self.scram.write().expect("scram lock poisoned");
                scram.remove(&(user.clone(), *mechanism));
                Ok(())
            }
            MetaRecord::Acl(binding) => {
                self.acls
                    .write()
                    .expect("acl lock poisoned")
                    .add(binding.clone());
                Ok(())
            }
            MetaRecord::RemoveAcl(binding) => {
                self.acls
                    .write()
                    .expect("acl lock poisoned")
                    .remove(binding);
                Ok(())
            }
        }
    }

    /// Creates a topic; `partitions` and configs must already be validated.
    ///
    /// # Errors
    /// TOPIC_ALREADY_EXISTS, or KAFKA_STORAGE_ERROR when the metadata or a log cannot be written.
    pub async fn create_topic(
        &self,
        name: &str,
        partitions: u32,
        configs: ConfigMap,
    ) -> Result<Arc<Topic>, AdminError> {
        self.create_topic_inner(name, partitions, configs, false)
            .await
    }

    async fn create_topic_inner(
        &self,
        name: &str,
        partitions: u32,
        configs: ConfigMap,
        internal: bool,
    ) -> Result<Arc<Topic>, AdminError> {
        let mut store = self.admin().await;
        if self.topic(name).is_some() {
            return Err(AdminError::new(
                ErrorCode::TOPIC_ALREADY_EXISTS,
                format!("Topic '{name}' already exists."),
            ));
        }
        if let Some(existing) = self.colliding_topic(name) {
            return Err(AdminError::new(
                ErrorCode::INVALID_TOPIC_EXCEPTION,
                format!("Topic '{name}' collides with existing topic: {existing}"),
            ));
        }
        let meta = TopicMeta {
            name: name.to_string(),
            id: Uuid::new_v4(),
            partitions,
            configs,
            internal,
        };
        self.append_meta(&mut store, MetaRecord::Topic(meta))
            .await?;
        self.topic(name).ok_or_else(|| {
            AdminError::new(ErrorCode::UNKNOWN_SERVER_ERROR, "the topic created is gone")
        })
    }

    /// Opens a topic a record created (here or on another broker of the cluster).
    fn open_created_topic(&self, meta: &TopicMeta) -> Result<(), AdminError> {
        // Stale directories of an earlier topic with this name must not be adopted.
        for index in 0..meta.partitions as i32 {
            let dir = topic_registry::partition_dir(&self.data_dir, &meta.name, index);
            if dir.exists() {
                let _ = fs::remove_dir_all(&dir);
            }
        }
        let topic = open_topic(
            &self.data_dir,
            &self.current_config(),
            &|topic, index| self.ownership.epoch_to_open(topic, index),
            meta,
            Opening::New,
        )
        .map_err(|e| AdminError::new(ErrorCode::KAFKA_STORAGE_ERROR, e.to_string()))?;
        let mut maps = self.topics.write().expect("topic map lock poisoned");
        maps.by_id.insert(topic.id, topic.clone());
        maps.by_name.insert(meta.name.clone(), topic);
        info!(topic = %meta.name, partitions = meta.partitions, id = %uuid_base64(meta.id), "topic created");
        Ok(())
    }

    /// The topic an admin change names, or Kafka's refusal when there is none.
    fn admin_topic(&self, name: &str) -> Result<Arc<Topic>, AdminError> {
        self.topic(name).ok_or_else(|| {
            AdminError::new(
                ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
                "This server does not host this topic-partition.",
            )
        })
    }

    /// Deletes a topic and its data.
    ///
    /// # Errors
    /// UNKNOWN_TOPIC_OR_PARTITION, or KAFKA_STORAGE_ERROR.
    pub async fn delete_topic(&self, name: &str) -> Result<Uuid, AdminError> {
        let mut store = self.admin().await;
        let topic = self.admin_topic(name)?;
        self.append_meta(
            &mut store,
            MetaRecord::RemoveTopic {
                name: name.to_string(),
                id: topic.id,
            },
        )
        .await?;
        Ok(topic.id)
    }

    /// Closes and removes a topic a record deleted (here or on another broker).
    fn remove_deleted_topic(&self, name: &str, id: Uuid) {
        let Some(topic) = self.topic(name).filter(|t| t.id == id) else {
            return;
        };
        {
            let mut maps = self.topics.write().expect("topic map lock poisoned");
            maps.by_name.remove(name);
            maps.by_id.remove(&topic.id);
        }
        // Moved aside now (a name can be reused at once), removed in the background as Kafka
        // does; a restart removes whatever a crash left (`remove_deleted_dirs`).
        let mut trash = Vec::with_capacity(topic.partition_count());
        for p in topic.partitions() {
            let dir = topic_registry::partition_dir(&self.data_dir, name, p.index);
            let aside = self.data_dir.join(format!(
                "{}-{}.{}-delete",
                name,
                p.index,
                uuid_base64(topic.id)
            ));
            match fs::rename(&dir, &aside) {
                Ok(()) => trash.push(aside),
                Err(e) => warn!(?dir, error = %e, "could not move deleted partition aside"),
            }
        }
        tokio::task::spawn_blocking(move || {
            for dir in trash {
                if let Err(e) = fs::remove_dir_all(&dir) {
                    warn!(?dir, error = %e, "could not remove deleted partition");
                }
            }
        });
        info!(topic = name, "topic deleted");
        for p in topic.partitions() {
            p.wake();
        }
    }

    /// Grows a topic to `partitions`.
    ///
    /// # Errors
    /// UNKNOWN_TOPIC_OR_PARTITION, INVALID_PARTITIONS, or KAFKA_STORAGE_ERROR.
    pub async fn create_partitions(
        &self,
        name: &str,
        partitions: u32,
        validate_only: bool,
    ) -> Result<(), AdminError> {
        let mut store = self.admin().await;
        let topic = self.admin_topic(name)?;
        let current = topic.partition_count() as u32;
        if partitions < current {
            return Err(AdminError::new(
                ErrorCode::INVALID_PARTITIONS,
                format!("Topic currently has {current} partitions, which is higher than the requested {partitions}."),
            ));
        }
        if partitions == current {
            return Err(AdminError::new(
                ErrorCode::INVALID_PARTITIONS,
                format!("Topic already has {current} partitions."),
            ));
        }
        if validate_only {
            return Ok(());
        }
        let mut meta = topic.meta();
        meta.partitions = partitions;
        self.append_meta(&mut store, MetaRecord::Topic(meta)).await
    }

    /// Applies a record that changed an open topic: its partition count, its configs.
    fn change_topic(&self, topic: &Topic, meta: &TopicMeta) -> Result<(), AdminError> {
        if meta.partitions as usize > topic.partition_count() {
            grow_topic(
                &self.data_dir,
                &self.current_config(),
                &|topic, index| self.ownership.epoch_to_open(topic, index),
                topic,
                meta,
            )
            .map_err(|e| AdminError::new(ErrorCode::KAFKA_STORAGE_ERROR, e.to_string()))?;
        }
        if topic.overrides() != meta.configs {
            topic.set_overrides(meta.configs.clone());
            self.apply_log_configs(topic)?;
        }
        Ok(())
    }

    /// Replaces a topic's overrides (validated by the caller) and applies them to its logs.
    ///
    /// # Errors
    /// UNKNOWN_TOPIC_OR_PARTITION or KAFKA_STORAGE_ERROR.
    pub async fn set_topic_configs(
        &self,
        name: &str,
        configs: ConfigMap,
    ) -> Result<(), AdminError> {
        let mut store = self.admin().await;
        let topic = self.admin_topic(name)?;
        let mut meta = topic.meta();
        meta.configs = configs;
        self.append_meta(&mut store, MetaRecord::Topic(meta)).await
    }

    /// A group's config overrides (empty if it has none; the group need not exist).
    pub fn group_config_overrides(&self, group: &str) -> ConfigMap {
        self.group_configs
            .read()
            .expect("group config lock poisoned")
            .get(group)
            .cloned()
            .unwrap_or_default()
    }

    /// The groups that have config overrides.
    pub fn groups_with_configs(&self) -> Vec<String> {
        self.group_configs
            .read()
            .expect("group config lock poisoned")
            .keys()
            .cloned()
            .collect()
    }

    /// A share group's effective settings: its overrides, else the broker's values.
    pub fn share_group_settings(&self, group: &str) -> crate::group_configs::ShareGroupSettings {
        crate::group_configs::ShareGroupSettings::resolve(
            &self.current_config(),
            &self.group_config_overrides(group),
        )
    }

    /// Replaces a group's overrides (validated by the caller) and persists them.
    ///
    /// # Errors
    /// KAFKA_STORAGE_ERROR.
    pub async fn set_group_configs(
        &self,
        group: &str,
        configs: ConfigMap,
    ) -> Result<(), AdminError> {
        let mut store = self.admin().await;
        self.append_meta(
            &mut store,
            MetaRecord::GroupConfigs {
                group: group.to_string(),
                configs,
            },
        )
        .await
    }

    /// `user`'s SCRAM credential for `mechanism`.
    pub fn scram_credential(
        &self,
        user: &str,
        mechanism: ScramMechanism,
    ) -> Option<ScramCredential> {
        self.scram
            .read()
            .expect("scram lock poisoned")
            .get(&(user.to_string(), mechanism))
            .cloned()
    }

    /// Every user with a SCRAM credential and the mechanisms and iterations of each.
    pub fn scram_users(&self) -> std::collections::BTreeMap<String, Vec<(ScramMechanism, i32)>> {
        let mut users = std::collections::BTreeMap::<String, Vec<_>>::new();
        for ((user, mechanism), credential) in
            self.scram.read().expect("scram lock poisoned").iter()
        {
            users
                .entry(user.clone())
                .or_default()
                .push((*mechanism, credential.iterations));
        }
        users
    }

    /// Applies SCRAM credential changes (validated by the caller) as one durable batch of
    /// records, in order, then to the credentials authentication reads.
    ///
    /// # Errors
    /// KAFKA_STORAGE_ERROR; records appended before the failure stay applied.
    pub async fn alter_scram_credentials(
        &self,
        records: Vec<MetaRecord>,
    ) -> Result<(), AdminError> {
        let mut store = self.admin().await;
        for record in records {
            debug_assert!(
                matches!(
                    record,
                    MetaRecord::ScramCredential { .. } | MetaRecord::RemoveScramCredential { .. }
                ),
                "not a SCRAM record: {record:?}"
            );
            self.append_meta(&mut store, record).await?;
        }
        Ok(())
    }

    /// The ACLs, for a check or a filter. Hold the guard only for that (no await).
    pub fn acls(&self) -> std::sync::RwLockReadGuard<'_, Authorizer> {
        self.acls.read().expect("acl lock poisoned")
    }

    /// Creates or deletes ACLs (validated by the caller) as durable records, in order, then
    /// in the ACLs checks read. A creation of an ACL that exists and a deletion of one that
    /// does not are no-ops, written nowhere.
    ///
    /// # Errors
    /// KAFKA_STORAGE_ERROR; records appended before the failure stay applied.
    pub async fn alter_acls(&self, records: Vec<MetaRecord>) -> Result<(), AdminError> {
        let mut store = self.admin().await;
        for record in records {
            let needed = match &record {
                MetaRecord::Acl(b) => !store.image.acls.contains(b),
                MetaRecord::RemoveAcl(b) => store.image.acls.contains(b),
                other => {
                    debug_assert!(false, "not an ACL record: {other:?}");
                    false
                }
            };
            if !needed {
                continue;
            }
            self.append_meta(&mut store, record).await?;
        }
        Ok(())
    }

    fn apply_log_configs(&self, topic: &Topic) -> Result<(), AdminError> {
        let log_config = topic_registry::log_config(&self.current_config(), &topic.overrides());
        for p in topic.partitions() {
            p.lock()
                .set_config(log_config)
                .map_err(|e| AdminError::new(ErrorCode::INVALID_CONFIG, e.to_string()))?;
        }
        Ok(())
    }

    /// Finalized feature levels and their epoch (ApiVersions' FinalizedFeaturesEpoch).
    pub async fn features(&self) -> (std::collections::BTreeMap<String, i16>, i64) {
        let store = self.admin().await;
        let mut features = store.image.features.clone();
        // Directories made before metadata.version was reported have no record of it.
        features
            .entry(crate::feature_levels::METADATA_VERSION.to_string())
            .or_insert(crate::feature_levels::METADATA_VERSION_LEVEL);
        (features, store.image.features_epoch)
    }

    /// A finalized feature level (0 when not finalized).
    pub async fn feature_level(&self, name: &str) -> i16 {
        self.admin()
            .await
            .image
            .features
            .get(name)
            .copied()
            .unwrap_or(0)
    }

    /// Finalizes `name` at `level` (checked by the caller).
    ///
    /// # Errors
    /// KAFKA_STORAGE_ERROR.
    pub async fn set_feature_level(&self, name: &str, level: i16) -> Result<(), AdminError> {
        let mut store = self.admin().await;
        self.append_meta(
            &mut store,
            MetaRecord::FeatureLevel {
                name: name.to_string(),
                level,
            },
        )
        .await
    }

    /// A new data directory (a new cluster) starts at the newest level of every feature.
    async fn ensure_default_features(&self) -> anyhow::Result<()> {
        let mut attempts = 0;
        'again: loop {
            let mut store = self.admin().await;
            if store.image.features_epoch > 0 {
                return Ok(());
            }
            for spec in crate::feature_levels::FEATURES
                .iter()
                .filter(|f| f.default_level > 0)
            {
                let record = MetaRecord::FeatureLevel {
                    name: spec.name.to_string(),
                    level: spec.default_level,
                };
                match self.append_meta(&mut store, record).await {
                    Ok(()) => {}
                    // Another broker of a new cluster finalizes them first.
                    Err(e) if e.code == ErrorCode::NOT_CONTROLLER && attempts < START_ATTEMPTS => {
                        attempts += 1;
                        continue 'again;
                    }
                    Err(e) => anyhow::bail!("finalizing {}: {}", spec.name, e.message),
                }
            }
            return Ok(());
        }
    }

    /// Replaces the dynamic broker configs (validated by the caller).
    ///
    /// # Errors
    /// KAFKA_STORAGE_ERROR.
    pub async fn set_broker_overrides(&self, configs: ConfigMap) -> Result<(), AdminError> {
        let mut store = self.admin().await;
        self.append_meta(&mut store, MetaRecord::BrokerConfigs(configs))
            .await
    }

    /// Flushes and closes every log, `num.recovery.threads.per.data.dir` at a time (Kafka uses
    /// them for flushing at shutdown too), then fsyncs the data directory's file system once,
    /// which makes every clean-shutdown marker durable; called once, at shutdown.
    ///
    /// # Errors
    /// The first log that could not be closed cleanly (it will be recovered at next start).
    pub fn close(&self) -> anyhow::Result<()> {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let partitions: Vec<Arc<topic_registry::Partition>> = self
            .topic_list()
            .iter()
            .flat_map(|t| t.partitions())
            .collect();
        let threads = self
            .current_config()
            .long("num.recovery.threads.per.data.dir")
            .clamp(1, 64) as usize;
        let next = AtomicUsize::new(0);
        let first_error = std::sync::Mutex::new(None);
        std::thread::scope(|scope| {
            for _ in 0..threads.min(partitions.len().max(1)) {
                scope.spawn(|| {
                    while let Some(p) = partitions.get(next.fetch_add(1, Ordering::Relaxed)) {
                        if let Err(e) = p.shutdown() {
                            let e = anyhow::anyhow!("{}-{}: {e}", p.topic, p.index);
                            first_error
                                .lock()
                                .unwrap_or_else(std::sync::PoisonError::into_inner)
                                .get_or_insert(e);
                        }
                    }
                });
            }
        });
        sync_file_system(&self.data_dir);
        match first_error
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
        {
            None => Ok(()),
            Some(e) => Err(e),
        }
    }

    /// Wall-clock milliseconds, from the node's [`Clock`].
    /// Whether this broker is one of a cluster's (its metadata shared through etcd, others
    /// owning some partitions).
    pub fn in_cluster(&self) -> bool {
        self.metadata_changes.is_some()
    }

    pub fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }

    /// Whether an api key is currently served (used by handlers that gate on features).
    pub fn serves(&self, api: ApiKey) -> bool {
        self.api_table().get(api as i16).is_some()
    }
}

/// `config` with `overrides` applied (overrides were validated when they were set).
/// `config` with the dynamic broker `overrides` set on it (a stored value that no longer
/// validates is logged and left out).
pub(crate) fn with_overrides(config: &BrokerConfig, overrides: &ConfigMap) -> BrokerConfig {
    let mut out = config.clone();
    for (k, v) in overrides.iter() {
        if let Err(e) = out.set(k, v) {
            warn!(key = k, error = %e, "ignoring stored dynamic broker config");
        }
    }
    out
}

/// `syncfs(2)` on the file system holding `dir` (logged, not fatal: what it makes durable
/// early is only what spares the next start a recovery).
fn sync_file_system(dir: &Path) {
    use std::os::fd::AsRawFd;
    match fs::File::open(dir) {
        // SAFETY: syncfs only reads the descriptor, which `f` keeps open for the call.
        Ok(f) => {
            if unsafe { libc::syncfs(f.as_raw_fd()) } != 0 {
                warn!(error = %std::io::Error::last_os_error(), "syncfs failed at shutdown");
            }
        }
        Err(e) => warn!(?dir, error = %e, "cannot open the data directory to sync it"),
    }
}

fn remove_deleted_dirs(data_dir: &Path) {
    let Ok(entries) = fs::read_dir(data_dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        if name.to_string_lossy().ends_with("-delete") {
            let _ = fs::remove_dir_all(entry.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuid_base64_matches_kafka() {
        // Kafka: Uuid(0, 1).toString() == "AAAAAAAAAAAAAAAAAAAAAQ"
        assert_eq!(uuid_base64(Uuid::from_u128(1)), "AAAAAAAAAAAAAAAAAAAAAQ");
        assert_eq!(
            uuid_base64(Uuid::from_u128(u128::MAX)),
            "_____________________w"
        );
        assert_eq!(uuid_base64(Uuid::new_v4()).len(), 22);
    }
}
