"""Authorization with Kafka's StandardAuthorizer semantics, configured with Kafka's keys.

The broker runs ``authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer``
with a PLAINTEXT listener (User:ANONYMOUS, a super user here as it must be for Kafka's own
controller connections) and a SASL_PLAINTEXT listener with PLAIN users admin (a super user),
alice and bob. ACLs are created, described and deleted with confluent-kafka's AdminClient and
with Kafka 4.4's ``kafka-acls`` tool; alice without WRITE on a topic gets
TOPIC_AUTHORIZATION_FAILED on produce; Metadata lists only the topics a principal may describe;
the super user passes every check. Validated against Apache Kafka 4.4 first.
"""

import os
import shutil
import subprocess
import time

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation,
                                   AclPermissionType, AdminClient, ResourcePatternType,
                                   ResourceType)

from iutil import OP_TIMEOUT, create_topic, uniq

AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              'username="admin" password="admin-pw" user_admin="admin-pw" '
              'user_alice="alice-pw" user_bob="bob-pw";')
BROKER_LISTENERS = {"SASL_PLAINTEXT": "SASL_PLAINTEXT"}
BROKER_CONFIG = {
    "num.partitions": "1",
    "authorizer.class.name": AUTHORIZER,
    "super.users": "User:ANONYMOUS;User:admin",
    "sasl.enabled.mechanisms": "PLAIN",
    "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
}
TOOL_TIMEOUT = 120
ACL_COMMAND = "org.apache.kafka.tools.AclCommand"


def sasl_conf(broker, user, **extra):
    conf = {
        "bootstrap.servers": broker.listener_bootstrap("SASL_PLAINTEXT"),
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": user,
        "sasl.password": f"{user}-pw",
        "socket.timeout.ms": 5000,
        "log_level": 2,
    }
    conf.update(extra)
    return conf


def admin(broker):
    return AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 2})


def topic_acl(name, principal, operation, permission=AclPermissionType.ALLOW,
              pattern=ResourcePatternType.LITERAL):
    return AclBinding(ResourceType.TOPIC, name, pattern, principal, "*", operation, permission)


def create_acls(broker, bindings):
    a = admin(broker)  # keep a reference: a collected client fails its futures
    futures = a.create_acls(bindings)
    for f in futures.values():
        f.result(timeout=OP_TIMEOUT)


def describe(broker, filt):
    a = admin(broker)
    return a.describe_acls(filt).result(timeout=OP_TIMEOUT)


def delete(broker, filt):
    a = admin(broker)
    return a.delete_acls([filt])[filt].result(timeout=OP_TIMEOUT)


def wait_for(condition, what):
    """Kafka publishes ACL changes through its metadata log: the broker sees them shortly
    after CreateAcls answers."""
    deadline = time.monotonic() + OP_TIMEOUT
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.3)
    pytest.fail(f"never true: {what}")


def produce_error(broker, user, topic):
    """The error of one record produced as `user` (None when delivered)."""
    outcome = []
    p = Producer(sasl_conf(broker, user, **{"message.timeout.ms": 10000, "retries": 0}))
    p.produce(topic, b"v", on_delivery=lambda err, msg: outcome.append(err))
    p.flush(15)
    assert outcome, "no delivery report"
    return outcome[0]


def visible_topics(broker, user):
    a = AdminClient(sasl_conf(broker, user))
    md = a.list_topics(timeout=OP_TIMEOUT)
    return {t for t in md.topics if not t.startswith("__")}


def test_admin_client_creates_describes_and_deletes_acls(broker):
    topic = uniq("acl-admin")
    create_topic(broker, topic)
    binding = topic_acl(topic, "User:alice", AclOperation.READ)
    prefixed = topic_acl(topic[:6], "User:bob", AclOperation.WRITE,
                         AclPermissionType.DENY, ResourcePatternType.PREFIXED)
    create_acls(broker, [binding, prefixed])
    # Creating an existing ACL is no error.
    create_acls(broker, [binding])
    by_name = AclBindingFilter(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL,
                               None, None, AclOperation.ANY, AclPermissionType.ANY)
    assert describe(broker, by_name) == [binding]
    matching = AclBindingFilter(ResourceType.TOPIC, topic, ResourcePatternType.MATCH,
                                None, None, AclOperation.ANY, AclPermissionType.ANY)
    assert sorted(map(str, describe(broker, matching))) == sorted(map(str, [binding, prefixed]))
    deleted = delete(broker, by_name)
    assert deleted == [binding]
    assert describe(broker, by_name) == []
    delete(broker, matching)
    assert describe(broker, matching) == []


