"""An exactly-once queue pipeline (KIP-1289), the Python twin of shoal-client's
``exactly_once_pipeline`` example, with the same flags and output.

It reads INPUT as a member of share group GROUP (explicit acknowledgement), writes each
record to OUTPUT as ``processed:`` + its value (key and headers kept), and commits the
outputs with the ACCEPT acknowledgements of their inputs in one transaction of up to N
records (``--records-per-txn``, default 100; a transaction is committed earlier when a poll
comes back empty). It runs until killed, printing one line per commit to stderr:
``committed R records in transaction T (total C) in D ms``, D being the duration of the
commit step (staging the acknowledgements and committing)::

    python crates/python/examples/exactly_once_pipeline.py \\
        --bootstrap 127.0.0.1:9092 --input orders --output orders-processed \\
        --group order-workers --transactional-id order-worker-1 [--records-per-txn 100]

Run several with the same group and different transactional ids to share the work; a
restarted worker must reuse its transactional id, which fences its old instance and aborts
the transaction it left open (the records come back). The group's
``share.auto.offset.reset`` is set to ``earliest`` first, so that what is already queued is
processed.

Errors: an abortable one (STALE_MEMBER_EPOCH after a rebalance, INVALID_RECORD_STATE after
a lock expired, a failed send) aborts the transaction and goes on: its records are
redelivered. A fatal one (PRODUCER_FENCED) and any other failure exit non-zero.

``--broken-skip-acknowledgements`` commits the outputs but never acknowledges the inputs (a
deliberately wrong pipeline, for testing checkers). ``--at-least-once`` is the
non-transactional baseline: outputs flushed, then the inputs acknowledged ACCEPT (RELEASE
for one whose output failed) and committed every N records (or on an empty poll), printing
``committed R records in batch T (total C) in D ms``.
"""

import sys
import time

from shoal import (AcknowledgeType, AdminClient, KafkaException, Producer, RetriableError,
                   ShareAcknowledgements, ShareConsumer)

PREFIX = b"processed:"
CLIENT_ID = "shoal-example-exactly-once-pipeline"
USAGE = ("usage: exactly_once_pipeline --bootstrap B --input IN --output OUT "
         "--group G --transactional-id TID [--records-per-txn N] [--at-least-once]")
SWITCHES = ("broken-skip-acknowledgements", "at-least-once")
REQUIRED = ("bootstrap", "input", "output", "group", "transactional-id")


def parse_flags(argv):
    """``--name value`` pairs and bare ``--switch``es; exits with the usage on a mistake,
    with the Rust example's messages."""
    values, switches, args = {}, set(), iter(argv)
    for flag in args:
        if not flag.startswith("--"):
            sys.exit(f"Error: unexpected argument {flag}\n{USAGE}")
        name = flag[2:]
        if name in SWITCHES:
            switches.add(name)
            continue
        value = next(args, None)
        if value is None:
            sys.exit(f"Error: {flag} needs a value")
        values[name] = value
    for name in REQUIRED:
        if name not in values:
            sys.exit(f"Error: --{name} is required\n{USAGE}")
    n = values.get("records-per-txn", "100")
    if not n.isdigit():
        sys.exit(f"Error: --records-per-txn {n}")
    if int(n) == 0:
        sys.exit("Error: --records-per-txn must be at least 1")
    return values, switches, int(n)


def explicit_consumer(bootstrap, group, topic, max_poll_records):
    consumer = ShareConsumer({
        "bootstrap.servers": bootstrap, "client.id": CLIENT_ID, "group.id": group,
        "share.acknowledgement.mode": "explicit", "max.poll.records": max_poll_records,
        "share.acquire.mode": "record_limit",  # strictly: else whole batches are acquired
    })
    consumer.subscribe([topic])
    return consumer


def poll(consumer):
    """A poll; a retriable failure (the broker restarting) is no records after a pause."""
    try:
        return consumer.poll(0.5)
    except RetriableError as e:
        print(f"poll failed, retrying: {e}", file=sys.stderr)
        time.sleep(0.2)
        return []


def produce(producer, output, m, on_delivery=None):
    producer.produce(output, value=PREFIX + (m.value() or b""), key=m.key(),
                     headers=m.headers(), on_delivery=on_delivery)


class Open:
    """The open transaction: its acknowledgements so far and the member they belong to."""

    def __init__(self, metadata):
        self.acks, self.metadata, self.records = ShareAcknowledgements(), metadata, 0


class Totals:
    transactions = committed = 0


