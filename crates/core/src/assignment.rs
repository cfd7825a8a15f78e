//! Which broker should own each partition of a cluster (`shared/spec/cluster.md`,
//! "Ownership"): decided by one elected broker at a time from the live brokers and the
//! current assignment, written to etcd, and followed by each broker claiming what is assigned
//! to it. Deciding is not the safety mechanism — every commit is fenced by the owner's epoch
//! — so this only has to be balanced, stable and sparing with moves.
//!
//! [`rebalance`] gives the next assignment:
//! - every partition goes to a live broker (none when no broker is live);
//! - balanced by count: the brokers' counts differ by at most one;
//! - the fewest moves that achieves it: a partition stays where it is while its broker is live
//!   and within its share; the brokers given the one extra partition (when the count does not
//!   divide evenly) are those already holding the most, so nothing moves to even out a
//!   remainder;
//! - deterministic (ties by node id, then partition order), and a fixed point: rebalancing a
//!   balanced assignment with the same brokers changes nothing.
//!
//! [`rebalance_by`] does the same for each group of partitions (a topic's) in turn, so a
//! topic's partitions are spread over the brokers as evenly as the whole is — a topic of six
//! partitions on three brokers puts two on each, where balancing the whole alone could leave
//! all six on one broker whose share is filled by the others' internal partitions. Ties for a
//! group's extra partitions go to the brokers given the fewest partitions so far.
//!
//! Must not: move a partition whose broker is live and within its share; read anything but its
//! arguments.

use std::collections::{BTreeMap, BTreeSet};

/// The next assignment of `partitions` to the `live` brokers, from `current` (see the module
/// docs). Partitions of `current` not in `partitions` are dropped; brokers of `current` not in
/// `live` lose everything they held.
pub fn rebalance<P: Ord + Clone>(
    current: &BTreeMap<P, i32>,
    partitions: &BTreeSet<P>,
    live: &BTreeSet<i32>,
) -> BTreeMap<P, i32> {
    balance(current, partitions, live, |_| 0)
}

/// [`rebalance`] of each group of `partitions` (by `group`) in the groups' order, each balanced
/// by count over the `live` brokers with the fewest moves (see the module docs).
pub fn rebalance_by<P: Ord + Clone, G: Ord>(
    current: &BTreeMap<P, i32>,
    partitions: &BTreeSet<P>,
    live: &BTreeSet<i32>,
    group: impl Fn(&P) -> G,
) -> BTreeMap<P, i32> {
    let mut groups: BTreeMap<G, BTreeSet<P>> = BTreeMap::new();
    for p in partitions {
        groups.entry(group(p)).or_default().insert(p.clone());
    }
    let mut given: BTreeMap<i32, usize> = live.iter().map(|&b| (b, 0)).collect();
    let mut out = BTreeMap::new();
    for members in groups.values() {
        let next = balance(current, members, live, |b| given[&b]);
        for b in next.values() {
            *given.get_mut(b).expect("assigned to a live broker") += 1;
        }
        out.extend(next);
    }
    out
}

