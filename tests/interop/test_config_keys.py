"""Every Kafka 4.4 configuration key, through confluent-kafka's AdminClient.

Checks, against the live target, that DescribeConfigs lists exactly Kafka 4.4's keys for a
topic, the broker and a group (recorded in kafka44_configs.py), with Kafka's config types,
topic, group and broker defaults, read-only and sensitive broker keys; that a topic can be
created and altered with Kafka's compaction, timestamp, tiering and replication keys
(min.cleanable.dirty.ratio=0.01, max.compaction.lag.ms, segment.jitter.ms, ...) while an
unknown key, a value outside Kafka's range or conflicting compaction lags are INVALID_CONFIG;
that the broker refuses read-only keys and bad values with INVALID_REQUEST, takes dynamic
ones, and describes its cluster default as Kafka does; and that group keys of every group
type are validated against the broker's bounds. Passes against Apache Kafka 4.4 exactly;
against Shoal the only differences allowed are the ones listed below, each with its reason.
"""

import time

from confluent_kafka import KafkaException
from confluent_kafka.admin import (AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource,
                                   NewTopic, ResourceType)

import kafka44_configs as k44
from iutil import OP_TIMEOUT, admin, create_topic, uniq

INVALID_CONFIG = 40
INVALID_REQUEST = 42
NODE = "1"  # the node id of the target (Kafka's fixture and Shoal's default)

# Shoal's deliberate differences, key -> (Shoal's value, why).
SHOAL_TOPIC_DEFAULTS = {
    "flush.messages": ("1", "Shoal fsyncs every acknowledged write, with group commit "
                            "(durable by default; log.flush.interval.messages=1)"),
}
SHOAL_BROKER_DEFAULTS = {
    "log.flush.interval.messages": ("1", "durable by default (decision 0003)"),
    "group.max.size": ("1000", "a limit on everything (DESIGN principle 6)"),
    "max.connections": ("10000", "a limit on everything (DESIGN principle 6)"),
    # Kafka leaves these null and derives the value used; Shoal describes that value.
    "log.retention.ms": ("604800000", "derived from log.retention.hours (decision 0007)"),
    "log.roll.ms": ("604800000", "derived from log.roll.hours (decision 0007)"),
    "log.roll.jitter.ms": ("0", "derived from log.roll.jitter.hours (decision 0007)"),
    "log.flush.interval.ms": ("9223372036854775807", "the flush interval used (decision 0007)"),
}
# Shoal keeps one set of dynamic broker values (decision 0007): a value set on broker "1" is
# reported as the cluster default.
SHOAL_DYNAMIC_BROKER_SOURCE = ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG


def result_code(fut):
    """None on success, else the Kafka error code of the future's failure."""
    try:
        fut.result(timeout=OP_TIMEOUT)
        return None
    except KafkaException as e:
        return e.args[0].code()


def describe(a, rtype, name):
    (fut,) = a.describe_configs([ConfigResource(rtype, name)],
                                request_timeout=OP_TIMEOUT).values()
    return fut.result(timeout=OP_TIMEOUT)


def incremental(a, rtype, name, key, value, op=AlterConfigOpType.SET):
    entry = ConfigEntry(key, value, incremental_operation=op)
    (fut,) = a.incremental_alter_configs([ConfigResource(rtype, name, incremental_configs=[entry])],
                                         request_timeout=OP_TIMEOUT).values()
    return result_code(fut)


def entry_state(a, key):
    e = describe(a, ResourceType.BROKER, NODE)[key]
    return (e.value, e.source, e.is_read_only)


def wait_entry(a, key, expected):
    """The broker entry's (value, source, read_only) once it equals `expected` (Kafka applies
    broker changes through its metadata log, a moment after answering), or the last one seen
    after OP_TIMEOUT."""
    deadline = time.monotonic() + OP_TIMEOUT
    while True:
        state = entry_state(a, key)
        if state == expected or time.monotonic() > deadline:
            return state
        time.sleep(0.2)


def create_code(a, config):
    name = uniq("cfgkeys-bad")
    fut = a.create_topics([NewTopic(name, num_partitions=1, replication_factor=1, config=config)],
                          operation_timeout=OP_TIMEOUT, request_timeout=OP_TIMEOUT)
    return result_code(fut[name])


