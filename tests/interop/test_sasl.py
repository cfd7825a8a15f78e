"""SASL on a SASL_PLAINTEXT listener beside the PLAINTEXT one, configured with Kafka's keys.

SCRAM-SHA-512 credentials are created with confluent-kafka's AdminClient
(AlterUserScramCredentials: the client sends a salted password) on the PLAINTEXT listener, then
confluent-kafka and kafka-python produce and consume over SASL_PLAINTEXT with them; PLAIN users
come from the listener's JAAS configuration. Getting it wrong: a wrong password is the
authentication error, answered and followed by the close only after
`connection.failed.authentication.delay.ms` (and nothing behind it served), an unknown mechanism
is UNSUPPORTED_SASL_MECHANISM with the enabled list, a request before authentication closes the
connection, and the broker serves the next client.

Re-authentication (KIP-368) on a second broker with `connections.max.reauth.ms`: SaslAuthenticate
v1 tells the session lifetime, and a confluent-kafka producer over SCRAM keeps producing across
several lifetimes with every message delivered and no connection lost.
"""

import json
import socket
import struct
import time

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (AdminClient, ScramCredentialInfo, ScramMechanism,
                                   UserScramCredentialUpsertion)

import kwire
from conftest import Broker
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
# The re-authentication broker: sessions of 2 s, and a long failed-authentication delay.
REAUTH_MS = 2000
SLOW_FAILURE_MS = 1500
REAUTH_CONFIG = dict(BROKER_CONFIG, **{
    "connections.max.reauth.ms": str(REAUTH_MS),
    "connection.failed.authentication.delay.ms": str(SLOW_FAILURE_MS),
})


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


def create_scram_user(broker):
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


@pytest.fixture(scope="module")
def scram_user(broker):
    return create_scram_user(broker)


@pytest.fixture(scope="module")
def reauth_broker(tmp_path_factory):
    b = Broker(tmp_path_factory.mktemp("reauth-broker"), REAUTH_CONFIG, BROKER_LISTENERS)
    try:
        b.start()
        create_scram_user(b)
        yield b
    finally:
        b.stop()
        if b.is_running():
            b.kill9()


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


def request_frame(api_key, version, correlation_id, body):
    """A non-flexible request (header v1) as one size-prefixed frame."""
    client_id = b"shoal-interop"
    header = struct.pack(">hhih", api_key, version, correlation_id, len(client_id)) + client_id
    payload = header + body
    return struct.pack(">i", len(payload)) + payload


def sasl_authenticate_frame(token, correlation_id):
    """SaslAuthenticate v1."""
    return request_frame(36, 1, correlation_id, struct.pack(">i", len(token)) + token)


def read_sasl_authenticate(sock):
    """A SaslAuthenticate v1 answer: correlation id, error code, message, session lifetime."""
    size = struct.unpack(">i", kwire._read(sock, 4))[0]
    r = kwire.Reader(kwire._read(sock, size))
    correlation_id, code = r.i32(), r.i16()
    length = r.i16()
    message = None if length < 0 else r.take(length).decode()
    r.take(r.i32())  # auth bytes
    lifetime = struct.unpack(">q", r.take(8))[0]
    return correlation_id, code, message, lifetime


def sasl_socket(broker):
    host, port = broker.listener_bootstrap("SASL_PLAINTEXT").rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=OP_TIMEOUT)


def test_sasl_authenticate_v1_tells_the_session_lifetime(broker, reauth_broker):
    for b, lifetime in ((broker, 0), (reauth_broker, REAUTH_MS)):
        with sasl_socket(b) as s:
            assert sasl_handshake(s, "PLAIN")[0] == 0
            s.sendall(sasl_authenticate_frame(b"\0bob\0bob-plain-secret", 2))
            assert read_sasl_authenticate(s) == (2, 0, "", lifetime)


def test_a_failed_authentication_is_answered_and_closed_after_the_delay(broker, reauth_broker):
    metadata_v1_all_topics = request_frame(3, 1, 3, struct.pack(">i", -1))
    for b, delay_ms in ((broker, 200), (reauth_broker, SLOW_FAILURE_MS)):
        with sasl_socket(b) as s:
            assert sasl_handshake(s, "PLAIN")[0] == 0
            started = time.monotonic()
            # The wrong password, and right behind it a Metadata that must never be served.
            s.sendall(sasl_authenticate_frame(b"\0bob\0wrong", 2) + metadata_v1_all_topics)
            correlation_id, code, message, _ = read_sasl_authenticate(s)
            answered_after = time.monotonic() - started
            assert (correlation_id, code) == (2, 58)  # SASL_AUTHENTICATION_FAILED
            # Kafka's PLAIN says "Authentication failed: Invalid username or password";
            # Shoal's the message Kafka gives for the other mechanisms.
            assert message.startswith("Authentication failed"), message
            assert answered_after >= delay_ms / 1000, answered_after
            assert closed_by_peer(s)


def test_confluent_kafka_re_authenticates_while_producing(reauth_broker):
    """librdkafka re-authenticates each connection before its 2 s session ends: ~6 s of
    producing over SCRAM-SHA-512, every message delivered, no connection ever dropped."""
    topic = uniq("sasl-reauth")
    create_topic(reauth_broker, topic)
    errors, stats, delivered, failed = [], [], [], []

    def on_delivery(err, msg):
        (failed if err else delivered).append(err or msg.value())

    # A connection that authenticates and then stays quiet: sessions do end on this broker.
    idle = sasl_socket(reauth_broker)
    assert sasl_handshake(idle, "PLAIN")[0] == 0
    idle.sendall(sasl_authenticate_frame(b"\0bob\0bob-plain-secret", 2))
    assert read_sasl_authenticate(idle)[1:] == (0, "", REAUTH_MS)
    producer = Producer(sasl_conf(reauth_broker, error_cb=errors.append, stats_cb=stats.append,
                                  **{"statistics.interval.ms": 500, "linger.ms": 5}))
    sent = []
    started = time.monotonic()
    while time.monotonic() - started < 3 * REAUTH_MS / 1000:
        value = f"m{len(sent)}".encode()
        producer.produce(topic, value, on_delivery=on_delivery)
        sent.append(value)
        producer.poll(0.02)
    assert producer.flush(OP_TIMEOUT) == 0
    producer.poll(1)  # one more statistics report
    assert failed == [], failed[:3]
    assert sorted(delivered) == sorted(sent)
    assert errors == [], errors
    brokers = json.loads(stats[-1])["brokers"].values()
    learned = [b for b in brokers if b["nodeid"] >= 0]
    assert learned, brokers
    for b in learned:
        assert (b["connects"], b["disconnects"]) == (1, 0), (b["name"], b["connects"],
                                                              b["disconnects"])
    # The quiet connection's session is long over: its next request closes it.
    with idle:
        idle.sendall(request_frame(3, 1, 3, struct.pack(">i", -1)))
        assert closed_by_peer(idle)
