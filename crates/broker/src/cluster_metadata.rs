//! Cluster metadata as records: topics (name, id, partition count, config overrides), dynamic
//! broker configs, feature levels, group configs, SCRAM credentials and ACLs.
//!
//! Like Kafka's KRaft metadata log, every change is a record appended (and fsynced) to the
//! `__cluster_metadata` log before it takes effect; at start the image is rebuilt by replaying
//! that log. The image itself is plain data with no I/O.

use std::collections::{BTreeMap, BTreeSet};

use uuid::Uuid;

use crate::config::ConfigMap;
use shoal_codec::wire::{Reader, Writer};
use shoal_codec::DecodeError;
use shoal_core::acl::{
    AccessControlEntry, AclBinding, AclOperation, AclPermission, PatternType, ResourcePattern,
    ResourceType,
};
use shoal_core::sasl::scram::{ScramCredential, ScramMechanism};

/// One topic as the metadata log knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicMeta {
    pub name: String,
    pub id: Uuid,
    pub partitions: u32,
    pub configs: ConfigMap,
    pub internal: bool,
}

/// A change to the cluster metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MetaRecord {
    /// A topic was created, grew, or had its configs replaced.
    Topic(TopicMeta),
    /// A topic was deleted.
    RemoveTopic { name: String, id: Uuid },
    /// The dynamic broker configs were replaced.
    BrokerConfigs(ConfigMap),
    /// A feature's finalized level changed (UpdateFeatures, or the defaults of a new
    /// directory); level 0 removes it.
    FeatureLevel { name: String, level: i16 },
    /// Every override of one group (GROUP config resource); empty removes them.
    GroupConfigs { group: String, configs: ConfigMap },
    /// A user's SCRAM credential for one mechanism was set (Kafka's
    /// `UserScramCredentialRecord`): salt, StoredKey, ServerKey and iterations, never the
    /// password.
    ScramCredential {
        user: String,
        mechanism: ScramMechanism,
        credential: ScramCredential,
    },
    /// A user's SCRAM credential for one mechanism was deleted.
    RemoveScramCredential {
        user: String,
        mechanism: ScramMechanism,
    },
    /// An ACL was created (Kafka's `AccessControlEntryRecord`).
    Acl(AclBinding),
    /// An ACL was deleted.
    RemoveAcl(AclBinding),
}

const RECORD_TOPIC: i16 = 0;
const RECORD_REMOVE_TOPIC: i16 = 1;
const RECORD_BROKER_CONFIGS: i16 = 2;
const RECORD_FEATURE_LEVEL: i16 = 3;
const RECORD_GROUP_CONFIGS: i16 = 4;
const RECORD_SCRAM_CREDENTIAL: i16 = 5;
const RECORD_REMOVE_SCRAM_CREDENTIAL: i16 = 6;
const RECORD_ACL: i16 = 7;
const RECORD_REMOVE_ACL: i16 = 8;
const VERSION: i16 = 0;

fn write_configs(w: &mut Writer, configs: &ConfigMap) {
    w.len_i32(configs.len());
    for (k, v) in configs.iter() {
        w.string_i32(k);
        w.string_i32(v);
    }
}

fn read_configs(r: &mut Reader<'_>) -> Result<ConfigMap, DecodeError> {
    // A config takes at least 8 bytes (two empty strings).
    let n = r.count_i32(8)?;
    let mut configs = ConfigMap::new();
    for _ in 0..n {
        let k = r.string_i32()?;
        let v = r.string_i32()?;
        configs.insert(k, v);
    }
    Ok(configs)
}

