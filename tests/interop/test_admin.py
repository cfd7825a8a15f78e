"""Admin API interop: topic create/list/describe/delete/re-create, partition
growth, topic configs (describe / legacy alter / incremental alter), describe
cluster and the exact error codes, with confluent-kafka's AdminClient and
kafka-python's KafkaAdminClient."""

import time

import pytest
from confluent_kafka import KafkaException, Producer, TopicCollection
from confluent_kafka.admin import (AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource,
                                   NewPartitions, NewTopic)

from iutil import OP_TIMEOUT, admin, create_topic, end_offsets, uniq, wait_topic_ready

# Also exercises passing broker config: topics created without a partition
# count must get num.partitions partitions.
BROKER_CONFIG = {"num.partitions": "3"}

# Kafka error codes (as numbers, the client's names differ: librdkafka calls 17
# TOPIC_EXCEPTION, Kafka calls it INVALID_TOPIC_EXCEPTION).
UNKNOWN_TOPIC_OR_PARTITION = 3
INVALID_TOPIC_EXCEPTION = 17
TOPIC_ALREADY_EXISTS = 36
INVALID_PARTITIONS = 37
INVALID_REPLICATION_FACTOR = 38
INVALID_CONFIG = 40
INVALID_REPLICA_ASSIGNMENT = 39


def result_code(fut):
    """None on success, else the Kafka error code of the future's failure."""
    try:
        fut.result(timeout=OP_TIMEOUT)
        return None
    except KafkaException as e:
        return e.args[0].code()


def describe_topic(a, name):
    return a.describe_topics(TopicCollection([name]),
                             request_timeout=OP_TIMEOUT)[name].result(timeout=OP_TIMEOUT)


def topic_configs(a, name):
    res = a.describe_configs([ConfigResource("topic", name)], request_timeout=OP_TIMEOUT)
    (fut,) = res.values()
    return fut.result(timeout=OP_TIMEOUT)


