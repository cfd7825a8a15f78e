//! `ShareConsumer` (a share group member, KIP-932) and what it hands to a transaction
//! (KIP-1289): `ShareAcknowledgements` and `ShareGroupMetadata`.

use std::sync::Mutex;
use std::time::Instant;

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};
use shoal_client::share_consumer::{
    AcknowledgeType as ClientAckType, ShareConsumerConfig, ShareRecord,
};
use shoal_client::Error;

use crate::message::Message;
use crate::{
    block, lock, properties, seconds, wait, without_gil, PyResultExt, SIGNAL_CHECK_INTERVAL,
};

/// How a record is acknowledged (ShareAcknowledge's numbering, confluent-kafka's names).
#[pyclass(eq, eq_int, frozen, module = "shoal")]
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum AcknowledgeType {
    /// Processed: the record is done.
    #[pyo3(name = "ACCEPT")]
    Accept = 1,
    /// Not processed: deliver it again (to any member).
    #[pyo3(name = "RELEASE")]
    Release = 2,
    /// Unprocessable: never deliver it again.
    #[pyo3(name = "REJECT")]
    Reject = 3,
    /// Still working on it: extend the acquisition lock.
    #[pyo3(name = "RENEW")]
    Renew = 4,
}

impl From<AcknowledgeType> for ClientAckType {
    fn from(t: AcknowledgeType) -> ClientAckType {
        match t {
            AcknowledgeType::Accept => ClientAckType::Accept,
            AcknowledgeType::Release => ClientAckType::Release,
            AcknowledgeType::Reject => ClientAckType::Reject,
            AcknowledgeType::Renew => ClientAckType::Renew,
        }
    }
}

/// The share record behind a message from `ShareConsumer.poll`.
fn share_record(message: &Message) -> PyResult<&ShareRecord> {
    message.share.as_ref().ok_or_else(|| {
        PyTypeError::new_err("only a message from ShareConsumer.poll() can be acknowledged")
    })
}

/// The group, member id and member epoch a share consumer's records belong to (from
/// `ShareConsumer.share_group_metadata()`); an immutable snapshot.
#[pyclass(frozen, get_all, module = "shoal")]
#[derive(Clone)]
pub struct ShareGroupMetadata {
    pub group_id: String,
    pub member_id: String,
    pub member_epoch: i32,
}

impl ShareGroupMetadata {
    pub(crate) fn to_client(&self) -> shoal_client::ShareGroupMetadata {
        shoal_client::ShareGroupMetadata {
            group_id: self.group_id.clone(),
            member_id: self.member_id.clone(),
            member_epoch: self.member_epoch,
        }
    }
}

#[pymethods]
impl ShareGroupMetadata {
    fn __repr__(&self) -> String {
        format!(
            "ShareGroupMetadata(group_id={:?}, member_id={:?}, member_epoch={})",
            self.group_id, self.member_id, self.member_epoch
        )
    }
}

/// Acknowledgements for a transaction (ACCEPT or REJECT), per share partition: drained
/// from a consumer (`ShareConsumer.acknowledgements_for_transaction()`) or built from
/// polled messages with `add`.
#[pyclass(frozen, module = "shoal")]
pub struct ShareAcknowledgements {
    inner: Mutex<shoal_client::ShareAcknowledgements>,
}

impl ShareAcknowledgements {
    pub(crate) fn snapshot(&self, py: Python<'_>) -> shoal_client::ShareAcknowledgements {
        without_gil(py, || lock(&self.inner).clone())
    }
}

#[pymethods]
impl ShareAcknowledgements {
    /// No acknowledgements.
    #[new]
    fn new() -> ShareAcknowledgements {
        ShareAcknowledgements {
            inner: Mutex::new(shoal_client::ShareAcknowledgements::new()),
        }
    }

    /// Adds `type` (ACCEPT or REJECT) for a polled message; such a message must not also
    /// be acknowledged through the consumer. Raises AbortableError (INVALID_RECORD_STATE)
    /// for RELEASE or RENEW, or a message added twice; nothing changes then.
    #[pyo3(signature = (message, r#type=AcknowledgeType::Accept))]
    fn add(&self, py: Python<'_>, message: &Message, r#type: AcknowledgeType) -> PyResult<()> {
        let record = share_record(message)?;
        without_gil(py, || lock(&self.inner).add(record, r#type.into()))
            .map_err(Error::ShareAcknowledgement)
            .py_err(py)
    }

    /// Moves every acknowledgement of `other` into this one (`other` is left empty).
    /// Raises AbortableError when both hold an offset; nothing changes then.
    fn extend(&self, py: Python<'_>, other: &ShareAcknowledgements) -> PyResult<()> {
        if std::ptr::eq(self, other) {
            return Ok(());
        }
        without_gil(py, || {
            let taken = std::mem::take(&mut *lock(&other.inner));
            let merged = lock(&self.inner).extend(taken.clone());
            if merged.is_err() {
                *lock(&other.inner) = taken;
            }
            merged
        })
        .map_err(Error::ShareAcknowledgement)
        .py_err(py)
    }

    /// How many records are acknowledged.
    fn __len__(&self, py: Python<'_>) -> usize {
        without_gil(py, || lock(&self.inner).len())
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        format!("ShareAcknowledgements(len={})", self.__len__(py))
    }
}

/// A share group member (KIP-932) over shoal-client: confluent-kafka's `ShareConsumer`.
///
/// `ShareConsumer(config)` with `bootstrap.servers`, `group.id`,
/// `share.acknowledgement.mode` (`implicit` by default, `explicit` to acknowledge each
/// record), `max.poll.records`, `share.acquire.mode`, ... Thread-safe, one call at a time.
#[pyclass(frozen, module = "shoal")]
pub struct ShareConsumer {
    /// None once closed.
    client: Mutex<Option<shoal_client::ShareConsumer>>,
}

impl ShareConsumer {
    /// Runs `f` on the consumer with the GIL released; `Error::Closed` once closed.
    fn with<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut shoal_client::ShareConsumer) -> Result<T, Error> + Send,
    ) -> PyResult<T> {
        without_gil(py, || match lock(&self.client).as_mut() {
            Some(c) => f(c),
            None => Err(Error::Closed),
        })
        .py_err(py)
    }
}

