"""A dead-letter queue that is exactly-once (KIP-1289), the Python twin of shoal-client's
``atomic_dead_letter`` example, with the same flags and output.

It reads INPUT as a member of share group GROUP (explicit acknowledgement) and checks each
record's value. A value that is a decimal integer is transformed (its double, as a decimal,
key and headers kept), written to OUTPUT and ACCEPTed; any other value is written unchanged
to DEAD_LETTER, with headers saying where it came from and why (``dlq.source``,
``dlq.reason``), and REJECTed (archived: never delivered again). Outputs, dead letters and
both kinds of acknowledgement commit in one transaction of up to N records
(``--records-per-txn``, default 100; earlier when a poll comes back empty), so a bad record
is in the dead-letter topic exactly when it is rejected. It runs until killed, printing one
line per commit to stderr:
``committed R records (A accepted, D dead-lettered) in transaction T``::

    python crates/python/examples/atomic_dead_letter.py \\
        --bootstrap 127.0.0.1:9092 --input amounts --output amounts-doubled \\
        --dead-letter amounts-dlq --group amount-workers \\
        --transactional-id amount-worker-1 [--records-per-txn 100]

It sets the group's ``share.auto.offset.reset`` to ``earliest`` first; abortable errors
abort the transaction and go on, others exit non-zero.
"""

import sys

from shoal import AcknowledgeType, KafkaException, Producer, ShareAcknowledgements
from support import (I64_MAX, I64_MIN, Flags, decimal, explicit_consumer, fail, poll,
                     start_at_earliest)

CLIENT_ID = "shoal-example-atomic-dead-letter"
USAGE = ("usage: atomic_dead_letter --bootstrap B --input IN --output OUT "
         "--dead-letter DLQ --group G --transactional-id TID [--records-per-txn N]")
REASON = "value is not a decimal integer"


def judge(m, output, dead_letter):
    """The check and the transformation: a decimal integer doubles; anything else is a dead
    letter. Returns the record to write (topic, value, headers) and the acknowledgement."""
    n = decimal(m.value())
    headers = list(m.headers() or [])
    if n is not None and I64_MIN <= 2 * n <= I64_MAX:
        return output, str(2 * n).encode(), headers, AcknowledgeType.ACCEPT
    headers += [("dlq.source", f"{m.topic()}-{m.partition()}@{m.offset()}"),
                ("dlq.reason", REASON)]
    return dead_letter, m.value(), headers, AcknowledgeType.REJECT


class Open:
    """The open transaction."""

    def __init__(self, metadata):
        self.acks, self.metadata = ShareAcknowledgements(), metadata
        self.accepted = self.rejected = 0

    def __len__(self):
        return self.accepted + self.rejected


class Totals:
    transactions = 0


def finish(producer, txn, totals):
    """Stages the acknowledgements and commits; on an abortable error aborts instead."""
    try:
        producer.send_share_acknowledgements_to_transaction(txn.acks, txn.metadata)
        producer.commit_transaction()
    except KafkaException as e:
        return abort_on(producer, e, len(txn))
    totals.transactions += 1
    print(f"committed {len(txn)} records ({txn.accepted} accepted, {txn.rejected} "
          f"dead-lettered) in transaction {totals.transactions}", file=sys.stderr)


def abort_on(producer, e, records):
    """Aborts after an abortable error (the records come back); others end the worker."""
    if not e.txn_requires_abort():
        fail(f"transaction failed ({e.name}({e.code})): {e}")
    print(f"aborting a transaction of {records} records: {e}", file=sys.stderr)
    producer.abort_transaction()


def main():
    flags = Flags(USAGE)
    bootstrap, topic, output, dead_letter, group, transactional_id = (
        flags.required(name) for name in ("bootstrap", "input", "output", "dead-letter",
                                          "group", "transactional-id"))
    records_per_txn = flags.number("records-per-txn", 100)

    start_at_earliest(bootstrap, group)
    producer = Producer({"bootstrap.servers": bootstrap, "client.id": CLIENT_ID,
                         "transactional.id": transactional_id, "linger.ms": 5})
    producer.init_transactions()
    consumer = explicit_consumer(bootstrap, group, topic, CLIENT_ID, min(records_per_txn, 500))

    txn, totals = None, Totals()
    while True:
        records = poll(consumer, 0.5)
        if not records:
            if txn is not None:
                finish(producer, txn, totals)
                txn = None
            continue
        for m in records:
            # A transaction holds N records at most, even when a poll brings more.
            if txn is not None and len(txn) >= records_per_txn:
                txn.acks.extend(consumer.acknowledgements_for_transaction())
                finish(producer, txn, totals)
                txn = None
            if txn is None:
                producer.begin_transaction()
                txn = Open(consumer.share_group_metadata())
            to, value, headers, ack = judge(m, output, dead_letter)
            if ack == AcknowledgeType.ACCEPT:
                txn.accepted += 1
            else:
                txn.rejected += 1
            try:
                producer.produce(to, value=value, key=m.key(), headers=headers)
                failed = None
            except KafkaException as e:
                failed = e
            consumer.acknowledge(m, ack)
            if failed is not None:
                # Drained and dropped: sent by no one, the records come back.
                consumer.acknowledgements_for_transaction()
                abort_on(producer, failed, len(txn))
                txn = None
        # Drained before the next poll, which would otherwise carry them (not
        # transactional); once per poll, as draining walks every record the consumer holds.
        if txn is not None:
            txn.acks.extend(consumer.acknowledgements_for_transaction())


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit(130)
    except KafkaException as e:  # as the Rust example's `main` returning the error
        fail(e)
