//! Compaction of the commit index into segment objects, and the collection of objects no
//! entry names, against a real etcd and a real S3 server (SeaweedFS) started on loopback, as
//! `tests/cluster/rig.sh install` provides them (see `engines.rs`).

use std::collections::BTreeSet;
use std::time::Duration;

use bytes::Bytes;
use shoal_cluster::collector::Collector;
use shoal_cluster::commits::{self, index};
use shoal_cluster::compaction::{self, compact, compact_group, read_index, Policy};
use shoal_cluster::owners;
use shoal_cluster::restore::catch_up;
use shoal_cluster::rig::{create_bucket, start_etcd, start_s3, Server};
use shoal_cluster::session::{self, Session};
use shoal_cluster::{Claim, CommitRefused, Keys, ObjectRef, Objects, Owner, PartitionCommit};
use shoal_storage::{Log, LogConfig};

async fn session(etcd: &Server, cluster: &str) -> Session {
    let client = session::connect(std::slice::from_ref(&etcd.endpoint), Duration::from_secs(5))
        .await
        .expect("connect to etcd");
    Session::start(client, Keys::new(cluster).unwrap(), 2)
        .await
        .expect("lease")
}

/// A bucket of its own on a fresh SeaweedFS.
fn s3_store(s3: &Server, prefix: &str) -> Objects {
    create_bucket(&s3.endpoint, "shoal").unwrap();
    std::env::set_var("AWS_ACCESS_KEY_ID", "test");
    std::env::set_var("AWS_SECRET_ACCESS_KEY", "test");
    Objects::from_url(&format!(
        "s3://shoal/{prefix}?endpoint={}&region=us-east-1",
        s3.endpoint
    ))
    .unwrap()
}

async fn claim(s: &Session, node: i32, partition: i32) -> i64 {
    match owners::claim(s, node, "t", partition).await.unwrap() {
        Claim::Won(Owner { fence, .. }) => fence,
        Claim::Owned(o) => panic!("t-{partition} owned by {o:?}"),
    }
}

/// Appends one batch of one record `value` to `log`.
fn append(log: &mut Log, value: &str) {
    let mut batch = shoal_storage::encode_batch(
        &[(None, Some(value.as_bytes()))],
        shoal_storage::BatchOptions::default(),
    );
    log.append(&mut batch, 0).unwrap();
}

fn bytes_of(log: &Log, from: i64, to: i64) -> Bytes {
    let slice = log.read_slice(from, usize::MAX, Some(to), false).unwrap();
    slice.region.map_or_else(Bytes::new, |r| r.read().unwrap())
}

/// Group commits: each round appends one record to every partition's log and commits them
/// all in one object and one transaction, as a broker's flush does.
async fn group_commits(
    s: &Session,
    objects: &Objects,
    fences: &[i64],
    logs: &mut [Log],
    rounds: usize,
) {
    for round in 0..rounds {
        let name = Objects::unique_name(1);
        let mut object = Vec::new();
        let mut parts = Vec::new();
        for (p, log) in logs.iter_mut().enumerate() {
            let base = log.log_end_offset();
            append(log, &format!("p{p} r{round}"));
            let bytes = bytes_of(log, base, base + 1);
            parts.push(PartitionCommit {
                topic: "t".into(),
                partition: p as i32,
                fence: fences[p],
                base_offset: base,
                end_offset: base + 1,
                object: ObjectRef {
                    name: name.clone(),
                    position: object.len() as u64,
                    len: bytes.len() as u64,
                },
            });
            object.extend_from_slice(&bytes);
        }
        objects.put(&name, Bytes::from(object)).await.unwrap();
        for chunk in parts.chunks(50) {
            commits::commit(s, chunk).await.unwrap().expect("committed");
        }
    }
}

async fn object_names(objects: &Objects) -> BTreeSet<String> {
    objects.list().await.unwrap().into_iter().collect()
}

/// Every object some index entry of `partitions` names.
async fn referenced(s: &Session, partitions: i32) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for p in 0..partitions {
        for (_, o) in index(s, "t", p, 0).await.unwrap() {
            names.insert(o.name);
        }
    }
    names
}

const POLICY: Policy = Policy {
    runs_max: 4,
    segment_bytes: 1024 * 1024,
};

