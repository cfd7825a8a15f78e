//! `Producer`: shoal-client's producer (idempotent by default; transactional with a
//! `transactional.id`) with confluent-kafka's method names, and KIP-1289's
//! `send_share_acknowledgements_to_transaction`.

use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
use std::task::{Context, Poll, Waker};

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};
use shoal_client::producer::{
    ConsumerGroupMetadata, DeliveryFuture, ProducerConfig, ProducerRecord, RecordMetadata,
    TopicPartition,
};
use shoal_client::Error;

use crate::consumer::{ShareAcknowledgements, ShareGroupMetadata};
use crate::message::Message;
use crate::{block, lock, payload, properties, seconds, wait, without_gil, PyResultExt};

/// A sent record whose delivery report is still to be given to its `on_delivery`.
struct Pending {
    future: DeliveryFuture,
    /// The future's outcome once it gave one (a finished future is never polled again).
    outcome: Option<Result<RecordMetadata, Error>>,
    callback: PyObject,
    record: ProducerRecord,
}

impl Pending {
    /// Polls the delivery once, with `cx`, unless it has its outcome; whether it has.
    fn poll_done(&mut self, cx: &mut Context<'_>) -> bool {
        if self.outcome.is_none() {
            if let Poll::Ready(outcome) = Pin::new(&mut self.future).poll(cx) {
                self.outcome = Some(outcome);
            }
        }
        self.outcome.is_some()
    }

    /// Whether the delivery has finished (without waiting).
    fn done(&mut self) -> bool {
        self.poll_done(&mut Context::from_waker(Waker::noop()))
    }
}

/// A Kafka producer (confluent-kafka's `Producer`) over shoal-client.
///
/// `Producer(config)` with Kafka's config keys (`bootstrap.servers`, `transactional.id`,
/// `linger.ms`, `acks`, `compression.type`, ...). Idempotent by default. Thread-safe.
#[pyclass(frozen, module = "shoal")]
pub struct Producer {
    /// None once closed.
    client: Mutex<Option<shoal_client::Producer>>,
    /// Sent records with an `on_delivery` callback, in send order.
    pending: Mutex<Vec<Pending>>,
}

impl Producer {
    fn client(&self, py: Python<'_>) -> PyResult<shoal_client::Producer> {
        without_gil(py, || lock(&self.client).clone()).ok_or_else(|| closed(py))
    }

    /// Calls the `on_delivery` callbacks of finished deliveries, in send order; returns
    /// how many were called. A callback's exception propagates (the rest stay pending).
    fn serve(&self, py: Python<'_>) -> PyResult<usize> {
        let mut served = 0;
        loop {
            let next = without_gil(py, || {
                let mut pending = lock(&self.pending);
                if !pending.first_mut()?.done() {
                    return None;
                }
                let mut done = pending.remove(0);
                let outcome = done.outcome.take().expect("done");
                Some((done, outcome))
            });
            let Some((done, outcome)) = next else {
                return Ok(served);
            };
            let (message, err) = report(py, done.record, outcome);
            served += 1;
            done.callback.call1(py, (err, message))?;
        }
    }

    /// Waits up to `timeout` (None: without limit) for the oldest pending delivery; the
    /// pending list stays free meanwhile, for other threads' `produce`.
    fn wait_first(&self, py: Python<'_>, timeout: Option<std::time::Duration>) {
        without_gil(py, || {
            let first = {
                let mut pending = lock(&self.pending);
                (!pending.is_empty()).then(|| pending.remove(0))
            };
            let Some(mut first) = first else {
                return;
            };
            let done = std::future::poll_fn(|cx| {
                if first.poll_done(cx) {
                    Poll::Ready(())
                } else {
                    Poll::Pending
                }
            });
            match timeout {
                Some(t) => {
                    let _ = wait(tokio::time::timeout(t, done));
                }
                None => wait(done),
            }
            lock(&self.pending).insert(0, first);
        });
    }

    fn pending_count(&self, py: Python<'_>) -> usize {
        without_gil(py, || lock(&self.pending).len())
    }
}

