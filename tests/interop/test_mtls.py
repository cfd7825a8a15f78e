"""Mutual TLS: an SSL listener with ``ssl.client.auth=required``, its stores made at test time
(tlsutil.py: openssl, and keytool for a PKCS#12 trust store Java reads).

The module's broker has a PKCS#12 key store (openssl's default PBES2/AES) and a PEM trust
store. confluent-kafka (PEM certificate with an encrypted key and ``ssl.key.password``, and a
PKCS#12 ``ssl.keystore.location``), kafka-python (PEM certificate, encrypted key) and the Java
client (Kafka's console producer and consumer with PKCS12 key and trust stores) produce and
consume with a client certificate; a client without one fails cleanly and the broker carries
on. A second broker with an authorizer, ``ssl.principal.mapping.rules``, a legacy 3DES
PKCS#12 key store and a PKCS#12 trust store: the principal the rules make of the certificate
is the one ACLs name (no WRITE ACL: TOPIC_AUTHORIZATION_FAILED). Last, the module broker's
certificate is reloaded through IncrementalAlterConfigs of
``listener.name.ssl.ssl.keystore.location``: new connections see the new serial, a connection
opened before keeps working, a store that does not load and a certificate with another subject
are INVALID_REQUEST with the stores in use kept. Validated against Apache Kafka 4.4 first.
"""

import os
import shutil
import socket
import ssl
import struct
import subprocess
import time

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient,
                                   AlterConfigOpType, ConfigEntry, ConfigResource,
                                   ResourcePatternType, ResourceType)

from conftest import _kafka_libs
from iutil import OP_TIMEOUT, create_topic, uniq
from tlsutil import (make_certs, make_client, make_pkcs12, make_server, make_truststore_pkcs12,
                     peer_certificate, serial_of)

KEY_PASSWORD = "client-key-pw"
STORE_PASSWORD = "store-pw"
AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
TOOL_TIMEOUT = 120


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("pki")
    certs = make_certs(d)
    server = d / "server"
    certs["server_p12"] = make_pkcs12(d, "server", f"{server}.crt", f"{server}.key",
                                      STORE_PASSWORD)
    certs["server_legacy_p12"] = make_pkcs12(d, "server-legacy", f"{server}.crt",
                                             f"{server}.key", STORE_PASSWORD, legacy=True)
    certs["trust_p12"] = make_truststore_pkcs12(d, "trust", STORE_PASSWORD)
    certs["alice"] = make_client(d, "alice", "mtls-alice", KEY_PASSWORD)
    certs["alice"]["p12"] = make_pkcs12(d, "alice", certs["alice"]["cert"],
                                        certs["alice"]["key"], STORE_PASSWORD)
    certs["dir"] = d
    return certs


def ssl_listener_config(keystore, keystore_type="PKCS12", truststore=None,
                        truststore_type="PEM"):
    return {
        "listener.name.ssl.ssl.keystore.type": keystore_type,
        "listener.name.ssl.ssl.keystore.location": keystore,
        "listener.name.ssl.ssl.keystore.password": STORE_PASSWORD,
        "listener.name.ssl.ssl.truststore.type": truststore_type,
        "listener.name.ssl.ssl.truststore.location": truststore,
        "listener.name.ssl.ssl.client.auth": "required",
    }


@pytest.fixture(scope="module")
def mtls(pki, tmp_path_factory):
    from conftest import Broker

    config = ssl_listener_config(pki["server_p12"], truststore=pki["ca"])
    broker = Broker(tmp_path_factory.mktemp("broker"), config, {"SSL": "SSL"})
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()
        if broker.is_running():
            broker.kill9()


