//! What the exactly-once examples share: `--flag value` arguments, the group set to start at
//! the earliest offset, and an explicit-mode share consumer.

#![allow(dead_code)] // each example uses part of it

use std::collections::BTreeMap;

use anyhow::{bail, Context};
use shoal_client::admin::{AlterConfigOp, ConfigResource, Mode};
use shoal_client::share_consumer::{ShareConsumer, ShareConsumerConfig, ShareRecord};
use shoal_client::{Admin, ClientConfig};

/// `--name value` pairs and bare `--switch`es.
pub struct Flags {
    values: BTreeMap<String, String>,
    switches: Vec<String>,
    usage: &'static str,
}

impl Flags {
    /// The process's arguments; `switches` are the flags that take no value.
    pub fn parse(usage: &'static str, switches: &[&str]) -> anyhow::Result<Flags> {
        let mut flags = Flags {
            values: BTreeMap::new(),
            switches: Vec::new(),
            usage,
        };
        let mut args = std::env::args().skip(1);
        while let Some(flag) = args.next() {
            let Some(name) = flag.strip_prefix("--") else {
                bail!("unexpected argument {flag}\n{usage}");
            };
            if switches.contains(&name) {
                flags.switches.push(name.to_owned());
                continue;
            }
            let value = args
                .next()
                .with_context(|| format!("{flag} needs a value"))?;
            flags.values.insert(name.to_owned(), value);
        }
        Ok(flags)
    }

    pub fn optional(&self, name: &str) -> Option<String> {
        self.values.get(name).cloned()
    }

    pub fn required(&self, name: &str) -> anyhow::Result<String> {
        match self.values.get(name) {
            Some(v) => Ok(v.clone()),
            None => bail!("--{name} is required\n{}", self.usage),
        }
    }

    /// A positive number, `default` when absent.
    pub fn number(&self, name: &str, default: u64) -> anyhow::Result<u64> {
        let n = match self.values.get(name) {
            Some(v) => v.parse().with_context(|| format!("--{name} {v}"))?,
            None => default,
        };
        if n == 0 {
            bail!("--{name} must be at least 1");
        }
        Ok(n)
    }

    pub fn switch(&self, name: &str) -> bool {
        self.switches.iter().any(|s| s == name)
    }
}

/// Sets `group`'s `share.auto.offset.reset` to `earliest` (share groups start at the end of
/// their topics by default), so that a new group reads what is already queued.
pub async fn start_at_earliest(bootstrap: &str, group: &str) -> anyhow::Result<()> {
    set_group_configs(bootstrap, group, &[("share.auto.offset.reset", "earliest")]).await
}

/// An admin client of the cluster at `bootstrap`.
pub async fn admin(bootstrap: &str) -> anyhow::Result<Admin> {
    let config = ClientConfig::from_properties([("bootstrap.servers", bootstrap)])?;
    Ok(Admin::connect(config).await?)
}

/// Sets `configs` on group `group` (IncrementalAlterConfigs, SET), all or none.
pub async fn set_group_configs(
    bootstrap: &str,
    group: &str,
    configs: &[(&str, &str)],
) -> anyhow::Result<()> {
    let admin = admin(bootstrap).await?;
    let ops = configs
        .iter()
        .map(|(name, value)| AlterConfigOp::Set {
            name: (*name).to_owned(),
            value: (*value).to_owned(),
        })
        .collect();
    let set = admin
        .incremental_alter_configs(
            &[(ConfigResource::group(group.to_owned()), ops)],
            Mode::Apply,
        )
        .await;
    admin.close().await;
    for (_, result) in set? {
        result.with_context(|| format!("group {group}'s configs"))?;
    }
    Ok(())
}

/// A share consumer of `group` on `input` in explicit mode, `max_poll_records` a poll at most.
pub async fn explicit_consumer(
    bootstrap: &str,
    group: &str,
    input: &str,
    client_id: &str,
    max_poll_records: usize,
) -> anyhow::Result<ShareConsumer> {
    let max_poll_records = max_poll_records.to_string();
    let mut consumer = ShareConsumer::new(ShareConsumerConfig::from_properties([
        ("bootstrap.servers", bootstrap),
        ("client.id", client_id),
        ("group.id", group),
        ("share.acknowledgement.mode", "explicit"),
        ("max.poll.records", max_poll_records.as_str()),
        // Strictly: the broker acquires whole batches otherwise.
        ("share.acquire.mode", "record_limit"),
    ])?)
    .await?;
    consumer.subscribe([input.to_owned()]);
    Ok(consumer)
}

/// A poll's result, with a retriable failure (the broker restarting: connection refused, a
/// timeout) turned into no records after a pause, so that the worker outlives a broker
/// restart. Its records stay acquired by this member and nothing was acknowledged, so
/// polling again is safe.
pub async fn retrying(
    poll: impl std::future::Future<Output = Result<Vec<ShareRecord>, shoal_client::Error>>,
) -> Result<Vec<ShareRecord>, shoal_client::Error> {
    match poll.await {
        Err(e) if e.is_retriable() => {
            eprintln!("poll failed, retrying: {e}");
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            Ok(Vec::new())
        }
        other => other,
    }
}

/// The environment variable naming a crash point: `PHASE:N`.
pub const CRASH_AT: &str = "SHOAL_CRASH_AT";

/// A test hook for crash schedules (`shoal verify --pipeline checkpointed`): when
/// `SHOAL_CRASH_AT` is `phase:N`, the process SIGKILLs itself the Nth time it reaches
/// `phase` — a kill -9 at a chosen step, which a random schedule would rarely hit. Does nothing
/// otherwise.
pub fn crash_point(phase: &str) {
    use std::sync::atomic::{AtomicU64, Ordering};
    static REACHED: AtomicU64 = AtomicU64::new(0);
    let Ok(at) = std::env::var(CRASH_AT) else {
        return;
    };
    let Some((name, nth)) = at.split_once(':') else {
        return;
    };
    if name != phase {
        return;
    }
    if REACHED.fetch_add(1, Ordering::SeqCst) + 1 == nth.parse::<u64>().unwrap_or(1) {
        eprintln!("crash point {phase}: SIGKILL");
        // SAFETY: kill(2) of this very process.
        unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
    }
}
