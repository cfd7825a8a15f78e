"""Misuse raises the documented exception (with the Kafka error name) and the client, and
the interpreter, go on."""

import pytest
import shoal
from conftest import create_topics, earliest_group, poll_all
from shoal import AbortableError, FatalError, KafkaException


def test_exception_classes_mirror_the_client():
    for cls in (FatalError, AbortableError, shoal.RetriableError):
        assert issubclass(cls, KafkaException)
    e = AbortableError("m", "INVALID_TXN_STATE", 48)
    assert (e.name, e.code, e.txn_requires_abort(), e.fatal(), e.retriable()) == (
        "INVALID_TXN_STATE", 48, True, False, False)


def test_bad_config(broker):
    with pytest.raises(FatalError) as e:
        shoal.Producer({"bootstrap.servers": broker.bootstrap, "no.such.key": "1"})
    assert e.value.name == "INVALID_CONFIG" and "no.such.key" in str(e.value)
    with pytest.raises(FatalError) as e:
        shoal.ShareConsumer({"bootstrap.servers": broker.bootstrap, "group.id": "g",
                             "share.acknowledgement.mode": "sometimes"})
    assert e.value.name == "INVALID_CONFIG"
    with pytest.raises(TypeError):
        shoal.Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": [5]})


def test_transaction_calls_out_of_order(broker, names):
    p = shoal.Producer({"bootstrap.servers": broker.bootstrap,
                        "transactional.id": names("tid")})
    with pytest.raises(AbortableError) as e:
        p.begin_transaction()  # before init_transactions
    assert e.value.name == "INVALID_TXN_STATE"
    p.init_transactions()
    with pytest.raises(AbortableError) as e:
        p.commit_transaction()  # without begin
    assert e.value.name == "INVALID_TXN_STATE"
    p.begin_transaction()
    with pytest.raises(AbortableError):
        p.begin_transaction()  # twice
    p.abort_transaction()  # the producer goes on
    p.begin_transaction()
    p.commit_transaction()
    p.close()
    with pytest.raises(FatalError, match="closed") as e:
        p.produce("t", value=b"late")
    assert e.value.name == "_CLOSED"
    p.close()  # twice: harmless


def test_idempotent_producer_has_no_transactions(broker):
    with shoal.Producer({"bootstrap.servers": broker.bootstrap}) as p:
        with pytest.raises(FatalError) as e:
            p.init_transactions()
        assert e.value.name == "INVALID_CONFIG"


def test_acknowledgement_misuse(broker, names):
    topic, group = names("t"), names("g")
    create_topics(broker, topic)
    earliest_group(broker, group)
    reports = []
    with shoal.Producer({"bootstrap.servers": broker.bootstrap}) as p:
        for i in range(3):
            p.produce(topic, value=str(i), on_delivery=lambda err, m: reports.append(m))
        p.flush(30)
    with pytest.raises(TypeError):
        shoal.ShareAcknowledgements().add(reports[0])  # a delivery report is no share record
    with shoal.ShareConsumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                              "share.acknowledgement.mode": "explicit"}) as c:
        c.subscribe([topic])
        got = poll_all(c, 3)
        assert len(got) == 3
        with pytest.raises(AbortableError) as e:
            c.poll(0.1)  # explicit mode: the last poll's records are unacknowledged
        assert e.value.name == "INVALID_RECORD_STATE"
        acks = shoal.ShareAcknowledgements()
        with pytest.raises(AbortableError):
            acks.add(got[0], shoal.AcknowledgeType.RELEASE)  # not transactional
        acks.add(got[0])
        with pytest.raises(AbortableError):
            acks.add(got[0])  # twice
        assert len(acks) == 1
        for m in got:
            c.acknowledge(m, shoal.AcknowledgeType.ACCEPT)
        c.commit_sync()
    with pytest.raises(FatalError) as e:
        c.poll(0.1)
    assert e.value.name == "_CLOSED"


def test_acknowledge_in_implicit_mode(broker, names):
    topic, group = names("t"), names("g")
    create_topics(broker, topic)
    earliest_group(broker, group)
    with shoal.Producer({"bootstrap.servers": broker.bootstrap}) as p:
        p.produce(topic, value=b"x")
        p.flush(30)
    with shoal.ShareConsumer({"bootstrap.servers": broker.bootstrap, "group.id": group}) as c:
        c.subscribe([topic])
        (m,) = poll_all(c, 1)
        with pytest.raises(AbortableError) as e:
            c.acknowledge(m)
        assert e.value.name == "INVALID_RECORD_STATE"
        with pytest.raises(AbortableError):
            c.acknowledgements_for_transaction()


def test_a_callback_exception_propagates_from_flush(broker, names):
    topic = names("t")
    create_topics(broker, topic)

    def boom(err, msg):
        raise RuntimeError("from the callback")

    with shoal.Producer({"bootstrap.servers": broker.bootstrap}) as p:
        p.produce(topic, value=b"x", on_delivery=boom)
        with pytest.raises(RuntimeError, match="from the callback"):
            p.flush(30)
        assert p.flush(30) == 0


def test_acknowledger_needs_a_transactional_id(broker):
    with pytest.raises(FatalError) as e:
        shoal.TransactionalShareAcknowledger({"bootstrap.servers": broker.bootstrap})
    assert e.value.name == "INVALID_CONFIG"
