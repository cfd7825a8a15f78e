//! What a connection costs after a burst: a quiet connection gives its buffers back, and the
//! broker process returns the freed memory, so many connections that once sent or received
//! something large do not each keep that much resident. Also that giving buffers back keeps
//! a half-received frame, and that `connections.max.idle.ms` still closes idle connections.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::{free_port, terminate, wait_listening};

/// Connections in the burst, and the size of the request each sends (and, about, of the
/// response each reads): 64 × (4 + 4) MiB went through connection buffers. Kept by each
/// connection, that is 512 MiB; what the broker may keep after the quiet is [`KEPT_MIB`]: the
/// allocator keeps up to 32 MiB free at the top of each thread's heap (`tune_allocator` in
/// the binary), a few heaps in all (15 to 20 MiB measured).
const CONNECTIONS: usize = 64;
const KEPT_MIB: f64 = 128.0;
const REQUEST_BYTES: usize = 4 << 20;

fn start(dir: &std::path::Path, settings: &[&str]) -> (Child, SocketAddr) {
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_shoal"));
    cmd.args(["serve", "--listen", &addr.to_string()])
        .arg("--data-dir")
        .arg(dir.join("data"));
    for s in settings {
        cmd.args(["--set", s]);
    }
    let mut child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_listening(addr, &mut child);
    (child, addr)
}

fn rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("VmRSS in /proc/<pid>/status");
    kib / 1024.0
}

fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s
}

/// Reads one response frame whole; returns its size.
fn read_response(s: &mut TcpStream) -> usize {
    let mut len = [0u8; 4];
    s.read_exact(&mut len).unwrap();
    let len = usize::try_from(i32::from_be_bytes(len)).unwrap();
    let mut body = vec![0u8; len];
    s.read_exact(&mut body).unwrap();
    len
}

/// ApiVersions v0, the whole frame.
fn api_versions_frame(correlation_id: i32) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&10i32.to_be_bytes());
    f.extend_from_slice(&18i16.to_be_bytes());
    f.extend_from_slice(&0i16.to_be_bytes());
    f.extend_from_slice(&correlation_id.to_be_bytes());
    f.extend_from_slice(&(-1i16).to_be_bytes());
    f
}

/// Metadata v4 for about `bytes` of unknown topic names, no auto-creation: a large request
/// whose response (one error entry per name) is about as large.
fn metadata_frame(bytes: usize) -> Vec<u8> {
    let count = bytes / 202;
    let mut body = Vec::with_capacity(bytes + 64);
    body.extend_from_slice(&3i16.to_be_bytes());
    body.extend_from_slice(&4i16.to_be_bytes());
    body.extend_from_slice(&7i32.to_be_bytes());
    body.extend_from_slice(&(-1i16).to_be_bytes());
    body.extend_from_slice(&i32::try_from(count).unwrap().to_be_bytes());
    for i in 0..count {
        let name = format!("{:m<190}{i:010}", "");
        body.extend_from_slice(&i16::try_from(name.len()).unwrap().to_be_bytes());
        body.extend_from_slice(name.as_bytes());
    }
    body.push(0);
    let mut f = (i32::try_from(body.len()).unwrap()).to_be_bytes().to_vec();
    f.extend_from_slice(&body);
    f
}

#[test]
fn quiet_connections_give_back_what_a_burst_made_them_hold() {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, addr) = start(dir.path(), &[]);
    let mut conns: Vec<TcpStream> = (0..CONNECTIONS).map(|_| connect(addr)).collect();
    for c in &mut conns {
        c.write_all(&api_versions_frame(1)).unwrap();
        read_response(c);
    }
    std::thread::sleep(Duration::from_secs(2));
    let base = rss_mib(child.id());

    let request = metadata_frame(REQUEST_BYTES);
    let mut peak = base;
    for c in &mut conns {
        c.write_all(&request).unwrap();
        assert!(
            read_response(c) > REQUEST_BYTES / 2,
            "a response as large as the request"
        );
        peak = peak.max(rss_mib(child.id()));
    }
    // Quiet now: within the bound, the broker is back near where it was.
    let deadline = Instant::now() + Duration::from_secs(40);
    let bound = base + KEPT_MIB;
    let mut now = rss_mib(child.id());
    while now > bound && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(500));
        now = rss_mib(child.id());
    }
    assert!(
        now <= bound,
        "{CONNECTIONS} quiet connections still hold {:.1} MiB over the {base:.1} MiB before the burst (peak {peak:.1})",
        now - base
    );
    // Every connection is still open and served.
    for (i, c) in conns.iter_mut().enumerate() {
        c.write_all(&api_versions_frame(i32::try_from(i).unwrap()))
            .unwrap();
        read_response(c);
    }
    assert!(terminate(&mut child).success());
}

#[test]
fn a_half_sent_frame_survives_the_quiet_and_idle_connections_still_close() {
    let dir = tempfile::tempdir().unwrap();
    let idle_ms = 4000;
    let (mut child, addr) = start(dir.path(), &[&format!("connections.max.idle.ms={idle_ms}")]);
    let mut c = connect(addr);
    let frame = api_versions_frame(5);
    c.write_all(&frame[..7]).unwrap();
    // Longer than a connection stays quiet before it gives its buffers back.
    std::thread::sleep(Duration::from_millis(1500));
    c.write_all(&frame[7..]).unwrap();
    let mut len = [0u8; 4];
    c.read_exact(&mut len).unwrap();
    let mut correlation = [0u8; 4];
    c.read_exact(&mut correlation).unwrap();
    assert_eq!(i32::from_be_bytes(correlation), 5);
    let mut rest = vec![0u8; usize::try_from(i32::from_be_bytes(len)).unwrap() - 4];
    c.read_exact(&mut rest).unwrap();

    // Now idle: closed by the broker, not before connections.max.idle.ms.
    let answered = Instant::now();
    let mut byte = [0u8; 1];
    let read = c.read(&mut byte);
    let waited = answered.elapsed();
    assert!(
        matches!(read, Ok(0)),
        "closed by the broker, got {read:?} after {waited:?}"
    );
    assert!(
        waited >= Duration::from_millis(idle_ms - 200),
        "closed after {waited:?}, before connections.max.idle.ms"
    );
    assert!(terminate(&mut child).success());
}
