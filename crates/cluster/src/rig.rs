//! Real engines for tests, started on loopback: an etcd (Debian's `etcd-server`) and
//! SeaweedFS's S3 gateway (`weed`), as `tests/cluster/rig.sh install` provides them
//! (`SHOAL_ETCD_BIN`, `SHOAL_WEED_BIN`, else found on PATH). Each server lives in a temporary
//! directory and is killed when its [`Server`] is dropped. For tests only: it panics on
//! failure.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a server may take to listen.
const WAIT: Duration = Duration::from_secs(20);

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn binary(var: &str, name: &str) -> PathBuf {
    if let Ok(path) = std::env::var(var) {
        return PathBuf::from(path);
    }
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(name))
            .find(|p| p.is_file())
    });
    found.unwrap_or_else(|| {
        panic!("{name} not found: run tests/cluster/rig.sh install, or set {var}")
    })
}

/// A server process, killed when dropped.
pub struct Server {
    child: Child,
    _dir: tempfile::TempDir,
    /// `host:port` for etcd, `http://host:port` for S3.
    pub endpoint: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn wait_for_port(port: u16, what: &str) {
    let start = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(start.elapsed() < WAIT, "{what} did not listen on {port}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

pub fn start_etcd() -> Server {
    let dir = tempfile::tempdir().unwrap();
    let (client, peer) = (free_port(), free_port());
    let child = Command::new(binary("SHOAL_ETCD_BIN", "etcd"))
        .args(["--name", "test", "--data-dir"])
        .arg(dir.path().join("data"))
        .arg(format!("--listen-client-urls=http://127.0.0.1:{client}"))
        .arg(format!("--advertise-client-urls=http://127.0.0.1:{client}"))
        .arg(format!("--listen-peer-urls=http://127.0.0.1:{peer}"))
        .arg(format!(
            "--initial-advertise-peer-urls=http://127.0.0.1:{peer}"
        ))
        .arg(format!("--initial-cluster=test=http://127.0.0.1:{peer}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start etcd");
    wait_for_port(client, "etcd");
    Server {
        child,
        _dir: dir,
        endpoint: format!("127.0.0.1:{client}"),
    }
}

pub fn start_s3() -> Server {
    let dir = tempfile::tempdir().unwrap();
    let s3 = free_port();
    let (master, volume, filer) = (free_port(), free_port(), free_port());
    let child = Command::new(binary("SHOAL_WEED_BIN", "weed"))
        .arg("server")
        .arg(format!("-dir={}", dir.path().display()))
        .args(["-ip=127.0.0.1", "-ip.bind=127.0.0.1"])
        .arg(format!("-master.port={master}"))
        .arg(format!("-volume.port={volume}"))
        .arg(format!("-filer.port={filer}"))
        .args(["-filer", "-s3"])
        .arg(format!("-s3.port={s3}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start weed");
    wait_for_port(s3, "the S3 gateway");
    Server {
        child,
        _dir: dir,
        endpoint: format!("http://127.0.0.1:{s3}"),
    }
}

/// Creates `bucket` with a bare S3 CreateBucket (no credentials configured on the server).
pub fn create_bucket(endpoint: &str, bucket: &str) {
    use std::io::{Read, Write};
    let addr = endpoint.trim_start_matches("http://");
    let start = Instant::now();
    loop {
        let mut stream = std::net::TcpStream::connect(addr).unwrap();
        write!(
            stream,
            "PUT /{bucket} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut answer = String::new();
        let _ = stream.read_to_string(&mut answer);
        if answer.starts_with("HTTP/1.1 200") {
            return;
        }
        assert!(start.elapsed() < WAIT, "cannot create bucket: {answer}");
        std::thread::sleep(Duration::from_millis(200));
    }
}
