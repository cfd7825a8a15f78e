"""SASL_SSL and SSL listeners with PEM key stores made at test time (openssl CLI).

confluent-kafka and kafka-python produce and consume over SASL_SSL with SCRAM-SHA-512
(credentials created with AlterUserScramCredentials on the PLAINTEXT listener), a client speaks
SSL without SASL, a wrong password over SASL_SSL is the authentication error, and a plaintext
client on the SSL port fails cleanly while the broker keeps serving TLS clients.
"""

import time

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (AdminClient, ScramCredentialInfo, ScramMechanism,
                                   UserScramCredentialUpsertion)

from conftest import Broker
from iutil import OP_TIMEOUT, create_topic, uniq
from tlsutil import make_certs

USER, PASSWORD = "tls-alice", "tls-alice-secret"
SCRAM_JAAS = "org.apache.kafka.common.security.scram.ScramLoginModule required;"


@pytest.fixture(scope="module")
def tls(tmp_path_factory):
    certs = make_certs(tmp_path_factory.mktemp("certs"))
    config = {
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": certs["keystore"],
        "sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": SCRAM_JAAS,
    }
    broker = Broker(tmp_path_factory.mktemp("broker"), config,
                    {"SASL_SSL": "SASL_SSL", "SSL": "SSL"})
    broker.start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192)
        admin.alter_user_scram_credentials(
            [UserScramCredentialUpsertion(USER, info, PASSWORD.encode())])[USER].result(
                timeout=OP_TIMEOUT)
        deadline = time.monotonic() + OP_TIMEOUT
        while not authenticates(broker, certs)[0]:
            assert time.monotonic() < deadline, "the SCRAM credential never authenticated"
            time.sleep(0.5)
        yield broker, certs
    finally:
        broker.stop()
        if broker.is_running():
            broker.kill9()


def conf(broker, certs, listener="SASL_SSL", password=PASSWORD, **extra):
    c = {
        "bootstrap.servers": broker.listener_bootstrap(listener),
        "security.protocol": listener,
        "ssl.ca.location": certs["ca"],
        "socket.timeout.ms": 5000,
        "log_level": 2,
    }
    if listener == "SASL_SSL":
        c.update({"sasl.mechanism": "SCRAM-SHA-512", "sasl.username": USER,
                  "sasl.password": password})
    c.update(extra)
    return c


def authenticates(broker, certs, **kw):
    errors = []
    admin = AdminClient(conf(broker, certs, error_cb=errors.append, **kw))
    try:
        return bool(admin.list_topics(timeout=5).brokers), errors
    except KafkaException as e:
        admin.poll(1)
        return False, errors + [e.args[0]]


def test_confluent_kafka_over_sasl_ssl_with_scram_sha_512(tls):
    broker, certs = tls
    topic = uniq("sasl-ssl-ck")
    create_topic(broker, topic)
    producer = Producer(conf(broker, certs))
    values = [f"secret-{i}".encode() * 100 for i in range(20)]
    for v in values:
        producer.produce(topic, v)
    assert producer.flush(OP_TIMEOUT) == 0
    consumer = Consumer(conf(broker, certs, **{"group.id": uniq("g"),
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


def test_kafka_python_over_sasl_ssl_with_scram_sha_512(tls):
    from kafka import KafkaConsumer, KafkaProducer

    broker, certs = tls
    common = dict(bootstrap_servers=broker.listener_bootstrap("SASL_SSL"),
                  security_protocol="SASL_SSL", ssl_cafile=certs["ca"],
                  sasl_mechanism="SCRAM-SHA-512", sasl_plain_username=USER,
                  sasl_plain_password=PASSWORD)
    topic = uniq("sasl-ssl-kp")
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


def test_ssl_without_sasl(tls):
    broker, certs = tls
    ok, errors = authenticates(broker, certs, listener="SSL")
    assert ok, errors


def test_a_wrong_password_over_sasl_ssl_is_an_authentication_error(tls):
    broker, certs = tls
    ok, errors = authenticates(broker, certs, password="wrong")
    assert not ok
    auth = [e for e in errors if e.code() == KafkaError._AUTHENTICATION]
    assert auth, errors
    assert "Authentication failed" in auth[0].str(), auth[0].str()


def test_a_plaintext_client_on_the_ssl_port_fails_and_the_broker_carries_on(tls):
    broker, certs = tls
    admin = AdminClient({"bootstrap.servers": broker.listener_bootstrap("SSL"),
                         "socket.timeout.ms": 3000, "log_level": 0})
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=4)
    # And a TLS client on the plaintext port.
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, "security.protocol": "SSL",
                         "ssl.ca.location": certs["ca"], "socket.timeout.ms": 3000,
                         "log_level": 0})
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=4)
    for listener in ("SSL", "SASL_SSL"):
        ok, errors = authenticates(broker, certs, listener=listener)
        assert ok, (listener, errors)
