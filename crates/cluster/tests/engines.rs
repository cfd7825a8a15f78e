//! The cluster's engine clients against real servers started here on loopback: etcd (Debian's
//! `etcd-server`) and SeaweedFS's S3 gateway (`weed`), as `tests/cluster/rig.sh install`
//! provides them (`SHOAL_ETCD_BIN`, `SHOAL_WEED_BIN`, else on PATH). Each test starts its own
//! etcd; the S3 server is started once per test binary.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use bytes::Bytes;
use shoal_cluster::assigner;
use shoal_cluster::commits::{self, committed_end, index};
use shoal_cluster::owners::{self, OwnerTable};
use shoal_cluster::rig::{create_bucket, start_etcd, start_s3, Server};
use shoal_cluster::session::{self, Session};
use shoal_cluster::{Claim, CommitRefused, Keys, ObjectRef, Objects, Owner, PartitionCommit};
use shoal_core::assignment::rebalance;

const WAIT: Duration = Duration::from_secs(20);

async fn session(etcd: &Server, cluster: &str) -> Session {
    let client = session::connect(std::slice::from_ref(&etcd.endpoint), Duration::from_secs(5))
        .await
        .expect("connect to etcd");
    Session::start(client, Keys::new(cluster).unwrap(), 2)
        .await
        .expect("lease")
}