#[tokio::test]
async fn a_compacted_index_restores_exactly_the_committed_records() {
    let (etcd, s3) = (start_etcd().unwrap(), start_s3().unwrap());
    let objects = s3_store(&s3, "restore");
    let dir = tempfile::tempdir().unwrap();
    let open = |name: &str| Log::create(&dir.path().join(name), LogConfig::default()).unwrap();
    let (a, b) = (session(&etcd, "c").await, session(&etcd, "c").await);
    let fences = [claim(&a, 1, 0).await, claim(&a, 1, 1).await];
    let mut logs = vec![open("a0"), open("a1")];
    group_commits(&a, &objects, &fences, &mut logs, 30).await;
    assert_eq!(index(&a, "t", 0, 0).await.unwrap().len(), 30);

    for (p, fence) in fences.iter().enumerate() {
        let done = compact(&a, &objects, 1, ("t", p as i32), *fence, POLICY)
            .await
            .unwrap();
        assert_eq!(
            (done.groups, done.entries_replaced, done.refused),
            (1, 29, 0)
        );
        // One segment for the first 29 commits, the last entry as it was.
        let entries = index(&a, "t", p as i32, 0).await.unwrap();
        assert_eq!(entries.iter().map(|e| e.0).collect::<Vec<_>>(), vec![0, 29]);
    }
    // Under the policy's threshold again: nothing to do.
    let again = compact(&a, &objects, 1, ("t", 0), fences[0], POLICY)
        .await
        .unwrap();
    assert_eq!(again, compaction::Compacted::default());

    // The owner commits on after the compaction; then a new owner restores from nothing.
    group_commits(&a, &objects, &fences, &mut logs, 3).await;
    a.revoke().await.unwrap();
    claim(&b, 2, 0).await;
    for (p, log) in logs.iter().enumerate() {
        let mut fresh = open(&format!("b{p}"));
        let done = catch_up(&b, &objects, "t", p as i32, &mut fresh)
            .await
            .unwrap();
        assert_eq!((done.fetched, done.end), (33, 33));
        assert_eq!(bytes_of(&fresh, 0, 33), bytes_of(log, 0, 33));
    }
    // The old owner's own log is found whole at the committed end: nothing refetched.
    let done = catch_up(&b, &objects, "t", 0, &mut logs[0]).await.unwrap();
    assert_eq!((done.truncated, done.fetched), (0, 0));
}

#[tokio::test]
async fn a_compaction_under_a_lost_fence_or_over_changed_entries_changes_nothing() {
    let (etcd, s3) = (start_etcd().unwrap(), start_s3().unwrap());
    let objects = s3_store(&s3, "races");
    let dir = tempfile::tempdir().unwrap();
    let mut logs = vec![Log::create(&dir.path().join("a"), LogConfig::default()).unwrap()];
    let (a, b) = (session(&etcd, "c").await, session(&etcd, "c").await);
    let fence = claim(&a, 1, 0).await;
    group_commits(&a, &objects, &[fence], &mut logs, 10).await;
    let before = read_index(&a, "t", 0).await.unwrap();

    // Entries changed since they were read (another compaction of the same owner got there
    // first): the stale group is refused and its segment is an orphan.
    let first = compact_group(&a, &objects, 1, ("t", 0), fence, &before.entries[0..3])
        .await
        .unwrap();
    assert!(first.1, "the first compaction is recorded");
    let after_first = read_index(&a, "t", 0).await.unwrap();
    let stale = compact_group(&a, &objects, 1, ("t", 0), fence, &before.entries[0..5])
        .await
        .unwrap();
    assert!(!stale.1, "a group read before the index changed is refused");
    assert_eq!(
        read_index(&a, "t", 0).await.unwrap().entries,
        after_first.entries
    );
    assert!(object_names(&objects).await.contains(&stale.0.name));

    // A commit racing the compaction: the group still holds.
    let group = &after_first.entries[0..4];
    group_commits(&a, &objects, &[fence], &mut logs, 1).await;
    let raced = compact_group(&a, &objects, 1, ("t", 0), fence, group)
        .await
        .unwrap();
    assert!(
        raced.1,
        "a commit at the end does not touch a compaction's group"
    );

    // The owner is gone (paused past its lease): its compaction is refused.
    let now = read_index(&a, "t", 0).await.unwrap();
    b.client().lease_revoke(a.lease()).await.unwrap();
    claim(&b, 2, 0).await;
    let zombie = compact_group(&a, &objects, 1, ("t", 0), fence, &now.entries[1..4])
        .await
        .unwrap();
    assert!(!zombie.1, "a lost owner compacts nothing");
    assert_eq!(read_index(&b, "t", 0).await.unwrap().entries, now.entries);

    // Whatever happened, the records are the committed ones.
    let mut fresh = Log::create(&dir.path().join("b"), LogConfig::default()).unwrap();
    catch_up(&b, &objects, "t", 0, &mut fresh).await.unwrap();
    assert_eq!(bytes_of(&fresh, 0, 11), bytes_of(&logs[0], 0, 11));
}

