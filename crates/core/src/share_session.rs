//! Share sessions: the per-member fetch sessions of share consumers (KIP-932).
//!
//! A share consumer's ShareFetch and ShareAcknowledge requests carry a session epoch: 0 opens a
//! session (replacing any the member had), every later request must carry the epoch the broker
//! expects next, -1 closes it after its acknowledgements are applied. A subsequent ShareFetch
//! names only the partitions it adds and forgets; the session remembers the rest. A session
//! belongs to the connection that opened it: when that connection closes, the session goes
//! (and the broker releases the member's acquired records), so a member that reconnects starts
//! a new session. The number of sessions is bounded (`group.share.max.share.sessions`).
//!
//! Kafka's rules (SharePartitionManager `newContext` / `acknowledgeSessionUpdate`):
//! - ShareFetch epoch 0 with acknowledgements: INVALID_REQUEST; epoch 0 beyond the session
//!   limit: SHARE_SESSION_LIMIT_REACHED;
//! - ShareFetch epoch -1 naming partitions to fetch: INVALID_REQUEST; epoch -1 or > 0 without a
//!   session: SHARE_SESSION_NOT_FOUND; epoch > 0 other than expected: INVALID_SHARE_SESSION_EPOCH;
//! - ShareAcknowledge epoch 0: INVALID_SHARE_SESSION_EPOCH; without a session:
//!   SHARE_SESSION_NOT_FOUND; epoch > 0 other than expected: INVALID_SHARE_SESSION_EPOCH; epoch
//!   -1 closes the session after the acknowledgements.
//!
//! Sans-IO: connections are opaque ids, time is an argument.

use std::collections::HashMap;

use indexmap::IndexSet;

/// The first epoch of a session (opens one).
pub const INITIAL_EPOCH: i32 = 0;
/// The epoch that closes a session.
pub const FINAL_EPOCH: i32 = -1;

/// The epoch after `epoch`, as Kafka's `ShareRequestMetadata.nextEpoch`: -1 stays -1, and the
/// epoch wraps from `i32::MAX` to 1 (0 would open a new session).
pub fn next_epoch(epoch: i32) -> i32 {
    if epoch < 0 {
        FINAL_EPOCH
    } else if epoch == i32::MAX {
        1
    } else {
        epoch + 1
    }
}

/// A session's owner.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SessionKey {
    pub group_id: String,
    pub member_id: String,
}

/// One share partition of a session: a topic id and a partition index.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopicIdPartition {
    pub topic_id: [u8; 16],
    pub partition: i32,
}

/// One member's share session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShareSession {
    /// The epoch the next request must carry.
    pub epoch: i32,
    /// The partitions fetched by every request of the session, in the order they were added.
    pub partitions: IndexSet<TopicIdPartition>,
    /// The connection that opened the session.
    pub connection: u64,
    pub created_ms: i64,
    pub last_used_ms: i64,
}

/// Why a request's session epoch was refused (Kafka's error for each).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SessionError {
    /// INVALID_REQUEST.
    #[error("invalid share session request")]
    InvalidRequest,
    /// SHARE_SESSION_NOT_FOUND.
    #[error("share session not found")]
    NotFound,
    /// INVALID_SHARE_SESSION_EPOCH.
    #[error("invalid share session epoch")]
    InvalidEpoch,
    /// SHARE_SESSION_LIMIT_REACHED.
    #[error("share session limit reached")]
    LimitReached,
}

impl SessionError {
    /// Kafka's error code.
    pub fn error_code(self) -> i16 {
        match self {
            SessionError::InvalidRequest => 42,
            SessionError::NotFound => 122,
            SessionError::InvalidEpoch => 123,
            SessionError::LimitReached => 133,
        }
    }
}

/// What a ShareFetch may do once its session epoch is accepted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FetchContext {
    /// Epoch 0: a new session with these partitions. `replaced` is the member's previous
    /// session, if it had one (the broker releases what it had acquired).
    Initial {
        partitions: Vec<TopicIdPartition>,
        replaced: Option<ShareSession>,
    },
    /// Epoch > 0: fetch every partition of the session (after the request's additions and
    /// removals).
    Subsequent { partitions: Vec<TopicIdPartition> },
    /// Epoch -1: apply the acknowledgements, fetch nothing, then [`ShareSessionCache::close`].
    Final,
}

/// What a ShareAcknowledge does once its session epoch is accepted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AcknowledgeContext {
    /// The session stays open.
    Continue,
    /// Epoch -1: close the session after the acknowledgements ([`ShareSessionCache::close`]).
    Final,
}

/// The share sessions of one broker.
#[derive(Clone, Debug)]
pub struct ShareSessionCache {
    sessions: HashMap<SessionKey, ShareSession>,
    max_sessions: usize,
}

impl ShareSessionCache {
    pub fn new(max_sessions: usize) -> Self {
        Self {
            sessions: HashMap::new(),
            max_sessions,
        }
    }

