//! Real engines for tests, started on loopback: an etcd (Debian's `etcd-server`) and
//! SeaweedFS's S3 gateway (`weed`), as `tests/cluster/rig.sh install` provides them
//! (`SHOAL_ETCD_BIN`, `SHOAL_WEED_BIN`, else found on PATH). Each server lives in a temporary
//! directory and is killed when its [`Server`] is dropped. For tests: every failure (a
//! binary missing, a server not listening in time) is an error naming what to do.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a server may take to listen.
const WAIT: Duration = Duration::from_secs(60);

fn io(what: &str, e: std::io::Error) -> crate::Error {
    crate::Error::Invalid {
        what: "test server",
        detail: format!("{what}: {e}"),
    }
}

/// A free loopback port.
///
/// # Errors
/// No port could be bound.
pub fn free_port() -> crate::Result<u16> {
    let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| io("bind", e))?;
    Ok(listener.local_addr().map_err(|e| io("bind", e))?.port())
}

fn binary(var: &str, name: &str) -> crate::Result<PathBuf> {
    if let Ok(path) = std::env::var(var) {
        return Ok(PathBuf::from(path));
    }
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(name))
            .find(|p| p.is_file())
    });
    found.ok_or_else(|| crate::Error::Invalid {
        what: "test server",
        detail: format!("{name} not found: run tests/cluster/rig.sh install, or set {var}"),
    })
}

/// A server process, killed when dropped.
pub struct Server {
    child: Child,
    _dir: tempfile::TempDir,
    /// `host:port` for etcd, `http://host:port` for S3.
    pub endpoint: String,
}

impl Server {
    /// Sends `signal` (`STOP`, `CONT`, …) to the server process: a stopped server accepts
    /// connections and answers nothing, as a stalled or partitioned one does.
    ///
    /// # Errors
    /// `kill` could not be run or refused.
    pub fn signal(&self, signal: &str) -> crate::Result<()> {
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.child.id().to_string())
            .status()
            .map_err(|e| io("kill", e))?;
        if status.success() {
            Ok(())
        } else {
            Err(io(
                "kill",
                std::io::Error::other(format!("kill -{signal}: {status}")),
            ))
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn wait_for_port(port: u16, what: &str) -> crate::Result<()> {
    let start = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if start.elapsed() >= WAIT {
            return Err(crate::Error::Invalid {
                what: "test server",
                detail: format!("{what} did not listen on {port} within {WAIT:?}"),
            });
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

/// Starts a one-member etcd on loopback.
///
/// # Errors
/// etcd missing, not started, or not listening in time.
pub fn start_etcd() -> crate::Result<Server> {
    let mut members = start_etcd_cluster(1)?;
    Ok(members.remove(0))
}

/// Starts an etcd cluster of `members` members on loopback (each a [`Server`]: killing one
/// leaves the others serving while a majority is up).
///
/// # Errors
/// etcd missing, not started, or not listening in time.
pub fn start_etcd_cluster(members: usize) -> crate::Result<Vec<Server>> {
    let ports = (0..members)
        .map(|_| Ok((free_port()?, free_port()?)))
        .collect::<crate::Result<Vec<(u16, u16)>>>()?;
    let initial = ports
        .iter()
        .enumerate()
        .map(|(i, (_, peer))| format!("m{i}=http://127.0.0.1:{peer}"))
        .collect::<Vec<_>>()
        .join(",");
    let mut servers = Vec::with_capacity(members);
    for (i, (client, peer)) in ports.iter().enumerate() {
        let dir = tempfile::tempdir().map_err(|e| io("temporary directory", e))?;
        let child = Command::new(binary("SHOAL_ETCD_BIN", "etcd")?)
            .arg(format!("--name=m{i}"))
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .arg(format!("--listen-client-urls=http://127.0.0.1:{client}"))
            .arg(format!("--advertise-client-urls=http://127.0.0.1:{client}"))
            .arg(format!("--listen-peer-urls=http://127.0.0.1:{peer}"))
            .arg(format!(
                "--initial-advertise-peer-urls=http://127.0.0.1:{peer}"
            ))
            .arg(format!("--initial-cluster={initial}"))
            .arg("--initial-cluster-token=shoal-test")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| io("start etcd", e))?;
        servers.push(Server {
            child,
            _dir: dir,
            endpoint: format!("127.0.0.1:{client}"),
        });
    }
    for (client, _) in &ports {
        wait_for_port(*client, "etcd")?;
    }
    Ok(servers)
}

/// Starts SeaweedFS with its S3 gateway on loopback.
///
/// # Errors
/// weed missing, not started, or not listening in time.
pub fn start_s3() -> crate::Result<Server> {
    let dir = tempfile::tempdir().map_err(|e| io("temporary directory", e))?;
    let s3 = free_port()?;
    let mut command = Command::new(binary("SHOAL_WEED_BIN", "weed")?);
    command
        .arg("server")
        .arg(format!("-dir={}", dir.path().display()))
        .args(["-ip=127.0.0.1", "-ip.bind=127.0.0.1", "-filer", "-s3"])
        .arg(format!("-s3.port={s3}"));
    // Every gRPC port too: weed's default is the HTTP port + 10000, past 65535 for a third
    // of the ports the kernel hands out.
    for server in ["master", "volume", "filer", "s3"] {
        if server != "s3" {
            command.arg(format!("-{server}.port={}", free_port()?));
        }
        command.arg(format!("-{server}.port.grpc={}", free_port()?));
    }
    // SeaweedFS turns authentication on when it finds AWS credentials in its environment
    // (tests set them for their clients): the bare CreateBucket below would be refused.
    let child = command
        .env_remove("AWS_ACCESS_KEY_ID")
        .env_remove("AWS_SECRET_ACCESS_KEY")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| io("start weed", e))?;
    let server = Server {
        child,
        _dir: dir,
        endpoint: format!("http://127.0.0.1:{s3}"),
    };
    wait_for_port(s3, "the S3 gateway")?;
    Ok(server)
}

/// Creates `bucket` with a bare S3 CreateBucket (no credentials configured on the server),
/// retrying until the gateway is ready.
///
/// # Errors
/// Not created within the wait.
pub fn create_bucket(endpoint: &str, bucket: &str) -> crate::Result<()> {
    use std::io::{Read, Write};
    let addr = endpoint.trim_start_matches("http://");
    let start = Instant::now();
    // What the last attempt got: the answer, or why there was none (for a failure's message).
    let mut last = String::new();
    while start.elapsed() < WAIT {
        let mut answer = String::new();
        let attempt = std::net::TcpStream::connect(addr).and_then(|mut stream| {
            let request = format!(
                "PUT /{bucket} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            );
            stream.write_all(request.as_bytes())?;
            stream.read_to_string(&mut answer)
        });
        if answer.starts_with("HTTP/1.1 200") {
            return Ok(());
        }
        last = match attempt {
            Err(e) => format!("{e} (after {:?})", start.elapsed()),
            Ok(_) => answer,
        };
        std::thread::sleep(Duration::from_millis(200));
    }
    Err(crate::Error::Invalid {
        what: "test server",
        detail: format!("cannot create bucket {bucket}: {last}"),
    })
}