impl MetaRecord {
    /// `(key, value)` for the log. The key names what the record is about.
    pub fn encode(&self) -> (Vec<u8>, Vec<u8>) {
        let mut key = Writer::default();
        let mut value = Writer::default();
        value.i16(VERSION);
        match self {
            MetaRecord::Topic(t) => {
                key.i16(RECORD_TOPIC);
                key.string_i32(&t.name);
                value.uuid(t.id.as_bytes());
                value.i32(t.partitions as i32);
                value.i8(i8::from(t.internal));
                write_configs(&mut value, &t.configs);
            }
            MetaRecord::RemoveTopic { name, id } => {
                key.i16(RECORD_REMOVE_TOPIC);
                key.string_i32(name);
                value.uuid(id.as_bytes());
            }
            MetaRecord::BrokerConfigs(configs) => {
                key.i16(RECORD_BROKER_CONFIGS);
                write_configs(&mut value, configs);
            }
            MetaRecord::FeatureLevel { name, level } => {
                key.i16(RECORD_FEATURE_LEVEL);
                key.string_i32(name);
                value.i16(*level);
            }
            MetaRecord::GroupConfigs { group, configs } => {
                key.i16(RECORD_GROUP_CONFIGS);
                key.string_i32(group);
                write_configs(&mut value, configs);
            }
            MetaRecord::ScramCredential {
                user,
                mechanism,
                credential,
            } => {
                key.i16(RECORD_SCRAM_CREDENTIAL);
                key.string_i32(user);
                key.i8(mechanism.code());
                for bytes in [
                    &credential.salt,
                    &credential.stored_key,
                    &credential.server_key,
                ] {
                    value.bytes_i32(bytes);
                }
                value.i32(credential.iterations);
            }
            MetaRecord::RemoveScramCredential { user, mechanism } => {
                key.i16(RECORD_REMOVE_SCRAM_CREDENTIAL);
                key.string_i32(user);
                key.i8(mechanism.code());
            }
            MetaRecord::Acl(binding) => {
                key.i16(RECORD_ACL);
                write_acl(&mut key, binding);
            }
            MetaRecord::RemoveAcl(binding) => {
                key.i16(RECORD_REMOVE_ACL);
                write_acl(&mut key, binding);
            }
        }
        (key.into_inner(), value.into_inner())
    }

    /// The record as one byte string (its key and value, each length-prefixed), for a store
    /// whose entries have no key of their own (a cluster's log in etcd).
    pub fn to_bytes(&self) -> Vec<u8> {
        let (key, value) = self.encode();
        let mut w = Writer::default();
        w.bytes_i32(&key);
        w.bytes_i32(&value);
        w.into_inner()
    }

    /// # Errors
    /// [`DecodeError`] when the bytes are not what [`MetaRecord::to_bytes`] wrote.
    pub fn from_bytes(bytes: &[u8]) -> Result<MetaRecord, DecodeError> {
        let mut r = Reader::new(bytes);
        let key = r.bytes_i32()?;
        let value = r.bytes_i32()?;
        MetaRecord::decode(key, value)
    }

    /// # Errors
    /// [`DecodeError`] when the bytes are not a record this code wrote.
    pub fn decode(key: &[u8], value: &[u8]) -> Result<MetaRecord, DecodeError> {
        let mut k = Reader::new(key);
        let mut v = Reader::new(value);
        let kind = k.i16()?;
        let version = v.i16()?;
        if version != VERSION {
            return Err(DecodeError::UnsupportedVersion {
                record_type: kind,
                version,
            });
        }
        match kind {
            RECORD_TOPIC => {
                let name = k.string_i32()?;
                let id = Uuid::from_bytes(v.uuid()?);
                let partitions = v.i32()?;
                let internal = v.i8()? != 0;
                let configs = read_configs(&mut v)?;
                let partitions =
                    u32::try_from(partitions).map_err(|_| DecodeError::InvalidValue {
                        what: "partition count",
                        value: i64::from(partitions),
                    })?;

                Ok(MetaRecord::Topic(TopicMeta {
                    name,
                    id,
                    partitions,
                    configs,
                    internal,
                }))
            }
            RECORD_REMOVE_TOPIC => Ok(MetaRecord::RemoveTopic {
                name: k.string_i32()?,
                id: Uuid::from_bytes(v.uuid()?),
            }),
            RECORD_BROKER_CONFIGS => Ok(MetaRecord::BrokerConfigs(read_configs(&mut v)?)),
            RECORD_FEATURE_LEVEL => Ok(MetaRecord::FeatureLevel {
                name: k.string_i32()?,
                level: v.i16()?,
            }),
            RECORD_GROUP_CONFIGS => Ok(MetaRecord::GroupConfigs {
                group: k.string_i32()?,
                configs: read_configs(&mut v)?,
            }),
            RECORD_SCRAM_CREDENTIAL => {
                let user = k.string_i32()?;
                let mechanism = read_mechanism(&mut k)?;
                let salt = v.bytes_i32()?.to_vec();
                let stored_key = v.bytes_i32()?.to_vec();
                let server_key = v.bytes_i32()?.to_vec();
                let iterations = v.i32()?;
                Ok(MetaRecord::ScramCredential {
                    user,
                    mechanism,
                    credential: ScramCredential {
                        salt,
                        stored_key,
                        server_key,
                        iterations,
                    },
                })
            }
            RECORD_REMOVE_SCRAM_CREDENTIAL => Ok(MetaRecord::RemoveScramCredential {
                user: k.string_i32()?,
                mechanism: read_mechanism(&mut k)?,
            }),
            RECORD_ACL => Ok(MetaRecord::Acl(read_acl(&mut k)?)),
            RECORD_REMOVE_ACL => Ok(MetaRecord::RemoveAcl(read_acl(&mut k)?)),
            _ => Err(DecodeError::UnknownRecordType(kind)),
        }
    }
}