/// The report for `on_delivery`: `(err, message)`.
fn report(
    py: Python<'_>,
    record: ProducerRecord,
    outcome: Result<RecordMetadata, Error>,
) -> (Message, PyObject) {
    let (partition, offset, timestamp, error) = match outcome {
        Ok(m) => (m.partition, m.offset, m.timestamp, None),
        Err(e) => (
            record.partition.unwrap_or(-1),
            -1,
            record.timestamp.unwrap_or(-1),
            Some(crate::to_py(py, e).into_value(py).into_any()),
        ),
    };
    let err = error
        .as_ref()
        .map_or_else(|| py.None(), |e| e.clone_ref(py));
    let message = Message {
        topic: record.topic,
        partition,
        offset,
        key: record.key,
        value: record.value,
        headers: record.headers,
        timestamp,
        share: None,
        error,
    };
    (message, err)
}

fn closed(py: Python<'_>) -> PyErr {
    crate::to_py(py, Error::Closed)
}

/// `headers` as a dict or a list of `(name, value)` pairs.
fn headers(headers: Option<&Bound<'_, PyAny>>) -> PyResult<Vec<(String, Option<bytes::Bytes>)>> {
    let Some(headers) = headers.filter(|h| !h.is_none()) else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    if let Ok(d) = headers.downcast::<PyDict>() {
        for (k, v) in d.iter() {
            out.push((k.extract()?, payload(Some(&v))?));
        }
    } else if let Ok(l) = headers.downcast::<PyList>() {
        for item in l.iter() {
            let pair = item
                .downcast::<PyTuple>()
                .map_err(|_| PyTypeError::new_err("headers: (name, value) pairs"))?;
            let (k, v): (String, Bound<'_, PyAny>) = pair.extract()?;
            out.push((k, payload(Some(&v))?));
        }
    } else {
        return Err(PyTypeError::new_err(
            "headers: a dict or a list of (name, value)",
        ));
    }
    Ok(out)
}

#[pymethods]
impl Producer {
    /// Connects (and, when idempotent and not transactional, gets a producer id).
    ///
    /// Raises FatalError (name INVALID_CONFIG) for an unknown key or a bad value, and the
    /// connection's error when no broker answers.
    #[new]
    fn new(py: Python<'_>, config: &Bound<'_, PyDict>) -> PyResult<Producer> {
        let config = ProducerConfig::from_properties(properties(config)?).py_err(py)?;
        let client = block(py, shoal_client::Producer::new(config)).py_err(py)?;
        Ok(Producer {
            client: Mutex::new(Some(client)),
            pending: Mutex::new(Vec::new()),
        })
    }

    /// Sends a record (asynchronously: it is batched; `flush()` waits for it). Waits only
    /// for metadata and buffer room, up to `max.block.ms`. `on_delivery(err, message)` (or
    /// `callback`) is called from `poll()` or `flush()` once the record is written (err
    /// None) or has failed (err the exception).
    #[pyo3(signature = (topic, value=None, key=None, partition=-1, on_delivery=None,
                        timestamp=0, headers=None, callback=None))]
    #[allow(clippy::too_many_arguments)]
    fn produce(
        &self,
        py: Python<'_>,
        topic: String,
        value: Option<&Bound<'_, PyAny>>,
        key: Option<&Bound<'_, PyAny>>,
        partition: i32,
        on_delivery: Option<PyObject>,
        timestamp: i64,
        headers: Option<&Bound<'_, PyAny>>,
        callback: Option<PyObject>,
    ) -> PyResult<()> {
        let record = ProducerRecord {
            topic,
            partition: (partition >= 0).then_some(partition),
            key: payload(key)?,
            value: payload(value)?,
            headers: self::headers(headers)?,
            timestamp: (timestamp > 0).then_some(timestamp),
        };
        let client = self.client(py)?;
        let callback = on_delivery.or(callback);
        let copy = callback.as_ref().map(|_| record.clone());
        let future = block(py, client.send(record)).py_err(py)?;
        if let (Some(callback), Some(record)) = (callback, copy) {
            let pending = Pending {
                future,
                outcome: None,
                callback,
                record,
            };
            without_gil(py, || lock(&self.pending).push(pending));
        }
        Ok(())
    }

    /// Calls the delivery callbacks of finished deliveries, waiting up to `timeout`
    /// seconds for one when none has finished. Returns how many were called.
    #[pyo3(signature = (timeout=0.0))]
    fn poll(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<usize> {
        let served = self.serve(py)?;
        if served > 0 || timeout == Some(0.0) {
            return Ok(served);
        }
        self.wait_first(py, seconds(timeout)?);
        self.serve(py)
    }

    /// Sends everything buffered and waits (up to `timeout` seconds, None: without limit)
    /// until every record is written or failed, then calls their delivery callbacks.
    /// Returns how many delivery callbacks are still due (0 unless timed out).
    #[pyo3(signature = (timeout=None))]
    fn flush(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<usize> {
        let client = self.client(py)?;
        match seconds(timeout)? {
            Some(t) => {
                let flushed = without_gil(py, || wait(tokio::time::timeout(t, client.flush())));
                if let Ok(flushed) = flushed {
                    flushed.py_err(py)?;
                }
            }
            None => block(py, client.flush()).py_err(py)?,
        }
        self.serve(py)?;
        Ok(self.pending_count(py))
    }

    /// Gets the producer id of `transactional.id`, fencing older instances, and aborts
    /// what they left open. Bounded by `max.block.ms`.
    fn init_transactions(&self, py: Python<'_>) -> PyResult<()> {
        let client = self.client(py)?;
        block(py, client.init_transactions()).py_err(py)
    }

    /// Begins a transaction: the records produced until commit or abort belong to it.
    /// Raises AbortableError (INVALID_TXN_STATE) unless initialized and between
    /// transactions.
    fn begin_transaction(&self, py: Python<'_>) -> PyResult<()> {
        let client = self.client(py)?;
        without_gil(py, || client.begin_transaction()).py_err(py)
    }

    /// Commits a consumer group's offsets in the open transaction (TxnOffsetCommit):
    /// `positions` are objects with `topic`, `partition` and `offset` (the next offset to
    /// consume), e.g. `shoal.TopicPartition` or confluent-kafka's; `group_metadata` is the
    /// group id (generation -1: the broker does not fence stale group members).
    fn send_offsets_to_transaction(
        &self,
        py: Python<'_>,
        positions: Vec<Bound<'_, PyAny>>,
        group_metadata: String,
    ) -> PyResult<()> {
        let mut offsets = Vec::with_capacity(positions.len());
        for p in &positions {
            let tp = TopicPartition::new(
                p.getattr("topic")?.extract::<String>()?,
                p.getattr("partition")?.extract()?,
            );
            offsets.push((tp, p.getattr("offset")?.extract::<i64>()?));
        }
        let client = self.client(py)?;
        let group = ConsumerGroupMetadata::new(group_metadata);
        block(py, client.send_offsets_to_transaction(&offsets, &group)).py_err(py)
    }

    /// Stages share acknowledgements in the open transaction (KIP-1289,
    /// TxnShareAcknowledge): they take effect if and only if it commits. `metadata` is
    /// the consumer's `share_group_metadata()` from when the records were polled.
    ///
    /// Raises AbortableError (abort the transaction; the records come back), e.g.
    /// STALE_MEMBER_EPOCH after a rebalance; FatalError when fenced or when the broker
    /// lacks transactional acknowledgements (UNSUPPORTED_VERSION).
    fn send_share_acknowledgements_to_transaction(
        &self,
        py: Python<'_>,
        acknowledgements: &ShareAcknowledgements,
        metadata: &ShareGroupMetadata,
    ) -> PyResult<()> {
        let client = self.client(py)?;
        let acks = acknowledgements.snapshot(py);
        let metadata = metadata.to_client();
        block(
            py,
            client.send_share_acknowledgements_to_transaction(&acks, &metadata),
        )
        .py_err(py)
    }

    /// Flushes, then commits the transaction; then calls the due delivery callbacks.
    /// Raises AbortableError (call `abort_transaction()` and go on) or FatalError
    /// (fenced: close the producer).
    fn commit_transaction(&self, py: Python<'_>) -> PyResult<()> {
        let client = self.client(py)?;
        let committed = block(py, client.commit_transaction()).py_err(py);
        self.serve(py)?;
        committed
    }

    /// Aborts the transaction (also the way out of an AbortableError); then calls the due
    /// delivery callbacks.
    fn abort_transaction(&self, py: Python<'_>) -> PyResult<()> {
        let client = self.client(py)?;
        let aborted = block(py, client.abort_transaction()).py_err(py);
        self.serve(py)?;
        aborted
    }

    /// Sends what is buffered and closes the connections; later calls raise FatalError
    /// named `_CLOSED`. Closing twice is harmless.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let client = without_gil(py, || lock(&self.client).take());
        if let Some(client) = client {
            block(py, client.close());
            self.serve(py)?;
        }
        Ok(())
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, PyTuple>) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }

    /// Delivery callbacks still due.
    fn __len__(&self, py: Python<'_>) -> usize {
        self.pending_count(py)
    }
}
