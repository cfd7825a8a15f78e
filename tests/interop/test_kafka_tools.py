"""Apache Kafka's own command-line tools (org.apache.kafka:kafka-tools 4.4) against one node.

Every tool command that applies to a single broker is run as the shell scripts run it,
``java -cp "$KAFKA_LIBS/*" <main class> ...``, bounded by TOOL_TIMEOUT, and each check looks at
the exit code AND the printed content: kafka-topics (create / list / describe / alter
partitions / delete), kafka-configs (topic, broker, group), kafka-consumer-groups (list /
describe / members / state / reset-offsets / delete-offsets / delete), kafka-share-groups
(list / describe / reset-offsets / delete-offsets / delete), kafka-features (describe /
upgrade / downgrade / disable share.version, dry runs, refusals), kafka-transactions (list /
describe / describe-producers / find-hanging), kafka-log-dirs, AlterReplicaLogDirs (raw),
kafka-delete-records, kafka-get-offsets, kafka-broker-api-versions, kafka-cluster (cluster-id)
and the three perf tools with small record counts. Validated against Kafka 4.4 first.
"""

import json
import os
import re
import shutil
import subprocess
import time

import pytest
from confluent_kafka import Consumer, Producer

import kwire
from conftest import TARGET
from iutil import OP_TIMEOUT, create_topic, uniq

BROKER_CONFIG = {"num.partitions": "1"}
TOOL_TIMEOUT = 120  # seconds for one JVM tool run (start-up included)

_LOG4J2 = """\
status = warn
appender.err.type = Console
appender.err.name = ERR
appender.err.target = SYSTEM_ERR
appender.err.layout.type = PatternLayout
appender.err.layout.pattern = %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.err.ref = ERR
"""


@pytest.fixture(scope="module")
def tools(broker, tmp_path_factory):
    """run(main_class, *args) -> CompletedProcess, bootstrap filled in by the caller."""
    libs = os.environ.get("KAFKA_LIBS")
    if not libs:
        from conftest import _kafka_libs
        libs = _kafka_libs()
    conf = tmp_path_factory.mktemp("tools")
    log4j = conf / "log4j2.properties"
    log4j.write_text(_LOG4J2)
    java = shutil.which("java") or "java"

    def run(main, *args, ok=True):
        cmd = [java, "-Xms64m", "-Xmx512m", "-XX:TieredStopAtLevel=1",
               f"-Dlog4j2.configurationFile={log4j}", "-cp", os.path.join(libs, "*"),
               main, *[str(a) for a in args]]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=TOOL_TIMEOUT,
                           stdin=subprocess.DEVNULL)
        if ok:
            assert p.returncode == 0, (f"{main} {args} exited {p.returncode}\n"
                                       f"stdout:\n{p.stdout[-4000:]}\nstderr:\n{p.stderr[-4000:]}")
        return p

    run.dir = conf
    return run


TOPICS = "org.apache.kafka.tools.TopicCommand"
CONFIGS = "org.apache.kafka.tools.ConfigCommand"
GROUPS = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
SHARE_GROUPS = "org.apache.kafka.tools.consumer.group.ShareGroupCommand"
FEATURES = "org.apache.kafka.tools.FeatureCommand"
TRANSACTIONS = "org.apache.kafka.tools.TransactionsCommand"
LOG_DIRS = "org.apache.kafka.tools.LogDirsCommand"
DELETE_RECORDS = "org.apache.kafka.tools.DeleteRecordsCommand"
GET_OFFSETS = "org.apache.kafka.tools.GetOffsetShell"
PRODUCER_PERF = "org.apache.kafka.tools.ProducerPerformance"
CONSUMER_PERF = "org.apache.kafka.tools.ConsumerPerformance"
SHARE_CONSUMER_PERF = "org.apache.kafka.tools.ShareConsumerPerformance"
BROKER_API_VERSIONS = "org.apache.kafka.tools.BrokerApiVersionsCommand"
CLUSTER = "org.apache.kafka.tools.ClusterTool"


def produce(broker, topic, n, partition=0):
    p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
    for i in range(n):
        p.produce(topic, value=f"v{i}".encode(), key=f"k{i}".encode(), partition=partition)
    assert p.flush(OP_TIMEOUT) == 0


