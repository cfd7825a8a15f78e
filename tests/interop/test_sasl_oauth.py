"""SASL/OAUTHBEARER with signed JWTs checked against a JSON Web Key Set file, configured with
Kafka's keys on a SASL_PLAINTEXT listener beside the PLAINTEXT one.

The broker validates tokens with Kafka's ``OAuthBearerValidatorCallbackHandler`` (named on the
listener, as Kafka needs; Kafka 4.x also needs the file URL in the JVM system property
``org.apache.kafka.sasl.oauthbearer.allowed.urls``), the key set from
``sasl.oauthbearer.jwks.endpoint.url=file:...``, an expected audience and issuer. The keys (an
RSA and an EC P-256 key) are made at test time with the ``openssl`` command, and so are the
tokens' signatures; nothing generated is committed.

confluent-kafka (``oauth_cb``) and kafka-python (a token provider) produce and consume as the
token's subject; an expired token, a token signed by another key, one for another audience and
an unsigned one (``alg: none``) are authentication errors and the broker serves the next client;
ACLs apply to ``User:<sub>`` (the StandardAuthorizer, PLAINTEXT's ANONYMOUS a super user as
Kafka's controller needs); without ``connections.max.reauth.ms`` a session ends with its token.
Validated against Apache Kafka 4.4 first.
"""

import base64
import json
import socket
import struct
import subprocess
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient,
                                   ResourcePatternType, ResourceType)

from conftest import Broker
from iutil import OP_TIMEOUT, create_topic, uniq

ISSUER = "https://issuer.shoal.test"
AUDIENCE = "kafka-broker"
AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
VALIDATOR = "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler"
LOGIN_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;"
BROKER_LISTENERS = {"SASL_PLAINTEXT": "SASL_PLAINTEXT"}


# ------------------------------------------------------------------ keys and tokens


def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def openssl(*args, data=None):
    return subprocess.run(["openssl", *args], input=data, capture_output=True, check=True,
                          timeout=60).stdout


def der_ecdsa_to_raw(der, size=32):
    """An ECDSA signature from DER (SEQUENCE of two INTEGERs) to JWS's r || s."""
    assert der[0] == 0x30
    i = 2 if der[1] < 0x80 else 2 + (der[1] & 0x7F)
    out = b""
    for _ in range(2):
        assert der[i] == 0x02
        n = der[i + 1]
        out += der[i + 2:i + 2 + n].lstrip(b"\x00").rjust(size, b"\x00")
        i += 2 + n
    return out


