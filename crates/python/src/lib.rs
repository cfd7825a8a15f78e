//! The native half of the Python package `shoal-queues` (`import shoal`): shoal-client's
//! producer, share consumer and admin client behind confluent-kafka's names, for the
//! exactly-once queue pipeline (KIP-1289) from Python.
//!
//! Every call that waits on the network runs on one shared tokio runtime with the GIL
//! released (`Python::allow_threads`), so other Python threads run meanwhile. Each object
//! keeps its client behind a mutex that is only ever taken with the GIL released: a thread
//! waiting for the mutex never holds the GIL that the holder needs to return.
//!
//! Errors become the Python exceptions of `shoal._errors` (`FatalError`, `AbortableError`,
//! `RetriableError`, all `KafkaException`), by the client's [`ErrorClass`], with the Kafka
//! error name and code; UNSUPPORTED_VERSION (fatal) is the `UnsupportedVersionError`
//! subclass of `FatalError`.

use std::future::Future;
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyString};
use shoal_client::{Error, ErrorClass};
use shoal_protocol::ErrorCode;

mod acknowledger;
mod admin;
mod consumer;
mod message;
mod producer;

// Decoding a hostile broker's answer must not abort the interpreter (decision 0002).
#[global_allocator]
static ALLOC: shoal_protocol::alloc::ReserveLazily = shoal_protocol::alloc::ReserveLazily;

/// Worker threads of the shared runtime: the clients' background tasks (sender,
/// heartbeats) are light; the waiting is done by the calling thread in `block_on`.
const RUNTIME_WORKERS: usize = 2;

/// The longest slice a blocking wait runs before checking for Ctrl-C (KeyboardInterrupt).
pub(crate) const SIGNAL_CHECK_INTERVAL: Duration = Duration::from_millis(200);

fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(RUNTIME_WORKERS)
            .thread_name("shoal-client")
            .enable_all()
            .build()
            .expect("the tokio runtime starts")
    })
}

/// Runs `f` with the GIL released, in the runtime's context (so that `f` may build
/// tokio timers); `f` may block on the runtime with [`wait`].
pub(crate) fn without_gil<T, F>(py: Python<'_>, f: F) -> T
where
    F: FnOnce() -> T + Send,
    T: Send,
{
    py.allow_threads(|| {
        let _context = runtime().enter();
        f()
    })
}

/// Waits for `future` on the shared runtime (call with the GIL released).
pub(crate) fn wait<F: Future>(future: F) -> F::Output {
    runtime().block_on(future)
}

/// Waits for `future` with the GIL released.
pub(crate) fn block<F>(py: Python<'_>, future: F) -> F::Output
where
    F: Future + Send,
    F::Output: Send,
{
    without_gil(py, || wait(future))
}

/// Takes a mutex (call with the GIL released, see the module docs); a poisoned one is
/// still consistent here, as every holder only moves whole values in and out.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The Python exception for a client error: its class by [`ErrorClass`], its `name` the
/// Kafka error name (`_CLOSED` for a call after `close()`, which has none).
pub(crate) fn to_py(py: Python<'_>, e: Error) -> PyErr {
    let (class, name) = match &e {
        Error::Closed => ("FatalError", "_CLOSED".to_owned()),
        _ if e.code() == ErrorCode::UNSUPPORTED_VERSION => {
            ("UnsupportedVersionError", "UNSUPPORTED_VERSION".to_owned())
        }
        _ => {
            let class = match e.class() {
                ErrorClass::Fatal => "FatalError",
                ErrorClass::Abortable => "AbortableError",
                ErrorClass::Retriable => "RetriableError",
            };
            let code = e.code();
            let name = code
                .name()
                .map_or_else(|| format!("UNKNOWN({})", code.0), str::to_owned);
            (class, name)
        }
    };
    let made = py
        .import("shoal._errors")
        .and_then(|m| m.getattr(class))
        .and_then(|cls| cls.call1((e.to_string(), name, e.code().0)));
    match made {
        Ok(exception) => PyErr::from_value(exception),
        Err(import_failed) => import_failed,
    }
}

/// `Result<T, Error>` to `PyResult<T>`.
pub(crate) trait PyResultExt<T> {
    fn py_err(self, py: Python<'_>) -> PyResult<T>;
}

impl<T> PyResultExt<T> for Result<T, Error> {
    fn py_err(self, py: Python<'_>) -> PyResult<T> {
        self.map_err(|e| to_py(py, e))
    }
}

/// A confluent-kafka style config dict as `(key, value)` strings: values may be `str`,
/// `int`, `float` or `bool` (`true` / `false`, as Kafka spells them).
pub(crate) fn properties(config: &Bound<'_, PyDict>) -> PyResult<Vec<(String, String)>> {
    let mut out = Vec::with_capacity(config.len());
    for (key, value) in config.iter() {
        let key: String = key
            .extract()
            .map_err(|_| PyTypeError::new_err("config keys must be str"))?;
        let value = if value.is_instance_of::<PyBool>() {
            if value.extract::<bool>()? {
                "true"
            } else {
                "false"
            }
            .to_owned()
        } else if value.is_instance_of::<PyString>() {
            value.extract()?
        } else if let Ok(n) = value.extract::<i64>() {
            n.to_string()
        } else if let Ok(x) = value.extract::<f64>() {
            x.to_string()
        } else {
            return Err(PyTypeError::new_err(format!(
                "config {key}: a str, int, float or bool, not {}",
                value.get_type().name()?
            )));
        };
        out.push((key, value));
    }
    Ok(out)
}

/// A key or value given as `bytes` or `str` (UTF-8), or `None`.
pub(crate) fn payload(value: Option<&Bound<'_, PyAny>>) -> PyResult<Option<bytes::Bytes>> {
    let Some(value) = value.filter(|v| !v.is_none()) else {
        return Ok(None);
    };
    if let Ok(b) = value.downcast::<PyBytes>() {
        return Ok(Some(bytes::Bytes::copy_from_slice(b.as_bytes())));
    }
    if let Ok(s) = value.downcast::<PyString>() {
        return Ok(Some(bytes::Bytes::copy_from_slice(s.to_cow()?.as_bytes())));
    }
    Err(PyTypeError::new_err(format!(
        "expected bytes, str or None, not {}",
        value.get_type().name()?
    )))
}

/// A timeout in seconds (`None` or negative: none) as a duration.
pub(crate) fn seconds(timeout: Option<f64>) -> PyResult<Option<Duration>> {
    match timeout {
        None => Ok(None),
        Some(t) if t < 0.0 => Ok(None),
        Some(t) if t.is_finite() => Ok(Some(Duration::from_secs_f64(t))),
        Some(t) => Err(PyValueError::new_err(format!("timeout {t}"))),
    }
}

#[pymodule]
fn _shoal(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<producer::Producer>()?;
    m.add_class::<consumer::ShareConsumer>()?;
    m.add_class::<consumer::ShareAcknowledgements>()?;
    m.add_class::<consumer::ShareGroupMetadata>()?;
    m.add_class::<consumer::AcknowledgeType>()?;
    m.add_class::<message::Message>()?;
    m.add_class::<acknowledger::TransactionalShareAcknowledger>()?;
    m.add_class::<admin::AdminClient>()?;
    m.add_class::<admin::NewTopic>()?;
    Ok(())
}