def until(fn, what, timeout=OP_TIMEOUT):
    """Polls fn() until it returns a truthy value (tool output that settles after a change)."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(0.5)
    raise AssertionError(f"{what}: last result {last!r}")


def table_rows(out, first=("GROUP", "TOPIC")):
    """Whitespace-separated tables printed by the tools, as a list of dicts (the header line
    is the first one starting with a word in `first`)."""
    lines = [ln for ln in out.splitlines() if ln.strip()]
    for i, ln in enumerate(lines):
        if ln.split()[0] in first:
            header = ln.split()
            return [dict(zip(header, row.split())) for row in lines[i + 1:]
                    if len(row.split()) == len(header)]
    return []


def perf_row(out):
    """The consumer perf tools' CSV summary: header line (start.time, ...) and one row."""
    lines = [ln for ln in out.splitlines() if ln.strip()]
    at = next(i for i, ln in enumerate(lines) if ln.startswith("start.time"))
    header = [h.strip() for h in lines[at].split(",")]
    assert "data.consumed.in.MB" in header and "nMsg.sec" in header, out
    return dict(zip(header, [f.strip() for f in lines[at + 1].split(",")]))


# ------------------------------------------------------------------ kafka-topics
def test_topics_create_list_describe_alter_delete(broker, tools):
    b = ["--bootstrap-server", broker.bootstrap]
    t = uniq("tool-topic")
    out = tools(TOPICS, *b, "--create", "--topic", t, "--partitions", 2,
                "--replication-factor", 1, "--config", "retention.ms=3600000").stdout
    assert f"Created topic {t}." in out
    assert t in tools(TOPICS, *b, "--list").stdout.split()
    desc = tools(TOPICS, *b, "--describe", "--topic", t).stdout
    assert re.search(rf"Topic: {t}\s+TopicId: \S+\s+PartitionCount: 2\s+"
                     r"ReplicationFactor: 1", desc), desc
    assert "retention.ms=3600000" in desc
    for p in (0, 1):
        assert re.search(rf"Topic: {t}\s+Partition: {p}\s+Leader: 1\s+Replicas: 1\s+Isr: 1",
                         desc), desc
    # creating it again fails with Kafka's message
    again = tools(TOPICS, *b, "--create", "--topic", t, "--partitions", 1, ok=False)
    assert again.returncode != 0
    assert "already exists" in again.stdout + again.stderr
    tools(TOPICS, *b, "--alter", "--topic", t, "--partitions", 3)
    until(lambda: "PartitionCount: 3" in tools(TOPICS, *b, "--describe", "--topic", t).stdout,
          "partitions grown to 3")
    tools(TOPICS, *b, "--delete", "--topic", t)
    until(lambda: t not in tools(TOPICS, *b, "--list").stdout.split(), "topic deleted")


# ------------------------------------------------------------------ kafka-configs
def test_configs_topic_broker_group(broker, tools):
    b = ["--bootstrap-server", broker.bootstrap]
    t = create_topic(broker, uniq("tool-configs"))
    out = tools(CONFIGS, *b, "--alter", "--entity-type", "topics", "--entity-name", t,
                "--add-config", "retention.ms=7200000,max.message.bytes=2000000").stdout
    assert f"Completed updating config for topic {t}." in out
    desc = tools(CONFIGS, *b, "--describe", "--entity-type", "topics", "--entity-name", t).stdout
    assert f"Dynamic configs for topic {t} are:" in desc
    assert ("retention.ms=7200000 sensitive=false "
            "synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=7200000") in desc, desc
    assert "max.message.bytes=2000000" in desc
    tools(CONFIGS, *b, "--alter", "--entity-type", "topics", "--entity-name", t,
          "--delete-config", "max.message.bytes")
    desc = tools(CONFIGS, *b, "--describe", "--entity-type", "topics", "--entity-name", t).stdout
    assert "max.message.bytes" not in desc and "retention.ms=7200000" in desc
    # --all lists the defaults too
    full = tools(CONFIGS, *b, "--describe", "--all", "--entity-type", "topics",
                 "--entity-name", t).stdout
    assert f"All configs for topic {t} are:" in full
    assert "cleanup.policy=delete" in full and "segment.bytes=1073741824" in full
    bad = tools(CONFIGS, *b, "--alter", "--entity-type", "topics", "--entity-name", t,
                "--add-config", "no.such.key=1", ok=False)
    assert bad.returncode != 0

    # broker: a cluster-wide dynamic default, described and removed
    out = tools(CONFIGS, *b, "--alter", "--entity-type", "brokers", "--entity-default",
                "--add-config", "log.retention.ms=86400000").stdout
    assert "Completed updating default config for brokers in the cluster." in out
    desc = tools(CONFIGS, *b, "--describe", "--entity-type", "brokers", "--entity-default").stdout
    assert "Default configs for brokers in the cluster are:" in desc
    assert "log.retention.ms=86400000" in desc
    tools(CONFIGS, *b, "--alter", "--entity-type", "brokers", "--entity-default",
          "--delete-config", "log.retention.ms")
    desc = tools(CONFIGS, *b, "--describe", "--entity-type", "brokers", "--entity-name", 1).stdout
    assert "Dynamic configs for broker 1 are:" in desc
    full = tools(CONFIGS, *b, "--describe", "--all", "--entity-type", "brokers",
                 "--entity-name", 1).stdout
    assert "All configs for broker 1 are:" in full
    assert re.search(r"^\s+num\.partitions=1 sensitive=false", full, re.M), full

    # group
    g = uniq("tool-group-config")
    out = tools(CONFIGS, *b, "--alter", "--entity-type", "groups", "--entity-name", g,
                "--add-config", "share.auto.offset.reset=earliest").stdout
    assert f"Completed updating config for group {g}." in out
    desc = tools(CONFIGS, *b, "--describe", "--entity-type", "groups", "--entity-name", g).stdout
    assert f"Dynamic configs for group {g} are:" in desc
    assert "share.auto.offset.reset=earliest" in desc


