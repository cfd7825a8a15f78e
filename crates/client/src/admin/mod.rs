//! [`Admin`]: Kafka's admin operations over [`Cluster`] — topics ([`topics`]), configs
//! ([`configs`]), share groups ([`share_groups`]), features ([`features`]) and transactions
//! ([`transactions`]).
//!
//! Owns nothing but a [`Cluster`] handle: every request goes through it, at the version
//! negotiated with the broker it is sent to, and nothing here opens a socket. Requests about a
//! group or a transactional id go to its coordinator ([`Cluster::send_to_coordinator`]);
//! requests about one broker (its configs) go to that broker; the rest go to any broker.
//!
//! Results keep Kafka's admin shape: a call about several items answers for each one, in the
//! order asked, as [`ItemResults`] — `Vec<(item, Result<T, Error>)>` — so one unknown topic
//! does not hide the others' results. The outer `Result` fails only when the request as a whole
//! could not be made (no broker reachable, an api the broker lacks, a request-level error).
//! Each item's error is an [`Error::Kafka`] with the broker's code and message.
//!
//! Responses are untrusted: an item asked about and missing from the answer is
//! [`Error::IncompleteResponse`] for that item, never a panic; items nobody asked about are
//! ignored.
//!
//! Retries, as Kafka's admin client does them: transport failures and retriable request-level
//! errors retry the whole request within [`Cluster::retry`]'s budget; an item whose error says
//! the broker was the wrong one or was not ready (NOT_CONTROLLER, NOT_COORDINATOR,
//! COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS, and for requests to partition
//! leaders NOT_LEADER_OR_FOLLOWER and LEADER_NOT_AVAILABLE) is sent again, the others are
//! final (an unknown topic is not waited for).
//!
//! ```no_run
//! use shoal_client::admin::{Mode, NewTopic};
//! use shoal_client::{Admin, ClientConfig};
//!
//! # async fn run() -> Result<(), shoal_client::Error> {
//! let config = ClientConfig::from_properties([("bootstrap.servers", "127.0.0.1:9092")])?;
//! let admin = Admin::connect(config).await?;
//! let topics = [NewTopic::new("orders").partitions(3), NewTopic::new("audit")];
//! for (name, result) in admin.create_topics(&topics, Mode::Apply).await? {
//!     match result {
//!         Ok(created) => println!("{name}: {}", created.topic_id),
//!         Err(e) => println!("{name}: {} ({e})", e.code()),
//!     }
//! }
//! admin.close().await;
//! # Ok(())
//! # }
//! ```

use std::collections::HashMap;
use std::future::Future;
use std::hash::Hash;
use std::sync::Mutex;

use kafka_protocol::protocol::{Request, StrBytes};
use shoal_protocol::{ApiKey, ErrorCode};

use crate::cluster::{Cluster, CoordinatorType};
use crate::config::ClientConfig;
use crate::error::Error;

pub mod configs;
pub mod features;
pub mod share_groups;
pub mod topics;
pub mod transactions;

pub use configs::{AlterConfigOp, ConfigEntry, ConfigResource, ConfigSource, ResourceType};
pub use features::{FeatureMetadata, FeatureUpdate, UpgradeType};
pub use share_groups::{GroupListing, ShareGroupDescription, ShareMember, SharePartitionOffset};
pub use topics::{
    CreatedTopic, NewTopic, OffsetSpec, PartitionDescription, TopicDescription, TopicListing,
};
pub use transactions::{
    AbortTransaction, ListTransactionsFilter, ProducerState, TransactionDescription,
    TransactionListing,
};

/// One result per item asked about, in the order asked.
pub type ItemResults<K, T> = Vec<(K, Result<T, Error>)>;

/// Whether a change is made or only checked (Kafka's `validate_only`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Mode {
    /// Make the change.
    #[default]
    Apply,
    /// Run every check the broker would and change nothing.
    ValidateOnly,
}