def test_topic_keys_and_defaults(broker):
    a = admin(broker)
    topic = create_topic(broker, uniq("cfgkeys"))
    configs = describe(a, ResourceType.TOPIC, topic)
    assert set(configs) == k44.TOPIC_KEYS, (
        f"missing {sorted(k44.TOPIC_KEYS - set(configs))}, "
        f"extra {sorted(set(configs) - k44.TOPIC_KEYS)}")
    expected = dict(k44.TOPIC_DEFAULTS)
    if broker.target == "shoal":
        expected.update({k: v for k, (v, _why) in SHOAL_TOPIC_DEFAULTS.items()})
    actual = {k: e.value for k, e in configs.items()}
    assert actual == expected
    assert not any(e.is_read_only or e.is_sensitive for e in configs.values())


def test_broker_keys(broker):
    a = admin(broker)
    configs = describe(a, ResourceType.BROKER, NODE)
    assert set(configs) == k44.BROKER_KEYS, (
        f"missing {sorted(k44.BROKER_KEYS - set(configs))}, "
        f"extra {sorted(set(configs) - k44.BROKER_KEYS)}")
    assert {k for k, e in configs.items() if not e.is_read_only} == k44.BROKER_DYNAMIC_KEYS
    sensitive = {k for k, e in configs.items() if e.is_sensitive}
    assert sensitive == k44.BROKER_SENSITIVE_KEYS
    assert all(configs[k].value is None for k in sensitive)
    # Kafka's defaults, for the keys neither broker was configured with.
    expected = dict(k44.BROKER_DEFAULTS)
    if broker.target == "shoal":
        expected.update({k: v for k, (v, _why) in SHOAL_BROKER_DEFAULTS.items()})
    actual = {k: configs[k].value for k in expected
              if configs[k].source == ConfigSource.DEFAULT_CONFIG.value}
    assert actual == {k: expected[k] for k in actual}
    assert len(actual) > 300  # nearly every key is compared


def test_group_keys(broker):
    a = admin(broker)
    configs = describe(a, ResourceType.GROUP, uniq("cfgkeys-group"))
    assert set(configs) == k44.GROUP_KEYS, (
        f"missing {sorted(k44.GROUP_KEYS - set(configs))}, "
        f"extra {sorted(set(configs) - k44.GROUP_KEYS)}")
    assert {k: e.value for k, e in configs.items()} == k44.GROUP_DEFAULTS
    assert all(e.source == ConfigSource.DEFAULT_CONFIG.value for e in configs.values())


# Keys a Kafka tool or client may set at topic creation, with valid values.
KAFKA_TOPIC_CONFIG = {
    "cleanup.policy": "compact,delete",
    "min.cleanable.dirty.ratio": "0.01",
    "max.compaction.lag.ms": "60000",
    "min.compaction.lag.ms": "1000",
    "delete.retention.ms": "1000",
    "segment.jitter.ms": "1000",
    "segment.bytes": "1048576",
    "segment.index.bytes": "1048576",
    "index.interval.bytes": "1024",
    "file.delete.delay.ms": "0",
    "preallocate": "true",
    "compression.type": "zstd",
    "compression.zstd.level": "5",
    "compression.gzip.level": "-1",
    "message.timestamp.after.max.ms": "1000",
    "min.insync.replicas": "1",
    "unclean.leader.election.enable": "true",
    "follower.replication.throttled.replicas": "*",
    "local.retention.ms": "-2",
    "remote.storage.enable": "false",
}