# ------------------------------------------------------------ kafka-consumer-groups
def test_consumer_groups_list_describe_reset_delete(broker, tools):
    b = ["--bootstrap-server", broker.bootstrap]
    t = create_topic(broker, uniq("tool-cg"))
    produce(broker, t, 10)
    g = uniq("tool-cg")
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": g,
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        c.subscribe([t])
        got = 0
        deadline = time.monotonic() + 60
        while got < 6 and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and not m.error():
                got += 1
                if got == 6:
                    c.commit(message=m, asynchronous=False)
        assert got == 6
        # the live member, as DescribeGroups reports it
        members = table_rows(tools(GROUPS, *b, "--describe", "--group", g, "--members",
                                   "--verbose").stdout)
        assert len(members) == 1, members
        m = members[0]
        assert (m["GROUP"], m["HOST"], m["CLIENT-ID"], m["#PARTITIONS"]) == (
            g, "/127.0.0.1", "rdkafka", "1"), members
        assert m["CURRENT-ASSIGNMENT"] == f"{t}:0", members
        state = tools(GROUPS, *b, "--describe", "--group", g, "--state").stdout
        assert re.search(rf"^{re.escape(g)}\s+\S+\s+\(1\)\s+range\s+Stable\s+1\s*$",
                         state, re.M), state
    finally:
        c.close()
    assert g in tools(GROUPS, *b, "--list").stdout.split()
    rows = until(lambda: table_rows(tools(GROUPS, *b, "--describe", "--group", g).stdout),
                 "describe rows")
    assert len(rows) == 1, rows
    assert rows[0]["GROUP"] == g and rows[0]["TOPIC"] == t and rows[0]["PARTITION"] == "0"
    row = rows[0]
    assert (row["CURRENT-OFFSET"], row["LOG-END-OFFSET"], row["LAG"]) == ("6", "10", "4"), rows
    state = tools(GROUPS, *b, "--describe", "--group", g, "--state").stdout
    assert "Empty" in state, state
    # dry run, then execute
    plan = table_rows(tools(GROUPS, *b, "--reset-offsets", "--group", g, "--topic", t,
                            "--to-earliest", "--dry-run").stdout)
    assert plan and plan[0]["NEW-OFFSET"] == "0", plan
    rows = table_rows(tools(GROUPS, *b, "--describe", "--group", g).stdout)
    assert rows[0]["CURRENT-OFFSET"] == "6"
    done = table_rows(tools(GROUPS, *b, "--reset-offsets", "--group", g, "--topic", f"{t}:0",
                            "--to-offset", 3, "--execute").stdout)
    assert done and done[0]["NEW-OFFSET"] == "3", done
    rows = table_rows(tools(GROUPS, *b, "--describe", "--group", g).stdout)
    assert (rows[0]["CURRENT-OFFSET"], rows[0]["LAG"]) == ("3", "7"), rows
    listed = tools(GROUPS, *b, "--list", "--state").stdout
    assert re.search(rf"^{re.escape(g)}\s+Empty\s*$", listed, re.M), listed
    listed = tools(GROUPS, *b, "--list", "--type").stdout
    assert re.search(rf"^{re.escape(g)}\s+Classic\s*$", listed, re.M), listed
    out = tools(GROUPS, *b, "--delete-offsets", "--group", g, "--topic", t).stdout
    assert f"Request succeeded for deleting offsets from group {g}." in out, out
    rows = table_rows(out, first=("TOPIC",))
    assert rows == [{"TOPIC": t, "PARTITION": "0", "STATUS": "Successful"}], out
    out = tools(GROUPS, *b, "--delete", "--group", g).stdout
    assert f"Deletion of requested consumer groups ('{g}') was successful." in out
    assert g not in tools(GROUPS, *b, "--list").stdout.split()


