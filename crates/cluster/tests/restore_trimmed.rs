//! `restore::catch_up` of a partition whose log start was recorded (`retention::trim`): a
//! new owner's log starts at the recorded start and holds exactly the committed records from
//! there, whatever its local log held — nothing, a prefix the trim passed, everything with the
//! start not yet moved, or a start above the recorded one. Real etcd on loopback, as
//! `tests/cluster/rig.sh install` provides it; objects in a directory.

use std::time::Duration;

use bytes::Bytes;
use shoal_cluster::commits::{self, index};
use shoal_cluster::restore::catch_up;
use shoal_cluster::retention::{log_start, trim};
use shoal_cluster::rig::{start_etcd, Server};
use shoal_cluster::session::{self, Session};
use shoal_cluster::{owners, Claim, Keys, ObjectRef, Objects, Owner, PartitionCommit};
use shoal_storage::{Log, LogConfig};

async fn session(etcd: &Server) -> Session {
    let client = session::connect(std::slice::from_ref(&etcd.endpoint), Duration::from_secs(5))
        .await
        .unwrap();
    Session::start(client, Keys::new("c").unwrap(), 2)
        .await
        .unwrap()
}

fn append(log: &mut Log, value: &str) -> i64 {
    let mut batch = shoal_storage::encode_batch(
        &[(None, Some(value.as_bytes()))],
        shoal_storage::BatchOptions::default(),
    );
    log.append(&mut batch, 0).unwrap().first_offset
}

/// The log's bytes of offsets `from..to` (whole batches).
fn bytes_of(log: &Log, from: i64, to: i64) -> Bytes {
    let slice = log.read_slice(from, usize::MAX, Some(to), false).unwrap();
    slice.region.map_or_else(Bytes::new, |r| r.read().unwrap())
}

/// Commits `log`'s offsets `from..to` as one run.
async fn commit_run(s: &Session, objects: &Objects, fence: i64, log: &Log, from: i64, to: i64) {
    let name = Objects::unique_name(0);
    let bytes = bytes_of(log, from, to);
    let len = bytes.len() as u64;
    objects.put(&name, bytes).await.unwrap();
    let run = PartitionCommit {
        topic: "t".into(),
        partition: 0,
        fence,
        base_offset: from,
        end_offset: to,
        object: ObjectRef {
            name,
            position: 0,
            len,
        },
    };
    commits::commit(s, &[run])
        .await
        .unwrap()
        .expect("committed");
}

#[tokio::test]
async fn a_restored_log_starts_at_the_recorded_log_start() {
    let etcd = start_etcd().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let objects = Objects::from_url(&format!("file://{}/objects", dir.path().display())).unwrap();
    let open = |name: &str| Log::create(&dir.path().join(name), LogConfig::default()).unwrap();
    let (a, b) = (session(&etcd).await, session(&etcd).await);
    let Claim::Won(Owner { fence, .. }) = owners::claim(&a, 1, "t", 0).await.unwrap() else {
        panic!("free");
    };
    // Ten runs of one record each.
    let mut owner = open("owner");
    for i in 0..10 {
        append(&mut owner, &format!("v{i}"));
        commit_run(&a, &objects, fence, &owner, i, i + 1).await;
    }
    let trimmed = trim(&a, ("t", 0), fence, 4).await.unwrap();
    assert_eq!((trimmed.log_start, trimmed.refused), (4, false));
    assert_eq!(index(&a, "t", 0, 0).await.unwrap()[0].0, 4);
    let expect = |log: &Log| {
        assert_eq!((log.log_start_offset(), log.log_end_offset()), (4, 10));
        assert_eq!(
            bytes_of(log, 4, 10),
            bytes_of(&owner, 0, 10).slice(bytes_of(&owner, 0, 4).len()..)
        );
    };

    // An empty log (the new owner never held t-0) starts at 4.
    let mut fresh = open("fresh");
    let done = catch_up(&b, &objects, "t", 0, &mut fresh).await.unwrap();
    assert_eq!((done.fetched, done.end), (6, 10));
    expect(&fresh);
    drop(fresh);
    expect(&Log::open(&dir.path().join("fresh"), LogConfig::default()).unwrap());

    // A log that ends below the first remaining run.
    let mut prefix = open("prefix");
    for i in 0..2 {
        append(&mut prefix, &format!("v{i}"));
    }
    catch_up(&b, &objects, "t", 0, &mut prefix).await.unwrap();
    expect(&prefix);

    // The owner's own log, killed between the trim and moving its start: kept, start moved.
    let mut whole = open("whole");
    for i in 0..10 {
        append(&mut whole, &format!("v{i}"));
    }
    let done = catch_up(&b, &objects, "t", 0, &mut whole).await.unwrap();
    assert_eq!((done.truncated, done.fetched), (0, 0));
    expect(&whole);

    // A log whose start is above the recorded one lacks records still served: replaced.
    let mut ahead = open("ahead");
    for i in 0..10 {
        append(&mut ahead, &format!("v{i}"));
    }
    ahead.delete_records_before(6).unwrap();
    let done = catch_up(&b, &objects, "t", 0, &mut ahead).await.unwrap();
    assert_eq!(done.fetched, 6);
    expect(&ahead);

    // A start inside a run: the run is restored whole, the start is the recorded one.
    append(&mut owner, "v10");
    append(&mut owner, "v11");
    commit_run(&a, &objects, fence, &owner, 10, 12).await;
    assert_eq!(trim(&a, ("t", 0), fence, 11).await.unwrap().log_start, 11);
    assert_eq!(log_start(&b, "t", 0).await.unwrap().0, 11);
    for log in [&mut fresh_log(&dir, "late"), &mut ahead] {
        catch_up(&b, &objects, "t", 0, log).await.unwrap();
        assert_eq!((log.log_start_offset(), log.log_end_offset()), (11, 12));
        assert_eq!(bytes_of(log, 11, 12), bytes_of(&owner, 11, 12));
    }
}

fn fresh_log(dir: &tempfile::TempDir, name: &str) -> Log {
    Log::create(&dir.path().join(name), LogConfig::default()).unwrap()
}
