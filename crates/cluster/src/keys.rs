//! Where a cluster's state lives in etcd: everything under `/shoal/<cluster>/`.
//!
//! | key | value | written |
//! |---|---|---|
//! | `brokers/<node id>` | the broker's endpoint (`host:port[ rack]`) | under the broker's lease |
//! | `owners/<topic>/<partition>` | `node_id leader_epoch` | under the owner's lease; its mod revision is the fence commits compare |
//! | `epochs/<topic>/<partition>` | the last leader epoch handed out | with each claim |
//! | `assigner` | the elected assigner's node id | under its lease |
//! | `assignments/<topic>/<partition>` | the node id the partition is assigned to | by the assigner, fenced by its key |
//! | `ends/<topic>/<partition>` | the committed end offset (decimal) | by each commit |
//! | `starts/<topic>/<partition>` | the log start offset (decimal): entries wholly below it are deleted | by the owner's trim ([`crate::retention`]), fenced |
//! | `index/<topic>/<partition>/<base offset>` | where the records from that offset are ([`crate::ObjectRef`]) | by each commit |
//! | `collector` | the object collector's last round: `listed referenced awaiting deleted` | under the collecting broker's lease |
//! | `cluster-id` | the cluster id clients are told (Kafka's base64 UUID) | once, by the first broker |
//! | `meta/<sequence>` | one metadata record (topics, configs, features, credentials) | created iff absent, by the broker that made the change |
//! | `producer-ids` | the first producer id no broker has reserved (decimal) | compare-and-swap, a block at a time |
//!
//! Numbers in keys are zero-padded so that a range read returns them in order. Topic names are
//! Kafka's (letters, digits, `.`, `_`, `-`), so `/` separates safely.

/// The keys of one cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keys {
    root: String,
}

impl Keys {
    /// The keys of cluster `cluster` (a name of letters, digits, `.`, `_`, `-`).
    ///
    /// # Errors
    /// An empty cluster name or one with other characters.
    pub fn new(cluster: &str) -> crate::Result<Keys> {
        let valid = !cluster.is_empty()
            && cluster
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
        if !valid {
            return Err(crate::Error::Invalid {
                what: "cluster name",
                detail: format!("{cluster:?}: use letters, digits, '.', '_' or '-'"),
            });
        }
        Ok(Keys {
            root: format!("/shoal/{cluster}/"),
        })
    }

    pub fn brokers(&self) -> String {
        format!("{}brokers/", self.root)
    }

    pub fn broker(&self, node_id: i32) -> String {
        format!("{}{node_id:010}", self.brokers())
    }

    pub fn owners(&self) -> String {
        format!("{}owners/", self.root)
    }

    pub fn owner(&self, topic: &str, partition: i32) -> String {
        format!("{}{topic}/{partition:010}", self.owners())
    }

    pub fn assigner(&self) -> String {
        format!("{}assigner", self.root)
    }

    pub fn assignments(&self) -> String {
        format!("{}assignments/", self.root)
    }

    pub fn assignment(&self, topic: &str, partition: i32) -> String {
        format!("{}{topic}/{partition:010}", self.assignments())
    }

    /// The (topic, partition) an assignment key names.
    pub fn parse_assignment(&self, key: &str) -> Option<(String, i32)> {
        let rest = key.strip_prefix(&self.assignments())?;
        let (topic, partition) = rest.rsplit_once('/')?;
        Some((topic.to_string(), partition.parse().ok()?))
    }

    pub fn epoch(&self, topic: &str, partition: i32) -> String {
        format!("{}epochs/{topic}/{partition:010}", self.root)
    }

    pub fn end(&self, topic: &str, partition: i32) -> String {
        format!("{}ends/{topic}/{partition:010}", self.root)
    }

    /// The log start offset the partition's owner recorded (retention, DeleteRecords).
    pub fn start(&self, topic: &str, partition: i32) -> String {
        format!("{}starts/{topic}/{partition:010}", self.root)
    }