# --------------------------------------------------------------- kafka-share-groups
def test_share_groups_and_share_consumer_perf(broker, tools):
    b = ["--bootstrap-server", broker.bootstrap]
    t = create_topic(broker, uniq("tool-share"))
    g = uniq("tool-share")
    tools(CONFIGS, *b, "--alter", "--entity-type", "groups", "--entity-name", g,
          "--add-config", "share.auto.offset.reset=earliest")
    produce(broker, t, 50)
    perf = tools(SHARE_CONSUMER_PERF, *b, "--topic", t, "--group", g, "--num-records", 50,
                 "--timeout", 60000).stdout
    row = perf_row(perf)
    assert row["data.consumed.in.nMsg"] == "50", perf
    assert g in tools(SHARE_GROUPS, *b, "--list").stdout.split()
    rows = until(lambda: table_rows(tools(SHARE_GROUPS, *b, "--describe", "--group", g).stdout),
                 "share group describe rows")
    assert rows[0]["GROUP"] == g and rows[0]["TOPIC"] == t and rows[0]["PARTITION"] == "0", rows
    # Kafka 4.4 was seen to show 0 here right after the perf consumer closed, so only the
    # range is checked; the resets below pin the value down.
    assert 0 <= int(rows[0]["START-OFFSET"]) <= 50, rows
    state = tools(SHARE_GROUPS, *b, "--describe", "--group", g, "--state").stdout
    assert "Empty" in state, state
    for to, expect in (("--to-latest", "50"), ("--to-earliest", "0")):
        done = tools(SHARE_GROUPS, *b, "--reset-offsets", "--group", g, "--topic", t,
                     to, "--execute").stdout
        rows = table_rows(done)
        assert rows and rows[0]["NEW-OFFSET"] == expect, done
        rows = table_rows(tools(SHARE_GROUPS, *b, "--describe", "--group", g).stdout)
        assert rows[0]["START-OFFSET"] == expect, rows
    out = tools(SHARE_GROUPS, *b, "--delete-offsets", "--group", g, "--topic", t).stdout
    assert table_rows(out, first=("TOPIC",)) == [{"TOPIC": t, "STATUS": "Successful"}], out
    out = tools(SHARE_GROUPS, *b, "--describe", "--group", g).stdout
    assert f"Share group '{g}' has no offset information." in out, out
    out = tools(SHARE_GROUPS, *b, "--delete", "--group", g).stdout
    assert f"Deletion of requested share groups ('{g}') was successful." in out
    assert g not in tools(SHARE_GROUPS, *b, "--list").stdout.split()