def test_create_and_alter_topics_with_kafka_keys(broker):
    a = admin(broker)
    topic = create_topic(broker, uniq("cfgkeys-set"), config=KAFKA_TOPIC_CONFIG)
    configs = describe(a, ResourceType.TOPIC, topic)
    for key, value in KAFKA_TOPIC_CONFIG.items():
        assert (configs[key].value, configs[key].source) == (
            value, ConfigSource.DYNAMIC_TOPIC_CONFIG.value), key

    for bad in ({"no.such.key": "1"}, {"min.cleanable.dirty.ratio": "1.5"},
                {"segment.bytes": "1000"}, {"compression.gzip.level": "0"},
                {"max.compaction.lag.ms": "0"}, {"segment.jitter.ms": "-1"},
                {"follower.replication.throttled.replicas": "x"}, {"preallocate": "yes"},
                # checked together: lags in order; tiered storage needs the broker's
                {"min.compaction.lag.ms": "2000", "max.compaction.lag.ms": "1000"},
                {"remote.storage.enable": "true"}):
        assert create_code(a, bad) == INVALID_CONFIG, bad

    assert incremental(a, ResourceType.TOPIC, topic, "min.cleanable.dirty.ratio", "0.2") is None
    assert incremental(a, ResourceType.TOPIC, topic, "message.timestamp.before.max.ms",
                       "86400000") is None
    assert incremental(a, ResourceType.TOPIC, topic, "min.cleanable.dirty.ratio",
                       "2") == INVALID_CONFIG
    assert incremental(a, ResourceType.TOPIC, topic, "no.such.key", "1") == INVALID_CONFIG
    # the topic's max.compaction.lag.ms is 60000
    assert incremental(a, ResourceType.TOPIC, topic, "min.compaction.lag.ms",
                       "60001") == INVALID_CONFIG
    assert incremental(a, ResourceType.TOPIC, topic, "retention.ms", "1",
                       AlterConfigOpType.APPEND) == INVALID_CONFIG
    configs = describe(a, ResourceType.TOPIC, topic)
    assert configs["min.cleanable.dirty.ratio"].value == "0.2"
    assert configs["message.timestamp.before.max.ms"].value == "86400000"


def test_broker_alters_dynamic_keys_only(broker):
    a = admin(broker)
    # Read-only keys and bad values: INVALID_REQUEST, as Kafka answers for broker resources.
    assert incremental(a, ResourceType.BROKER, NODE, "num.partitions", "3") == INVALID_REQUEST
    assert incremental(a, ResourceType.BROKER, NODE, "log.dirs", "/tmp/x") == INVALID_REQUEST
    assert incremental(a, ResourceType.BROKER, NODE, "log.segment.bytes",
                       "100") == INVALID_REQUEST
    assert incremental(a, ResourceType.BROKER, NODE, "log.cleaner.min.cleanable.ratio",
                       "1.5") == INVALID_REQUEST

    # A topic's compaction lags are checked against each other with the broker's value for the
    # one it leaves out: this topic's 2000 > the broker's 1000 is refused.
    assert incremental(a, ResourceType.BROKER, NODE, "log.cleaner.max.compaction.lag.ms",
                       "1000") is None
    try:
        source = (SHOAL_DYNAMIC_BROKER_SOURCE if broker.target == "shoal"
                  else ConfigSource.DYNAMIC_BROKER_CONFIG)
        expected = ("1000", source.value, False)
        assert wait_entry(a, "log.cleaner.max.compaction.lag.ms", expected) == expected
        assert create_code(a, {"min.compaction.lag.ms": "2000"}) == INVALID_CONFIG
        assert create_code(a, {"min.compaction.lag.ms": "1000"}) is None
    finally:
        assert incremental(a, ResourceType.BROKER, NODE, "log.cleaner.max.compaction.lag.ms",
                           None, AlterConfigOpType.DELETE) is None

    assert incremental(a, ResourceType.BROKER, NODE, "log.cleaner.min.cleanable.ratio",
                       "0.3") is None
    try:
        source = (SHOAL_DYNAMIC_BROKER_SOURCE if broker.target == "shoal"
                  else ConfigSource.DYNAMIC_BROKER_CONFIG)
        expected = ("0.3", source.value, False)
        assert wait_entry(a, "log.cleaner.min.cleanable.ratio", expected) == expected
        # The broker value is the default of topics without their own.
        topic = create_topic(broker, uniq("cfgkeys-inherit"))
        assert describe(a, ResourceType.TOPIC, topic)["min.cleanable.dirty.ratio"].value == "0.3"
    finally:
        assert incremental(a, ResourceType.BROKER, NODE, "log.cleaner.min.cleanable.ratio",
                           None, AlterConfigOpType.DELETE) is None
    expected = ("0.5", ConfigSource.DEFAULT_CONFIG.value, False)
    assert wait_entry(a, "log.cleaner.min.cleanable.ratio", expected) == expected


# Kafka's storage format writes min.insync.replicas as a cluster default; nothing formats Shoal's.
KAFKA_FORMAT_CLUSTER_DEFAULTS = {"min.insync.replicas"}


