"""SASL on a SASL_PLAINTEXT listener beside the PLAINTEXT one, configured with Kafka's keys.

SCRAM-SHA-512 credentials are created with confluent-kafka's AdminClient
(AlterUserScramCredentials: the client sends a salted password) on the PLAINTEXT listener, then
confluent-kafka and kafka-python produce and consume over SASL_PLAINTEXT with them; PLAIN users
come from the listener's JAAS configuration. Getting it wrong: a wrong password is the
authentication error, an unknown mechanism is UNSUPPORTED_SASL_MECHANISM with the enabled list,
a request before authentication closes the connection, and the broker serves the next client.
"""

import socket
import struct
import time

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (AdminClient, ScramCredentialInfo, ScramMechanism,
                                   UserScramCredentialUpsertion)

import kwire
from iutil import OP_TIMEOUT, create_topic, uniq

USER, PASSWORD = "alice", "alice-scram-secret"
PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              'username="admin" password="admin-secret" user_bob="bob-plain-secret";')
SCRAM_JAAS = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
MECHANISMS = ["SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"]
BROKER_LISTENERS = {"SASL_PLAINTEXT": "SASL_PLAINTEXT"}
BROKER_CONFIG = {
    "sasl.enabled.mechanisms": ",".join(MECHANISMS),
    "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
    "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config": SCRAM_JAAS,
    "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config": SCRAM_JAAS,
    "connection.failed.authentication.delay.ms": "200",
}


def sasl_conf(broker, mechanism="SCRAM-SHA-512", user=USER, password=PASSWORD, **extra):
    conf = {
        "bootstrap.servers": broker.listener_bootstrap("SASL_PLAINTEXT"),
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": mechanism,
        "sasl.username": user,
        "sasl.password": password,
        "socket.timeout.ms": 5000,
        "log_level": 2,
    }
    conf.update(extra)
    return conf


def authenticates(broker, **kw):
    """Whether a confluent-kafka admin client gets Metadata through the SASL listener."""
    errors = []
    admin = AdminClient(sasl_conf(broker, error_cb=errors.append, **kw))
    try:
        return bool(admin.list_topics(timeout=5).brokers), errors
    except KafkaException as e:
        admin.poll(1)  # serves error_cb with what the client saw
        return False, errors + [e.args[0]]


@pytest.fixture(scope="module")
def scram_user(broker):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192)
    futures = admin.alter_user_scram_credentials(
        [UserScramCredentialUpsertion(USER, info, PASSWORD.encode())])
    futures[USER].result(timeout=OP_TIMEOUT)
    # Kafka publishes the credential to its authenticator through the metadata log: wait.
    deadline = time.monotonic() + OP_TIMEOUT
    while time.monotonic() < deadline:
        ok, _ = authenticates(broker)
        if ok:
            return USER
        time.sleep(0.5)
    pytest.fail("the new SCRAM credential never authenticated")


def test_created_credentials_are_described_without_secrets(broker, scram_user):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    described = admin.describe_user_scram_credentials([scram_user])[scram_user].result(
        timeout=OP_TIMEOUT)
    infos = [(i.mechanism, i.iterations) for i in described.scram_credential_infos]
    assert infos == [(ScramMechanism.SCRAM_SHA_512, 8192)]
    missing = admin.describe_user_scram_credentials(["nobody"])["nobody"]
    with pytest.raises(KafkaException) as e:
        missing.result(timeout=OP_TIMEOUT)
    assert e.value.args[0].code() == KafkaError.RESOURCE_NOT_FOUND


def test_confluent_kafka_produces_and_consumes_with_scram_sha_512(broker, scram_user):
    topic = uniq("sasl-ck")
    create_topic(broker, topic)
    producer = Producer(sasl_conf(broker))
    values = [f"v{i}".encode() for i in range(20)]
    for v in values:
        producer.produce(topic, v)
    assert producer.flush(OP_TIMEOUT) == 0
    consumer = Consumer(sasl_conf(broker, **{"group.id": uniq("g"),
                                             "auto.offset.reset": "earliest"}))
    consumer.subscribe([topic])
    got = []
    deadline = time.monotonic() + OP_TIMEOUT
    while len(got) < len(values) and time.monotonic() < deadline:
        m = consumer.poll(0.5)
        if m is not None and m.error() is None:
            got.append(m.value())
    consumer.close()
    assert got == values


