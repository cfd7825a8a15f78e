//! The simple assignor of share groups, following the principles of Kafka 4.2's
//! `SimpleAssignor` (its homogeneous and heterogeneous assignment builders):
//!
//! - every assignable partition goes to at least one member, and to `ceil(members /
//!   partitions)` members when members outnumber partitions (share groups share partitions);
//! - balance first: the members' partition counts differ by at most one;
//! - stickiness second: a member keeps what it had where balance allows.
//!
//! With one subscription for all members (homogeneous) the balance is over all subscribed
//! partitions together; otherwise (heterogeneous) each topic is balanced among its subscribers
//! on its own and the results are combined, as Kafka does.
//!
//! Unlike Kafka's, which walks hash maps, every choice here follows a total order (member id,
//! topic name, partition, and the counts described below), so the result depends only on the
//! inputs. Which member gets the extra partition when the division is uneven is chosen by
//! what members already hold (Kafka picks by member position), which moves fewer partitions.

use std::collections::{BTreeMap, BTreeSet};

use super::records::{Assignment, TopicId};
use super::types::TopicsImage;

/// One member as the assignor sees it.
pub(super) struct AssignmentMember<'a> {
    pub subscribed_topic_names: &'a BTreeSet<String>,
    /// The member's current target assignment.
    pub previous: Option<&'a Assignment>,
}

/// Computes the target assignment of every member (empty ones included). Topics missing
/// from the image are ignored, as Kafka resolves subscriptions through its metadata image.
pub(super) fn assign(
    members: &BTreeMap<String, AssignmentMember<'_>>,
    image: &TopicsImage,
) -> BTreeMap<String, Assignment> {
    let mut result: BTreeMap<String, Assignment> = members
        .keys()
        .map(|id| (id.clone(), Assignment::new()))
        .collect();
    let Some(first) = members.values().next() else {
        return result;
    };
    let homogeneous = members
        .values()
        .all(|m| m.subscribed_topic_names == first.subscribed_topic_names);
    if homogeneous {
        let ids: Vec<&str> = members.keys().map(String::as_str).collect();
        let pool = partitions_of(
            first.subscribed_topic_names.iter().map(String::as_str),
            image,
        );
        balance_into(&ids, &pool, members, &mut result);
        return result;
    }
    // Heterogeneous: each topic among its own subscribers.
    let mut subscribers: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (id, m) in members {
        for name in m.subscribed_topic_names {
            subscribers.entry(name).or_default().push(id);
        }
    }
    for (name, ids) in subscribers {
        let pool = partitions_of([name], image);
        balance_into(&ids, &pool, members, &mut result);
    }
    result
}

/// The partitions of the named topics that exist, in name then partition order.
fn partitions_of<'a>(
    names: impl IntoIterator<Item = &'a str>,
    image: &TopicsImage,
) -> Vec<(TopicId, i32)> {
    let mut pool = Vec::new();
    for name in names {
        if let Some(meta) = image.by_name(name) {
            pool.extend((0..meta.partitions).map(|p| (meta.topic_id, p)));
        }
    }
    pool
}

fn balance_into(
    ids: &[&str],
    pool: &[(TopicId, i32)],
    members: &BTreeMap<String, AssignmentMember<'_>>,
    result: &mut BTreeMap<String, Assignment>,
) {
    let previous: Vec<Option<&Assignment>> = ids
        .iter()
        .map(|id| members.get(*id).and_then(|m| m.previous))
        .collect();
    let holdings = balance(pool, &previous);
    for (id, held) in ids.iter().zip(holdings) {
        let Some(assignment) = result.get_mut(*id) else {
            continue;
        };
        for index in held {
            if let Some((topic_id, partition)) = pool.get(index) {
                assignment.entry(*topic_id).or_default().insert(*partition);
            }
        }
    }
}

/// Working state of one balance computation: partitions and members are indices.
struct Pool {
    /// Members holding each partition.
    holders: Vec<BTreeSet<usize>>,
    /// Partitions held by each member.
    holdings: Vec<BTreeSet<usize>>,
}

impl Pool {
    fn remove(&mut self, member: usize, partition: usize) {
        if let Some(h) = self.holders.get_mut(partition) {
            h.remove(&member);
        }
        if let Some(h) = self.holdings.get_mut(member) {
            h.remove(&partition);
        }
    }

    fn add(&mut self, member: usize, partition: usize) {
        if let Some(h) = self.holders.get_mut(partition) {
            h.insert(member);
        }
        if let Some(h) = self.holdings.get_mut(member) {
            h.insert(partition);
        }
    }

    fn held(&self, member: usize) -> usize {
        self.holdings.get(member).map_or(0, BTreeSet::len)
    }
}