def ck_conf(broker, pki, client=None, listener="SSL", **extra):
    """confluent-kafka settings; ``client``: None (no certificate), "pem" (certificate and
    encrypted key) or "p12" (PKCS#12 key store)."""
    c = {
        "bootstrap.servers": broker.listener_bootstrap(listener),
        "security.protocol": "SSL",
        "ssl.ca.location": pki["ca"],
        "socket.timeout.ms": 5000,
        "log_level": 2,
    }
    if client == "pem":
        c.update({"ssl.certificate.location": pki["alice"]["cert"],
                  "ssl.key.location": pki["alice"]["encrypted_key"],
                  "ssl.key.password": KEY_PASSWORD})
    elif client == "p12":
        c.update({"ssl.keystore.location": pki["alice"]["p12"],
                  "ssl.keystore.password": STORE_PASSWORD})
    c.update(extra)
    return c


def consume_all(conf, topic, count):
    consumer = Consumer(dict(conf, **{"group.id": uniq("g"), "auto.offset.reset": "earliest"}))
    consumer.subscribe([topic])
    got = []
    deadline = time.monotonic() + OP_TIMEOUT
    while len(got) < count and time.monotonic() < deadline:
        m = consumer.poll(0.5)
        if m is not None and m.error() is None:
            got.append(m.value())
    consumer.close()
    return got


def test_confluent_kafka_produces_and_consumes_with_a_client_certificate(mtls, pki):
    topic = uniq("mtls-ck")
    create_topic(mtls, topic)
    for client in ("pem", "p12"):
        producer = Producer(ck_conf(mtls, pki, client))
        values = [f"{client}-{i}".encode() for i in range(10)]
        for v in values:
            producer.produce(topic, v)
        assert producer.flush(OP_TIMEOUT) == 0
    got = consume_all(ck_conf(mtls, pki, "p12"), topic, 20)
    assert got == [f"{c}-{i}".encode() for c in ("pem", "p12") for i in range(10)]


def test_kafka_python_produces_and_consumes_with_a_client_certificate(mtls, pki):
    from kafka import KafkaConsumer, KafkaProducer

    common = dict(bootstrap_servers=mtls.listener_bootstrap("SSL"), security_protocol="SSL",
                  ssl_cafile=pki["ca"], ssl_certfile=pki["alice"]["cert"],
                  ssl_keyfile=pki["alice"]["encrypted_key"], ssl_password=KEY_PASSWORD)
    topic = uniq("mtls-kp")
    create_topic(mtls, topic)
    producer = KafkaProducer(**common)
    for i in range(10):
        producer.send(topic, f"k{i}".encode()).get(timeout=OP_TIMEOUT)
    producer.close()
    consumer = KafkaConsumer(topic, auto_offset_reset="earliest",
                             consumer_timeout_ms=int(OP_TIMEOUT * 1000), **common)
    got = []
    for m in consumer:
        got.append(m.value)
        if len(got) == 10:
            break
    consumer.close()
    assert got == [f"k{i}".encode() for i in range(10)]


def java_tool(main, *args, stdin=None):
    libs = os.environ.get("KAFKA_LIBS") or _kafka_libs()
    java = shutil.which("java") or "java"
    cmd = [java, "-Xms64m", "-Xmx512m", "-XX:TieredStopAtLevel=1",
           "-cp", os.path.join(libs, "*"), main, *args]
    return subprocess.run(cmd, input=stdin, capture_output=True, text=True,
                          timeout=TOOL_TIMEOUT)