impl Mode {
    fn validate_only(self) -> bool {
        self == Mode::ValidateOnly
    }
}

/// The codes after which an item is sent again: the broker asked was the wrong one or not
/// ready yet (for a partition's leader, after metadata is refreshed: [`Cluster::retry`] does
/// that for these codes). Kafka's admin retries these; every other item error is final.
const ITEM_RETRY_CODES: &[ErrorCode] = &[
    ErrorCode::NOT_LEADER_OR_FOLLOWER,
    ErrorCode::LEADER_NOT_AVAILABLE,
    ErrorCode::NOT_CONTROLLER,
    ErrorCode::NOT_COORDINATOR,
    ErrorCode::COORDINATOR_NOT_AVAILABLE,
    ErrorCode::COORDINATOR_LOAD_IN_PROGRESS,
];

fn retry_item(e: &Error) -> bool {
    matches!(e, Error::Kafka { code, .. } if ITEM_RETRY_CODES.contains(code))
}

/// The admin client: cheap to clone, `Send + Sync`; it shares the [`Cluster`] it is built on.
#[derive(Debug, Clone)]
pub struct Admin {
    cluster: Cluster,
}

impl Admin {
    /// An admin client on an existing cluster handle (shared with producers and consumers).
    pub fn new(cluster: Cluster) -> Admin {
        Admin { cluster }
    }

    /// Connects to the cluster ([`Cluster::connect`]).
    ///
    /// # Errors
    /// As [`Cluster::connect`].
    pub async fn connect(config: ClientConfig) -> Result<Admin, Error> {
        Ok(Admin::new(Cluster::connect(config).await?))
    }

    pub fn cluster(&self) -> &Cluster {
        &self.cluster
    }

    /// Closes the cluster handle ([`Cluster::close`]) — and with it every clone's.
    pub async fn close(&self) {
        self.cluster.close().await;
    }

    /// The broker-side timeout to put in requests that carry one (`request.timeout.ms`).
    fn timeout_ms(&self) -> i32 {
        i32::try_from(self.cluster.config().request_timeout().as_millis()).unwrap_or(i32::MAX)
    }

    /// The node for requests any broker answers but Kafka sends to the controller
    /// (CreateTopics, DeleteTopics, CreatePartitions, UpdateFeatures): the controller metadata
    /// names (in KRaft a broker that forwards), else the first known broker.
    fn controller(&self) -> Result<i32, Error> {
        let m = self.cluster.metadata();
        m.controller_id()
            .filter(|id| m.broker(*id).is_some())
            .or_else(|| m.brokers().map(|b| b.node_id).next())
            .ok_or(Error::UnknownBroker { node_id: -1 })
    }

    /// Sends a request to the controller once, built for the version negotiated with it (for
    /// fields that moved between versions), and returns that version with the answer. A
    /// transport failure marks metadata stale: the controller may have moved. Callers retry
    /// ([`Admin::per_item`], [`Cluster::retry`]).
    async fn controller_once<R, B>(&self, build: B) -> Result<(i16, R::Response), Error>
    where
        R: Request,
        B: Fn(i16) -> R,
    {
        let node = self.controller()?;
        let version = self
            .cluster
            .api_versions(node)
            .await?
            .version(crate::broker::api_key::<R>()?)?;
        let result = self.cluster.send(node, &build(version)).await;
        if result.as_ref().is_err_and(Error::is_retriable) {
            self.cluster.invalidate_metadata();
        }
        result.map(|response| (version, response))
    }