#[tokio::test]
async fn unreferenced_objects_are_collected_after_their_grace_and_referenced_ones_never() {
    let (etcd, s3) = (start_etcd().unwrap(), start_s3().unwrap());
    let objects = s3_store(&s3, "gc");
    let dir = tempfile::tempdir().unwrap();
    let open = |name: &str| Log::create(&dir.path().join(name), LogConfig::default()).unwrap();
    let (a, b) = (session(&etcd, "c").await, session(&etcd, "c").await);
    let fences = [claim(&a, 1, 0).await, claim(&a, 1, 1).await];
    let mut logs = vec![open("a0"), open("a1")];
    group_commits(&a, &objects, &fences, &mut logs, 8).await;

    // A's lease is lost behind its back; B takes t-0. A's next commit, object stored first,
    // is refused: the object is a zombie's, named by nothing.
    b.client().lease_revoke(a.lease()).await.unwrap();
    let fence_b = claim(&b, 2, 0).await;
    let zombie = Objects::unique_name(1);
    objects
        .put(&zombie, Bytes::from_static(b"zombie bytes"))
        .await
        .unwrap();
    let refused = commits::commit(
        &a,
        &[PartitionCommit {
            topic: "t".into(),
            partition: 0,
            fence: fences[0],
            base_offset: 8,
            end_offset: 9,
            object: ObjectRef {
                name: zombie.clone(),
                position: 0,
                len: 12,
            },
        }],
    )
    .await
    .unwrap();
    assert!(matches!(refused, Err(CommitRefused::Fenced { .. })));
    // B compacts t-0: the group commits' objects are still named by t-1's entries.
    let done = compact(&b, &objects, 2, ("t", 0), fence_b, POLICY)
        .await
        .unwrap();
    assert_eq!(done.groups, 1);
    // A file that is not an object of this store is never touched.
    objects
        .put("notes.txt", Bytes::from_static(b"not ours"))
        .await
        .unwrap();

    // Within the grace: nothing is deleted.
    let grace = Duration::from_millis(300);
    let mut collector = Collector::new(grace);
    let first = collector.round(&b, &objects).await.unwrap();
    assert_eq!((first.awaiting, first.deleted), (1, 0), "{first:?}");
    let mut patient = Collector::new(Duration::from_secs(3600));
    patient.round(&b, &objects).await.unwrap();
    tokio::time::sleep(grace).await;
    let patient_round = patient.round(&b, &objects).await.unwrap();
    assert_eq!(patient_round.deleted, 0);
    assert!(object_names(&objects).await.contains(&zombie));

    // Past it: the zombie's object goes, every referenced one stays.
    let second = collector.round(&b, &objects).await.unwrap();
    assert_eq!((second.awaiting, second.deleted), (0, 1), "{second:?}");
    let left = object_names(&objects).await;
    assert!(!left.contains(&zombie));
    assert!(left.contains("notes.txt"));
    let named = referenced(&b, 2).await;
    assert!(named.is_subset(&left), "{named:?} not all in {left:?}");
    assert_eq!(left.len(), named.len() + 1);

    // t-1 compacted too: the group commits' objects are named by nothing now, and go.
    b.client().lease_revoke(b.lease()).await.ok();
    let c = session(&etcd, "c").await;
    let fence_c = claim(&c, 3, 1).await;
    compact(&c, &objects, 3, ("t", 1), fence_c, POLICY)
        .await
        .unwrap();
    collector.round(&c, &objects).await.unwrap();
    tokio::time::sleep(grace).await;
    let third = collector.round(&c, &objects).await.unwrap();
    assert_eq!(third.deleted, 7, "{third:?}");
    let left = object_names(&objects).await;
    assert_eq!(left.len(), referenced(&c, 2).await.len() + 1);
    for (p, log) in logs.iter().enumerate() {
        let mut fresh = open(&format!("c{p}"));
        catch_up(&c, &objects, "t", p as i32, &mut fresh)
            .await
            .unwrap();
        assert_eq!(bytes_of(&fresh, 0, 8), bytes_of(log, 0, 8));
    }
}