def cluster_default_request(kp, request):
    """Sends a request naming the BROKER resource "" (the cluster default), which neither
    confluent-kafka nor kafka-python's public API accepts, through kafka-python."""
    return kp._manager.run(kp._manager.send, request)


def test_broker_cluster_default(broker):
    """The BROKER resource with an empty name is the cluster default: a value set there is
    every broker's DYNAMIC_DEFAULT_BROKER_CONFIG, and describing "" lists only the values set
    there. Per-broker keys need the broker's id; APPEND and SUBTRACT apply to lists only."""
    from kafka.admin import AlterConfigOp, ConfigResource as KCR, KafkaAdminClient
    from kafka.admin import ConfigResourceType as KType
    a = admin(broker)
    kp = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=30000)
    key = "log.cleaner.backoff.ms"

    def alter(k, op, value):
        request = kp._alter_configs_request([KCR(KType.BROKER, "", {k: (op, value)})],
                                            incremental=True)
        return cluster_default_request(kp, request).responses[0].error_code

    try:
        assert alter(key, AlterConfigOp.SET, "20000") == 0
        expected = ("20000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value, False)
        assert wait_entry(a, key, expected) == expected
        response = cluster_default_request(kp, kp._describe_configs_request([KCR(KType.BROKER, "")]))
        (result,) = response.results
        described = {c.name for c in result.configs}
        if broker.target == "kafka":
            described -= KAFKA_FORMAT_CLUSTER_DEFAULTS
        assert (result.error_code, described) == (0, {key})
        assert alter("listeners", AlterConfigOp.SET, "PLAINTEXT://127.0.0.1:1") == INVALID_REQUEST
        assert alter("log.cleaner.threads", AlterConfigOp.APPEND, "2") == INVALID_CONFIG
    finally:
        assert alter(key, AlterConfigOp.DELETE, None) == 0
        kp.close()
    expected = ("15000", ConfigSource.DEFAULT_CONFIG.value, False)
    assert wait_entry(a, key, expected) == expected


def test_group_keys_of_every_group_type_are_validated(broker):
    a = admin(broker)
    group = uniq("cfgkeys-group")
    for key, value in (("consumer.session.timeout.ms", "50000"),
                       ("consumer.heartbeat.interval.ms", "6000"),
                       ("streams.num.standby.replicas", "1"),
                       ("streams.session.timeout.ms", "50000"),
                       ("share.assignment.interval.ms", "2000"),
                       ("errors.deadletterqueue.topic.name", "dlq")):
        assert incremental(a, ResourceType.GROUP, group, key, value) is None, key
    for key, value in (("consumer.session.timeout.ms", "5000"),   # below the broker's min
                       ("consumer.heartbeat.interval.ms", "16000"),  # above the broker's max
                       ("streams.num.standby.replicas", "3"),     # above the broker's max
                       ("streams.session.timeout.ms", "x"),
                       ("consumer.no.such.key", "1")):
        assert incremental(a, ResourceType.GROUP, group, key, value) == INVALID_CONFIG, key
    configs = describe(a, ResourceType.GROUP, group)
    assert configs["consumer.session.timeout.ms"].value == "50000"
    assert configs["consumer.session.timeout.ms"].source == ConfigSource.GROUP_CONFIG.value
    assert configs["streams.num.standby.replicas"].value == "1"


def test_config_types(broker):
    """kafka-python's DescribeConfigs (v3+, which carries each key's config type): every key of
    a topic, the broker and a group has Kafka 4.4's type."""
    from kafka.admin import ConfigResource as KCR, ConfigResourceType, KafkaAdminClient
    kp = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=30000)
    try:
        topic = create_topic(broker, uniq("cfgkeys-types"))
        for rtype, name, expected in ((ConfigResourceType.TOPIC, topic, k44.TOPIC_TYPES),
                                      (ConfigResourceType.BROKER, NODE, k44.BROKER_TYPES),
                                      (ConfigResourceType.GROUP, uniq("cfgkeys-types"),
                                       k44.GROUP_TYPES)):
            described = kp.describe_configs([KCR(rtype, name)], config_filter="all")
            (configs,) = described[rtype.name.lower()].values()
            actual = {}
            for key, entry in configs.items():
                actual.setdefault(entry["config_type"], set()).add(key)
            assert actual == {t: set(keys) for t, keys in expected.items()}, rtype.name
    finally:
        kp.close()