def test_invalid_acls_are_refused(broker):
    bad = AclBinding(ResourceType.BROKER, "not-the-cluster", ResourcePatternType.LITERAL,
                     "User:alice", "*", AclOperation.ALTER, AclPermissionType.ALLOW)
    a = admin(broker)
    futures = a.create_acls([bad])
    with pytest.raises(KafkaException) as e:
        futures[bad].result(timeout=OP_TIMEOUT)
    assert e.value.args[0].code() == KafkaError.INVALID_REQUEST


def test_produce_without_write_is_topic_authorization_failed(broker):
    allowed, denied = uniq("acl-w"), uniq("acl-x")
    for t in (allowed, denied):
        create_topic(broker, t)
    create_acls(broker, [topic_acl(allowed, "User:alice", AclOperation.WRITE)])
    wait_for(lambda: produce_error(broker, "alice", allowed) is None, "alice may write")
    err = produce_error(broker, "alice", denied)
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, err


def test_metadata_lists_only_described_topics_and_super_users_see_all(broker):
    mine, other = uniq("acl-md"), uniq("acl-hidden")
    for t in (mine, other):
        create_topic(broker, t)
    create_acls(broker, [topic_acl(mine, "User:bob", AclOperation.READ)])
    wait_for(lambda: mine in visible_topics(broker, "bob"), "bob sees his topic")
    seen = visible_topics(broker, "bob")
    assert mine in seen and other not in seen
    everything = visible_topics(broker, "admin")
    assert {mine, other} <= everything
    assert produce_error(broker, "admin", other) is None


@pytest.fixture(scope="module")
def acl_tool():
    libs = os.environ.get("KAFKA_LIBS")
    if not libs:
        from conftest import _kafka_libs
        libs = _kafka_libs()
    java = shutil.which("java") or "java"

    def run(*args):
        cmd = [java, "-Xms64m", "-Xmx512m", "-XX:TieredStopAtLevel=1",
               "-cp", os.path.join(libs, "*"), ACL_COMMAND, *args]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=TOOL_TIMEOUT,
                           stdin=subprocess.DEVNULL)
        assert p.returncode == 0, (f"kafka-acls {args} exited {p.returncode}\n"
                                   f"stdout:\n{p.stdout[-4000:]}\nstderr:\n{p.stderr[-4000:]}")
        return p.stdout

    return run


def test_kafka_acls_tool_adds_lists_and_removes(broker, acl_tool):
    topic = uniq("acl-tool")
    group = uniq("acl-group")
    create_topic(broker, topic)
    acl_tool("--bootstrap-server", broker.bootstrap, "--add",
             "--allow-principal", "User:carol", "--operation", "Read",
             "--topic", topic, "--group", group)
    listed = acl_tool("--bootstrap-server", broker.bootstrap, "--list", "--topic", topic)
    assert "User:carol" in listed and "READ" in listed, listed
    listed = acl_tool("--bootstrap-server", broker.bootstrap, "--list",
                      "--principal", "User:carol")
    assert topic in listed and group in listed, listed
    acl_tool("--bootstrap-server", broker.bootstrap, "--remove", "--force",
             "--allow-principal", "User:carol", "--operation", "Read", "--topic", topic)
    listed = acl_tool("--bootstrap-server", broker.bootstrap, "--list", "--topic", topic)
    assert "User:carol" not in listed, listed
    listed = acl_tool("--bootstrap-server", broker.bootstrap, "--list", "--group", group)
    assert "User:carol" in listed, listed


def test_kafka_acls_tool_grants_two_phase_commit_on_a_transactional_id(broker, acl_tool):
    """KIP-939's TWO_PHASE_COMMIT operation (code 15) on a transactional id: added, listed
    and removed with Kafka's own tool, which names it TwoPhaseCommit."""
    tid = uniq("acl-2pc")
    acl_tool("--bootstrap-server", broker.bootstrap, "--add",
             "--allow-principal", "User:carol", "--operation", "TwoPhaseCommit",
             "--operation", "Write", "--transactional-id", tid)
    listed = acl_tool("--bootstrap-server", broker.bootstrap, "--list",
                      "--transactional-id", tid)
    assert "User:carol" in listed and "TWO_PHASE_COMMIT" in listed, listed
    assert "WRITE" in listed, listed
    acl_tool("--bootstrap-server", broker.bootstrap, "--remove", "--force",
             "--allow-principal", "User:carol", "--operation", "TwoPhaseCommit",
             "--transactional-id", tid)
    listed = acl_tool("--bootstrap-server", broker.bootstrap, "--list",
                      "--transactional-id", tid)
    assert "TWO_PHASE_COMMIT" not in listed and "WRITE" in listed, listed
