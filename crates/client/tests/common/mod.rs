//! Starting the real `shoal` binary for the client's integration tests.
//!
//! The client must not depend on the broker crates, even for tests, so the tests run the
//! binary as a separate process. It is built once per test binary with the same cargo that
//! runs the tests (`cargo build -p shoal-cli --bin shoal`, a no-op when fresh), so the tests
//! never run against a stale broker; `SHOAL_BIN` names another binary instead (for example a
//! release build).

#![allow(dead_code)]

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn shoal_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Some(bin) = std::env::var_os("SHOAL_BIN") {
            return PathBuf::from(bin);
        }
        // target/debug/deps/<test> → target/debug/shoal
        let exe = std::env::current_exe().unwrap();
        let dir = exe.parent().and_then(Path::parent).unwrap().to_path_buf();
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let status = Command::new(cargo)
            .args(["build", "--quiet", "-p", "shoal-cli", "--bin", "shoal"])
            .status()
            .expect("run cargo build for the shoal binary");
        assert!(status.success(), "building the shoal binary failed");
        let bin = dir.join("shoal");
        assert!(bin.exists(), "{} missing; set SHOAL_BIN", bin.display());
        bin
    })
}

/// A `shoal serve` process on a fixed port and data directory, killed on drop.
pub struct Shoal {
    pub addr: SocketAddr,
    pub data_dir: PathBuf,
    child: Option<Child>,
}

impl Shoal {
    pub fn start(data_dir: &Path) -> Shoal {
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let mut shoal = Shoal {
            addr,
            data_dir: data_dir.to_path_buf(),
            child: None,
        };
        shoal.spawn();
        shoal
    }

    fn spawn(&mut self) {
        let mut child = Command::new(shoal_bin())
            .args(["serve", "--listen", &self.addr.to_string()])
            .arg("--data-dir")
            .arg(&self.data_dir)
            .args(["--set", "group.initial.rebalance.delay.ms=0"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn shoal");
        let deadline = Instant::now() + Duration::from_secs(30);
        while TcpStream::connect(self.addr).is_err() {
            if let Some(status) = child.try_wait().unwrap() {
                panic!("shoal exited early: {status}");
            }
            assert!(Instant::now() < deadline, "shoal did not start listening");
            std::thread::sleep(Duration::from_millis(20));
        }
        self.child = Some(child);
    }

    /// SIGKILL, as a crash: no clean shutdown, connections reset.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SAFETY: kill(2) on our own child's pid.
            unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
            let _ = child.wait();
        }
    }

    /// Starts the broker again on the same port and data directory.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }
}

impl Drop for Shoal {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Runs a test body within `secs` seconds.
pub async fn bounded<F: std::future::Future>(secs: u64, f: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(secs), f)
        .await
        .expect("test took too long")
}