    /// Sends `request` to every broker metadata names (requests each broker answers for its
    /// own coordinators: ListGroups, ListTransactions), each retried, and fails on the first
    /// request-level error (`error_code` reads it from an answer).
    async fn on_every_broker<R, C>(
        &self,
        api: ApiKey,
        request: &R,
        error_code: C,
    ) -> Result<Vec<R::Response>, Error>
    where
        R: Request,
        C: Fn(&R::Response) -> i16,
    {
        let nodes: Vec<i32> = self
            .cluster
            .metadata()
            .brokers()
            .map(|b| b.node_id)
            .collect();
        let mut answers = Vec::with_capacity(nodes.len());
        for node in nodes {
            let response = self
                .cluster
                .retry(|| async {
                    let r = self.cluster.send(node, request).await?;
                    check(api, error_code(&r), None)?;
                    Ok(r)
                })
                .await?;
            answers.push(response);
        }
        Ok(answers)
    }

    /// Sends `request` to the coordinator of `key` and maps the answer with `map`, retried
    /// while either fails retriably; NOT_COORDINATOR and COORDINATOR_NOT_AVAILABLE in the
    /// answer make the next attempt look the coordinator up again.
    async fn coordinator_call<R, T, M>(
        &self,
        kind: CoordinatorType,
        key: &str,
        request: &R,
        map: M,
    ) -> Result<T, Error>
    where
        R: Request,
        M: Fn(R::Response) -> Result<T, Error>,
    {
        let map = &map;
        self.cluster
            .retry(move || async move {
                let response = self.cluster.send_to_coordinator(kind, key, request).await?;
                let result = map(response);
                if result
                    .as_ref()
                    .is_err_and(Error::requires_coordinator_lookup)
                {
                    self.cluster.invalidate_coordinator(kind, key);
                }
                result
            })
            .await
    }

    /// Runs `attempt` for the items still open until each has a final result (see
    /// [`ITEM_RETRY_CODES`]) or the retry budget runs out, when the open ones keep their last
    /// error. `attempt` answers for the items it was given (see [`in_order`]).
    ///
    /// # Errors
    /// The last error of an attempt that failed as a whole.
    async fn per_item<K, T, F, Fut>(
        &self,
        keys: &[K],
        attempt: F,
    ) -> Result<ItemResults<K, T>, Error>
    where
        K: Clone + Eq + Hash,
        F: Fn(Vec<K>) -> Fut,
        Fut: Future<Output = Result<ItemResults<K, T>, Error>>,
    {
        let done: Mutex<HashMap<K, Result<T, Error>>> = Mutex::new(HashMap::new());
        let (done_ref, attempt) = (&done, &attempt);
        let outcome = self
            .cluster
            .retry(move || async move {
                let open: Vec<K> = {
                    let done = done_ref.lock().unwrap_or_else(|e| e.into_inner());
                    keys.iter()
                        .filter(|k| {
                            done.get(*k)
                                .is_none_or(|r| r.as_ref().is_err_and(retry_item))
                        })
                        .cloned()
                        .collect()
                };
                if open.is_empty() {
                    return Ok(());
                }
                let answered = attempt(open).await?;
                let mut again = None;
                let mut done = done_ref.lock().unwrap_or_else(|e| e.into_inner());
                for (key, result) in answered {
                    if let Err(e) = &result {
                        if retry_item(e) {
                            again = Some(e.code());
                        }
                    }
                    done.insert(key, result);
                }
                drop(done);
                if again == Some(ErrorCode::NOT_CONTROLLER) {
                    self.cluster.invalidate_metadata();
                }
                match again {
                    Some(code) => Err(Error::Kafka {
                        code,
                        api: ApiKey::ApiVersions,
                        message: Some("an item is to be sent again".into()),
                    }),
                    None => Ok(()),
                }
            })
            .await;
        let mut done = done.into_inner().unwrap_or_else(|e| e.into_inner());
        match outcome {
            Err(e) if !retry_item(&e) => Err(e),
            _ => Ok(keys
                .iter()
                .map(|k| {
                    let result = done.remove(k).unwrap_or(Err(Error::Timeout {
                        what: "admin request".into(),
                        after: self.cluster.config().default_api_timeout(),
                    }));
                    (k.clone(), result)
                })
                .collect()),
        }
    }
}

