"""Group configs (ConfigResource GROUP) through confluent-kafka's AdminClient:
share-group keys set before the group exists, described with their source,
refused with INVALID_CONFIG when unknown or out of the broker's bounds, kept
across a broker restart. Every assertion also holds against Apache Kafka
(INTEROP_TARGET=kafka)."""

from confluent_kafka import KafkaException
from confluent_kafka.admin import (AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource,
                                   ResourceType)

from iutil import OP_TIMEOUT, admin, uniq

INVALID_CONFIG = 40


def group_resource(group, entries=None):
    return ConfigResource(ResourceType.GROUP, group, incremental_configs=entries)


def describe(a, group):
    (fut,) = a.describe_configs([group_resource(group)], request_timeout=OP_TIMEOUT).values()
    return fut.result(timeout=OP_TIMEOUT)


def alter_key(a, group, key, value):
    entry = ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)
    (fut,) = a.incremental_alter_configs([group_resource(group, [entry])],
                                         request_timeout=OP_TIMEOUT).values()
    try:
        fut.result(timeout=OP_TIMEOUT)
        return None
    except KafkaException as e:
        return e.args[0].code()


def test_share_group_configs(broker):
    a = admin(broker)
    group = uniq("cfg-group")
    before = describe(a, group)
    assert before["share.record.lock.duration.ms"].value == "30000"
    assert before["share.record.lock.duration.ms"].source == ConfigSource.DEFAULT_CONFIG.value
    assert before["share.auto.offset.reset"].value == "latest"
    assert before["share.isolation.level"].value == "read_uncommitted"

    assert alter_key(a, group, "share.delivery.count.limit", "3") is None
    assert alter_key(a, group, "share.isolation.level", "read_committed") is None
    assert alter_key(a, group, "share.auto.offset.reset", "earliest") is None
    after = describe(a, group)
    assert after["share.delivery.count.limit"].value == "3"
    assert after["share.delivery.count.limit"].source == ConfigSource.GROUP_CONFIG.value
    assert after["share.isolation.level"].value == "read_committed"
    assert after["share.auto.offset.reset"].value == "earliest"

    assert alter_key(a, group, "no.such.group.config", "1") == INVALID_CONFIG
    assert alter_key(a, group, "share.record.lock.duration.ms", "1000") == INVALID_CONFIG
    assert alter_key(a, group, "share.delivery.count.limit", "11") == INVALID_CONFIG
    assert alter_key(a, group, "share.isolation.level", "serializable") == INVALID_CONFIG
    assert alter_key(a, group, "share.auto.offset.reset", "none") == INVALID_CONFIG
    assert describe(a, group)["share.delivery.count.limit"].value == "3"

    broker.restart()
    a = admin(broker)
    kept = describe(a, group)
    assert kept["share.delivery.count.limit"].value == "3"
    assert kept["share.isolation.level"].value == "read_committed"