/// Balances `pool` among members (given by their previous assignments); returns the pool
/// indices each member gets.
fn balance(pool: &[(TopicId, i32)], previous: &[Option<&Assignment>]) -> Vec<BTreeSet<usize>> {
    let members = previous.len();
    let partitions = pool.len();
    let mut state = Pool {
        holders: vec![BTreeSet::new(); partitions],
        holdings: vec![BTreeSet::new(); members],
    };
    if members == 0 || partitions == 0 {
        return state.holdings;
    }
    // Keep what each member had of this pool.
    let index: BTreeMap<(TopicId, i32), usize> =
        pool.iter().enumerate().map(|(i, tp)| (*tp, i)).collect();
    for (member, prev) in previous.iter().enumerate() {
        for (topic_id, parts) in prev.iter().flat_map(|a| a.iter()) {
            for p in parts {
                if let Some(&i) = index.get(&(*topic_id, *p)) {
                    state.add(member, i);
                }
            }
        }
    }
    let sharing = members.div_ceil(partitions);
    revoke_overshared(&mut state, sharing);
    let desired = desired_counts(&state, sharing * partitions);
    revoke_overfilled(&mut state, &desired);
    fill(&mut state, sharing, &desired);
    state.holdings
}

/// No partition keeps more than `sharing` holders; the fullest members give theirs up first.
fn revoke_overshared(state: &mut Pool, sharing: usize) {
    for partition in 0..state.holders.len() {
        let holders: Vec<usize> = state.holders[partition].iter().copied().collect();
        if holders.len() <= sharing {
            continue;
        }
        let mut ranked = holders;
        ranked.sort_by_key(|&m| (std::cmp::Reverse(state.held(m)), std::cmp::Reverse(m)));
        let excess = ranked.len() - sharing;
        for &member in ranked.iter().take(excess) {
            state.remove(member, partition);
        }
    }
}

/// Spreads `total` assignments over the members as evenly as possible; the extra ones go to
/// the members already holding most (then to the first in order), which keeps them in place.
fn desired_counts(state: &Pool, total: usize) -> Vec<usize> {
    let members = state.holdings.len();
    let base = total / members;
    let extra = total % members;
    let mut order: Vec<usize> = (0..members).collect();
    order.sort_by_key(|&m| (std::cmp::Reverse(state.held(m)), m));
    let mut desired = vec![base; members];
    for &m in order.iter().take(extra) {
        desired[m] = base + 1;
    }
    desired
}

/// No member keeps more than it should; the most shared, then the last, partitions go first.
fn revoke_overfilled(state: &mut Pool, desired: &[usize]) {
    for (member, &want) in desired.iter().enumerate() {
        let held: Vec<usize> = state.holdings[member].iter().copied().collect();
        if held.len() <= want {
            continue;
        }
        let mut ranked = held;
        ranked.sort_by_key(|&p| {
            (
                std::cmp::Reverse(state.holders[p].len()),
                std::cmp::Reverse(p),
            )
        });
        let excess = ranked.len() - want;
        for &partition in ranked.iter().take(excess) {
            state.remove(member, partition);
        }
    }
}

/// Gives every partition its `sharing` holders from the members still short of their count,
/// neediest first. When the only members short of their count already hold the partition
/// (possible only when members outnumber partitions), one of them takes over another
/// partition from a member that then takes this one. If even that fails and nobody holds
/// the partition, the least loaded member takes it anyway: coverage wins over balance.
fn fill(state: &mut Pool, sharing: usize, desired: &[usize]) {
    for partition in 0..state.holders.len() {
        let need = sharing.saturating_sub(state.holders[partition].len());
        if need == 0 {
            continue;
        }
        let mut candidates: Vec<usize> = (0..desired.len())
            .filter(|&m| state.held(m) < desired[m] && !state.holders[partition].contains(&m))
            .collect();
        candidates.sort_by_key(|&m| {
            (
                std::cmp::Reverse(desired[m] - state.held(m)),
                state.held(m),
                m,
            )
        });
        for &member in candidates.iter().take(need) {
            state.add(member, partition);
        }
        while state.holders[partition].len() < sharing && swap_in(state, partition, desired) {}
        if state.holders[partition].is_empty() {
            let least = (0..desired.len()).min_by_key(|&m| (state.held(m), m));
            if let Some(member) = least {
                state.add(member, partition);
            }
        }
    }
}

/// One exchange that adds a holder to `partition`: a member `short` of its count that holds
/// `partition` takes some `other` partition from a member `giver` that does not hold
/// `partition`, and `giver` takes `partition` instead. Counts: `short` +1, `giver` ±0.
fn swap_in(state: &mut Pool, partition: usize, desired: &[usize]) -> bool {
    let members = desired.len();
    for short in (0..members).filter(|&m| state.held(m) < desired[m]) {
        if !state.holders[partition].contains(&short) {
            continue;
        }
        for giver in (0..members).filter(|m| !state.holders[partition].contains(m)) {
            let other = state.holdings[giver]
                .iter()
                .copied()
                .find(|q| !state.holdings[short].contains(q));
            if let Some(other) = other {
                state.remove(giver, other);
                state.add(short, other);
                state.add(giver, partition);
                return true;
            }
        }
    }
    false
}