def test_java_client_produces_and_consumes_with_pkcs12_stores(mtls, pki, tmp_path):
    topic = uniq("mtls-java")
    create_topic(mtls, topic)
    props = tmp_path / "client.properties"
    props.write_text("\n".join([
        "security.protocol=SSL",
        "ssl.truststore.type=PKCS12",
        f"ssl.truststore.location={pki['trust_p12']}",
        f"ssl.truststore.password={STORE_PASSWORD}",
        "ssl.keystore.type=PKCS12",
        f"ssl.keystore.location={pki['alice']['p12']}",
        f"ssl.keystore.password={STORE_PASSWORD}",
    ]) + "\n")
    bootstrap = mtls.listener_bootstrap("SSL")
    lines = [f"java-{i}" for i in range(10)]
    produced = java_tool("org.apache.kafka.tools.ConsoleProducer", "--bootstrap-server",
                         bootstrap, "--topic", topic, "--command-config", str(props),
                         stdin="\n".join(lines) + "\n")
    assert produced.returncode == 0, produced.stderr[-3000:]
    consumed = java_tool("org.apache.kafka.tools.consumer.ConsoleConsumer",
                         "--bootstrap-server", bootstrap, "--topic", topic,
                         "--command-config", str(props), "--from-beginning",
                         "--max-messages", "10", "--timeout-ms", "30000")
    assert consumed.returncode == 0, consumed.stderr[-3000:]
    got = [line for line in consumed.stdout.split() if line.startswith("java-")]
    assert got == lines, consumed.stdout + consumed.stderr[-3000:]


def test_no_client_certificate_fails_cleanly_and_the_broker_carries_on(mtls, pki):
    errors = []
    admin = AdminClient(ck_conf(mtls, pki, None, error_cb=errors.append, log_level=0))
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=5)
    # kafka-python and Python's ssl module see the handshake refused.
    context = ssl.create_default_context(cafile=pki["ca"])
    host, port = mtls.listener_bootstrap("SSL").rsplit(":", 1)
    with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
        with socket.create_connection((host, int(port)), timeout=10) as raw:
            with context.wrap_socket(raw, server_hostname=host) as tls:
                # TLS 1.3: the refusal arrives with the first read.
                tls.sendall(api_versions_request())
                if not tls.recv(4):
                    raise ConnectionError("closed")
    ok = AdminClient(ck_conf(mtls, pki, "pem"))
    assert ok.list_topics(timeout=OP_TIMEOUT).brokers


def api_versions_request(correlation_id=1):
    """ApiVersions v0, the one request every broker answers before anything else."""
    client = b"mtls"
    body = struct.pack(">hhih", 18, 0, correlation_id, len(client)) + client
    return struct.pack(">i", len(body)) + body


def api_versions_ok(sock, correlation_id):
    sock.sendall(api_versions_request(correlation_id))
    size = struct.unpack(">i", read_exactly(sock, 4))[0]
    data = read_exactly(sock, size)
    got_id, error = struct.unpack(">ih", data[:6])
    return got_id == correlation_id and error == 0


def read_exactly(sock, n):
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("closed by the broker")
        buf += chunk
    return buf


def wait_for(condition, what):
    """Kafka applies ACL and dynamic config changes through its metadata log, shortly after
    the admin request is answered."""
    deadline = time.monotonic() + OP_TIMEOUT
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.3)
    pytest.fail(f"never true: {what}")


def test_acls_name_the_principal_the_mapping_rules_make_of_the_certificate(pki, make_broker):
    config = ssl_listener_config(pki["server_legacy_p12"], truststore=pki["trust_p12"],
                                 truststore_type="PKCS12")
    config.update({
        "listener.name.ssl.ssl.truststore.password": STORE_PASSWORD,
        "listener.name.ssl.ssl.principal.mapping.rules":
            "RULE:^CN=mtls-([a-z]+)$/$1/U,DEFAULT",
        "authorizer.class.name": AUTHORIZER,
        "super.users": "User:ANONYMOUS",
        "num.partitions": "1",
    })
    broker = make_broker(config, {"SSL": "SSL"})
    allowed, denied = uniq("mtls-acl-w"), uniq("mtls-acl-x")
    for t in (allowed, denied):
        create_topic(broker, t)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 2})
    bindings = [AclBinding(ResourceType.TOPIC, allowed, ResourcePatternType.LITERAL,
                           "User:ALICE", "*", op, AclPermissionType.ALLOW)
                for op in (AclOperation.WRITE, AclOperation.DESCRIBE)]
    for f in admin.create_acls(bindings).values():
        f.result(timeout=OP_TIMEOUT)

    def produce_error(topic):
        outcome = []
        p = Producer(ck_conf(broker, pki, "pem", **{"message.timeout.ms": 10000,
                                                   "retries": 0}))
        p.produce(topic, b"v", on_delivery=lambda err, msg: outcome.append(err))
        p.flush(15)
        assert outcome, "no delivery report"
        return outcome[0]

    wait_for(lambda: produce_error(allowed) is None, "User:ALICE may write")
    err = produce_error(denied)
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, err