/// [`rebalance`], the extra shares going to the brokers holding the most now, then those with
/// the least `load`, then the lowest ids.
fn balance<P: Ord + Clone>(
    current: &BTreeMap<P, i32>,
    partitions: &BTreeSet<P>,
    live: &BTreeSet<i32>,
    load: impl Fn(i32) -> usize,
) -> BTreeMap<P, i32> {
    if live.is_empty() {
        return BTreeMap::new();
    }
    // What each live broker holds now, and what must find a broker.
    let mut held: BTreeMap<i32, Vec<P>> = live.iter().map(|&b| (b, Vec::new())).collect();
    let mut homeless = Vec::new();
    for p in partitions {
        match current.get(p).and_then(|b| held.get_mut(b)) {
            Some(list) => list.push(p.clone()),
            None => homeless.push(p.clone()),
        }
    }
    // Shares: `extra` brokers take one more, those holding the most now (then lower ids).
    let brokers = live.len();
    let (base, extra) = (partitions.len() / brokers, partitions.len() % brokers);
    let mut by_holding: Vec<i32> = live.iter().copied().collect();
    by_holding.sort_by_key(|b| (std::cmp::Reverse(held[b].len()), load(*b), *b));
    let share: BTreeMap<i32, usize> = by_holding
        .iter()
        .enumerate()
        .map(|(rank, &b)| (b, base + usize::from(rank < extra)))
        .collect();
    // Over their share: give up the last partitions they hold.
    for (b, list) in held.iter_mut() {
        while list.len() > share[b] {
            homeless.push(list.pop().expect("longer than its share"));
        }
    }
    homeless.sort();
    // Under their share: take the homeless in order, lowest node id first.
    let mut homeless = homeless.into_iter();
    for (b, list) in held.iter_mut() {
        while list.len() < share[b] {
            match homeless.next() {
                Some(p) => list.push(p),
                None => break,
            }
        }
    }
    held.into_iter()
        .flat_map(|(b, list)| list.into_iter().map(move |p| (p, b)))
        .collect()
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn parts(n: u32) -> BTreeSet<u32> {
        (0..n).collect()
    }

    fn counts(a: &BTreeMap<u32, i32>) -> BTreeMap<i32, usize> {
        let mut c = BTreeMap::new();
        for b in a.values() {
            *c.entry(*b).or_default() += 1;
        }
        c
    }

    #[test]
    fn a_dead_brokers_partitions_move_and_nothing_else_does() {
        let live: BTreeSet<i32> = [1, 2, 3].into();
        let first = rebalance(&BTreeMap::new(), &parts(9), &live);
        assert_eq!(counts(&first), [(1, 3), (2, 3), (3, 3)].into());
        let survivors: BTreeSet<i32> = [1, 3].into();
        let after = rebalance(&first, &parts(9), &survivors);
        for (p, b) in &first {
            if *b != 2 {
                assert_eq!(after[p], *b, "partition {p} moved off a live broker");
            }
        }
        assert_eq!(counts(&after), [(1, 5), (3, 4)].into());
        // Broker 2 comes back: it gets a share, taken from the fullest.
        let back = rebalance(&after, &parts(9), &live);
        assert_eq!(counts(&back), [(1, 3), (2, 3), (3, 3)].into());
        assert_eq!(rebalance(&back, &parts(9), &live), back);
    }

    #[test]
    fn no_live_broker_owns_nothing_and_new_partitions_are_spread() {
        assert!(rebalance(&BTreeMap::new(), &parts(4), &BTreeSet::new()).is_empty());
        let live: BTreeSet<i32> = [7, 8].into();
        let a = rebalance(&BTreeMap::new(), &parts(3), &live);
        let b = rebalance(&a, &parts(6), &live);
        assert_eq!(counts(&b), [(7, 3), (8, 3)].into());
        for (p, broker) in &a {
            assert_eq!(b[p], *broker);
        }
    }

    /// Moves the reference model needs: each live broker keeps at most its share of what it
    /// holds, the largest holders getting the extra shares; everything else moves.
    fn fewest_moves(current: &BTreeMap<u32, i32>, n: u32, live: &BTreeSet<i32>) -> usize {
        let mut held: Vec<usize> = live
            .iter()
            .map(|b| current.iter().filter(|(p, o)| **p < n && *o == b).count())
            .collect();
        held.sort_unstable_by(|a, b| b.cmp(a));
        let (base, extra) = (n as usize / live.len(), n as usize % live.len());
        let kept: usize = held
            .iter()
            .enumerate()
            .map(|(rank, h)| (*h).min(base + usize::from(rank < extra)))
            .sum();
        n as usize - kept
    }

    #[test]
    fn each_topic_is_spread_over_the_brokers() {
        let live: BTreeSet<i32> = [1, 2, 3].into();
        let mut partitions = BTreeSet::new();
        for (topic, n) in [
            ("__consumer_offsets", 6),
            ("__transaction_state", 3),
            ("t", 6),
        ] {
            for p in 0..n {
                partitions.insert((topic, p));
            }
        }
        // Balancing the whole alone: t is not spread (the internal topics' partitions fill
        // some brokers' shares).
        let whole = rebalance(&BTreeMap::new(), &partitions, &live);
        let t_brokers: BTreeSet<i32> = whole
            .iter()
            .filter(|((t, _), _)| *t == "t")
            .map(|(_, b)| *b)
            .collect();
        assert!(t_brokers.len() < 3, "{whole:?}");
        let next = rebalance_by(&BTreeMap::new(), &partitions, &live, |(t, _)| *t);
        for topic in ["__consumer_offsets", "__transaction_state", "t"] {
            let mut per: BTreeMap<i32, usize> = BTreeMap::new();
            for ((t, _), b) in &next {
                if *t == topic {
                    *per.entry(*b).or_default() += 1;
                }
            }
            assert_eq!(per.len(), 3, "{topic} not on every broker: {next:?}");
            assert!(per.values().max().unwrap() - per.values().min().unwrap() <= 1);
        }
        assert_eq!(rebalance_by(&next, &partitions, &live, |(t, _)| *t), next);
    }

    proptest! {
        #[test]
        fn each_group_balanced_with_the_fewest_moves_and_single_ones_spread(
            sizes in prop::collection::vec(1u32..8, 1..8),
            owners in prop::collection::vec(0i32..6, 0..60),
            live in prop::collection::btree_set(0i32..6, 1..6),
        ) {
            let partitions: BTreeSet<(usize, u32)> = sizes
                .iter()
                .enumerate()
                .flat_map(|(g, n)| (0..*n).map(move |p| (g, p)))
                .collect();
            let current: BTreeMap<(usize, u32), i32> =
                partitions.iter().cloned().zip(owners.iter().copied()).collect();
            let next = rebalance_by(&current, &partitions, &live, |(g, _)| *g);
            prop_assert_eq!(next.len(), partitions.len());
            prop_assert!(next.values().all(|b| live.contains(b)));
            for (g, n) in sizes.iter().enumerate() {
                // Each group alone is what `rebalance` gives it: balanced, fewest moves.
                let cur: BTreeMap<u32, i32> = current
                    .iter()
                    .filter(|((cg, _), _)| *cg == g)
                    .map(|((_, p), b)| (*p, *b))
                    .collect();
                let got: BTreeMap<u32, i32> = next
                    .iter()
                    .filter(|((ng, _), _)| *ng == g)
                    .map(|((_, p), b)| (*p, *b))
                    .collect();
                let mut c: Vec<usize> =
                    live.iter().map(|b| counts(&got).get(b).copied().unwrap_or(0)).collect();
                c.sort_unstable();
                prop_assert!(c.last().unwrap() - c.first().unwrap() <= 1);
                let moved = got.iter().filter(|(p, b)| cur.get(p) != Some(b)).count();
                prop_assert_eq!(moved, fewest_moves(&cur, *n, &live));
            }
            prop_assert_eq!(rebalance_by(&next, &partitions, &live, |(g, _)| *g), next.clone());
            // From nothing, groups of one partition each go to different brokers while any
            // broker has none.
            if sizes.iter().all(|n| *n == 1) {
                let fresh = rebalance_by(&BTreeMap::new(), &partitions, &live, |(g, _)| *g);
                let mut c: BTreeMap<i32, usize> = live.iter().map(|b| (*b, 0)).collect();
                for b in fresh.values() {
                    *c.get_mut(b).unwrap() += 1;
                }
                prop_assert!(c.values().max().unwrap() - c.values().min().unwrap() <= 1);
            }
        }

        #[test]
        fn balanced_on_live_brokers_with_the_fewest_moves(
            n in 0u32..60,
            owners in prop::collection::vec(0i32..6, 0..60),
            live in prop::collection::btree_set(0i32..6, 1..6),
        ) {
            let current: BTreeMap<u32, i32> =
                owners.iter().enumerate().map(|(p, b)| (p as u32, *b)).collect();
            let next = rebalance(&current, &parts(n), &live);
            prop_assert_eq!(next.len(), n as usize);
            prop_assert!(next.values().all(|b| live.contains(b)));
            let mut c: Vec<usize> =
                live.iter().map(|b| counts(&next).get(b).copied().unwrap_or(0)).collect();
            c.sort_unstable();
            prop_assert!(c.last().unwrap() - c.first().unwrap() <= 1);
            let moved = next.iter().filter(|(p, b)| current.get(p) != Some(b)).count();
            prop_assert_eq!(moved, fewest_moves(&current, n, &live));
            prop_assert_eq!(rebalance(&next, &parts(n), &live), next);
        }
    }
}
