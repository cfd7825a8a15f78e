//! `TransactionalShareAcknowledger`: share acknowledgements committed in transactions of
//! their own, for a pipeline that produces nothing itself (KIP-1289 §4).

use std::sync::{Arc, Mutex};

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};
use shoal_client::producer::ProducerConfig;
use shoal_client::{Error, TransactionalShareAcknowledger as Client};

use crate::consumer::{ShareAcknowledgements, ShareGroupMetadata};
use crate::{block, lock, properties, to_py, without_gil, PyResultExt};

/// Commits share acknowledgements in transactions of their own (a stream processor's source
/// committing what it read on a checkpoint, a sink that writes elsewhere): a transactional
/// producer that sends no records. `TransactionalShareAcknowledger(config)` needs a
/// `transactional.id`, which fences an older instance as a producer's does.
#[pyclass(frozen, module = "shoal")]
pub struct TransactionalShareAcknowledger {
    /// None once closed.
    client: Mutex<Option<Arc<Client>>>,
}

impl TransactionalShareAcknowledger {
    fn client(&self, py: Python<'_>) -> PyResult<Arc<Client>> {
        without_gil(py, || lock(&self.client).clone()).ok_or_else(|| to_py(py, Error::Closed))
    }
}

#[pymethods]
impl TransactionalShareAcknowledger {
    /// Connects. Raises FatalError (INVALID_CONFIG) without a `transactional.id`.
    #[new]
    fn new(py: Python<'_>, config: &Bound<'_, PyDict>) -> PyResult<Self> {
        let config = ProducerConfig::from_properties(properties(config)?).py_err(py)?;
        let client = block(py, Client::new(config)).py_err(py)?;
        Ok(TransactionalShareAcknowledger {
            client: Mutex::new(Some(Arc::new(client))),
        })
    }

    /// Gets the producer id of the transactional id, fencing an older instance and
    /// aborting a transaction it left open.
    fn init_transactions(&self, py: Python<'_>) -> PyResult<()> {
        let client = self.client(py)?;
        block(py, client.init_transactions()).py_err(py)
    }

    /// Applies `acknowledgements` (of the member `metadata` names) in one transaction.
    /// On an AbortableError the transaction was aborted before it is raised (the records
    /// are available again; after STALE_MEMBER_EPOCH poll again). Empty: commits nothing.
    fn commit_acknowledgements(
        &self,
        py: Python<'_>,
        acknowledgements: &ShareAcknowledgements,
        metadata: &ShareGroupMetadata,
    ) -> PyResult<()> {
        let client = self.client(py)?;
        let acks = acknowledgements.snapshot(py);
        let metadata = metadata.to_client();
        block(py, client.commit_acknowledgements(&acks, &metadata)).py_err(py)
    }

    /// Aborts a transaction a failed or interrupted commit left open (none: nothing).
    fn abort_acknowledgements(&self, py: Python<'_>) -> PyResult<()> {
        let client = self.client(py)?;
        block(py, client.abort_acknowledgements()).py_err(py)
    }

    /// Closes the connections (an open transaction is left to time out); later calls
    /// raise FatalError named `_CLOSED`.
    fn close(&self, py: Python<'_>) {
        let client = without_gil(py, || lock(&self.client).take());
        if let Some(client) = client {
            block(py, client.producer().close());
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
