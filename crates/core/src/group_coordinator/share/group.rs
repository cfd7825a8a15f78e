//! A share group's state is exactly its durable state ([`DurableGroup`]); this module applies
//! records to it (the one way it changes, live and on replay) and reads it.

use std::collections::{BTreeMap, BTreeSet};

use super::records::{Assignment, ShareGroupRecord, MEMBER_STATE_STABLE};
use super::types::{DurableGroup, DurableMember, ShareGroupState, TopicsImage};

/// Applies one record to the groups. Tombstones of things that do not exist are no-ops;
/// groups and members left with nothing durable are dropped.
pub(super) fn apply(groups: &mut BTreeMap<String, DurableGroup>, record: &ShareGroupRecord) {
    let group_id = record.group_id();
    let group = groups.entry(group_id.to_string()).or_default();
    match record {
        ShareGroupRecord::MemberMetadata {
            member_id, value, ..
        } => {
            let member = group.members.entry(member_id.clone()).or_default();
            member.metadata = value.clone();
            drop_vacant_member(group, member_id);
        }
        ShareGroupRecord::GroupMetadata { value, .. } => {
            group.epoch = value.map(|v| (v.epoch, v.metadata_hash));
        }
        ShareGroupRecord::TargetAssignmentMetadata { value, .. } => {
            group.assignment_epoch = *value;
        }
        ShareGroupRecord::TargetAssignmentMember {
            member_id, value, ..
        } => {
            let member = group.members.entry(member_id.clone()).or_default();
            member.target = value.clone();
            drop_vacant_member(group, member_id);
        }
        ShareGroupRecord::CurrentMemberAssignment {
            member_id, value, ..
        } => {
            let member = group.members.entry(member_id.clone()).or_default();
            member.current = value.clone();
            drop_vacant_member(group, member_id);
        }
        ShareGroupRecord::StatePartitionMetadata { value, .. } => {
            group.state_partitions = value.clone();
        }
    }
    if group.is_vacant() {
        groups.remove(group_id);
    }
}

fn drop_vacant_member(group: &mut DurableGroup, member_id: &str) {
    if group
        .members
        .get(member_id)
        .is_some_and(DurableMember::is_vacant)
    {
        group.members.remove(member_id);
    }
}

impl DurableMember {
    /// A member is in the group while its metadata record stands.
    pub(super) fn is_member(&self) -> bool {
        self.metadata.is_some()
    }

    fn is_vacant(&self) -> bool {
        self.metadata.is_none() && self.target.is_none() && self.current.is_none()
    }

    pub(super) fn epoch(&self) -> i32 {
        self.current.as_ref().map_or(0, |c| c.member_epoch)
    }

    pub(super) fn previous_epoch(&self) -> i32 {
        self.current.as_ref().map_or(0, |c| c.previous_member_epoch)
    }

    /// The partitions the member was last told it has.
    pub(super) fn assigned(&self) -> Option<&Assignment> {
        self.current.as_ref().map(|c| &c.assigned_partitions)
    }

    pub(super) fn subscription(&self) -> Option<&BTreeSet<String>> {
        self.metadata.as_ref().map(|m| &m.subscribed_topic_names)
    }

    pub(super) fn is_stable(&self) -> bool {
        self.current
            .as_ref()
            .is_none_or(|c| c.state == MEMBER_STATE_STABLE)
    }
}

impl DurableGroup {
    fn is_vacant(&self) -> bool {
        self.epoch.is_none()
            && self.assignment_epoch.is_none()
            && self.members.is_empty()
            && self.state_partitions.is_none()
    }

    pub(super) fn group_epoch(&self) -> i32 {
        self.epoch.map_or(0, |(e, _)| e)
    }

    pub(super) fn metadata_hash(&self) -> i64 {
        self.epoch.map_or(0, |(_, h)| h)
    }

    pub(super) fn target_epoch(&self) -> i32 {
        self.assignment_epoch.unwrap_or(0)
    }

    /// Members in id order (entries holding only stray assignment records are not members).
    pub(super) fn member_ids(&self) -> impl Iterator<Item = &String> {
        self.members
            .iter()
            .filter(|(_, m)| m.is_member())
            .map(|(id, _)| id)
    }

    pub(super) fn member_count(&self) -> usize {
        self.member_ids().count()
    }

    pub(super) fn has_member(&self, member_id: &str) -> bool {
        self.members
            .get(member_id)
            .is_some_and(DurableMember::is_member)
    }

    pub(super) fn state(&self) -> ShareGroupState {
        if self.member_count() == 0 {
            ShareGroupState::Empty
        } else {
            ShareGroupState::Stable
        }
    }

    /// The union of the members' subscriptions.
    pub(super) fn subscribed_topics(&self) -> BTreeSet<&str> {
        self.members
            .values()
            .filter_map(DurableMember::subscription)
            .flatten()
            .map(String::as_str)
            .collect()
    }
}

/// Hash of the subscribed topics' metadata (name, id, partition count), 0 when none of them
/// exists. Kafka hashes the same facts (plus racks) with its own function; the value is only
/// ever compared with values computed here.
pub(super) fn metadata_hash<'a>(
    subscribed: impl IntoIterator<Item = &'a str>,
    image: &TopicsImage,
) -> i64 {
    let mut hasher = Fnv64::default();
    let mut any = false;
    let names: BTreeSet<&str> = subscribed.into_iter().collect();
    for name in names {
        let Some(meta) = image.by_name(name) else {
            continue;
        };
        any = true;
        hasher.write(&(name.len() as u64).to_be_bytes());
        hasher.write(name.as_bytes());
        hasher.write(&meta.topic_id);
        hasher.write(&meta.partitions.to_be_bytes());
    }
    if !any {
        return 0;
    }
    // A zero hash means "no topics"; nudge the (vanishingly unlikely) collision away.
    match i64::from_be_bytes(hasher.finish().to_be_bytes()) {
        0 => 1,
        h => h,
    }
}

/// 64-bit FNV-1a with a final avalanche (SplitMix64's), fixed forever because it is persisted.
struct Fnv64(u64);

impl Default for Fnv64 {
    fn default() -> Self {
        Fnv64(0xcbf2_9ce4_8422_2325)
    }
}

impl Fnv64 {
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }

    fn finish(&self) -> u64 {
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}
