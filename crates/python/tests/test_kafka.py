"""Against Apache Kafka (INTEROP_TARGET=kafka), which has share groups but not KIP-1289:
staging share acknowledgements in a transaction fails fast with UnsupportedVersionError
(nothing sent, nothing committed), the rest of the package works (the other test files run
there too)."""

import time

import pytest
import shoal
from conftest import create_topics, earliest_group, poll_all
from test_exactly_once import committed_values, explicit, produce_inputs

pytestmark = pytest.mark.kafka_only
FAST = 5.0  # seconds: an answer from ApiVersions, not a timeout


def polled_acknowledgements(broker, group, inp, n):
    """An explicit consumer holding `n` polled, ACCEPTed and drained records."""
    c = explicit(broker, group)
    c.subscribe([inp])
    got = poll_all(c, n, ack=lambda m: shoal.AcknowledgeType.ACCEPT)
    assert len(got) == n
    return c, c.acknowledgements_for_transaction()


def test_transactional_acknowledgements_fail_fast(broker, names):
    inp, out, group = names("in"), names("out"), names("g")
    create_topics(broker, inp, out)
    earliest_group(broker, group)
    produce_inputs(broker, inp, 5)
    c, acks = polled_acknowledgements(broker, group, inp, 5)
    with c, shoal.Producer({"bootstrap.servers": broker.bootstrap,
                            "transactional.id": names("tid")}) as p:
        p.init_transactions()  # transactions themselves work
        p.begin_transaction()
        p.produce(out, value=b"never committed")
        started = time.monotonic()
        with pytest.raises(shoal.UnsupportedVersionError) as e:
            p.send_share_acknowledgements_to_transaction(acks, c.share_group_metadata())
        assert time.monotonic() - started < FAST
    assert isinstance(e.value, shoal.FatalError) and e.value.fatal()
    assert (e.value.name, e.value.code) == ("UNSUPPORTED_VERSION", 35)
    assert "TxnShareAcknowledge" in str(e.value), str(e.value)
    assert committed_values(broker, out, 0, timeout=5) == []


def test_the_acknowledger_fails_fast_too(broker, names):
    inp, group = names("in"), names("g")
    create_topics(broker, inp)
    earliest_group(broker, group)
    produce_inputs(broker, inp, 3)
    c, acks = polled_acknowledgements(broker, group, inp, 3)
    with c, shoal.TransactionalShareAcknowledger({"bootstrap.servers": broker.bootstrap,
                                                  "transactional.id": names("tid")}) as acker:
        acker.init_transactions()
        started = time.monotonic()
        with pytest.raises(shoal.UnsupportedVersionError) as e:
            acker.commit_acknowledgements(acks, c.share_group_metadata())
        assert time.monotonic() - started < FAST
    assert e.value.name == "UNSUPPORTED_VERSION"