/// Polls `check` until it holds (the owner table follows etcd through a watch).
async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let start = Instant::now();
    while !check() {
        assert!(start.elapsed() < WAIT, "not seen within {WAIT:?}: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn object(name: &str, len: u64) -> ObjectRef {
    ObjectRef {
        name: name.to_string(),
        position: 0,
        len,
    }
}

fn part(fence: i64, base: i64, end: i64, name: &str) -> PartitionCommit {
    PartitionCommit {
        topic: "t".into(),
        partition: 0,
        fence,
        base_offset: base,
        end_offset: end,
        object: object(name, 100),
    }
}

#[tokio::test]
async fn a_partition_has_one_owner_whose_epoch_grows_across_owners() {
    let etcd = start_etcd().unwrap();
    let a = session(&etcd, "c").await;
    let b = session(&etcd, "c").await;
    a.register(1, "127.0.0.1:9001").await.unwrap();
    b.register(2, "127.0.0.1:9002").await.unwrap();
    let table = OwnerTable::start(b.client(), b.keys().clone())
        .await
        .unwrap();

    let Claim::Won(first) = owners::claim(&a, 1, "t", 0).await.unwrap() else {
        panic!("nobody owned t-0");
    };
    assert_eq!((first.node_id, first.leader_epoch), (1, 1));
    assert_eq!(
        owners::claim(&b, 2, "t", 0).await.unwrap(),
        Claim::Owned(first)
    );
    eventually("b sees a own t-0", || table.owner("t", 0) == Some(first)).await;
    eventually("both brokers registered", || table.brokers().len() == 2).await;

    // A leaves: its lease goes, with its registration and its partition.
    a.close().await.unwrap();
    eventually("a's partition and registration gone", || {
        table.owner("t", 0).is_none() && table.brokers().len() == 1
    })
    .await;
    let Claim::Won(second) = owners::claim(&b, 2, "t", 0).await.unwrap() else {
        panic!("t-0 was free");
    };
    // Clients see the next leader epoch; commits compare a fence that also only grows.
    assert_eq!(second.leader_epoch, 2);
    assert!(second.fence > first.fence, "{first:?} then {second:?}");
    eventually("b sees itself own t-0", || {
        table.owner("t", 0) == Some(second)
    })
    .await;
    // A clean hand-over: released only under the fence it was owned with.
    assert!(!owners::release(&b, "t", 0, first.fence).await.unwrap());
    assert!(owners::release(&b, "t", 0, second.fence).await.unwrap());
    let Claim::Won(third) = owners::claim(&b, 2, "t", 0).await.unwrap() else {
        panic!("released");
    };
    assert_eq!(third.leader_epoch, 3);
    // Another cluster's keys are apart.
    let other = session(&etcd, "other").await;
    assert!(matches!(
        owners::claim(&other, 9, "t", 0).await.unwrap(),
        Claim::Won(Owner {
            leader_epoch: 1,
            ..
        })
    ));
}

#[tokio::test]
async fn a_zombie_owner_commits_nothing_and_commits_are_contiguous() {
    let etcd = start_etcd().unwrap();
    let a = session(&etcd, "c").await;
    let b = session(&etcd, "c").await;
    let Claim::Won(Owner { fence: ea, .. }) = owners::claim(&a, 1, "t", 0).await.unwrap() else {
        panic!("t-0 was free");
    };
    commits::commit(&a, &[part(ea, 0, 10, "a1")])
        .await
        .unwrap()
        .expect("the owner commits");

    // A's lease is gone behind its back (paused past its TTL): it still believes it owns t-0.
    let mut admin = b.client();
    admin.lease_revoke(a.lease()).await.unwrap();
    let Claim::Won(new_owner) = owners::claim(&b, 2, "t", 0).await.unwrap() else {
        panic!("t-0 was freed with a's lease");
    };
    let eb = new_owner.fence;
    assert_eq!(
        commits::commit(&a, &[part(ea, 10, 20, "a2")])
            .await
            .unwrap(),
        Err(CommitRefused::Fenced {
            topic: "t".into(),
            partition: 0,
            owner: Some(new_owner),
        })
    );
    // The new owner continues from the committed end, and only from there.
    commits::commit(&b, &[part(eb, 10, 20, "b1")])
        .await
        .unwrap()
        .expect("the new owner commits");
    assert_eq!(
        commits::commit(&b, &[part(eb, 15, 30, "b2")])
            .await
            .unwrap(),
        Err(CommitRefused::NotContiguous {
            topic: "t".into(),
            partition: 0,
            committed_end: 20,
        })
    );
    assert_eq!(
        commits::commit(&b, &[part(eb, 0, 5, "b3")]).await.unwrap(),
        Err(CommitRefused::NotContiguous {
            topic: "t".into(),
            partition: 0,
            committed_end: 20,
        })
    );
    assert_eq!(committed_end(&b, "t", 0).await.unwrap(), 20);
    let entries = index(&b, "t", 0, 0).await.unwrap();
    assert_eq!(
        entries
            .iter()
            .map(|(base, o)| (*base, o.name.as_str()))
            .collect::<Vec<_>>(),
        vec![(0, "a1"), (10, "b1")]
    );
    // The zombie's session notices its lease is gone.
    eventually("a's session lost", || a.is_lost()).await;
}

#[tokio::test]
async fn a_commit_over_several_partitions_is_all_or_nothing() {
    let etcd = start_etcd().unwrap();
    let a = session(&etcd, "c").await;
    let b = session(&etcd, "c").await;
    let Claim::Won(Owner { fence: e0, .. }) = owners::claim(&a, 1, "t", 0).await.unwrap() else {
        panic!("free");
    };
    let Claim::Won(Owner { fence: e1, .. }) = owners::claim(&b, 2, "t", 1).await.unwrap() else {
        panic!("free");
    };
    let on = |partition, fence| PartitionCommit {
        partition,
        ..part(fence, 0, 10, "x")
    };
    // A does not own t-1: nothing of the commit is recorded, t-0 included.
    let refused = commits::commit(&a, &[on(0, e0), on(1, e0)]).await.unwrap();
    assert!(matches!(
        refused,
        Err(CommitRefused::Fenced { partition: 1, .. })
    ));
    assert_eq!(committed_end(&a, "t", 0).await.unwrap(), 0);
    assert!(index(&a, "t", 0, 0).await.unwrap().is_empty());
    commits::commit(&b, &[on(1, e1)]).await.unwrap().unwrap();
    // An empty or backwards range is not a commit.
    assert!(commits::commit(&a, &[part(e0, 5, 5, "y")]).await.is_err());
}

#[tokio::test]
async fn objects_on_a_real_s3_server_are_read_back_by_range() {
    let s3 = start_s3().unwrap();
    create_bucket(&s3.endpoint, "shoal").unwrap();
    std::env::set_var("AWS_ACCESS_KEY_ID", "test");
    std::env::set_var("AWS_SECRET_ACCESS_KEY", "test");
    let url = format!(
        "s3://shoal/cluster-a?endpoint={}&region=us-east-1",
        s3.endpoint
    );
    let objects = Objects::from_url(&url).unwrap();
    let name = Objects::unique_name(1);
    let payload: Vec<u8> = (0..=255u8).cycle().take(100_000).collect();
    objects
        .put(&name, Bytes::from(payload.clone()))
        .await
        .expect("put");
    let range = ObjectRef {
        name: name.clone(),
        position: 1000,
        len: 5000,
    };
    assert_eq!(
        &objects.get(&range).await.unwrap()[..],
        &payload[1000..6000]
    );
    let missing = ObjectRef {
        name: Objects::unique_name(1),
        ..range.clone()
    };
    assert!(objects.get(&missing).await.is_err());
    let past = ObjectRef {
        position: 99_000,
        len: 5000,
        ..range
    };
    assert!(
        objects.get(&past).await.is_err(),
        "a short read is an error"
    );
}

/// Every broker's view of the owners, as a map.
fn owned(table: &OwnerTable) -> BTreeMap<(String, i32), Owner> {
    table.owners().into_iter().collect()
}

#[tokio::test]
async fn an_elected_assigner_spreads_partitions_and_moves_a_dead_brokers_away() {
    let etcd = start_etcd().unwrap();
    let brokers = [
        session(&etcd, "c").await,
        session(&etcd, "c").await,
        session(&etcd, "c").await,
    ];
    for (i, s) in brokers.iter().enumerate() {
        s.register(i as i32, &format!("127.0.0.1:{}", 9000 + i))
            .await
            .unwrap();
    }
    let table = OwnerTable::start(brokers[0].client(), brokers[0].keys().clone())
        .await
        .unwrap();
    eventually("three brokers", || table.brokers().len() == 3).await;
    let partitions: BTreeSet<(String, i32)> = (0..6).map(|p| ("t".to_string(), p)).collect();

    // One assigner at a time.
    let Ok(lead) = assigner::campaign(&brokers[2], 2).await.unwrap() else {
        panic!("nobody was assigner");
    };
    assert_eq!(
        assigner::campaign(&brokers[0], 0).await.unwrap(),
        Err(Some(2))
    );
    let live: BTreeSet<i32> = table.brokers().iter().map(|b| b.node_id).collect();
    let first = rebalance(&BTreeMap::new(), &partitions, &live);
    assert!(assigner::write(&brokers[2], lead, &BTreeMap::new(), &first)
        .await
        .unwrap());
    let recorded = assigner::read(&brokers[0]).await.unwrap();
    assert_eq!(recorded, first);
    for (i, s) in brokers.iter().enumerate() {
        let done = assigner::reconcile(s, i as i32, &recorded, &owned(&table))
            .await
            .unwrap();
        assert_eq!(done.claimed.len(), 2, "broker {i}: {done:?}");
    }
    eventually("every partition owned as assigned", || {
        let o = owned(&table);
        partitions
            .iter()
            .all(|p| o.get(p).map(|o| o.node_id) == first.get(p).copied())
    })
    .await;

    // Broker 2 — the assigner, and the owner of two partitions — dies.
    let [b0, b1, b2] = brokers;
    let mut admin = b0.client();
    admin.lease_revoke(b2.lease()).await.unwrap();
    eventually("broker 2 gone", || table.brokers().len() == 2).await;
    // Its late assignment is refused: it is no longer the assigner.
    assert!(!assigner::write(&b2, lead, &first, &BTreeMap::new())
        .await
        .unwrap());
    let Ok(lead) = assigner::campaign(&b0, 0).await.unwrap() else {
        panic!("the assigner's key went with its lease");
    };
    let live: BTreeSet<i32> = table.brokers().iter().map(|b| b.node_id).collect();
    let second = rebalance(&first, &partitions, &live);
    assert!(assigner::write(&b0, lead, &first, &second).await.unwrap());
    let recorded = assigner::read(&b1).await.unwrap();
    assert_eq!(recorded, second);
    let mut moved = Vec::new();
    for (i, s) in [(0, &b0), (1, &b1)] {
        let done = assigner::reconcile(s, i, &recorded, &owned(&table))
            .await
            .unwrap();
        moved.extend(done.claimed);
    }
    // Only broker 2's partitions moved, each to a new leader epoch.
    let was_2: Vec<_> = first
        .iter()
        .filter(|(_, b)| **b == 2)
        .map(|(p, _)| p.clone())
        .collect();
    assert_eq!(
        moved
            .iter()
            .map(|(p, _)| p.clone())
            .collect::<Vec<_>>()
            .len(),
        was_2.len()
    );
    for (p, owner) in &moved {
        assert!(was_2.contains(p), "{p:?} moved though its broker lived");
        assert_eq!(owner.leader_epoch, 2);
    }
    eventually("every partition owned by a live broker", || {
        let o = owned(&table);
        partitions
            .iter()
            .all(|p| o.get(p).is_some_and(|o| o.node_id != 2))
    })
    .await;
}

#[tokio::test]
async fn brokers_running_membership_share_the_partitions_and_take_over_a_crashed_ones() {
    use shoal_cluster::membership::{Membership, Partitions};
    use std::sync::Arc;

    let etcd = start_etcd().unwrap();
    let partitions: BTreeSet<(String, i32)> = (0..6).map(|p| ("t".to_string(), p)).collect();
    let wanted = partitions.clone();
    let all: Partitions = Arc::new(move || wanted.clone());
    let mut brokers = Vec::new();
    for node_id in 0..3 {
        let s = Arc::new(session(&etcd, "c").await);
        s.register(node_id, &format!("127.0.0.1:{}", 9000 + node_id))
            .await
            .unwrap();
        let table = Arc::new(
            OwnerTable::start(s.client(), s.keys().clone())
                .await
                .unwrap(),
        );
        let m = Membership::start(
            s.clone(),
            node_id,
            table,
            all.clone(),
            Duration::from_millis(100),
        );
        brokers.push(Some((s, m)));
    }
    let observer = session(&etcd, "c").await;
    let table = OwnerTable::start(observer.client(), observer.keys().clone())
        .await
        .unwrap();
    let per_node = |table: &OwnerTable| {
        let mut count: BTreeMap<i32, usize> = BTreeMap::new();
        for (p, o) in table.owners() {
            if partitions.contains(&p) {
                *count.entry(o.node_id).or_default() += 1;
            }
        }
        count
    };
    eventually("two partitions each", || {
        per_node(&table) == BTreeMap::from([(0, 2), (1, 2), (2, 2)])
    })
    .await;
    let before: BTreeMap<_, _> = table.owners().into_iter().collect();

    // The assigner crashes: it stops renewing its lease, which expires on its own.
    let Err(Some(victim)) = assigner::campaign(&observer, 99).await.unwrap() else {
        panic!("some broker is the assigner");
    };
    drop(brokers[victim as usize].take());
    let survivors: BTreeMap<i32, usize> = (0..3).filter(|n| *n != victim).map(|n| (n, 3)).collect();
    eventually("the survivors own three each", || {
        per_node(&table) == survivors
    })
    .await;
    for (p, o) in table.owners() {
        let was = before[&p];
        if was.node_id == victim {
            assert_eq!(o.leader_epoch, was.leader_epoch + 1, "{p:?} moved once");
        } else {
            assert_eq!(o, was, "{p:?} moved though its broker lived");
        }
    }
}

/// Appends one batch of one record `value` to `log`; its offset.
fn append(log: &mut shoal_storage::Log, value: &str) -> i64 {
    let mut batch = shoal_storage::encode_batch(
        &[(None, Some(value.as_bytes()))],
        shoal_storage::BatchOptions::default(),
    );
    log.append(&mut batch, 0).unwrap().first_offset
}

/// The log's bytes of offsets `from..to`.
fn bytes_of(log: &shoal_storage::Log, from: i64, to: i64) -> Bytes {
    let slice = log.read_slice(from, usize::MAX, Some(to), false).unwrap();
    slice.region.map_or_else(Bytes::new, |r| r.read().unwrap())
}

/// Commits `log`'s offsets `from..to` as one run: an object, then the fenced transaction.
async fn commit_run(
    s: &Session,
    objects: &Objects,
    fence: i64,
    log: &shoal_storage::Log,
    from: i64,
    to: i64,
) {
    let name = Objects::unique_name(0);
    let bytes = bytes_of(log, from, to);
    let len = bytes.len() as u64;
    objects.put(&name, bytes).await.unwrap();
    let run = PartitionCommit {
        object: ObjectRef {
            name,
            position: 0,
            len,
        },
        ..part(fence, from, to, "unused")
    };
    commits::commit(s, &[run])
        .await
        .unwrap()
        .expect("committed");
}

#[tokio::test]
async fn a_new_owner_restores_exactly_the_committed_records() {
    use shoal_cluster::restore::{catch_up, CaughtUp};
    use shoal_storage::{Log, LogConfig};

    let etcd = start_etcd().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let objects = Objects::from_url(&format!("file://{}/objects", dir.path().display())).unwrap();
    let open = |name: &str| Log::create(&dir.path().join(name), LogConfig::default()).unwrap();
    let (a, b) = (session(&etcd, "c").await, session(&etcd, "c").await);
    let Claim::Won(Owner { fence: fa, .. }) = owners::claim(&a, 1, "t", 0).await.unwrap() else {
        panic!("free");
    };
    let mut log_a = open("a");
    for v in ["v0", "v1", "v2"] {
        append(&mut log_a, v);
    }
    commit_run(&a, &objects, fa, &log_a, 0, 2).await;
    commit_run(&a, &objects, fa, &log_a, 2, 3).await;

    // An empty log gets every committed record, byte for byte.
    let mut fresh = open("fresh");
    let done = catch_up(&b, &objects, "t", 0, &mut fresh).await.unwrap();
    assert_eq!(
        done,
        CaughtUp {
            truncated: 0,
            fetched: 3,
            end: 3
        }
    );
    assert_eq!(bytes_of(&fresh, 0, 3), bytes_of(&log_a, 0, 3));

    // A appends without committing, then loses t-0 to B, which commits something else there.
    append(&mut log_a, "zombie");
    let mut admin = b.client();
    admin.lease_revoke(a.lease()).await.unwrap();
    let Claim::Won(Owner { fence: fb, .. }) = owners::claim(&b, 2, "t", 0).await.unwrap() else {
        panic!("freed");
    };
    assert_eq!(append(&mut fresh, "new owner"), 3);
    commit_run(&b, &objects, fb, &fresh, 3, 4).await;

    // A's log loses its uncommitted record and gets B's.
    let done = catch_up(&b, &objects, "t", 0, &mut log_a).await.unwrap();
    assert_eq!(
        done,
        CaughtUp {
            truncated: 1,
            fetched: 1,
            end: 4
        }
    );
    assert_eq!(bytes_of(&log_a, 0, 4), bytes_of(&fresh, 0, 4));

    // A log that ends inside a committed run is cut back to the run's start.
    let mut partial = open("partial");
    append(&mut partial, "v0");
    let done = catch_up(&b, &objects, "t", 0, &mut partial).await.unwrap();
    assert_eq!(
        done,
        CaughtUp {
            truncated: 1,
            fetched: 4,
            end: 4
        }
    );
    assert_eq!(bytes_of(&partial, 0, 4), bytes_of(&fresh, 0, 4));

    // A log whose records differ from the committed ones at the same offsets is replaced.
    let mut diverged = open("diverged");
    for v in ["v0", "v1", "v2", "other"] {
        append(&mut diverged, v);
    }
    let done = catch_up(&b, &objects, "t", 0, &mut diverged).await.unwrap();
    assert_eq!(
        done,
        CaughtUp {
            truncated: 1,
            fetched: 1,
            end: 4
        }
    );
    assert_eq!(bytes_of(&diverged, 0, 4), bytes_of(&fresh, 0, 4));
}

#[tokio::test]
async fn the_metadata_log_takes_one_record_per_sequence_and_reads_back_in_order() {
    use shoal_cluster::metadata::{append, read_log, LogWatch};

    let etcd = start_etcd().unwrap();
    let (a, b) = (session(&etcd, "c").await, session(&etcd, "c").await);
    let watch = LogWatch::start(a.client(), a.keys().clone(), Duration::from_secs(30));
    let appended = watch.appended();
    let woken = tokio::spawn(async move { appended.notified().await });
    assert!(append(&a.client(), a.keys(), 0, b"first").await.unwrap());
    tokio::time::timeout(WAIT, woken)
        .await
        .expect("the watch wakes on an append")
        .unwrap();
    // B decided on a stale view (it had seen nothing): refused, nothing written.
    assert!(!append(&b.client(), b.keys(), 0, b"stale").await.unwrap());
    assert!(append(&b.client(), b.keys(), 1, b"second").await.unwrap());
    for i in 2..600u64 {
        assert!(append(&a.client(), a.keys(), i, format!("r{i}").as_bytes())
            .await
            .unwrap());
    }
    // More than one page, from the start and from the middle.
    let all = read_log(&b.client(), b.keys(), 0).await.unwrap();
    assert_eq!(all.len(), 600);
    assert_eq!(all[0], (0, b"first".to_vec()));
    assert_eq!(all[1], (1, b"second".to_vec()));
    assert_eq!(all[599], (599, b"r599".to_vec()));
    let tail = read_log(&a.client(), a.keys(), 598).await.unwrap();
    assert_eq!(tail.iter().map(|r| r.0).collect::<Vec<_>>(), vec![598, 599]);
    assert!(read_log(&a.client(), a.keys(), 600)
        .await
        .unwrap()
        .is_empty());
    // Another cluster's log is its own.
    let other = session(&etcd, "d").await;
    assert!(read_log(&other.client(), other.keys(), 0)
        .await
        .unwrap()
        .is_empty());
}

#[tokio::test]
async fn the_first_broker_names_the_cluster_and_producer_id_blocks_never_overlap() {
    use shoal_cluster::metadata::{cluster_id, reserve_producer_ids};

    let etcd = start_etcd().unwrap();
    let (a, b) = (session(&etcd, "c").await, session(&etcd, "c").await);
    assert_eq!(
        cluster_id(&a.client(), a.keys(), "one").await.unwrap(),
        "one"
    );
    assert_eq!(
        cluster_id(&b.client(), b.keys(), "two").await.unwrap(),
        "one"
    );

    let mut tasks = Vec::new();
    for s in [&a, &b] {
        for _ in 0..10 {
            let (client, keys) = (s.client(), s.keys().clone());
            tasks.push(tokio::spawn(async move {
                reserve_producer_ids(&client, &keys, 1000).await.unwrap()
            }));
        }
    }
    let mut firsts = BTreeSet::new();
    for t in tasks {
        assert!(
            firsts.insert(t.await.unwrap()),
            "a block was handed out twice"
        );
    }
    let expected: BTreeSet<i64> = (0..20).map(|i| i * 1000).collect();
    assert_eq!(firsts, expected);
}

#[tokio::test]
async fn coordinator_epochs_only_grow_across_brokers() {
    use shoal_cluster::metadata::next_coordinator_epoch;

    let etcd = start_etcd().unwrap();
    let (a, b) = (session(&etcd, "c").await, session(&etcd, "c").await);
    let mut tasks = Vec::new();
    for s in [&a, &b] {
        for _ in 0..10 {
            let (client, keys) = (s.client(), s.keys().clone());
            tasks.push(tokio::spawn(async move {
                next_coordinator_epoch(&client, &keys).await.unwrap()
            }));
        }
    }
    let mut epochs = BTreeSet::new();
    for t in tasks {
        assert!(
            epochs.insert(t.await.unwrap()),
            "an epoch was handed out twice"
        );
    }
    assert_eq!(epochs, (1..=20).collect::<BTreeSet<i32>>());
    // Later than every one before, whoever asks.
    assert_eq!(
        next_coordinator_epoch(&a.client(), a.keys()).await.unwrap(),
        21
    );
}

#[tokio::test]
async fn an_assignment_larger_than_one_etcd_transaction_is_recorded_whole() {
    let etcd = start_etcd().unwrap();
    let a = session(&etcd, "c").await;
    let Ok(lead) = assigner::campaign(&a, 1).await.unwrap() else {
        panic!("no assigner yet");
    };
    // More changes than etcd takes in one transaction (128 by default).
    let next: BTreeMap<(String, i32), i32> = (0..300)
        .map(|p| (("t".to_string(), p), 1 + p % 3))
        .collect();
    assert!(assigner::write(&a, lead, &BTreeMap::new(), &next)
        .await
        .unwrap());
    assert_eq!(assigner::read(&a).await.unwrap(), next);
    // And all of it removed again.
    assert!(assigner::write(&a, lead, &next, &BTreeMap::new())
        .await
        .unwrap());
    assert!(assigner::read(&a).await.unwrap().is_empty());
}