def wait_listed(a, name, present=True, timeout=OP_TIMEOUT):
    """Metadata propagation is asynchronous in KRaft Kafka: wait (bounded)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (name in a.list_topics(timeout=5).topics) == present:
            return
        time.sleep(0.1)
    raise AssertionError(f"topic {name} {'not ' if present else ''}listed after {timeout}s")


# --------------------------------------------------------------- topics


def test_create_list_describe(broker):
    a = admin(broker)
    t1, t2, t3 = uniq("adm-a"), uniq("adm-b"), uniq("adm-default")
    fs = a.create_topics([NewTopic(t1, num_partitions=4, replication_factor=1,
                                   config={"retention.ms": "86400000",
                                           "cleanup.policy": "compact"}),
                          NewTopic(t2, num_partitions=1, replication_factor=1),
                          NewTopic(t3)],  # broker defaults: num.partitions=3, rf=1
                         operation_timeout=OP_TIMEOUT, request_timeout=OP_TIMEOUT)
    assert {k: result_code(f) for k, f in fs.items()} == {t1: None, t2: None, t3: None}
    for t, n in ((t1, 4), (t2, 1), (t3, 3)):
        wait_topic_ready(broker, t, n)

    md = a.list_topics(timeout=10)
    (broker_id,) = md.brokers
    for t, n in ((t1, 4), (t2, 1), (t3, 3)):
        assert t in md.topics
        assert sorted(md.topics[t].partitions) == list(range(n))
        for p in md.topics[t].partitions.values():
            assert p.leader == broker_id
            assert p.replicas == [p.leader] and p.isrs == [p.leader]

    d = describe_topic(a, t1)
    assert d.name == t1 and not d.is_internal
    assert str(d.topic_id) and str(d.topic_id) != "AAAAAAAAAAAAAAAAAAAAAA"  # not the zero uuid
    assert [p.id for p in d.partitions] == [0, 1, 2, 3]
    for p in d.partitions:
        assert p.leader is not None and [r.id for r in p.replicas] == [p.leader.id]
        assert [r.id for r in p.isr] == [p.leader.id]
    assert str(describe_topic(a, t2).topic_id) != str(d.topic_id)

    cfg = topic_configs(a, t1)
    assert cfg["retention.ms"].value == "86400000"
    assert cfg["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert cfg["cleanup.policy"].value == "compact"

    # describing an unknown topic
    missing = uniq("nope")
    fs = a.describe_topics(TopicCollection([missing]), request_timeout=OP_TIMEOUT)
    assert result_code(fs[missing]) == UNKNOWN_TOPIC_OR_PARTITION


def test_create_errors(broker):
    a = admin(broker)
    name = create_topic(broker, uniq("adm-dup"), 2)
    cases = {
        name: NewTopic(name, 2, 1),                        # already exists
        "bad name!": NewTopic("bad name!", 1, 1),          # illegal chars
        "a/b": NewTopic("a/b", 1, 1),
        ".": NewTopic(".", 1, 1),
        "..": NewTopic("..", 1, 1),
        "x" * 250: NewTopic("x" * 250, 1, 1),              # > 249 chars
        "zero-parts": NewTopic(uniq("zero-parts"), 0, 1),
        "rf2": NewTopic(uniq("rf2"), 1, 2),                # one broker only
        "unknown-config": NewTopic(uniq("unk-cfg"), 1, 1, config={"no.such.config": "1"}),
        "bad-config": NewTopic(uniq("bad-cfg"), 1, 1, config={"retention.ms": "abc"}),
    }
    want = {
        name: TOPIC_ALREADY_EXISTS,
        "bad name!": INVALID_TOPIC_EXCEPTION, "a/b": INVALID_TOPIC_EXCEPTION,
        ".": INVALID_TOPIC_EXCEPTION, "..": INVALID_TOPIC_EXCEPTION,
        "x" * 250: INVALID_TOPIC_EXCEPTION,
        "zero-parts": INVALID_PARTITIONS, "rf2": INVALID_REPLICATION_FACTOR,
        "unknown-config": INVALID_CONFIG, "bad-config": INVALID_CONFIG,
    }
    got = {}
    for key, nt in cases.items():
        fs = a.create_topics([nt], operation_timeout=OP_TIMEOUT, request_timeout=OP_TIMEOUT)
        got[key] = result_code(fs[nt.topic])
    assert got == want
    # the failed creations left nothing behind; the existing topic is untouched
    md = a.list_topics(timeout=10)
    for key, nt in cases.items():
        if key != name:
            assert nt.topic not in md.topics
    assert len(md.topics[name].partitions) == 2

    # '.' and '_' collide in topic names (metric names): INVALID_TOPIC_EXCEPTION
    base = uniq("coll")
    create_topic(broker, base + ".x", 1)
    fs = a.create_topics([NewTopic(base + "_x", 1, 1)], operation_timeout=OP_TIMEOUT)
    assert result_code(fs[base + "_x"]) == INVALID_TOPIC_EXCEPTION


def test_delete_and_recreate_gets_new_topic_id(broker):
    a = admin(broker)
    name = create_topic(broker, uniq("adm-del"), 2, {"retention.ms": "3600000"})
    old_id = str(describe_topic(a, name).topic_id)
    p = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": False})
    for i in range(10):
        p.produce(name, value=b"v%d" % i, partition=i % 2)
    assert p.flush(OP_TIMEOUT) == 0
    assert end_offsets(broker, name, 2) == {0: 5, 1: 5}

    fs = a.delete_topics([name], operation_timeout=OP_TIMEOUT, request_timeout=OP_TIMEOUT)
    assert result_code(fs[name]) is None
    wait_listed(a, name, present=False)
    assert result_code(a.delete_topics([name], operation_timeout=OP_TIMEOUT)[name]) == \
        UNKNOWN_TOPIC_OR_PARTITION

    fs = a.create_topics([NewTopic(name, 3, 1)], operation_timeout=OP_TIMEOUT,
                         request_timeout=OP_TIMEOUT)
    assert result_code(fs[name]) is None
    wait_topic_ready(broker, name, 3)
    d = describe_topic(a, name)
    assert str(d.topic_id) != old_id
    assert len(d.partitions) == 3
    # the new incarnation is empty and has default configs again
    assert end_offsets(broker, name, 3) == {0: 0, 1: 0, 2: 0}
    cfg = topic_configs(a, name)
    assert cfg["retention.ms"].value == "604800000"
    assert cfg["retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value


def test_create_partitions(broker):
    a = admin(broker)
    name = create_topic(broker, uniq("adm-grow"), 2)
    fs = a.create_partitions([NewPartitions(name, 5)], operation_timeout=OP_TIMEOUT,
                             request_timeout=OP_TIMEOUT)
    assert result_code(fs[name]) is None
    wait_topic_ready(broker, name, 5)
    assert [p.id for p in describe_topic(a, name).partitions] == [0, 1, 2, 3, 4]
    # the new partitions are usable
    p = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": False})
    p.produce(name, value=b"x", partition=4)
    assert p.flush(OP_TIMEOUT) == 0
    assert end_offsets(broker, name, 5) == {0: 0, 1: 0, 2: 0, 3: 0, 4: 1}
    # same count or shrinking: INVALID_PARTITIONS; unknown topic: UNKNOWN_TOPIC_OR_PARTITION
    for n in (5, 3):
        fs = a.create_partitions([NewPartitions(name, n)], operation_timeout=OP_TIMEOUT)
        assert result_code(fs[name]) == INVALID_PARTITIONS
    missing = uniq("nope")
    fs = a.create_partitions([NewPartitions(missing, 4)], operation_timeout=OP_TIMEOUT)
    assert result_code(fs[missing]) == UNKNOWN_TOPIC_OR_PARTITION


def test_create_partitions_with_manual_assignments(broker):
    """Manual assignments of the new partitions, as Kafka's controller checks them: one per
    added partition, every broker registered, none twice, the topic's replication factor."""
    a = admin(broker)
    name = create_topic(broker, uniq("adm-assign"), 2)
    node = next(iter(a.list_topics(timeout=OP_TIMEOUT).brokers))

    def grow(count, assignment):
        fs = a.create_partitions([NewPartitions(name, count, replica_assignment=assignment)],
                                 operation_timeout=OP_TIMEOUT, request_timeout=OP_TIMEOUT)
        try:
            fs[name].result(timeout=OP_TIMEOUT)
            return None, None
        except KafkaException as e:
            return e.args[0].code(), e.args[0].str()

    assert grow(3, [[node]]) == (None, None)
    wait_topic_ready(broker, name, 3)
    code, message = grow(5, [[node]])
    assert code == INVALID_REPLICA_ASSIGNMENT
    assert "Attempted to add 2 additional partition(s), but only 1 assignment(s) were " \
        "specified." in message
    code, message = grow(4, [[node + 100]])
    assert code == INVALID_REPLICA_ASSIGNMENT
    assert f"includes broker {node + 100}, but no such broker is registered" in message
    code, message = grow(4, [[node, node]])
    assert code == INVALID_REPLICA_ASSIGNMENT
    assert f"includes the broker {node} more than once" in message
    # Nothing of the refused requests was applied.
    assert [p.id for p in describe_topic(a, name).partitions] == [0, 1, 2]