    pub fn len(&self) -> usize {
        self.sessions.len()
    }

    pub fn is_empty(&self) -> bool {
        self.sessions.is_empty()
    }

    pub fn set_max_sessions(&mut self, max_sessions: usize) {
        self.max_sessions = max_sessions;
    }

    pub fn get(&self, key: &SessionKey) -> Option<&ShareSession> {
        self.sessions.get(key)
    }

    /// Checks and advances the session of a ShareFetch on `connection`.
    ///
    /// `added` are the partitions the request names to fetch, `forgotten` those it removes;
    /// `has_acknowledgements` whether it carries any.
    ///
    /// # Errors
    /// [`SessionError`] as in the module docs; the session is unchanged then.
    #[allow(clippy::too_many_arguments)]
    pub fn fetch(
        &mut self,
        key: &SessionKey,
        epoch: i32,
        connection: u64,
        added: &[TopicIdPartition],
        forgotten: &[TopicIdPartition],
        has_acknowledgements: bool,
        now_ms: i64,
    ) -> Result<FetchContext, SessionError> {
        match epoch {
            FINAL_EPOCH => {
                if !added.is_empty() {
                    return Err(SessionError::InvalidRequest);
                }
                if !self.sessions.contains_key(key) {
                    return Err(SessionError::NotFound);
                }
                Ok(FetchContext::Final)
            }
            INITIAL_EPOCH => {
                if has_acknowledgements {
                    return Err(SessionError::InvalidRequest);
                }
                let replaced = self.sessions.remove(key);
                if self.sessions.len() >= self.max_sessions {
                    // Put the old one back: a refused request changes nothing.
                    if let Some(old) = replaced {
                        self.sessions.insert(key.clone(), old);
                    }
                    return Err(SessionError::LimitReached);
                }
                let partitions: IndexSet<TopicIdPartition> = added.iter().copied().collect();
                let list = partitions.iter().copied().collect();
                self.sessions.insert(
                    key.clone(),
                    ShareSession {
                        epoch: next_epoch(INITIAL_EPOCH),
                        partitions,
                        connection,
                        created_ms: now_ms,
                        last_used_ms: now_ms,
                    },
                );
                Ok(FetchContext::Initial {
                    partitions: list,
                    replaced,
                })
            }
            _ => {
                let session = self.sessions.get_mut(key).ok_or(SessionError::NotFound)?;
                if epoch < 0 || session.epoch != epoch {
                    return Err(SessionError::InvalidEpoch);
                }
                for tp in added {
                    session.partitions.insert(*tp);
                }
                for tp in forgotten {
                    session.partitions.shift_remove(tp);
                }
                session.epoch = next_epoch(session.epoch);
                session.last_used_ms = now_ms;
                Ok(FetchContext::Subsequent {
                    partitions: session.partitions.iter().copied().collect(),
                })
            }
        }
    }

    /// Checks and advances the session of a ShareAcknowledge.
    ///
    /// # Errors
    /// [`SessionError`] as in the module docs; the session is unchanged then.
    pub fn acknowledge(
        &mut self,
        key: &SessionKey,
        epoch: i32,
        now_ms: i64,
    ) -> Result<AcknowledgeContext, SessionError> {
        if epoch == INITIAL_EPOCH {
            return Err(SessionError::InvalidEpoch);
        }
        let session = self.sessions.get_mut(key).ok_or(SessionError::NotFound)?;
        if epoch == FINAL_EPOCH {
            return Ok(AcknowledgeContext::Final);
        }
        if epoch < 0 || session.epoch != epoch {
            return Err(SessionError::InvalidEpoch);
        }
        session.epoch = next_epoch(session.epoch);
        session.last_used_ms = now_ms;
        Ok(AcknowledgeContext::Continue)
    }

    /// Removes a session (after a final request, or when its member leaves the group).
    pub fn close(&mut self, key: &SessionKey) -> Option<ShareSession> {
        self.sessions.remove(key)
    }

    /// Removes every session opened on `connection` (it closed).
    pub fn connection_closed(&mut self, connection: u64) -> Vec<(SessionKey, ShareSession)> {
        let keys: Vec<SessionKey> = self
            .sessions
            .iter()
            .filter(|(_, s)| s.connection == connection)
            .map(|(k, _)| k.clone())
            .collect();
        let mut removed: Vec<(SessionKey, ShareSession)> = keys
            .into_iter()
            .filter_map(|k| self.sessions.remove(&k).map(|s| (k, s)))
            .collect();
        removed.sort_by(|a, b| a.0.cmp(&b.0));
        removed
    }