    pub fn index(&self, topic: &str, partition: i32) -> String {
        format!("{}index/{topic}/{partition:010}/", self.root)
    }

    /// Every partition's index entries.
    pub fn index_all(&self) -> String {
        format!("{}index/", self.root)
    }

    /// The object collector's last report (under its lease).
    pub fn collector(&self) -> String {
        format!("{}collector", self.root)
    }

    pub fn index_entry(&self, topic: &str, partition: i32, base_offset: i64) -> String {
        format!("{}{base_offset:020}", self.index(topic, partition))
    }

    pub fn cluster_id(&self) -> String {
        format!("{}cluster-id", self.root)
    }

    pub fn metadata_log(&self) -> String {
        format!("{}meta/", self.root)
    }

    pub fn metadata_record(&self, sequence: u64) -> String {
        format!("{}{sequence:020}", self.metadata_log())
    }

    /// The sequence number a metadata record key names.
    pub fn parse_metadata_record(&self, key: &str) -> Option<u64> {
        key.strip_prefix(&self.metadata_log())?.parse().ok()
    }

    pub fn producer_ids(&self) -> String {
        format!("{}producer-ids", self.root)
    }

    /// The last transaction-coordinator epoch handed out.
    pub fn coordinator_epochs(&self) -> String {
        format!("{}txn-coordinator-epoch", self.root)
    }

    /// The (topic, partition) an owner key names.
    pub fn parse_owner(&self, key: &str) -> Option<(String, i32)> {
        let rest = key.strip_prefix(&self.owners())?;
        let (topic, partition) = rest.rsplit_once('/')?;
        Some((topic.to_string(), partition.parse().ok()?))
    }

    /// The (topic, partition) a committed-end key names.
    pub fn parse_end(&self, key: &str) -> Option<(String, i32)> {
        let rest = key.strip_prefix(&format!("{}ends/", self.root))?;
        let (topic, partition) = rest.rsplit_once('/')?;
        Some((topic.to_string(), partition.parse().ok()?))
    }

    /// The (topic, partition) an index entry key names.
    pub fn parse_index_entry(&self, key: &str) -> Option<(String, i32)> {
        let rest = key.strip_prefix(&format!("{}index/", self.root))?;
        let (partition_path, _base) = rest.rsplit_once('/')?;
        let (topic, partition) = partition_path.rsplit_once('/')?;
        Some((topic.to_string(), partition.parse().ok()?))
    }

    /// The node id a broker key names.
    pub fn parse_broker(&self, key: &str) -> Option<i32> {
        key.strip_prefix(&self.brokers())?.parse().ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_sort_numerically_and_parse_back() {
        let k = Keys::new("c1").unwrap();
        assert!(k.index_entry("t", 0, 9) < k.index_entry("t", 0, 10));
        assert!(k.owner("t", 2) < k.owner("t", 10));
        assert_eq!(
            k.parse_owner(&k.owner("a.b-c", 7)),
            Some(("a.b-c".into(), 7))
        );
        assert_eq!(k.parse_broker(&k.broker(3)), Some(3));
        assert_eq!(k.parse_owner(&k.broker(3)), None);
        assert_eq!(k.parse_end(&k.end("t", 4)), Some(("t".into(), 4)));
        assert_eq!(
            k.parse_index_entry(&k.index_entry("t", 4, 17)),
            Some(("t".into(), 4))
        );
        assert_eq!(k.parse_index_entry(&k.end("t", 4)), None);
        assert!(k.metadata_record(9) < k.metadata_record(10));
        assert_eq!(k.parse_metadata_record(&k.metadata_record(42)), Some(42));
        assert_eq!(k.parse_metadata_record(&k.producer_ids()), None);
    }

    #[test]
    fn a_cluster_name_that_could_escape_its_prefix_is_refused() {
        for bad in ["", "a/b", "a b", "../x"] {
            assert!(Keys::new(bad).is_err(), "{bad:?}");
        }
    }
}
