//! `Message`: a record a share consumer delivered, or one a producer's delivery report
//! describes, with confluent-kafka's accessor methods.

use bytes::Bytes;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use shoal_client::share_consumer::ShareRecord;

/// confluent-kafka's `TIMESTAMP_CREATE_TIME`: the producer's timestamp.
const TIMESTAMP_CREATE_TIME: i32 = 1;

/// A record: delivered by `ShareConsumer.poll`, or reported to a producer's `on_delivery`.
#[pyclass(frozen, module = "shoal")]
pub struct Message {
    pub(crate) topic: String,
    pub(crate) partition: i32,
    pub(crate) offset: i64,
    pub(crate) key: Option<Bytes>,
    pub(crate) value: Option<Bytes>,
    pub(crate) headers: Vec<(String, Option<Bytes>)>,
    pub(crate) timestamp: i64,
    /// Set for a record a share consumer delivered (it can be acknowledged).
    pub(crate) share: Option<ShareRecord>,
    /// A failed delivery's exception (producer delivery reports only).
    pub(crate) error: Option<PyObject>,
}

impl Message {
    pub(crate) fn delivered(record: ShareRecord) -> Message {
        Message {
            topic: record.topic.clone(),
            partition: record.partition,
            offset: record.offset,
            key: record.key.clone(),
            value: record.value.clone(),
            headers: record.headers.clone(),
            timestamp: record.timestamp,
            share: Some(record),
            error: None,
        }
    }
}

fn bytes_or_none(py: Python<'_>, b: &Option<Bytes>) -> Option<Py<PyBytes>> {
    b.as_ref().map(|b| PyBytes::new(py, b).unbind())
}

#[pymethods]
impl Message {
    /// The topic's name.
    fn topic(&self) -> &str {
        &self.topic
    }

    /// The partition (-1 when a failed delivery never had one).
    fn partition(&self) -> i32 {
        self.partition
    }

    /// The offset (-1 when a failed delivery never had one).
    fn offset(&self) -> i64 {
        self.offset
    }

    /// The key, or None.
    fn key(&self, py: Python<'_>) -> Option<Py<PyBytes>> {
        bytes_or_none(py, &self.key)
    }

    /// The value, or None.
    fn value(&self, py: Python<'_>) -> Option<Py<PyBytes>> {
        bytes_or_none(py, &self.value)
    }

    /// The headers as a list of `(name, value)`, or None when there are none (as
    /// confluent-kafka).
    fn headers(&self, py: Python<'_>) -> Option<Vec<(String, Option<Py<PyBytes>>)>> {
        if self.headers.is_empty() {
            return None;
        }
        Some(
            self.headers
                .iter()
                .map(|(k, v)| (k.clone(), bytes_or_none(py, v)))
                .collect(),
        )
    }

    /// `(TIMESTAMP_CREATE_TIME, milliseconds since the epoch)`.
    fn timestamp(&self) -> (i32, i64) {
        (TIMESTAMP_CREATE_TIME, self.timestamp)
    }

    /// How many times the share group delivered this record (1 at first); None for a
    /// delivery report.
    fn delivery_count(&self) -> Option<i16> {
        self.share.as_ref().map(|r| r.delivery_count)
    }

    /// The exception of a failed delivery, else None.
    fn error(&self, py: Python<'_>) -> Option<PyObject> {
        self.error.as_ref().map(|e| e.clone_ref(py))
    }

    fn __len__(&self) -> usize {
        self.value.as_ref().map_or(0, Bytes::len)
    }

    fn __repr__(&self) -> String {
        format!(
            "Message(topic={:?}, partition={}, offset={})",
            self.topic, self.partition, self.offset
        )
    }
}