# ------------------------------------------------------------------ kafka-features
def test_features_describe_downgrade_upgrade(make_broker, tools):
    """kafka-features describe / upgrade / downgrade / disable of share.version, with dry runs
    and the refusals, and what ApiVersions then advertises."""
    fresh = make_broker(BROKER_CONFIG)  # share.version changes must not disturb other tests
    b = ["--bootstrap-server", fresh.bootstrap]
    # Kafka 4.4's newest share.version is 2 (dead-letter queues, KIP-1191); Shoal's is 3
    # (transactional acknowledgements, KIP-1289, numbered as Kafka numbers them; Shoal has no
    # dead-letter queues and its level 2 behaves as 1, decision 0012). Both finalize the newest
    # level on a new data directory.
    top = 2 if TARGET == "kafka" else 3

    def levels():
        out = tools(FEATURES, *b, "describe").stdout
        found = {}
        for ln in out.splitlines():
            m = re.match(r"Feature: (\S+)\s+SupportedMinVersion: (\S+)\s+SupportedMaxVersion: (\S+)"
                         r"\s+FinalizedVersionLevel: (\S+)\s+Epoch: (\d+)", ln)
            if m:
                found[m.group(1)] = m.groups()[1:]
        return found, out

    def share_level():
        return levels()[0]["share.version"][2]

    def txn_share_ack_advertised():
        # TxnShareAcknowledge (api key 95) exists on Shoal only, from share.version 3.
        return 95 in kwire.api_versions(fresh.bootstrap)[0]

    found, out = levels()
    for name in ("metadata.version", "share.version", "transaction.version"):
        assert name in found, out
    assert found["metadata.version"][1:3] == ("4.4-IV2", "4.4-IV2"), out
    assert found["transaction.version"][2] == "2", out
    assert found["share.version"][:3] == ("0", str(top), str(top)), out
    assert txn_share_ack_advertised() == (TARGET != "kafka")

    # Down to 1 (share groups only): TxnShareAcknowledge is no longer advertised.
    out = tools(FEATURES, *b, "downgrade", "--feature", "share.version=1").stdout
    assert "share.version was downgraded to 1." in out, out
    until(lambda: share_level() == "1", "share.version finalized at 1")
    assert not txn_share_ack_advertised()
    # A downgrade can not raise a level; an upgrade past the newest level is refused.
    bad = tools(FEATURES, *b, "downgrade", "--feature", f"share.version={top}", ok=False)
    assert bad.returncode != 0 and f"Could not downgrade share.version to {top}." in bad.stdout, (
        bad.stdout, bad.stderr)
    bad = tools(FEATURES, *b, "upgrade", "--feature", f"share.version={top + 1}", ok=False)
    assert bad.returncode != 0 and f"Could not upgrade share.version to {top + 1}." in bad.stdout, (
        bad.stdout, bad.stderr)
    bad = tools(FEATURES, *b, "upgrade", "--feature", "share.version=99", ok=False)
    assert bad.returncode != 0
    # A dry run changes nothing.
    out = tools(FEATURES, *b, "upgrade", "--feature", f"share.version={top}", "--dry-run").stdout
    assert f"share.version can be upgraded to {top}." in out, out
    assert share_level() == "1"
    # Back up to the newest level.
    out = tools(FEATURES, *b, "upgrade", "--feature", f"share.version={top}").stdout
    assert f"share.version was upgraded to {top}." in out, out
    until(lambda: share_level() == str(top), f"share.version finalized at {top}")
    assert txn_share_ack_advertised() == (TARGET != "kafka")
    # Disable (level 0), unsafe downgrade, and up again.
    out = tools(FEATURES, *b, "disable", "--feature", "share.version", "--dry-run").stdout
    assert "share.version can be disabled." in out, out
    out = tools(FEATURES, *b, "disable", "--feature", "share.version").stdout
    assert "share.version was disabled." in out, out
    until(lambda: share_level() == "0", "share.version finalized at 0")
    assert not txn_share_ack_advertised()
    # Level 0 is no finalized level: ApiVersions leaves the feature out of its finalized list.
    assert "share.version" not in kwire.api_versions(fresh.bootstrap, version=4)[2]
    out = tools(FEATURES, *b, "upgrade", "--feature", "share.version=1").stdout
    assert "share.version was upgraded to 1." in out, out
    until(lambda: share_level() == "1", "share.version finalized at 1")
    out = tools(FEATURES, *b, "downgrade", "--unsafe", "--feature", "share.version=0").stdout
    assert "share.version was downgraded to 0." in out, out
    until(lambda: share_level() == "0", "share.version finalized at 0")
    out = tools(FEATURES, *b, "upgrade", "--feature", f"share.version={top}").stdout
    assert f"share.version was upgraded to {top}." in out, out
    until(lambda: share_level() == str(top), f"share.version finalized at {top}")

    out = tools(FEATURES, *b, "downgrade", "--feature", "transaction.version=1", "--dry-run").stdout
    assert "transaction.version can be downgraded to 1." in out, out
    assert levels()[0]["transaction.version"][2] == "2"