def drain(consumer, txn, skip_acknowledgements):
    """Moves the consumer's pending acknowledgements into the open transaction."""
    acks = consumer.acknowledgements_for_transaction()
    if not skip_acknowledgements:
        txn.acks.extend(acks)  # else dropped: the records' locks expire and they come back


def finish(producer, txn, totals):
    """Stages the acknowledgements and commits; on an abortable error aborts instead."""
    started = time.monotonic()
    try:
        if len(txn.acks):
            producer.send_share_acknowledgements_to_transaction(txn.acks, txn.metadata)
        producer.commit_transaction()
    except KafkaException as e:
        return abort_on(producer, e, txn.records)
    totals.transactions += 1
    totals.committed += txn.records
    print(f"committed {txn.records} records in transaction {totals.transactions} "
          f"(total {totals.committed}) in {(time.monotonic() - started) * 1e3:.1f} ms",
          file=sys.stderr)


def abort_on(producer, e, records):
    """Aborts after an abortable error (the records come back); others end the worker."""
    if not e.txn_requires_abort():
        sys.exit(f"Error: transaction failed ({e.name}({e.code})): {e}")
    print(f"aborting a transaction of {records} records: {e}", file=sys.stderr)
    producer.abort_transaction()


def exactly_once(flags, switches, n):
    producer = Producer({"bootstrap.servers": flags["bootstrap"], "client.id": CLIENT_ID,
                         "transactional.id": flags["transactional-id"], "linger.ms": 5})
    producer.init_transactions()
    consumer = explicit_consumer(flags["bootstrap"], flags["group"], flags["input"],
                                 min(n, 500))
    skip = "broken-skip-acknowledgements" in switches
    txn, totals = None, Totals()
    while True:
        records = poll(consumer)
        if not records:
            if txn is not None:
                finish(producer, txn, totals)
                txn = None
            continue
        for m in records:
            if txn is not None and txn.records >= n:  # N records at most per transaction
                drain(consumer, txn, skip)
                finish(producer, txn, totals)
                txn = None
            if txn is None:
                producer.begin_transaction()
                txn = Open(consumer.share_group_metadata())
            try:
                produce(producer, flags["output"], m)
                failed = None
            except KafkaException as e:
                failed = e
            consumer.acknowledge(m, AcknowledgeType.ACCEPT)
            txn.records += 1
            if failed is not None:
                consumer.acknowledgements_for_transaction()  # dropped: the records come back
                abort_on(producer, failed, txn.records)
                txn = None
        # Drained before the next poll, which would otherwise carry them (not transactional).
        if txn is not None:
            drain(consumer, txn, skip)


def at_least_once(flags, n):
    """The baseline: outputs flushed and acknowledged, then the inputs accepted."""
    producer = Producer({"bootstrap.servers": flags["bootstrap"], "client.id": CLIENT_ID,
                         "enable.idempotence": True, "acks": "all", "linger.ms": 5})
    consumer = explicit_consumer(flags["bootstrap"], flags["group"], flags["input"],
                                 min(n, 500))
    batches = committed = due = 0
    step = 0.0
    while True:
        records = poll(consumer)
        if records:
            written = [False] * len(records)

            def report(i):
                return lambda err, _m: written.__setitem__(i, err is None)

            for i, m in enumerate(records):
                try:
                    produce(producer, flags["output"], m, on_delivery=report(i))
                except KafkaException:
                    pass  # not written: released below
            started = time.monotonic()
            producer.flush()
            for ok, m in zip(written, records):
                consumer.acknowledge(m, AcknowledgeType.ACCEPT if ok else AcknowledgeType.RELEASE)
                due += ok
            step += time.monotonic() - started
        if due == 0 or (records and due < n):
            continue
        started = time.monotonic()
        try:
            consumer.commit_sync()
        except KafkaException as e:  # the records whose acknowledgement failed come back
            print(f"committing acknowledgements failed: {e}", file=sys.stderr)
            due, step = 0, 0.0
            continue
        step += time.monotonic() - started
        batches += 1
        committed += due
        print(f"committed {due} records in batch {batches} (total {committed}) in "
              f"{step * 1e3:.1f} ms", file=sys.stderr)
        due, step = 0, 0.0


def main():
    flags, switches, n = parse_flags(sys.argv[1:])
    with AdminClient({"bootstrap.servers": flags["bootstrap"]}) as admin:
        admin.set_group_configs(flags["group"], {"share.auto.offset.reset": "earliest"})
    if "at-least-once" in switches:
        at_least_once(flags, n)
    else:
        exactly_once(flags, switches, n)


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit(130)
    except KafkaException as e:  # as the Rust example's `main` returning the error
        sys.exit(f"Error: {e}")