#[pymethods]
impl ShareConsumer {
    /// Connects and starts the membership task (it joins on `subscribe`). Raises
    /// FatalError (INVALID_CONFIG) for an unknown key or a bad value.
    #[new]
    fn new(py: Python<'_>, config: &Bound<'_, PyDict>) -> PyResult<ShareConsumer> {
        let config = ShareConsumerConfig::from_properties(properties(config)?).py_err(py)?;
        let client = block(py, shoal_client::ShareConsumer::new(config)).py_err(py)?;
        Ok(ShareConsumer {
            client: Mutex::new(Some(client)),
        })
    }

    /// Subscribes to `topics` (replacing the subscription).
    fn subscribe(&self, py: Python<'_>, topics: Vec<String>) -> PyResult<()> {
        self.with(py, |c| {
            c.subscribe(topics);
            Ok(())
        })
    }

    /// Fetches records, waiting up to `timeout` seconds (None or negative: until some
    /// come) for some; returns a list of Message, empty when none came. Implicit mode
    /// first accepts every record of the last poll; explicit mode raises AbortableError
    /// (INVALID_RECORD_STATE) while one is unacknowledged. Ctrl-C interrupts the wait.
    #[pyo3(signature = (timeout=None))]
    fn poll(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Vec<Message>> {
        let deadline = seconds(timeout)?.map(|t| Instant::now() + t);
        loop {
            // In slices, checking for signals between them: an empty slice has nothing to
            // acknowledge, so the next one starts cleanly in either mode.
            let slice = deadline.map_or(SIGNAL_CHECK_INTERVAL, |d| {
                d.saturating_duration_since(Instant::now())
                    .min(SIGNAL_CHECK_INTERVAL)
            });
            let records = self.with(py, |c| wait(c.poll(slice)))?;
            if !records.is_empty() {
                return Ok(records.into_iter().map(Message::delivered).collect());
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(Vec::new());
            }
            py.check_signals()?;
        }
    }

    /// Acknowledges a message of the last poll (explicit mode): sent with the next poll
    /// or `commit_sync()`, or drained by `acknowledgements_for_transaction()`.
    #[pyo3(signature = (message, r#type=AcknowledgeType::Accept))]
    fn acknowledge(
        &self,
        py: Python<'_>,
        message: &Message,
        r#type: AcknowledgeType,
    ) -> PyResult<()> {
        let record = share_record(message)?;
        self.with(py, |c| c.acknowledge(record, r#type.into()))
    }

    /// Drains the pending ACCEPT / REJECT acknowledgements for a transaction (explicit
    /// mode): the consumer never sends these itself. Call once per poll, not per record.
    fn acknowledgements_for_transaction(&self, py: Python<'_>) -> PyResult<ShareAcknowledgements> {
        let acks = self.with(py, |c| c.acknowledgements_for_transaction())?;
        Ok(ShareAcknowledgements {
            inner: Mutex::new(acks),
        })
    }

    /// The group, member id and epoch as the last heartbeat left them.
    fn share_group_metadata(&self, py: Python<'_>) -> PyResult<ShareGroupMetadata> {
        let m = self.with(py, |c| Ok(c.share_group_metadata()))?;
        Ok(ShareGroupMetadata {
            group_id: m.group_id,
            member_id: m.member_id,
            member_epoch: m.member_epoch,
        })
    }

    /// Sends the pending acknowledgements now (ShareAcknowledge) and waits for their
    /// results, bounded by the client's timeouts (`default.api.timeout.ms`).
    fn commit_sync(&self, py: Python<'_>) -> PyResult<()> {
        self.with(py, |c| wait(c.commit_sync()))
    }

    /// Leaves the group (pending non-transactional acknowledgements are sent) and closes
    /// the connections; later calls raise FatalError named `_CLOSED`.
    fn close(&self, py: Python<'_>) {
        let client = without_gil(py, || lock(&self.client).take());
        if let Some(client) = client {
            block(py, client.close());
        }
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, PyTuple>) -> bool {
        self.close(py);
        false
    }
}
