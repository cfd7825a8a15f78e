//! `shoal cluster status` against a real etcd (started on loopback by `shoal_cluster::rig`),
//! with brokers, owners, an assignment and commits written through `shoal_cluster`.

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

use shoal_cluster::collector::Collector;
use shoal_cluster::commits::{commit, PartitionCommit};
use shoal_cluster::owners::{claim, Claim};
use shoal_cluster::rig::start_etcd;
use shoal_cluster::session::{connect, Session};
use shoal_cluster::{assigner, Keys, ObjectRef, Objects};

fn shoal(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_shoal"))
        .args(args)
        .output()
        .expect("run shoal")
}

#[tokio::test]
async fn status_shows_brokers_owners_assignment_and_commits() {
    let etcd = start_etcd().unwrap();
    let client = connect(std::slice::from_ref(&etcd.endpoint), Duration::from_secs(5))
        .await
        .unwrap();
    let s = Session::start(client, Keys::new("prod").unwrap(), 30)
        .await
        .unwrap();
    s.register(7, "10.0.0.7:9092").await.unwrap();
    let Claim::Won(owner) = claim(&s, 7, "orders", 1).await.unwrap() else {
        panic!("free");
    };
    let Ok(lead) = assigner::campaign(&s, 7).await.unwrap() else {
        panic!("no assigner yet");
    };
    let assignment = BTreeMap::from([
        (("orders".to_string(), 1), 7),
        (("orders".to_string(), 0), 7),
    ]);
    assert!(assigner::write(&s, lead, &BTreeMap::new(), &assignment)
        .await
        .unwrap());
    let run = |base, end| PartitionCommit {
        topic: "orders".into(),
        partition: 1,
        fence: owner.fence,
        base_offset: base,
        end_offset: end,
        object: ObjectRef {
            name: "n7-x".into(),
            position: 0,
            len: 1,
        },
    };
    commit(&s, &[run(0, 5)]).await.unwrap().unwrap();
    commit(&s, &[run(5, 12)]).await.unwrap().unwrap();
    let url = format!("etcd://{}", etcd.endpoint);
    let status = |cluster: &str| {
        shoal(&[
            "cluster",
            "--metadata-store",
            &url,
            "--cluster-name",
            cluster,
            "status",
        ])
    };
    let before = String::from_utf8_lossy(&status("prod").stdout).into_owned();
    assert!(before.contains("objects: not collected yet"), "{before}");
    // A collector round over a store holding one object no entry names.
    let dir = tempfile::tempdir().unwrap();
    let objects = Objects::from_url(&format!("file://{}", dir.path().display())).unwrap();
    objects
        .put(
            &Objects::unique_name(7),
            bytes::Bytes::from_static(b"orphan"),
        )
        .await
        .unwrap();
    Collector::new(Duration::from_secs(3600))
        .round(&s, &objects)
        .await
        .unwrap();

    let out = shoal(&[
        "cluster",
        "--metadata-store",
        &url,
        "--cluster-name",
        "prod",
        "status",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("brokers: 1"), "{text}");
    assert!(text.contains("node 7    10.0.0.7:9092"), "{text}");
    assert!(text.contains("assigner: node 7"), "{text}");
    let row = |topic: &str, partition: i32| {
        text.lines()
            .find(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                f.first() == Some(&topic) && f.get(1) == Some(&partition.to_string().as_str())
            })
            .map(|l| l.split_whitespace().map(str::to_string).collect::<Vec<_>>())
    };
    assert!(
        text.contains("objects: 1 listed, 0 referenced, 1 awaiting collection, 0 deleted"),
        "{text}"
    );
    // topic partition owner epoch assigned committed-end runs compaction-lag (the first
    // run, small and not the last, is what compaction has yet to fold)
    assert_eq!(
        row("orders", 1).unwrap(),
        ["orders", "1", "7", "1", "7", "12", "2", "1"]
    );
    assert_eq!(
        row("orders", 0).unwrap(),
        ["orders", "0", "-", "-", "7", "0", "0", "0"]
    );

    // Another cluster's name shows nothing of this one; a bad URL is a clean error.
    let other = shoal(&[
        "cluster",
        "--metadata-store",
        &url,
        "--cluster-name",
        "dev",
        "status",
    ]);
    assert!(other.status.success());
    assert!(String::from_utf8_lossy(&other.stdout).contains("brokers: 0"));
    let bad = shoal(&["cluster", "--metadata-store", "http://x:1", "status"]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("etcd://"));
}