# -------------------------------------------------------------- kafka-transactions
def test_transactions_list_describe_describe_producers(broker, tools):
    b = ["--bootstrap-server", broker.bootstrap]
    t = create_topic(broker, uniq("tool-txn"))
    txn_id = uniq("tool-txn")
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": txn_id})
    p.init_transactions(OP_TIMEOUT)
    p.begin_transaction()
    p.produce(t, value=b"open", partition=0)
    assert p.flush(OP_TIMEOUT) == 0
    try:
        out = tools(TRANSACTIONS, *b, "list").stdout
        assert re.search(rf"^{re.escape(txn_id)}\s+1\s+\d+\s+Ongoing\s*$", out, re.M), out
        desc = tools(TRANSACTIONS, *b, "describe", "--transactional-id", txn_id).stdout
        assert re.search(r"CoordinatorId\s+TransactionalId\s+ProducerId\s+ProducerEpoch\s+"
                         r"TransactionState", desc), desc
        assert re.search(rf"\b1\s+{re.escape(txn_id)}\s+\d+\s+\d+\s+Ongoing\s", desc), desc
        assert f"{t}-0" in desc, desc
        prod = tools(TRANSACTIONS, *b, "describe-producers", "--topic", t, "--partition", 0).stdout
        assert re.search(r"ProducerId\s+ProducerEpoch\s+LatestCoordinatorEpoch\s+LastSequence\s+"
                         r"LastTimestamp\s+CurrentTransactionStartOffset", prod), prod
        assert re.search(r"^\d+\s+\d+\s+\S+\s+0\s+\d+\s+0\s*$", prod, re.M), prod
        # open for seconds only: not hanging (Kafka's threshold is transaction.max.timeout.ms)
        hanging = tools(TRANSACTIONS, *b, "find-hanging", "--broker-id", 1).stdout
        lines = [ln for ln in hanging.splitlines() if ln.strip()]
        assert lines[0].split("\t")[:3] == ["Topic", "Partition", "ProducerId"], hanging
        assert len(lines) == 1, hanging
    finally:
        p.commit_transaction(OP_TIMEOUT)
    until(lambda: re.search(rf"^{re.escape(txn_id)}\s+1\s+\d+\s+CompleteCommit\s*$",
                            tools(TRANSACTIONS, *b, "list").stdout, re.M),
          "transaction completed")


# ---------------------------------- kafka-log-dirs, kafka-delete-records, kafka-get-offsets
def test_log_dirs_delete_records_get_offsets(broker, tools):
    b = ["--bootstrap-server", broker.bootstrap]
    t = create_topic(broker, uniq("tool-logdirs"), partitions=2)
    produce(broker, t, 10, partition=0)
    out = tools(LOG_DIRS, *b, "--describe", "--topic-list", t).stdout
    doc = json.loads(out.strip().splitlines()[-1])
    assert doc["version"] == 1 and len(doc["brokers"]) == 1 and doc["brokers"][0]["broker"] == 1
    dirs = doc["brokers"][0]["logDirs"]
    assert len(dirs) == 1 and dirs[0]["error"] is None
    assert os.path.realpath(dirs[0]["logDir"]) == os.path.realpath(broker.data_dir), dirs
    parts = {p["partition"]: p for p in dirs[0]["partitions"]}
    assert set(parts) == {f"{t}-0", f"{t}-1"}, parts
    assert parts[f"{t}-0"]["size"] > 0 and parts[f"{t}-1"]["size"] == 0, parts
    assert all(p["offsetLag"] == 0 and p["isFuture"] is False for p in parts.values())

    def offsets(*extra):
        """GetOffsetShell prints topic:partition:offset lines."""
        res = {}
        for ln in tools(GET_OFFSETS, *b, "--topic", t, *extra).stdout.split():
            if ln.startswith(t + ":"):
                _, part, off = ln.rsplit(":", 2)
                res[part] = off
        return res

    assert offsets() == {"0": "10", "1": "0"}
    assert offsets("--time", -2) == {"0": "0", "1": "0"}
    spec = tools.dir / "delete-records.json"
    spec.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": t, "partition": 0, "offset": 4}]}))
    out = tools(DELETE_RECORDS, *b, "--offset-json-file", spec).stdout
    assert re.search(rf"partition: {re.escape(t)}-0\s+low_watermark: 4", out), out
    assert offsets("--time", "earliest") == {"0": "4", "1": "0"}
    assert offsets("--partitions", 0) == {"0": "10"}


