//! `AdminClient`: the admin calls the examples need (create topics, a share group's
//! configs), over shoal-client's `Admin`.

use std::collections::BTreeMap;
use std::sync::Mutex;

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};
use shoal_client::admin::{AlterConfigOp, ConfigResource, Mode, NewTopic as ClientNewTopic};
use shoal_client::{Admin, ClientConfig, Error};

use crate::{block, lock, properties, to_py, without_gil, PyResultExt};

/// A topic to create (confluent-kafka's `NewTopic`); -1: the broker's default.
#[pyclass(frozen, get_all, module = "shoal")]
#[derive(Clone)]
pub struct NewTopic {
    pub topic: String,
    pub num_partitions: i32,
    pub replication_factor: i16,
    pub config: BTreeMap<String, String>,
}

#[pymethods]
impl NewTopic {
    #[new]
    #[pyo3(signature = (topic, num_partitions=-1, replication_factor=-1, config=None))]
    fn new(
        topic: String,
        num_partitions: i32,
        replication_factor: i16,
        config: Option<BTreeMap<String, String>>,
    ) -> NewTopic {
        NewTopic {
            topic,
            num_partitions,
            replication_factor,
            config: config.unwrap_or_default(),
        }
    }

    fn __repr__(&self) -> String {
        format!(
            "NewTopic(topic={:?}, num_partitions={})",
            self.topic, self.num_partitions
        )
    }
}

impl NewTopic {
    fn to_client(&self) -> ClientNewTopic {
        let mut t = ClientNewTopic::new(&self.topic);
        if self.num_partitions > 0 {
            t = t.partitions(self.num_partitions);
        }
        if self.replication_factor > 0 {
            t = t.replication_factor(self.replication_factor);
        }
        for (k, v) in &self.config {
            t = t.config(k, v);
        }
        t
    }
}

/// An admin client (confluent-kafka's `AdminClient`), blocking: each call waits for the
/// broker's answer with the GIL released.
#[pyclass(frozen, module = "shoal")]
pub struct AdminClient {
    /// None once closed.
    client: Mutex<Option<Admin>>,
}

impl AdminClient {
    fn client(&self, py: Python<'_>) -> PyResult<Admin> {
        without_gil(py, || lock(&self.client).clone()).ok_or_else(|| to_py(py, Error::Closed))
    }

    /// IncrementalAlterConfigs SET of `configs` on `resource`, all or none.
    fn set_configs(
        &self,
        py: Python<'_>,
        resource: ConfigResource,
        configs: BTreeMap<String, String>,
    ) -> PyResult<()> {
        let admin = self.client(py)?;
        let ops = configs
            .into_iter()
            .map(|(name, value)| AlterConfigOp::Set { name, value })
            .collect();
        let changes = [(resource, ops)];
        let results =
            block(py, admin.incremental_alter_configs(&changes, Mode::Apply)).py_err(py)?;
        for (_, result) in results {
            result.py_err(py)?;
        }
        Ok(())
    }
}

/// A `concurrent.futures.Future` already holding `outcome` (confluent-kafka's admin calls
/// return futures; these are resolved before the call returns).
fn resolved(py: Python<'_>, outcome: Result<(), Error>) -> PyResult<PyObject> {
    let future = py
        .import("concurrent.futures")?
        .getattr("Future")?
        .call0()?;
    match outcome {
        Ok(()) => future.call_method1("set_result", (py.None(),))?,
        Err(e) => future.call_method1("set_exception", (to_py(py, e).into_value(py),))?,
    };
    Ok(future.unbind())
}

#[pymethods]
impl AdminClient {
    /// Connects with Kafka's client config keys (`bootstrap.servers`, `client.id`, ...).
    #[new]
    fn new(py: Python<'_>, config: &Bound<'_, PyDict>) -> PyResult<AdminClient> {
        let config = ClientConfig::from_properties(properties(config)?).py_err(py)?;
        let admin = block(py, Admin::connect(config)).py_err(py)?;
        Ok(AdminClient {
            client: Mutex::new(Some(admin)),
        })
    }

    /// Creates topics (CreateTopics). Returns `{topic: Future}` as confluent-kafka does,
    /// each future already resolved: `result()` is None, or raises the topic's error
    /// (e.g. AbortableError TOPIC_ALREADY_EXISTS).
    fn create_topics(
        &self,
        py: Python<'_>,
        new_topics: Vec<NewTopic>,
    ) -> PyResult<BTreeMap<String, PyObject>> {
        let admin = self.client(py)?;
        let topics: Vec<ClientNewTopic> = new_topics.iter().map(NewTopic::to_client).collect();
        let results = block(py, admin.create_topics(&topics, Mode::Apply)).py_err(py)?;
        let mut out = BTreeMap::new();
        for (topic, result) in results {
            out.insert(topic, resolved(py, result.map(|_| ()))?);
        }
        Ok(out)
    }

    /// Sets a group's configs (IncrementalAlterConfigs SET on the GROUP resource), e.g.
    /// `{"share.auto.offset.reset": "earliest"}`. Shoal's shorthand: confluent-kafka's
    /// general `incremental_alter_configs` is not offered yet. Raises the error.
    fn set_group_configs(
        &self,
        py: Python<'_>,
        group_id: String,
        configs: BTreeMap<String, String>,
    ) -> PyResult<()> {
        self.set_configs(py, ConfigResource::group(group_id), configs)
    }

    /// Sets a topic's configs (IncrementalAlterConfigs SET on the TOPIC resource), e.g.
    /// `{"errors.deadletterqueue.group.enable": "true"}`; the same shorthand. Raises the
    /// error.
    fn set_topic_configs(
        &self,
        py: Python<'_>,
        topic: String,
        configs: BTreeMap<String, String>,
    ) -> PyResult<()> {
        self.set_configs(py, ConfigResource::topic(topic), configs)
    }

    /// Closes the connections; later calls raise FatalError named `_CLOSED`.
    fn close(&self, py: Python<'_>) {
        let admin = without_gil(py, || lock(&self.client).take());
        if let Some(admin) = admin {
            block(py, async move { admin.close().await });
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
