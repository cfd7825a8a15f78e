"""asyncio face of shoal: ``AIOProducer`` and ``AIOShareConsumer`` (confluent-kafka's
``confluent_kafka.aio`` names), awaitable versions of ``Producer`` and ``ShareConsumer``.

Each call runs the blocking call of the sync API in a thread of the object's executor
(``loop.run_in_executor``); the sync API releases the GIL while it waits on the network, so
the event loop and other threads run meanwhile. The client is made on first use, in the
executor (``async with`` makes it at once, so a bad config raises there)::

    async with AIOProducer({"bootstrap.servers": "127.0.0.1:9092"}) as producer:
        delivered = await producer.produce("orders", value=b"order 1")
        message = await delivered     # the record written, or its exception raised

    async with AIOShareConsumer({"bootstrap.servers": "127.0.0.1:9092",
                                 "group.id": "workers"}) as consumer:
        await consumer.subscribe(["orders"])
        for m in await consumer.poll(1.0):
            ...

Errors are the sync API's exceptions (``shoal.KafkaException`` and its subclasses). A
cancelled await stops waiting at once; the call it started runs to its end in its thread
(bounded by its timeout), so give ``poll`` a timeout.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
from typing import TYPE_CHECKING, Any, Callable, Generic, List, Mapping, Optional, Sequence, TypeVar

from . import _shoal
from ._errors import FatalError, KafkaException
from ._shoal import AcknowledgeType, Message, ShareAcknowledgements, ShareGroupMetadata

if TYPE_CHECKING:  # aliases of the stubs only
    from ._shoal import ConfigValue, Headers, Payload

__all__ = ["AIOProducer", "AIOShareConsumer"]

T = TypeVar("T")
C = TypeVar("C", _shoal.Producer, _shoal.ShareConsumer)


class _Async(Generic[C]):
    """A sync client made and called in an executor's threads."""

    def __init__(self, make: Callable[[], C], max_workers: int,
                 executor: Optional[concurrent.futures.Executor]) -> None:
        self._own_executor = executor is None
        self._executor = executor or concurrent.futures.ThreadPoolExecutor(
            max_workers=max_workers, thread_name_prefix="shoal-aio")
        self._make: Callable[[], C] = make
        self._made: Optional[asyncio.Future[C]] = None
        self._closed = False

    async def _run(self, f: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(
            self._executor, functools.partial(f, *args))

    async def _client(self) -> C:
        if self._made is None:
            if self._closed:
                raise FatalError("the client is closed", "_CLOSED", -1)
            self._made = asyncio.ensure_future(self._run(self._make))
        return await asyncio.shield(self._made)

    async def _call(self, method: Callable[..., T], *args: Any) -> T:
        """``method`` (the sync class's, unbound) on the client, in the executor."""
        client = await self._client()
        return await self._run_live(method, client, *args)

    async def _run_live(self, f: Callable[..., T], *args: Any) -> T:
        if self._closed:  # the sync client raises FatalError _CLOSED without waiting
            return f(*args)
        return await self._run(f, *args)

    async def close(self) -> None:
        """Closes the client (as the sync ``close()``) and the executor this object made;
        later calls raise FatalError named ``_CLOSED``. Closing twice is harmless."""
        if self._closed:
            return
        self._closed = True
        if self._made is not None:
            try:
                client = await self._client()
            except KafkaException:
                client = None  # never connected: nothing to close
            if client is not None:
                await self._run(client.close)
        if self._own_executor:
            self._executor.shutdown(wait=False)


class AIOProducer(_Async[_shoal.Producer]):
    """An awaitable ``shoal.Producer`` (same config keys and transactions).

    ``produce`` returns once the record is accepted (batched) with an ``asyncio.Future``
    that resolves to the delivered ``Message`` or raises the delivery's exception; a task
    of this object serves the deliveries meanwhile. ``max_workers`` threads run the calls
    (or those of ``executor``).
    """

    def __init__(self, producer_conf: Mapping[str, ConfigValue], max_workers: int = 4,
                 executor: Optional[concurrent.futures.Executor] = None) -> None:
        conf = dict(producer_conf)
        super().__init__(lambda: _shoal.Producer(conf), max_workers, executor)
        self._pump: Optional[asyncio.Task[None]] = None

    async def __aenter__(self) -> "AIOProducer":
        await self._client()
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.close()

    async def produce(self, topic: str, value: Payload = None, key: Payload = None,
                      partition: int = -1, timestamp: int = 0,
                      headers: Headers = None) -> asyncio.Future[Message]:
        """Sends a record (as ``Producer.produce``); returns its delivery as a future."""
        loop = asyncio.get_running_loop()
        delivered: asyncio.Future[Message] = loop.create_future()

        def settle(err: Optional[KafkaException], message: Message) -> None:
            if delivered.done():  # cancelled by its awaiter
                return
            if err is None:
                delivered.set_result(message)
            else:
                delivered.set_exception(err)

        def report(err: Optional[KafkaException], message: Message) -> None:
            loop.call_soon_threadsafe(settle, err, message)

        client = await self._client()
        await self._run_live(client.produce, topic, value, key, partition, report,
                           timestamp, headers)
        if self._pump is None or self._pump.done():
            self._pump = asyncio.ensure_future(self._serve(client))
        return delivered

    async def _serve(self, client: Any) -> None:
        """Serves delivery reports while some are due."""
        while len(client) > 0:
            await self._run(client.poll, 0.1)

    async def poll(self, timeout: float = 0.0) -> int:
        """Serves finished deliveries (their futures resolve); how many."""
        return await self._call(_shoal.Producer.poll, timeout)

    async def flush(self, timeout: Optional[float] = None) -> int:
        """Waits until every record is written or failed; the deliveries still due."""
        return await self._call(_shoal.Producer.flush, timeout)

    async def init_transactions(self) -> None:
        await self._call(_shoal.Producer.init_transactions)

    async def begin_transaction(self) -> None:
        await self._call(_shoal.Producer.begin_transaction)

    async def send_offsets_to_transaction(self, positions: Sequence[Any],
                                          group_metadata: str) -> None:
        await self._call(_shoal.Producer.send_offsets_to_transaction, positions,
                         group_metadata)

    async def send_share_acknowledgements_to_transaction(
            self, acknowledgements: ShareAcknowledgements,
            metadata: ShareGroupMetadata) -> None:
        """KIP-1289: stages the acknowledgements in the open transaction."""
        await self._call(_shoal.Producer.send_share_acknowledgements_to_transaction,
                         acknowledgements, metadata)

    async def commit_transaction(self) -> None:
        await self._call(_shoal.Producer.commit_transaction)

    async def abort_transaction(self) -> None:
        await self._call(_shoal.Producer.abort_transaction)

    async def close(self) -> None:
        """Sends what is buffered, serves the last deliveries and closes."""
        await super().close()
        if self._pump is not None:
            await asyncio.gather(self._pump, return_exceptions=True)

    def __len__(self) -> int:
        """Deliveries still due (0 before the first call)."""
        made = self._made
        if made is None or not made.done() or made.exception() is not None:
            return 0
        return len(made.result())


class AIOShareConsumer(_Async[_shoal.ShareConsumer]):
    """An awaitable ``shoal.ShareConsumer`` (same config keys; explicit acknowledgement
    and the acknowledgements for a transaction). Its calls run one at a time in one thread
    (or in ``executor``'s)."""

    def __init__(self, consumer_conf: Mapping[str, ConfigValue],
                 executor: Optional[concurrent.futures.Executor] = None) -> None:
        conf = dict(consumer_conf)
        super().__init__(lambda: _shoal.ShareConsumer(conf), 1, executor)

    async def __aenter__(self) -> "AIOShareConsumer":
        await self._client()
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.close()

    async def subscribe(self, topics: Sequence[str]) -> None:
        await self._call(_shoal.ShareConsumer.subscribe, list(topics))

    async def poll(self, timeout: Optional[float] = None) -> List[Message]:
        """Records, waiting up to ``timeout`` seconds for some (empty when none came)."""
        return await self._call(_shoal.ShareConsumer.poll, timeout)

    async def acknowledge(self, message: Message,
                          type: AcknowledgeType = AcknowledgeType.ACCEPT) -> None:
        await self._call(_shoal.ShareConsumer.acknowledge, message, type)

    async def acknowledgements_for_transaction(self) -> ShareAcknowledgements:
        return await self._call(_shoal.ShareConsumer.acknowledgements_for_transaction)

    async def share_group_metadata(self) -> ShareGroupMetadata:
        return await self._call(_shoal.ShareConsumer.share_group_metadata)

    async def commit_sync(self) -> None:
        await self._call(_shoal.ShareConsumer.commit_sync)