# --------------------------------------------------------------- configs


def test_describe_configs_defaults_and_sources(broker):
    a = admin(broker)
    name = create_topic(broker, uniq("adm-cfg"), 1,
                        {"retention.ms": "86400000", "max.message.bytes": "2000000"})
    cfg = topic_configs(a, name)
    expect = {  # name: (value, source)
        "retention.ms": ("86400000", ConfigSource.DYNAMIC_TOPIC_CONFIG),
        "max.message.bytes": ("2000000", ConfigSource.DYNAMIC_TOPIC_CONFIG),
        "cleanup.policy": ("delete", ConfigSource.DEFAULT_CONFIG),
        "segment.bytes": ("1073741824", ConfigSource.DEFAULT_CONFIG),
        "compression.type": ("producer", ConfigSource.DEFAULT_CONFIG),
        "message.timestamp.type": ("CreateTime", ConfigSource.DEFAULT_CONFIG),
        "retention.bytes": ("-1", ConfigSource.DEFAULT_CONFIG),
    }
    got = {k: (cfg[k].value, ConfigSource(cfg[k].source)) for k in expect}
    assert got == expect
    for k, (_, src) in expect.items():
        assert cfg[k].is_default == (src == ConfigSource.DEFAULT_CONFIG), k
        assert not cfg[k].is_read_only and not cfg[k].is_sensitive, k

    missing = uniq("nope")
    (fut,) = a.describe_configs([ConfigResource("topic", missing)]).values()
    assert result_code(fut) == UNKNOWN_TOPIC_OR_PARTITION