def alter_ssl(broker, entries):
    """IncrementalAlterConfigs SET of ``entries`` on broker 1; returns the error or None."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 0})
    resource = ConfigResource(ResourceType.BROKER, "1", incremental_configs=[
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
        for k, v in entries.items()])
    try:
        admin.incremental_alter_configs([resource])[resource].result(timeout=OP_TIMEOUT)
        return None
    except KafkaException as e:
        return e.args[0]


def test_a_reloaded_certificate_serves_new_connections_and_old_ones_go_on(mtls, pki):
    d = pki["dir"]
    alice = pki["alice"]
    bootstrap = mtls.listener_bootstrap("SSL")
    first_serial = serial_of(str(d / "server.crt"))
    assert peer_certificate(bootstrap, pki["ca"], alice["cert"], alice["key"]) == (
        "shoal-interop-ca", first_serial)
    # A connection opened before the reload.
    context = ssl.create_default_context(cafile=pki["ca"])
    context.load_cert_chain(alice["cert"], alice["key"])
    host, port = bootstrap.rsplit(":", 1)
    old = context.wrap_socket(socket.create_connection((host, int(port)), timeout=10),
                              server_hostname=host)
    try:
        assert api_versions_ok(old, 1)
        make_server(d, "server2")
        new_store = make_pkcs12(d, "server2", str(d / "server2.crt"), str(d / "server2.key"),
                                STORE_PASSWORD)
        new_serial = serial_of(str(d / "server2.crt"))
        assert new_serial != first_serial

        # Refused, and the stores in use stay: a file that is no store, a wrong password, a
        # certificate for another subject.
        garbage = d / "garbage.p12"
        garbage.write_bytes(b"not a key store")
        make_server(d, "other", subject="/CN=someone-else")
        other = make_pkcs12(d, "other", str(d / "other.crt"), str(d / "other.key"),
                            STORE_PASSWORD)
        for store, password in ((str(garbage), STORE_PASSWORD), (new_store, "wrong"),
                                (other, STORE_PASSWORD)):
            err = alter_ssl(mtls, {"listener.name.ssl.ssl.keystore.location": store,
                                   "listener.name.ssl.ssl.keystore.password": password})
            assert err is not None and err.code() == KafkaError.INVALID_REQUEST, (store, err)
        assert peer_certificate(bootstrap, pki["ca"], alice["cert"], alice["key"]) == (
            "shoal-interop-ca", first_serial)

        assert alter_ssl(mtls, {"listener.name.ssl.ssl.keystore.location": new_store,
                                "listener.name.ssl.ssl.keystore.password": STORE_PASSWORD}
                         ) is None
        wait_for(lambda: peer_certificate(bootstrap, pki["ca"], alice["cert"],
                                          alice["key"])[1] == new_serial,
                 "new connections get the new certificate")
        # The old connection goes on, on its first certificate.
        assert api_versions_ok(old, 2)
        assert int(old.getpeercert()["serialNumber"], 16) == first_serial
        # And clients connect and produce as before.
        producer = Producer(ck_conf(mtls, pki, "p12"))
        topic = uniq("mtls-reload")
        create_topic(mtls, topic)
        producer.produce(topic, b"after-reload")
        assert producer.flush(OP_TIMEOUT) == 0
    finally:
        old.close()