def test_kafka_python_produces_and_consumes_with_scram_sha_512(broker, scram_user):
    from kafka import KafkaConsumer, KafkaProducer

    common = dict(bootstrap_servers=broker.listener_bootstrap("SASL_PLAINTEXT"),
                  security_protocol="SASL_PLAINTEXT", sasl_mechanism="SCRAM-SHA-512",
                  sasl_plain_username=USER, sasl_plain_password=PASSWORD)
    topic = uniq("sasl-kp")
    create_topic(broker, topic)
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


def test_plain_users_come_from_the_jaas_configuration(broker):
    ok, errors = authenticates(broker, mechanism="PLAIN", user="bob",
                               password="bob-plain-secret")
    assert ok, errors


def test_a_wrong_password_is_an_authentication_error(broker, scram_user):
    for mechanism, user in (("SCRAM-SHA-512", scram_user), ("PLAIN", "bob")):
        ok, errors = authenticates(broker, mechanism=mechanism, user=user, password="wrong")
        assert not ok
        auth = [e for e in errors if e.code() == KafkaError._AUTHENTICATION]
        assert auth, errors
        assert "Authentication failed" in auth[0].str(), auth[0].str()
    # kafka-python 3.0.12 retries the refused connection until its bootstrap times out (it
    # logs only "socket disconnected"): no admin client is ever made with a wrong password.
    from kafka import KafkaAdminClient
    from kafka.errors import KafkaTimeoutError

    with pytest.raises(KafkaTimeoutError):
        KafkaAdminClient(bootstrap_servers=broker.listener_bootstrap("SASL_PLAINTEXT"),
                         security_protocol="SASL_PLAINTEXT", sasl_mechanism="SCRAM-SHA-512",
                         sasl_plain_username=scram_user, sasl_plain_password="wrong",
                         request_timeout_ms=3000)
    # The broker is unharmed: the right password still works.
    ok, errors = authenticates(broker)
    assert ok, errors


def sasl_handshake(sock, mechanism, correlation_id=1):
    body = struct.pack(">h", len(mechanism)) + mechanism.encode()
    client_id = b"shoal-interop"
    header = struct.pack(">hhih", 17, 1, correlation_id, len(client_id)) + client_id
    payload = header + body
    sock.sendall(struct.pack(">i", len(payload)) + payload)
    size = struct.unpack(">i", kwire._read(sock, 4))[0]
    r = kwire.Reader(kwire._read(sock, size))
    assert r.i32() == correlation_id
    code = r.i16()
    mechanisms = [r.take(r.i16()).decode() for _ in range(r.i32())]
    return code, mechanisms


def closed_by_peer(sock):
    sock.settimeout(OP_TIMEOUT)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def test_an_unknown_mechanism_gets_the_enabled_list_and_a_close(broker):
    host, port = broker.listener_bootstrap("SASL_PLAINTEXT").rsplit(":", 1)
    for mechanism in ("GSSAPI", "OAUTHBEARER", "SCRAM-SHA-1"):
        with socket.create_connection((host, int(port)), timeout=OP_TIMEOUT) as s:
            code, offered = sasl_handshake(s, mechanism)
            assert code == 33  # UNSUPPORTED_SASL_MECHANISM
            assert sorted(offered) == sorted(MECHANISMS)
            assert closed_by_peer(s)
    with socket.create_connection((host, int(port)), timeout=OP_TIMEOUT) as s:
        code, offered = sasl_handshake(s, "SCRAM-SHA-512")
        assert (code, sorted(offered)) == (0, sorted(MECHANISMS))


def test_a_request_before_authentication_closes_the_connection(broker, scram_user):
    sasl = broker.listener_bootstrap("SASL_PLAINTEXT")
    with pytest.raises(ConnectionError):
        kwire.request(sasl, 3, 12, kwire.compact_array([]) + b"\x01\x00" + kwire.TAGS)
    # A plaintext client (no SASL) on the SASL port: it fails, and the broker is unharmed.
    errors = []
    admin = AdminClient({"bootstrap.servers": sasl, "socket.timeout.ms": 3000,
                         "error_cb": errors.append, "log_level": 2})
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=4)
    ok, errors = authenticates(broker)
    assert ok, errors
