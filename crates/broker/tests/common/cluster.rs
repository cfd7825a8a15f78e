//! A broker as a cluster member for tests: its etcd session and owner table, the etcd
//! ownership and object-commit seams over them, registered under its node id. Real etcd and
//! object store (`shoal_cluster::rig`).

use std::sync::Arc;
use std::time::Duration;

use shoal_broker::seams::object_commits::ObjectCommits;
use shoal_broker::seams::ownership::EtcdOwnership;
use shoal_broker::seams::SeamOverrides;
use shoal_cluster::rig::Server;
use shoal_cluster::session::{self, Session};
use shoal_cluster::{Keys, Objects, OwnerTable};

use super::TestBroker;

/// A started member of cluster `c`.
pub struct Member {
    pub session: Arc<Session>,
    pub table: Arc<OwnerTable>,
    pub commits: Arc<ObjectCommits>,
    pub broker: TestBroker,
}

/// Starts broker `node_id` in `dir` with `settings`, its commits through `objects`; a PUT not
/// stored within `put_deadline` fails its commit (the seam's default when `None`).
pub async fn member(
    etcd: &Server,
    objects: &Objects,
    node_id: i32,
    dir: &std::path::Path,
    settings: &[(&str, &str)],
    put_deadline: Option<Duration>,
) -> Member {
    let client = session::connect(std::slice::from_ref(&etcd.endpoint), Duration::from_secs(5))
        .await
        .unwrap();
    let session = Arc::new(
        Session::start(client, Keys::new("c").unwrap(), 2)
            .await
            .unwrap(),
    );
    let table = Arc::new(
        OwnerTable::start(session.client(), session.keys().clone())
            .await
            .unwrap(),
    );
    let mut commits = ObjectCommits::new(node_id, session.clone(), table.clone(), objects.clone());
    if let Some(deadline) = put_deadline {
        commits = commits.with_put_deadline(deadline);
    }
    let commits = Arc::new(commits);
    let seams = SeamOverrides {
        ownership: Some(Arc::new(EtcdOwnership::new(node_id, table.clone()))),
        durability: Some(commits.clone()),
        ..SeamOverrides::default()
    };
    let node = node_id.to_string();
    let mut all = vec![("node.id", node.as_str())];
    all.extend_from_slice(settings);
    let broker = TestBroker::start_with_seams(dir, &all, seams).await;
    session
        .register(node_id, &broker.addr.to_string())
        .await
        .unwrap();
    Member {
        session,
        table,
        commits,
        broker,
    }
}