#[tokio::test]
async fn a_collector_killed_mid_round_deletes_nothing_referenced() {
    let (etcd, s3) = (start_etcd().unwrap(), start_s3().unwrap());
    let objects = s3_store(&s3, "kill");
    let dir = tempfile::tempdir().unwrap();
    let open = |name: &str| Log::create(&dir.path().join(name), LogConfig::default()).unwrap();
    let a = session(&etcd, "c").await;
    let fences = [claim(&a, 1, 0).await];
    let mut logs = vec![open("a0")];
    group_commits(&a, &objects, &fences, &mut logs, 12).await;
    // Orphans: replaced by a compaction, and a few failed commits'.
    compact(&a, &objects, 1, ("t", 0), fences[0], POLICY)
        .await
        .unwrap();
    for _ in 0..5 {
        objects
            .put(&Objects::unique_name(1), Bytes::from_static(b"orphan"))
            .await
            .unwrap();
    }
    let named = referenced(&a, 1).await;
    let all = object_names(&objects).await.len();
    assert_eq!(all, named.len() + 11 + 5);
    let mut stopped_midway = 0;
    // Collectors that have seen every orphan past its grace, each stopped after a little
    // longer than the one before: wherever it stops, what is named stays.
    let mut cut = Duration::from_millis(1);
    loop {
        let mut collector = Collector::new(Duration::ZERO);
        let stopped = tokio::time::timeout(cut, collector.round(&a, &objects)).await;
        let left = object_names(&objects).await;
        assert!(named.is_subset(&left), "stopped after {cut:?}: {left:?}");
        if stopped.is_ok() {
            break;
        }
        if left.len() > named.len() && left.len() < all {
            stopped_midway += 1;
        }
        cut += Duration::from_millis(2);
    }
    assert_eq!(object_names(&objects).await, named);
    // How many collectors were stopped with some orphans deleted and some not (a count of
    // how the run went, not a condition: it depends on the machine's speed).
    eprintln!("collectors stopped between two deletions: {stopped_midway}");
    let mut fresh = open("fresh");
    catch_up(&a, &objects, "t", 0, &mut fresh).await.unwrap();
    assert_eq!(bytes_of(&fresh, 0, 12), bytes_of(&logs[0], 0, 12));
}

/// Not a timed test: many group commits over many partitions, then compaction, collection and
/// etcd's history compacted; prints etcd's database size and the object count at each step
/// (docs/benchmarks.md, "Cluster index: compaction and collection"), and checks the index is
/// bounded.
#[tokio::test]
async fn compaction_and_collection_bound_the_index_and_the_objects() {
    let (etcd, s3) = (start_etcd().unwrap(), start_s3().unwrap());
    let objects = s3_store(&s3, "measure");
    let dir = tempfile::tempdir().unwrap();
    let partitions: i32 = 50;
    let rounds = 200;
    let a = session(&etcd, "c").await;
    let mut fences = Vec::new();
    let mut logs = Vec::new();
    for p in 0..partitions {
        fences.push(claim(&a, 1, p).await);
        logs.push(Log::create(&dir.path().join(format!("p{p}")), LogConfig::default()).unwrap());
    }
    let report = |step: &str, db: (i64, i64), entries: usize, objects: usize| {
        eprintln!(
            "{step:<36} etcd dbSize {:>9} dbSizeInUse {:>9} index entries {entries:>6} objects {objects:>5}",
            db.0, db.1
        );
    };
    let measure = || async {
        let mut client = a.client();
        let status = client.status().await.unwrap();
        let mut entries = 0;
        for p in 0..partitions {
            entries += index(&a, "t", p, 0).await.unwrap().len();
        }
        let listed = object_names(&objects).await.len();
        (
            (status.db_size(), status.raft_used_db_size()),
            entries,
            listed,
        )
    };
    let (db, entries, listed) = measure().await;
    report("start", db, entries, listed);
    group_commits(&a, &objects, &fences, &mut logs, rounds).await;
    let (db, entries, listed) = measure().await;
    report(
        &format!("{rounds} group commits x {partitions} partitions"),
        db,
        entries,
        listed,
    );
    assert_eq!(entries, rounds * partitions as usize);

    let policy = Policy::default();
    for (p, fence) in fences.iter().enumerate() {
        compact(&a, &objects, 1, ("t", p as i32), *fence, policy)
            .await
            .unwrap();
    }
    let (db, entries, listed) = measure().await;
    report("compacted", db, entries, listed);
    // Per partition: a group of at most ENTRIES_PER_GROUP_MAX entries each, then the last.
    let bound = partitions as usize * (rounds / compaction::ENTRIES_PER_GROUP_MAX + 2);
    assert!(entries <= bound, "{entries} entries, bound {bound}");

    let mut collector = Collector::new(Duration::ZERO);
    collector.round(&a, &objects).await.unwrap();
    // The second round compacts etcd's history up to the first round's revision.
    collector.round(&a, &objects).await.unwrap();
    let (db, entries, listed) = measure().await;
    report("collected, etcd history compacted", db, entries, listed);
    assert_eq!(listed, referenced(&a, partitions).await.len());
    a.client().defragment().await.unwrap();
    let (db, entries, listed) = measure().await;
    report("etcd defragmented", db, entries, listed);
}