class Key:
    """A signing key made with openssl: RSA (RS256) or EC P-256 (ES256)."""

    def __init__(self, workdir, kid, kind="RSA"):
        self.kid, self.kind = kid, kind
        self.path = workdir / f"{kid}.pem"
        if kind == "RSA":
            openssl("genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048",
                    "-out", str(self.path))
            modulus = openssl("rsa", "-in", str(self.path), "-noout", "-modulus").decode()
            n = int(modulus.strip().split("=", 1)[1], 16)
            text = openssl("rsa", "-in", str(self.path), "-noout", "-text").decode()
            e = int(text.split("publicExponent:", 1)[1].split()[0])
            self.jwk = {"kty": "RSA", "kid": kid, "use": "sig", "alg": "RS256",
                        "n": b64url(n.to_bytes((n.bit_length() + 7) // 8, "big")),
                        "e": b64url(e.to_bytes((e.bit_length() + 7) // 8, "big"))}
            self.alg = "RS256"
        else:
            openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256",
                    "-out", str(self.path))
            point = openssl("pkey", "-in", str(self.path), "-pubout", "-outform", "DER")[-65:]
            assert point[0] == 4
            self.jwk = {"kty": "EC", "kid": kid, "use": "sig", "crv": "P-256",
                        "x": b64url(point[1:33]), "y": b64url(point[33:])}
            self.alg = "ES256"

    def sign(self, data):
        sig = openssl("dgst", "-sha256", "-sign", str(self.path), data=data)
        return sig if self.kind == "RSA" else der_ecdsa_to_raw(sig)

    def token(self, sub, lifetime_s=600, header=None, **claims):
        now = int(time.time())
        body = {"sub": sub, "iss": ISSUER, "aud": AUDIENCE, "iat": now, "exp": now + lifetime_s,
                "jti": str(uuid.uuid4()), "scope": "kafka"}
        body.update(claims)
        head = {"alg": self.alg, "typ": "JWT", "kid": self.kid, **(header or {})}
        signing_input = (b64url(json.dumps(head).encode()) + "." +
                         b64url(json.dumps(body).encode()))
        return signing_input + "." + b64url(self.sign(signing_input.encode())), body["exp"]


def unsigned_token(sub):
    now = int(time.time())
    body = {"sub": sub, "iss": ISSUER, "aud": AUDIENCE, "iat": now, "exp": now + 600}
    return (b64url(b'{"alg":"none"}') + "." + b64url(json.dumps(body).encode()) + ".",
            now + 600)


# ------------------------------------------------------------------ the broker


class Keys:
    def __init__(self, workdir):
        self.rsa = Key(workdir, "rsa-1")
        self.ec = Key(workdir, "ec-1", kind="EC")
        self.stranger = Key(workdir, "rsa-1-impostor")  # not in the key set
        self.jwks = workdir / "jwks.json"
        self.jwks.write_text(json.dumps({"keys": [self.rsa.jwk, self.ec.jwk]}))
        self.url = self.jwks.resolve().as_uri()


def oauth_config(url):
    return {
        "num.partitions": "1",
        "authorizer.class.name": AUTHORIZER,
        "super.users": "User:ANONYMOUS",
        "sasl.enabled.mechanisms": "OAUTHBEARER",
        "listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config": LOGIN_MODULE,
        "listener.name.sasl_plaintext.oauthbearer.sasl.server.callback.handler.class": VALIDATOR,
        "listener.name.sasl_plaintext.sasl.oauthbearer.jwks.endpoint.url": url,
        "sasl.oauthbearer.expected.audience": AUDIENCE,
        "sasl.oauthbearer.expected.issuer": ISSUER,
        "connection.failed.authentication.delay.ms": "100",
    }


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    return Keys(tmp_path_factory.mktemp("oauth-keys"))


@pytest.fixture(scope="module")
def oauth_broker(tmp_path_factory, keys):
    b = Broker(tmp_path_factory.mktemp("oauth-broker"), oauth_config(keys.url), BROKER_LISTENERS)
    b.jvm_options = [f"-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls={keys.url}"]
    try:
        b.start()
        yield b
    finally:
        b.stop()
        if b.is_running():
            b.kill9()


def oauth_conf(broker, make_token, **extra):
    """confluent-kafka settings whose oauth_cb returns make_token()'s (token, exp)."""
    def oauth_cb(_config):
        token, exp = make_token()
        return token, float(exp)

    conf = {
        "bootstrap.servers": broker.listener_bootstrap("SASL_PLAINTEXT"),
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "OAUTHBEARER",
        "oauth_cb": oauth_cb,
        "socket.timeout.ms": 5000,
        "log_level": 2,
    }
    conf.update(extra)
    return conf


def authenticates(broker, make_token):
    """Whether a confluent-kafka admin client gets Metadata through the SASL listener, and the
    errors it saw."""
    errors = []
    admin = AdminClient(oauth_conf(broker, make_token, error_cb=errors.append))
    admin.poll(0)  # serves the oauth_cb
    try:
        return bool(admin.list_topics(timeout=5).brokers), errors
    except KafkaException as e:
        admin.poll(1)
        return False, errors + [e.args[0]]


def grant(broker, principal, topic=None, group=None, operation=AclOperation.ALL):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 2})
    bindings = []
    if topic:
        bindings.append(AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL,
                                   principal, "*", operation, AclPermissionType.ALLOW))
    if group:
        bindings.append(AclBinding(ResourceType.GROUP, group, ResourcePatternType.LITERAL,
                                   principal, "*", AclOperation.ALL, AclPermissionType.ALLOW))
    for f in admin.create_acls(bindings).values():
        f.result(timeout=OP_TIMEOUT)


def produce_error(broker, make_token, topic):
    """The error of one record produced with make_token's tokens (None when delivered)."""
    outcome = []
    p = Producer(oauth_conf(broker, make_token, **{"message.timeout.ms": 10000, "retries": 0}))
    p.produce(topic, b"v", on_delivery=lambda err, msg: outcome.append(err))
    p.flush(15)
    assert outcome, "no delivery report"
    return outcome[0]


def wait_for(condition, what):
    deadline = time.monotonic() + OP_TIMEOUT
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.3)
    pytest.fail(f"never true: {what}")


# ------------------------------------------------------------------ tests


@pytest.mark.parametrize("kind", ["rsa", "ec"])
def test_confluent_kafka_produces_and_consumes_with_a_signed_token(oauth_broker, keys, kind):
    key = getattr(keys, kind)
    user, topic, group = f"svc-{kind}", uniq(f"oauth-ck-{kind}"), uniq("oauth-g")
    create_topic(oauth_broker, topic)
    grant(oauth_broker, f"User:{user}", topic=topic, group=group)
    issued = []

    def make_token():
        issued.append(1)
        return key.token(user)

    wait_for(lambda: produce_error(oauth_broker, make_token, topic) is None,
             f"User:{user} may write")
    producer = Producer(oauth_conf(oauth_broker, make_token))
    values = [f"v{i}".encode() for i in range(20)]
    for v in values:
        producer.produce(topic, v)
    assert producer.flush(OP_TIMEOUT) == 0
    consumer = Consumer(oauth_conf(oauth_broker, make_token, **{
        "group.id": group, "auto.offset.reset": "earliest"}))
    consumer.subscribe([topic])
    got = []  # after the probes' b"v" records
    deadline = time.monotonic() + OP_TIMEOUT
    while len(got) < len(values) and time.monotonic() < deadline:
        m = consumer.poll(0.5)
        if m is not None and m.error() is None and m.value() != b"v":
            got.append(m.value())
    consumer.close()
    assert got == values
    assert issued, "the token came from oauth_cb"