def test_alter_replica_log_dirs_on_a_single_log_dir(broker, tools):
    """AlterReplicaLogDirs (what kafka-reassign-partitions sends for log_dirs), raw v2: the
    directory DescribeLogDirs reports is where every replica already is (0, or 3 for an unknown
    partition); any other path, the same one with a trailing slash included, gets 57
    LOG_DIR_NOT_FOUND for every partition, known or not."""
    b = ["--bootstrap-server", broker.bootstrap]
    t = create_topic(broker, uniq("tool-arld"), partitions=2)
    out = tools(LOG_DIRS, *b, "--describe", "--topic-list", t).stdout
    log_dir = json.loads(out.strip().splitlines()[-1])["brokers"][0]["logDirs"][0]["logDir"]
    assert kwire.alter_replica_log_dirs(broker.bootstrap, log_dir, t, [0, 1, 9]) == {
        (t, 0): 0, (t, 1): 0, (t, 9): 3}
    assert kwire.alter_replica_log_dirs(broker.bootstrap, log_dir, "no-such-topic", [0]) == {
        ("no-such-topic", 0): 3}
    for other in ("/nonexistent", log_dir + "/"):
        assert kwire.alter_replica_log_dirs(broker.bootstrap, other, t, [0]) == {(t, 0): 57}
        assert kwire.alter_replica_log_dirs(broker.bootstrap, other, "no-such-topic", [0]) == {
            ("no-such-topic", 0): 57}


# -------------------------------------------------------------------- perf tools
def test_producer_and_consumer_perf(broker, tools):
    b = ["--bootstrap-server", broker.bootstrap]
    t = create_topic(broker, uniq("tool-perf"))
    out = tools(PRODUCER_PERF, "--topic", t, "--num-records", 500, "--record-size", 100,
                "--throughput", -1, "--producer-props", f"bootstrap.servers={broker.bootstrap}",
                "acks=all").stdout
    assert re.search(r"^500 records sent, [\d.]+ records/sec", out, re.M), out
    out = tools(CONSUMER_PERF, *b, "--topic", t, "--num-records", 500, "--timeout", 60000).stdout
    row = perf_row(out)
    assert row["data.consumed.in.nMsg"] == "500", out


# ------------------------------------------- kafka-broker-api-versions, kafka-cluster
def test_broker_api_versions_and_cluster_id(broker, tools):
    """kafka-broker-api-versions prints, for every api key the client knows, the broker's range
    and the version the 4.4 client would use ("usable"); every API the broker lists must be
    usable by the Kafka 4.4 client."""
    b = ["--bootstrap-server", broker.bootstrap]
    out = tools(BROKER_API_VERSIONS, *b).stdout
    assert re.search(r"^127\.0\.0\.1:\d+ \(id: 1 rack: null", out, re.M), out
    lines = re.findall(r"^\s+([A-Za-z]+)\((\d+)\): (.+?),?$", out, re.M)
    by_key = {int(k): (name, rng) for name, k, rng in lines}
    for key, name in ((0, "Produce"), (1, "Fetch"), (3, "Metadata"), (18, "ApiVersions"),
                      (22, "InitProducerId"), (78, "ShareFetch")):
        assert by_key[key][0] == name, by_key.get(key)
        assert re.match(r"\d+ to \d+ \[usable: \d+\]$", by_key[key][1]), by_key[key]
    # TxnShareAcknowledge (95, KIP-1289) is Shoal's only key unknown to the Kafka 4.4 client,
    # which prints it as UNKNOWN without a usable version; Kafka 4.4 has no key 95.
    if TARGET == "kafka":
        assert 95 not in by_key, by_key.get(95)
    else:
        assert by_key.get(95) == ("UNKNOWN", "0"), by_key.get(95)
    # "UNSUPPORTED" is an API the broker does not list; anything it lists that the client knows
    # must be usable
    listed = {k: v for k, v in by_key.items() if v[1] != "UNSUPPORTED" and v[0] != "UNKNOWN"}
    unusable = {k: v for k, v in listed.items() if "[usable: " not in v[1]}
    assert len(listed) > 30 and not unusable, (unusable, out)
    out = tools(CLUSTER, "cluster-id", *b).stdout
    assert re.match(r"^Cluster ID: [A-Za-z0-9_-]{22}$", out.strip()), out
