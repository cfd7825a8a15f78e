//! Starting a real broker for the client's integration tests: the `shoal` binary, or with
//! `SHOAL_CLIENT_TARGET=kafka` Apache Kafka 4.4 in KRaft combined mode (the jars of
//! `tests/interop/kafka_ref`, from `KAFKA_LIBS`, default `~/.cache/shoal/kafka-libs`; run
//! `tests/interop/kafka_ref/fetch.sh` once to fill it), configured as the interop suite
//! configures it.
//!
//! The client must not depend on the broker crates, even for tests, so the tests run the
//! binary as a separate process. It is built once per test binary with the same cargo that
//! runs the tests (`cargo build -p shoal-cli --bin shoal`, a no-op when fresh), so the tests
//! never run against a stale broker; `SHOAL_BIN` names another binary instead (for example a
//! release build).

#![allow(dead_code)]

pub mod eos;
pub mod log;
pub mod share;

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use shoal_client::ClientConfig;

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

/// Which broker the tests run against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    Shoal,
    Kafka,
}

pub fn target() -> Target {
    match std::env::var("SHOAL_CLIENT_TARGET").as_deref() {
        Ok("kafka") => Target::Kafka,
        Ok("shoal") | Err(_) => Target::Shoal,
        Ok(other) => panic!("SHOAL_CLIENT_TARGET={other}: shoal or kafka"),
    }
}

/// A broker process on a fixed port and data directory, killed on drop.
pub struct Broker {
    pub addr: SocketAddr,
    pub data_dir: PathBuf,
    pub target: Target,
    controller_port: u16,
    /// Extra broker settings (`--set key=value`; Shoal only).
    settings: Vec<(String, String)>,
    child: Option<Child>,
}

impl Broker {
    pub fn start(data_dir: &Path) -> Broker {
        Broker::start_with(data_dir, &[])
    }

    /// [`Broker::start`] with extra Shoal settings (`--set key=value`), kept on restart.
    pub fn start_with(data_dir: &Path, settings: &[(&str, &str)]) -> Broker {
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let mut shoal = Broker {
            addr,
            data_dir: data_dir.to_path_buf(),
            target: target(),
            controller_port: free_port(),
            settings: settings
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            child: None,
        };
        shoal.spawn();
        shoal
    }

    fn command(&self) -> Command {
        match self.target {
            Target::Shoal => {
                let mut cmd = Command::new(shoal_bin());
                cmd.args(["serve", "--listen", &self.addr.to_string()])
                    .arg("--data-dir")
                    .arg(self.data_dir.join("data"))
                    .args(["--set", "group.initial.rebalance.delay.ms=0"]);
                for (key, value) in &self.settings {
                    cmd.arg("--set").arg(format!("{key}={value}"));
                }
                cmd
            }
            Target::Kafka => self.kafka_command(),
        }
    }

    fn kafka_command(&self) -> Command {
        let libs = std::env::var_os("KAFKA_LIBS")
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                PathBuf::from(std::env::var_os("HOME").unwrap()).join(".cache/shoal/kafka-libs")
            });
        assert!(
            libs.is_dir(),
            "{} missing: run tests/interop/kafka_ref/fetch.sh or set KAFKA_LIBS",
            libs.display()
        );
        let conf = self.data_dir.join("conf");
        std::fs::create_dir_all(&conf).unwrap();
        let (port, controller) = (self.addr.port(), self.controller_port);
        let props = format!(
            "process.roles=broker,controller\nnode.id=1\n\
             controller.quorum.bootstrap.servers=127.0.0.1:{controller}\n\
             listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller}\n\
             advertised.listeners=PLAINTEXT://127.0.0.1:{port}\n\
             controller.listener.names=CONTROLLER\ninter.broker.listener.name=PLAINTEXT\n\
             listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT\n\
             log.dirs={}\nnum.partitions=1\n\
             offsets.topic.replication.factor=1\noffsets.topic.num.partitions=5\n\
             transaction.state.log.replication.factor=1\ntransaction.state.log.min.isr=1\n\
             transaction.state.log.num.partitions=5\ngroup.initial.rebalance.delay.ms=0\n\
             share.coordinator.state.topic.replication.factor=1\n\
             share.coordinator.state.topic.min.isr=1\n\
             broker.heartbeat.interval.ms=500\nbroker.session.timeout.ms=3000\n",
            self.data_dir.join("data").display()
        );
        let server = conf.join("server.properties");
        std::fs::write(&server, props).unwrap();
        let log4j = conf.join("log4j2.properties");
        std::fs::write(
            &log4j,
            format!(
                "status = warn\nappender.file.type = File\nappender.file.name = FILE\n\
                 appender.file.fileName = {}\nappender.file.layout.type = PatternLayout\n\
                 appender.file.layout.pattern = [%d] %p %m (%c)%n\nrootLogger.level = INFO\n\
                 rootLogger.appenderRef.file.ref = FILE\n",
                conf.join("kafka.log").display()
            ),
        )
        .unwrap();
        let java = |main: &str| {
            let mut cmd = Command::new("java");
            cmd.args(["-Xms256m", "-Xmx1g", "-Djava.awt.headless=true"])
                .arg(format!("-Dlog4j2.configurationFile={}", log4j.display()))
                .arg("-cp")
                .arg(format!("{}/*", libs.display()))
                .arg(main);
            cmd
        };
        if !self.data_dir.join("data/meta.properties").exists() {
            let status = java("kafka.tools.StorageTool")
                .args(["format", "--cluster-id=q1Sh-9_ISia_zwGINzRvyQ", "-c"])
                .arg(&server)
                .arg("--standalone")
                .stdout(Stdio::null())
                .status()
                .unwrap();
            assert!(status.success(), "kafka storage format failed");
        }
        let mut cmd = java("kafka.Kafka");
        cmd.arg(&server);
        cmd
    }

    fn spawn(&mut self) {
        let mut child = self
            .command()
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn the broker");
        let deadline = Instant::now() + Duration::from_secs(90);
        while TcpStream::connect(self.addr).is_err() {
            if let Some(status) = child.try_wait().unwrap() {
                panic!("{:?} exited early: {status}", self.target);
            }
            assert!(
                Instant::now() < deadline,
                "{:?} did not start listening",
                self.target
            );
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

impl Drop for Broker {
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

/// Test time bounds: a JVM broker starts and restarts in seconds, not milliseconds.
pub fn secs(shoal_secs: u64) -> u64 {
    match target() {
        Target::Shoal => shoal_secs,
        Target::Kafka => shoal_secs * 3,
    }
}

pub fn config(shoal: &Broker, extra: &[(&str, &str)]) -> ClientConfig {
    let bootstrap = shoal.addr.to_string();
    let api_timeout = (secs(20) * 1000).to_string();
    let mut props = vec![
        ("bootstrap.servers", bootstrap.as_str()),
        ("client.id", "shoal-client-test"),
        ("request.timeout.ms", "5000"),
        ("default.api.timeout.ms", api_timeout.as_str()),
        ("retry.backoff.ms", "20"),
        ("retry.backoff.max.ms", "200"),
        ("reconnect.backoff.ms", "20"),
        ("reconnect.backoff.max.ms", "200"),
    ];
    props.extend_from_slice(extra);
    ClientConfig::from_properties(props).unwrap()
}