pub(crate) fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_owned())
}

/// `Err` for a non-zero item error code, with the broker's message.
pub(crate) fn check(api: ApiKey, code: i16, message: Option<&StrBytes>) -> Result<(), Error> {
    match Error::from_code(api, code, message.map(|m| m.as_str())) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// The answer for each of `keys`, in order, from what a response said about them: the first
/// answer for a key counts, keys nobody asked about are ignored, and a key without an answer
/// is [`Error::IncompleteResponse`].
pub(crate) fn in_order<K, T>(
    api: ApiKey,
    keys: &[K],
    answers: impl IntoIterator<Item = (K, Result<T, Error>)>,
) -> ItemResults<K, T>
where
    K: Clone + Eq + Hash + std::fmt::Debug,
{
    let mut found: HashMap<K, Result<T, Error>> = HashMap::new();
    for (key, result) in answers {
        if keys.contains(&key) {
            found.entry(key).or_insert(result);
        }
    }
    keys.iter()
        .map(|k| {
            let result = found.remove(k).unwrap_or_else(|| {
                Err(Error::IncompleteResponse {
                    api,
                    item: format!("{k:?}"),
                })
            });
            (k.clone(), result)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_come_in_the_order_asked_and_missing_ones_are_errors() {
        let keys = vec!["a".to_string(), "b".to_string(), "c".to_string()];
        let answers = vec![
            ("c".to_string(), Ok(3)),
            ("x".to_string(), Ok(9)),
            (
                "a".to_string(),
                Err(Error::from_code(ApiKey::CreateTopics, 36, None).unwrap()),
            ),
            ("a".to_string(), Ok(1)),
        ];
        let results = in_order(ApiKey::CreateTopics, &keys, answers);
        assert_eq!(results.len(), 3);
        assert_eq!(results[0].0, "a");
        assert_eq!(
            results[0].1.as_ref().unwrap_err().code(),
            ErrorCode::TOPIC_ALREADY_EXISTS
        );
        assert!(matches!(
            &results[1].1,
            Err(Error::IncompleteResponse { api: ApiKey::CreateTopics, item }) if item == "\"b\""
        ));
        assert!(!results[1].1.as_ref().unwrap_err().is_retriable());
        assert_eq!(results[2].1.as_ref().unwrap(), &3);
    }

    #[test]
    fn only_wrong_broker_and_loading_errors_resend_an_item() {
        let e = |code: i16| Error::from_code(ApiKey::DescribeConfigs, code, None).unwrap();
        assert!(retry_item(&e(ErrorCode::NOT_CONTROLLER.0)));
        assert!(retry_item(&e(ErrorCode::NOT_LEADER_OR_FOLLOWER.0)));
        assert!(retry_item(&e(ErrorCode::COORDINATOR_LOAD_IN_PROGRESS.0)));
        assert!(retry_item(&e(ErrorCode::NOT_COORDINATOR.0)));
        assert!(!retry_item(&e(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION.0)));
        assert!(!retry_item(&e(ErrorCode::REQUEST_TIMED_OUT.0)));
    }

    #[test]
    fn handles_and_futures_are_send() {
        fn send_sync<T: Send + Sync + Clone + std::fmt::Debug>() {}
        send_sync::<Admin>();
        fn spawnable<F: Future + Send>(_: F) {}
        fn check(a: &Admin) {
            spawnable(a.create_topics(&[NewTopic::new("t")], Mode::Apply));
            spawnable(a.delete_topics(&["t"]));
            spawnable(a.describe_topics(&["t"]));
            spawnable(a.describe_configs(&[ConfigResource::topic("t")]));
            spawnable(a.describe_share_groups(&["g"]));
            spawnable(a.list_share_groups());
            spawnable(a.describe_features());
            spawnable(a.describe_transactions(&["t"]));
            spawnable(a.list_transactions(&ListTransactionsFilter::default()));
        }
        let _ = check;
    }
}