def test_alter_configs_legacy_replaces_whole_set(broker):
    """AlterConfigs (non-incremental) replaces the topic's dynamic config set:
    keys not mentioned revert to their defaults."""
    a = admin(broker)
    name = create_topic(broker, uniq("adm-alter"), 1,
                        {"retention.ms": "86400000", "max.message.bytes": "2000000"})
    res = a.alter_configs([ConfigResource("topic", name,
                                          set_config={"retention.ms": "3600000"})],
                          request_timeout=OP_TIMEOUT)
    (fut,) = res.values()
    assert result_code(fut) is None
    cfg = topic_configs(a, name)
    assert (cfg["retention.ms"].value, cfg["retention.ms"].source) == \
        ("3600000", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
    assert (cfg["max.message.bytes"].value, cfg["max.message.bytes"].source) == \
        ("1048588", ConfigSource.DEFAULT_CONFIG.value)


def test_incremental_alter_configs(broker):
    a = admin(broker)
    name = create_topic(broker, uniq("adm-incr"), 1,
                        {"retention.ms": "86400000", "max.message.bytes": "2000000"})

    def incr(*entries, topic=name):
        res = a.incremental_alter_configs(
            [ConfigResource("topic", topic, incremental_configs=list(entries))],
            request_timeout=OP_TIMEOUT)
        (fut,) = res.values()
        return result_code(fut)

    assert incr(ConfigEntry("retention.ms", "7200000",
                            incremental_operation=AlterConfigOpType.SET),
                ConfigEntry("cleanup.policy", "compact",
                            incremental_operation=AlterConfigOpType.APPEND),
                ConfigEntry("segment.ms", "3600000",
                            incremental_operation=AlterConfigOpType.SET)) is None
    cfg = topic_configs(a, name)
    got = {k: (cfg[k].value, ConfigSource(cfg[k].source))
           for k in ("retention.ms", "cleanup.policy", "max.message.bytes", "segment.ms")}
    assert got == {
        "retention.ms": ("7200000", ConfigSource.DYNAMIC_TOPIC_CONFIG),
        "cleanup.policy": ("delete,compact", ConfigSource.DYNAMIC_TOPIC_CONFIG),
        "max.message.bytes": ("2000000", ConfigSource.DYNAMIC_TOPIC_CONFIG),  # untouched
        "segment.ms": ("3600000", ConfigSource.DYNAMIC_TOPIC_CONFIG),
    }

    assert incr(ConfigEntry("max.message.bytes", None,
                            incremental_operation=AlterConfigOpType.DELETE),
                ConfigEntry("cleanup.policy", "delete",
                            incremental_operation=AlterConfigOpType.SUBTRACT)) is None
    cfg = topic_configs(a, name)
    assert (cfg["max.message.bytes"].value, ConfigSource(cfg["max.message.bytes"].source)) == \
        ("1048588", ConfigSource.DEFAULT_CONFIG)
    assert (cfg["cleanup.policy"].value, ConfigSource(cfg["cleanup.policy"].source)) == \
        ("compact", ConfigSource.DYNAMIC_TOPIC_CONFIG)
    assert cfg["retention.ms"].value == "7200000"

    # errors: bad value, unknown key (nothing applied), unknown topic
    assert incr(ConfigEntry("retention.ms", "abc",
                            incremental_operation=AlterConfigOpType.SET)) == INVALID_CONFIG
    assert incr(ConfigEntry("bogus.key", "1",
                            incremental_operation=AlterConfigOpType.SET)) == INVALID_CONFIG
    assert incr(ConfigEntry("retention.ms", "1", incremental_operation=AlterConfigOpType.SET),
                topic=uniq("nope")) == UNKNOWN_TOPIC_OR_PARTITION
    assert topic_configs(a, name)["retention.ms"].value == "7200000"


def test_describe_cluster(broker):
    a = admin(broker)
    dc = a.describe_cluster(request_timeout=OP_TIMEOUT).result(timeout=OP_TIMEOUT)
    assert dc.cluster_id and isinstance(dc.cluster_id, str)
    assert len(dc.nodes) == 1
    node = dc.nodes[0]
    assert (node.host, node.port) == ("127.0.0.1", broker.port)
    assert dc.controller is not None and dc.controller.id == node.id
    md = a.list_topics(timeout=10)
    assert md.cluster_id == dc.cluster_id
    assert md.controller_id == node.id
    assert list(md.brokers) == [node.id]
    assert (md.brokers[node.id].host, md.brokers[node.id].port) == ("127.0.0.1", broker.port)


# --------------------------------------------------------------- kafka-python


@pytest.fixture
def kp_admin(broker):
    from kafka.admin import KafkaAdminClient
    a = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=30000)
    yield a
    a.close()


