"""shoal.aio: the awaitable producer and share consumer, run with asyncio.run (the event
loop keeps running while they wait)."""

import asyncio
import time

import pytest
import shoal
from conftest import create_topics, earliest_group
from shoal.aio import AIOProducer, AIOShareConsumer
from test_exactly_once import committed_values, produce_inputs, redelivered

N = 100


async def poll_all(consumer, count, timeout=30.0, ack=None):
    got, deadline = [], time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        for m in await consumer.poll(0.5):
            got.append(m)
            if ack is not None:
                await consumer.acknowledge(m, ack)
    return got


def test_produce_and_consume(broker, names):
    topic, group = names("t"), names("g")
    create_topics(broker, topic)
    earliest_group(broker, group)

    async def main():
        async with AIOProducer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5}) as p:
            deliveries = [await p.produce(topic, value=f"v{i}", key=f"k{i}",
                                          headers=[("i", str(i))]) for i in range(N)]
            delivered = await asyncio.wait_for(asyncio.gather(*deliveries), 30)
        async with AIOShareConsumer({"bootstrap.servers": broker.bootstrap,
                                     "group.id": group}) as c:
            await c.subscribe([topic])
            got = await poll_all(c, N)
            await c.commit_sync()
        return delivered, got

    delivered, got = asyncio.run(main())
    assert [m.offset() for m in delivered] == list(range(N))
    assert sorted((m.offset(), m.value(), m.key(), m.headers()) for m in got) == [
        (i, f"v{i}".encode(), f"k{i}".encode(), [("i", str(i).encode())]) for i in range(N)]


def test_the_loop_runs_while_poll_waits(broker, names):
    topic = names("t")
    create_topics(broker, topic)

    async def main():
        ticks = 0

        async def tick():
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.001)

        async with AIOShareConsumer({"bootstrap.servers": broker.bootstrap,
                                     "group.id": names("g")}) as c:
            await c.subscribe([topic])
            ticker = asyncio.ensure_future(tick())
            before = ticks
            assert await c.poll(1.0) == []
            during = ticks - before
            ticker.cancel()
        return during

    during = asyncio.run(main())
    assert during > 100, during


def test_a_failed_delivery_raises_from_its_future(broker, names):
    """The broker refuses a record larger than the topic's max.message.bytes."""
    topic = names("t")
    with shoal.AdminClient({"bootstrap.servers": broker.bootstrap}) as admin:
        (future,) = admin.create_topics(
            [shoal.NewTopic(topic, 1, config={"max.message.bytes": "1000"})]).values()
        assert future.result(timeout=0) is None

    async def main():
        async with AIOProducer({"bootstrap.servers": broker.bootstrap}) as p:
            small = await p.produce(topic, value=b"x" * 10)
            await p.flush(30)
            large = await p.produce(topic, value=b"x" * 5000)
            await p.flush(30)
            with pytest.raises(shoal.KafkaException) as e:
                await asyncio.wait_for(large, 30)
            return (await small).offset(), e.value

    offset, e = asyncio.run(main())
    assert offset == 0
    assert e.name in ("MESSAGE_TOO_LARGE", "RECORD_LIST_TOO_LARGE"), e


def test_misuse_raises_the_sync_exceptions(broker):
    async def main():
        with pytest.raises(shoal.FatalError) as e:
            async with AIOProducer({"bootstrap.servers": broker.bootstrap, "bad.key": 1}):
                pass
        assert e.value.name == "INVALID_CONFIG"
        p = AIOProducer({"bootstrap.servers": broker.bootstrap})
        await p.flush(5)
        await p.close()
        await p.close()  # twice: harmless
        with pytest.raises(shoal.FatalError) as e:
            await p.produce("t", value=b"late")
        assert e.value.name == "_CLOSED"
        c = AIOShareConsumer({"bootstrap.servers": broker.bootstrap, "group.id": "g"})
        await c.close()  # never used
        with pytest.raises(shoal.FatalError) as e:
            await c.poll(0.1)
        assert e.value.name == "_CLOSED"

    asyncio.run(main())


@pytest.mark.shoal_only
def test_exactly_once_with_asyncio(broker, names):
    """One transaction: the outputs and the inputs' acknowledgements commit together."""
    n = 20
    inp, out, group = names("in"), names("out"), names("g")
    create_topics(broker, inp, out)
    earliest_group(broker, group)
    produce_inputs(broker, inp, n)

    async def main():
        async with AIOProducer({"bootstrap.servers": broker.bootstrap,
                                "transactional.id": names("tid")}) as p, \
                AIOShareConsumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                                  "share.acknowledgement.mode": "explicit",
                                  "share.acquire.mode": "record_limit"}) as c:
            await p.init_transactions()
            await c.subscribe([inp])
            await p.begin_transaction()
            got = []
            while len(got) < n:
                records = await c.poll(5.0)
                assert records, "no records"
                for m in records:
                    await p.produce(out, value=b"processed:" + m.value())
                    await c.acknowledge(m, shoal.AcknowledgeType.ACCEPT)
                got += records
            acks = await c.acknowledgements_for_transaction()
            await p.send_share_acknowledgements_to_transaction(
                acks, await c.share_group_metadata())
            await p.commit_transaction()
            return len(acks)

    assert asyncio.run(main()) == n
    assert sorted(committed_values(broker, out, n)) == sorted(
        f"processed:in-{i}" for i in range(n))
    assert redelivered(broker, group, inp) == []