    /// Removes every session of `group_id` (the group was deleted).
    pub fn group_removed(&mut self, group_id: &str) -> Vec<(SessionKey, ShareSession)> {
        let mut removed: Vec<(SessionKey, ShareSession)> = Vec::new();
        self.sessions.retain(|k, s| {
            if k.group_id == group_id {
                removed.push((k.clone(), s.clone()));
                false
            } else {
                true
            }
        });
        removed.sort_by(|a, b| a.0.cmp(&b.0));
        removed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(member: &str) -> SessionKey {
        SessionKey {
            group_id: "g".into(),
            member_id: member.into(),
        }
    }

    fn tp(p: i32) -> TopicIdPartition {
        TopicIdPartition {
            topic_id: [7; 16],
            partition: p,
        }
    }

    #[test]
    fn epochs_advance_and_wrap_like_kafka() {
        assert_eq!(next_epoch(0), 1);
        assert_eq!(next_epoch(41), 42);
        assert_eq!(next_epoch(i32::MAX), 1);
        assert_eq!(next_epoch(-1), -1);
        assert_eq!(next_epoch(-7), -1);
    }

    #[test]
    fn fetch_sessions_follow_kafkas_rules() {
        let mut c = ShareSessionCache::new(10);
        let a = key("a");
        // Nothing to continue or close yet.
        assert_eq!(
            c.fetch(&a, 1, 1, &[], &[], false, 0),
            Err(SessionError::NotFound)
        );
        assert_eq!(
            c.fetch(&a, -1, 1, &[], &[], true, 0),
            Err(SessionError::NotFound)
        );
        assert_eq!(c.acknowledge(&a, 1, 0), Err(SessionError::NotFound));
        // Acknowledgements cannot ride on the opening request.
        assert_eq!(
            c.fetch(&a, 0, 1, &[tp(0)], &[], true, 0),
            Err(SessionError::InvalidRequest)
        );
        assert_eq!(
            c.fetch(&a, 0, 1, &[tp(0), tp(1)], &[], false, 0),
            Ok(FetchContext::Initial {
                partitions: vec![tp(0), tp(1)],
                replaced: None
            })
        );
        assert_eq!(
            c.fetch(&a, 2, 1, &[], &[], false, 1),
            Err(SessionError::InvalidEpoch)
        );
        assert_eq!(
            c.fetch(&a, 1, 1, &[tp(2)], &[tp(0)], true, 1),
            Ok(FetchContext::Subsequent {
                partitions: vec![tp(1), tp(2)]
            })
        );
        // ShareAcknowledge shares the epoch sequence; 0 is never valid for it.
        assert_eq!(c.acknowledge(&a, 0, 2), Err(SessionError::InvalidEpoch));
        assert_eq!(c.acknowledge(&a, 1, 2), Err(SessionError::InvalidEpoch));
        assert_eq!(c.acknowledge(&a, 2, 2), Ok(AcknowledgeContext::Continue));
        assert_eq!(c.get(&a).map(|s| s.epoch), Some(3));
        // Final fetch: no partitions to fetch allowed.
        assert_eq!(
            c.fetch(&a, -1, 1, &[tp(3)], &[], true, 3),
            Err(SessionError::InvalidRequest)
        );
        assert_eq!(
            c.fetch(&a, -1, 1, &[], &[], true, 3),
            Ok(FetchContext::Final)
        );
        assert!(c.close(&a).is_some());
        assert!(c.is_empty());
    }

    #[test]
    fn reopening_replaces_and_the_limit_holds() {
        let mut c = ShareSessionCache::new(2);
        c.fetch(&key("a"), 0, 1, &[tp(0)], &[], false, 0).unwrap();
        c.fetch(&key("b"), 0, 2, &[tp(0)], &[], false, 0).unwrap();
        assert_eq!(
            c.fetch(&key("c"), 0, 3, &[tp(0)], &[], false, 0),
            Err(SessionError::LimitReached)
        );
        // A member reopening its own session is not a new one.
        let Ok(FetchContext::Initial { replaced, .. }) =
            c.fetch(&key("a"), 0, 4, &[tp(1)], &[], false, 0)
        else {
            panic!("reopen refused")
        };
        assert_eq!(replaced.map(|s| s.connection), Some(1));
        assert_eq!(c.len(), 2);
        // Its old connection closing no longer takes the session with it.
        assert!(c.connection_closed(1).is_empty());
        let gone = c.connection_closed(4);
        assert_eq!(gone.len(), 1);
        assert_eq!(gone[0].0, key("a"));
        assert_eq!(c.acknowledge(&key("a"), -1, 0), Err(SessionError::NotFound));
        assert_eq!(
            c.acknowledge(&key("b"), -1, 0),
            Ok(AcknowledgeContext::Final)
        );
        assert_eq!(c.group_removed("g").len(), 1);
        assert!(c.is_empty());
    }

    #[test]
    fn error_codes_are_kafkas() {
        assert_eq!(SessionError::InvalidRequest.error_code(), 42);
        assert_eq!(SessionError::NotFound.error_code(), 122);
        assert_eq!(SessionError::InvalidEpoch.error_code(), 123);
        assert_eq!(SessionError::LimitReached.error_code(), 133);
    }
}