#[tokio::test]
async fn a_trim_records_the_log_start_and_drops_only_entries_wholly_below_it() {
    use shoal_cluster::retention::{log_start, trim, Trimmed};

    let (etcd, s3) = (start_etcd().unwrap(), start_s3().unwrap());
    let objects = s3_store(&s3, "trim");
    let dir = tempfile::tempdir().unwrap();
    let mut logs = vec![Log::create(&dir.path().join("a"), LogConfig::default()).unwrap()];
    let (a, b) = (session(&etcd, "c").await, session(&etcd, "c").await);
    let fence = claim(&a, 1, 0).await;
    group_commits(&a, &objects, &[fence], &mut logs, 10).await;
    // Entries 0..=4 end at or below 5: deleted; entry 5 holds offset 5: kept.
    let done = trim(&a, ("t", 0), fence, 5).await.unwrap();
    assert_eq!(
        done,
        Trimmed {
            entries_deleted: 5,
            log_start: 5,
            refused: false
        }
    );
    assert_eq!(index(&a, "t", 0, 0).await.unwrap()[0].0, 5);
    assert_eq!(log_start(&a, "t", 0).await.unwrap().0, 5);
    assert_eq!(index(&a, "t", 0, 0).await.unwrap().len(), 5);
    // The start only grows; past the committed end is an error.
    assert_eq!(trim(&a, ("t", 0), fence, 3).await.unwrap().log_start, 5);
    assert!(trim(&a, ("t", 0), fence, 11).await.is_err());
    // The last entry stays even when the start reaches the committed end.
    let done = trim(&a, ("t", 0), fence, 10).await.unwrap();
    assert_eq!((done.entries_deleted, done.log_start), (4, 10));
    assert_eq!(index(&a, "t", 0, 0).await.unwrap().len(), 1);

    // A lost owner trims nothing.
    group_commits(&a, &objects, &[fence], &mut logs, 3).await;
    b.client().lease_revoke(a.lease()).await.unwrap();
    let fence_b = claim(&b, 2, 0).await;
    let zombie = trim(&a, ("t", 0), fence, 12).await.unwrap();
    assert!(zombie.refused);
    assert_eq!(log_start(&b, "t", 0).await.unwrap().0, 10);
    assert_eq!(index(&b, "t", 0, 0).await.unwrap().len(), 4);
    let done = trim(&b, ("t", 0), fence_b, 12).await.unwrap();
    assert_eq!((done.entries_deleted, done.log_start), (3, 12));

    // The objects of the deleted entries go with the collector; the rest stay.
    let mut collector = Collector::new(Duration::ZERO);
    collector.round(&b, &objects).await.unwrap();
    assert_eq!(object_names(&objects).await, referenced(&b, 1).await);
    assert_eq!(object_names(&objects).await.len(), 1);
    // The old owner's log, whole, still catches up against what is left.
    let done = catch_up(&b, &objects, "t", 0, &mut logs[0]).await.unwrap();
    assert_eq!((done.truncated, done.fetched, done.end), (0, 0, 13));
}
