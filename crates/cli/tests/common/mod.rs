//! Helpers shared by the tests that run the `shoal` binary.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::Child;
use std::time::{Duration, Instant};

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub fn wait_listening(addr: SocketAddr, child: &mut Child) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while TcpStream::connect(addr).is_err() {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("broker exited early: {status}");
        }
        assert!(Instant::now() < deadline, "broker did not start listening");
        std::thread::sleep(Duration::from_millis(50));
    }
}

pub fn terminate(child: &mut Child) -> std::process::ExitStatus {
    // SAFETY: plain kill(2) on our own child's pid.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(Instant::now() < deadline, "broker ignored SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    }
}