def test_kafka_python_admin(broker, kp_admin):
    from kafka.admin import ConfigResource as KCR, ConfigResourceType
    from kafka.errors import InvalidTopicError, TopicAlreadyExistsError, UnknownTopicOrPartitionError

    name = uniq("kp-adm")
    resp = kp_admin.create_topics({name: {"num_partitions": 2, "replication_factor": 1,
                                          "configs": {"retention.ms": "123456"}}})
    (t,) = resp["topics"]
    assert (t["name"], t["error_code"], t["num_partitions"], t["replication_factor"]) == \
        (name, 0, 2, 1)
    assert t["topic_id"] is not None
    # CreateTopics v5+ returns the resulting configs
    assert t["configs"]["retention.ms"]["value"] == "123456"
    assert t["configs"]["retention.ms"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"
    assert t["configs"]["cleanup.policy"]["value"] == "delete"
    wait_topic_ready(broker, name, 2)

    dflt = uniq("kp-adm-dflt")
    (t,) = kp_admin.create_topics({dflt: {}})["topics"]  # -1/-1 -> broker defaults
    assert (t["error_code"], t["num_partitions"], t["replication_factor"]) == (0, 3, 1)
    wait_topic_ready(broker, dflt, 3)

    with pytest.raises(TopicAlreadyExistsError):
        kp_admin.create_topics({name: {"num_partitions": 2, "replication_factor": 1}})
    with pytest.raises(InvalidTopicError):
        kp_admin.create_topics({"bad name": {"num_partitions": 1, "replication_factor": 1}})

    desc = {t["name"]: t for t in kp_admin.describe_topics([name, dflt])}
    assert [p["partition_index"] for p in desc[name]["partitions"]] == [0, 1]
    assert desc[name]["error_code"] == 0 and not desc[name]["is_internal"]
    assert {name, dflt} <= set(kp_admin.list_topics())

    cfg = kp_admin.describe_configs([KCR(ConfigResourceType.TOPIC, name)])
    # default filter 'modified': only non-default keys
    assert cfg == {"topic": {name: {"retention.ms": {
        "config_source": "DYNAMIC_TOPIC_CONFIG", "config_type": "LONG", "documentation": None,
        "is_sensitive": False, "read_only": False, "synonyms": [], "value": "123456"}}}}
    cfg = kp_admin.describe_configs([KCR(ConfigResourceType.TOPIC, name,
                                         ["retention.ms", "cleanup.policy"])],
                                    config_filter="all")["topic"][name]
    assert set(cfg) == {"retention.ms", "cleanup.policy"}
    assert (cfg["cleanup.policy"]["value"], cfg["cleanup.policy"]["config_source"]) == \
        ("delete", "DEFAULT_CONFIG")

    assert kp_admin.alter_configs([KCR("TOPIC", name, {"retention.ms": "999"})]) == \
        {"topic": {name: "OK"}}
    cfg = kp_admin.describe_configs([KCR(ConfigResourceType.TOPIC, name)])["topic"][name]
    assert cfg["retention.ms"]["value"] == "999"

    r = kp_admin.create_partitions({name: 4})
    assert [(x.name, x.error_code) for x in r.results] == [(name, 0)]
    wait_topic_ready(broker, name, 4)

    cl = kp_admin.describe_cluster()
    assert [(b["host"], b["port"]) for b in cl["brokers"]] == [("127.0.0.1", broker.port)]
    assert cl["controller_id"] == cl["brokers"][0]["broker_id"] and cl["cluster_id"]

    r = kp_admin.delete_topics([name, dflt])
    assert sorted((x["name"], x["error_code"]) for x in r["topics"]) == \
        sorted([(name, 0), (dflt, 0)])
    with pytest.raises(UnknownTopicOrPartitionError):
        kp_admin.delete_topics([name])
    a = admin(broker)
    wait_listed(a, name, present=False)
    wait_listed(a, dflt, present=False)