/// An ACL is its own key: the resource pattern and the entry, in Kafka's codes.
fn write_acl(w: &mut Writer, binding: &AclBinding) {
    let (p, e) = (&binding.pattern, &binding.entry);
    w.i8(p.resource_type.code());
    w.string_i32(&p.name);
    w.i8(p.pattern_type.code());
    w.string_i32(&e.principal);
    w.string_i32(&e.host);
    w.i8(e.operation.code());
    w.i8(e.permission.code());
}

fn read_acl(r: &mut Reader<'_>) -> Result<AclBinding, DecodeError> {
    let resource_type = ResourceType::from_code(r.i8()?);
    let name = r.string_i32()?;
    let pattern_type = PatternType::from_code(r.i8()?);
    let principal = r.string_i32()?;
    let host = r.string_i32()?;
    let operation = AclOperation::from_code(r.i8()?);
    let permission = AclPermission::from_code(r.i8()?);
    let binding = AclBinding {
        pattern: ResourcePattern {
            resource_type,
            name,
            pattern_type,
        },
        entry: AccessControlEntry {
            principal,
            host,
            operation,
            permission,
        },
    };
    // Only valid bindings are written; anything else is not a record this code wrote.
    binding.validate().map_err(|_| DecodeError::InvalidValue {
        what: "ACL",
        value: i64::from(binding.pattern.resource_type.code()),
    })?;
    Ok(binding)
}

fn read_mechanism(r: &mut Reader<'_>) -> Result<ScramMechanism, DecodeError> {
    let code = r.i8()?;
    ScramMechanism::from_code(code).ok_or(DecodeError::InvalidValue {
        what: "SCRAM mechanism",
        value: i64::from(code),
    })
}

/// The state the metadata log describes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MetadataImage {
    pub topics: BTreeMap<String, TopicMeta>,
    pub broker_configs: ConfigMap,
    /// Finalized feature levels (absent = 0).
    pub features: BTreeMap<String, i16>,
    /// Bumped by every feature change: ApiVersions' FinalizedFeaturesEpoch.
    pub features_epoch: i64,
    /// Overrides of groups that have any.
    pub group_configs: BTreeMap<String, ConfigMap>,
    /// SCRAM credentials by user and mechanism.
    pub scram_credentials: BTreeMap<(String, ScramMechanism), ScramCredential>,
    /// Every ACL.
    pub acls: BTreeSet<AclBinding>,
}

