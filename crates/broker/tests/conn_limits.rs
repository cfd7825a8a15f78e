//! `conn_limits` without a listener: per-address counting and refusal, overrides, the
//! config checks, and the wait for room at `max.connections`.

use std::net::IpAddr;
use std::sync::Arc;

use shoal_broker::config::{overrides_check, parse_overrides};
use shoal_broker::conn_limits::{check_together, ConnectionCounts, Limits, Refused};

fn limits(total: usize, per_ip: usize, overrides: &[(&str, usize)]) -> Limits {
    Limits {
        total,
        per_ip,
        overrides: overrides
            .iter()
            .map(|(h, n)| (h.parse().unwrap(), *n))
            .collect(),
    }
}

#[test]
fn per_ip_limit_refuses_and_frees() {
    let counts = ConnectionCounts::new();
    let a: IpAddr = "10.0.0.1".parse().unwrap();
    let b: IpAddr = "10.0.0.2".parse().unwrap();
    let l = limits(100, 2, &[]);
    let s1 = counts.admit(a, &l).unwrap();
    let _s2 = counts.admit(a, &l).unwrap();
    assert_eq!(
        counts.admit(a, &l).unwrap_err(),
        Refused::PerIp { limit: 2 }
    );
    let _s3 = counts.admit(b, &l).unwrap();
    assert_eq!((counts.total(), counts.from_ip(a)), (3, 2));
    drop(s1);
    assert_eq!((counts.total(), counts.from_ip(a)), (2, 1));
    let _s4 = counts.admit(a, &l).unwrap();
}

#[test]
fn overrides_replace_the_default_and_zero_refuses_all() {
    let counts = ConnectionCounts::new();
    let a: IpAddr = "127.0.0.1".parse().unwrap();
    let b: IpAddr = "::1".parse().unwrap();
    let l = limits(100, 0, &[("127.0.0.1", 1)]);
    let _s = counts.admit(a, &l).unwrap();
    assert_eq!(
        counts.admit(a, &l).unwrap_err(),
        Refused::PerIp { limit: 1 }
    );
    assert_eq!(
        counts.admit(b, &l).unwrap_err(),
        Refused::PerIp { limit: 0 }
    );
    assert_eq!(
        counts.from_ip(b),
        0,
        "a refused address leaves no entry behind"
    );
}

#[test]
fn overrides_parse_and_reject_malformed() {
    assert_eq!(
        parse_overrides(" localhost:5, 10.1.2.3:0,[::1]:7 ").unwrap(),
        vec![
            ("localhost".to_string(), 5),
            ("10.1.2.3".to_string(), 0),
            ("::1".to_string(), 7)
        ]
    );
    assert_eq!(parse_overrides("").unwrap(), vec![]);
    for bad in ["host", "host:", ":5", "host:-1", "host:x", "h:99999999999"] {
        assert!(parse_overrides(bad).is_err(), "{bad} accepted");
    }
    assert_eq!(overrides_check("a:1, b:2").unwrap(), "a:1,b:2");
    assert!(check_together("0", "").is_err());
    assert!(check_together("0", "10.0.0.1:3").is_ok());
    assert!(check_together("5", "").is_ok());
}

#[tokio::test]
async fn waiting_for_room_ends_when_a_connection_closes() {
    let counts = ConnectionCounts::new();
    let l = limits(1, 10, &[]);
    let s = counts.admit("10.0.0.1".parse().unwrap(), &l).unwrap();
    let waiter = {
        let counts = Arc::clone(&counts);
        tokio::spawn(async move { counts.wait_for_room(|| l.total).await })
    };
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    assert!(!waiter.is_finished(), "waited with no room");
    drop(s);
    tokio::time::timeout(std::time::Duration::from_secs(5), waiter)
        .await
        .expect("woken by the close")
        .unwrap();
}