def test_kafka_python_produces_and_consumes_with_a_token_provider(oauth_broker, keys):
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.net.sasl.oauth import AbstractTokenProvider

    user, topic, group = "svc-kp", uniq("oauth-kp"), uniq("oauth-kpg")
    create_topic(oauth_broker, topic)
    grant(oauth_broker, f"User:{user}", topic=topic, group=group)

    class Provider(AbstractTokenProvider):
        def token(self):
            return keys.rsa.token(user)[0]

    common = dict(bootstrap_servers=oauth_broker.listener_bootstrap("SASL_PLAINTEXT"),
                  security_protocol="SASL_PLAINTEXT", sasl_mechanism="OAUTHBEARER",
                  sasl_oauth_token_provider=Provider())
    wait_for(lambda: produce_error(oauth_broker, lambda: keys.rsa.token(user), topic) is None,
             f"User:{user} may write")
    producer = KafkaProducer(**common)
    for i in range(10):
        producer.send(topic, f"k{i}".encode()).get(timeout=OP_TIMEOUT)
    producer.close()
    consumer = KafkaConsumer(topic, group_id=group, auto_offset_reset="earliest",
                             consumer_timeout_ms=int(OP_TIMEOUT * 1000), **common)
    got = []  # after the probes' b"v" records
    for m in consumer:
        if m.value != b"v":
            got.append(m.value)
        if len(got) == 10:
            break
    consumer.close()
    assert got == [f"k{i}".encode() for i in range(10)]


def test_invalid_tokens_are_authentication_errors_and_the_broker_serves_on(oauth_broker, keys):
    def expired():
        # librdkafka refuses a token whose lifetime it is told has passed: it is told
        # a future one, the broker sees the token's own.
        token, _ = keys.rsa.token("svc-x", lifetime_s=-300)
        return token, time.time() + 600

    bad = {
        "expired": expired,
        "another key": lambda: keys.stranger.token("svc-x", header={"kid": "rsa-1"}),
        "unknown kid": lambda: keys.stranger.token("svc-x"),
        "another audience": lambda: keys.rsa.token("svc-x", aud="someone-else"),
        "another issuer": lambda: keys.rsa.token("svc-x", iss="https://evil.test"),
        "unsigned": lambda: unsigned_token("svc-x"),
    }
    for what, make_token in bad.items():
        ok, errors = authenticates(oauth_broker, make_token)
        assert not ok, what
        auth = [e for e in errors if e.code() == KafkaError._AUTHENTICATION]
        assert auth, (what, errors)
        assert "invalid_token" in auth[0].str(), (what, auth[0].str())
    # The broker is unharmed: a good token still authenticates.
    ok, errors = authenticates(oauth_broker, lambda: keys.rsa.token("svc-x"))
    assert ok, errors


def test_acls_apply_to_the_tokens_subject(oauth_broker, keys):
    topic = uniq("oauth-acl")
    create_topic(oauth_broker, topic)
    mallory = lambda: keys.ec.token("mallory")  # noqa: E731
    err = produce_error(oauth_broker, mallory, topic)
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, err
    grant(oauth_broker, "User:mallory", topic=topic, operation=AclOperation.WRITE)
    wait_for(lambda: produce_error(oauth_broker, mallory, topic) is None,
             "User:mallory may write once granted")
    # Another subject with the same key is still refused.
    err = produce_error(oauth_broker, lambda: keys.ec.token("trudy"), topic)
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, err


def test_a_session_ends_with_its_token(oauth_broker, keys):
    """Without connections.max.reauth.ms a session lasts its token's remaining life (Kafka's
    rule): SaslAuthenticate v1 tells it, requests are served until then, and the connection's
    first request after the token expired closes it."""
    from test_sasl import (closed_by_peer, read_sasl_authenticate, request_frame,
                           sasl_authenticate_frame, sasl_handshake, sasl_socket)

    token, exp = keys.rsa.token("svc-session", lifetime_s=3)
    metadata_v1_all_topics = request_frame(3, 1, 3, struct.pack(">i", -1))
    with sasl_socket(oauth_broker) as s:
        assert sasl_handshake(s, "OAUTHBEARER")[0] == 0
        s.sendall(sasl_authenticate_frame(f"n,,\x01auth=Bearer {token}\x01\x01".encode(), 2))
        correlation_id, code, message, lifetime = read_sasl_authenticate(s)
        assert (correlation_id, code) == (2, 0), message
        assert 0 < lifetime <= 3000, lifetime
        s.sendall(metadata_v1_all_topics)
        size = struct.unpack(">i", s.recv(4, socket.MSG_WAITALL))[0]
        assert struct.unpack(">i", s.recv(size, socket.MSG_WAITALL)[:4])[0] == 3
        # Wait out the token (exp is whole seconds), then ask again.
        time.sleep(max(0.0, exp - time.time()) + 0.5)
        s.sendall(metadata_v1_all_topics)
        assert closed_by_peer(s)