impl MetadataImage {
    pub fn replay(&mut self, record: &MetaRecord) {
        match record {
            MetaRecord::Topic(t) => {
                self.topics.insert(t.name.clone(), t.clone());
            }
            MetaRecord::RemoveTopic { name, id } => {
                if self.topics.get(name).is_some_and(|t| t.id == *id) {
                    self.topics.remove(name);
                }
            }
            MetaRecord::BrokerConfigs(c) => self.broker_configs = c.clone(),
            MetaRecord::FeatureLevel { name, level } => {
                if *level == 0 {
                    self.features.remove(name);
                } else {
                    self.features.insert(name.clone(), *level);
                }
                self.features_epoch += 1;
            }
            MetaRecord::GroupConfigs { group, configs } => {
                if configs.is_empty() {
                    self.group_configs.remove(group);
                } else {
                    self.group_configs.insert(group.clone(), configs.clone());
                }
            }
            MetaRecord::ScramCredential {
                user,
                mechanism,
                credential,
            } => {
                self.scram_credentials
                    .insert((user.clone(), *mechanism), credential.clone());
            }
            MetaRecord::RemoveScramCredential { user, mechanism } => {
                self.scram_credentials.remove(&(user.clone(), *mechanism));
            }
            MetaRecord::Acl(binding) => {
                self.acls.insert(binding.clone());
            }
            MetaRecord::RemoveAcl(binding) => {
                self.acls.remove(binding);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acl(topic: &str, principal: &str) -> AclBinding {
        AclBinding {
            pattern: ResourcePattern {
                resource_type: ResourceType::Topic,
                name: topic.into(),
                pattern_type: PatternType::Prefixed,
            },
            entry: AccessControlEntry {
                principal: principal.into(),
                host: "*".into(),
                operation: AclOperation::Write,
                permission: AclPermission::Allow,
            },
        }
    }

    #[test]
    fn records_round_trip_and_replay() {
        let mut configs = ConfigMap::new();
        configs.insert("retention.ms", "1000");
        let a = TopicMeta {
            name: "t".into(),
            id: Uuid::from_u128(1),
            partitions: 3,
            configs,
            internal: false,
        };
        let b = TopicMeta {
            id: Uuid::from_u128(2),
            ..a.clone()
        };
        let records = vec![
            MetaRecord::Topic(a.clone()),
            MetaRecord::RemoveTopic {
                name: "t".into(),
                id: a.id,
            },
            MetaRecord::Topic(b.clone()),
            MetaRecord::RemoveTopic {
                name: "t".into(),
                id: a.id,
            },
            MetaRecord::BrokerConfigs(ConfigMap::new()),
            MetaRecord::FeatureLevel {
                name: "transaction.version".into(),
                level: 2,
            },
            MetaRecord::GroupConfigs {
                group: "g".into(),
                configs: {
                    let mut c = ConfigMap::new();
                    c.insert("share.delivery.count.limit", "3");
                    c
                },
            },
            MetaRecord::GroupConfigs {
                group: "h".into(),
                configs: ConfigMap::new(),
            },
            MetaRecord::ScramCredential {
                user: "alice".into(),
                mechanism: ScramMechanism::Sha512,
                credential: ScramCredential::from_password(
                    ScramMechanism::Sha512,
                    b"pw",
                    b"salt",
                    4096,
                ),
            },
            MetaRecord::ScramCredential {
                user: "bob".into(),
                mechanism: ScramMechanism::Sha256,
                credential: ScramCredential::from_password(
                    ScramMechanism::Sha256,
                    b"pw",
                    b"salt",
                    4096,
                ),
            },
            MetaRecord::RemoveScramCredential {
                user: "bob".into(),
                mechanism: ScramMechanism::Sha256,
            },
            MetaRecord::Acl(acl("orders", "User:alice")),
            MetaRecord::Acl(acl("payments", "User:bob")),
            MetaRecord::RemoveAcl(acl("payments", "User:bob")),
        ];
        let mut image = MetadataImage::default();
        for r in &records {
            let (k, v) = r.encode();
            let decoded = MetaRecord::decode(&k, &v).unwrap();
            assert_eq!(&decoded, r);
            image.replay(&decoded);
        }
        // The late removal names the old id and leaves the re-created topic alone.
        assert_eq!(image.topics.get("t"), Some(&b));
        assert_eq!(image.features.get("transaction.version"), Some(&2));
        assert_eq!(image.features_epoch, 1);
        assert_eq!(
            image
                .group_configs
                .get("g")
                .and_then(|c| c.get("share.delivery.count.limit")),
            Some("3")
        );
        assert!(!image.group_configs.contains_key("h"));
        let users: Vec<_> = image.scram_credentials.keys().collect();
        assert_eq!(users, [&("alice".to_string(), ScramMechanism::Sha512)]);
        // A stored credential holds no password: not in its bytes, not in its Debug.
        let (_, value) = records[8].encode();
        assert!(!value.windows(2).any(|w| w == b"pw"));
        assert!(!format!("{:?}", records[8]).contains("stored_key"));
        assert_eq!(
            image.acls.iter().collect::<Vec<_>>(),
            [&acl("orders", "User:alice")]
        );
        assert!(MetaRecord::decode(&[0, 9], &[0, 0]).is_err());
        assert!(MetaRecord::decode(&[], &[]).is_err());
    }

    /// The bytes of a topic record, written out field by field: records already in a
    /// `__cluster_metadata` log must keep decoding, and new ones must not change.
    #[test]
    fn a_topic_record_has_its_layout() {
        let mut configs = ConfigMap::new();
        configs.insert("retention.ms", "1000");
        let record = MetaRecord::Topic(TopicMeta {
            name: "orders".into(),
            id: Uuid::from_u128(0x0102_0304),
            partitions: 3,
            configs,
            internal: true,
        });
        let string = |s: &str| [&(s.len() as i32).to_be_bytes()[..], s.as_bytes()].concat();
        let key = [&RECORD_TOPIC.to_be_bytes()[..], &string("orders")].concat();
        let value = [
            &VERSION.to_be_bytes()[..],
            Uuid::from_u128(0x0102_0304).as_bytes(),
            &3i32.to_be_bytes(),
            &[1],
            &1i32.to_be_bytes(),
            &string("retention.ms"),
            &string("1000"),
        ]
        .concat();
        assert_eq!(record.encode(), (key.clone(), value.clone()));
        assert_eq!(MetaRecord::decode(&key, &value), Ok(record));
    }
}
