"""A dead-letter queue that is exactly-once (KIP-1289 with Kafka 4.4's share-group
dead-letter queues, KIP-1191), the Python twin of shoal-client's ``atomic_dead_letter``
example, with the same flags and output.

It reads INPUT as a member of share group GROUP (explicit acknowledgement) and checks each
record's value. A value that is a decimal integer is transformed (its double, as a decimal,
key and headers kept), written to OUTPUT and ACCEPTed; any other value is REJECTed, and the
broker writes its dead letter to DEAD_LETTER (the original key and value with Kafka's
``__dlq.errors.*`` headers saying where it came from) inside the same transaction as the
outputs and the acknowledgements. A transaction holds up to N records
(``--records-per-txn``, default 100; earlier when a poll comes back empty), so a bad record
is in the dead-letter topic, to read_committed readers, exactly when its rejection commits:
never for an aborted transaction, never twice. It runs until killed, printing one line per
commit to stderr: ``committed R records (A accepted, D dead-lettered) in transaction T``::

    python crates/python/examples/atomic_dead_letter.py \\
        --bootstrap 127.0.0.1:9092 --input amounts --output amounts-doubled \\
        --dead-letter dlq.amounts --group amount-workers \\
        --transactional-id amount-worker-1 [--records-per-txn 100]

First it creates DEAD_LETTER if missing and enables it for dead letters (topic config
``errors.deadletterqueue.group.enable=true``), then sets the group's
``errors.deadletterqueue.topic.name`` to it, ``errors.deadletterqueue.copy.record.enable`` to
``true`` and ``share.auto.offset.reset`` to ``earliest``. The name must start with the
broker's ``errors.deadletterqueue.topic.name.prefix`` (``dlq.`` unless configured otherwise)
or the broker writes no dead letter, as Kafka does. Abortable errors abort the transaction and
go on, others exit non-zero.
"""

import sys

from shoal import (AcknowledgeType, AdminClient, KafkaException, NewTopic, Producer,
                   ShareAcknowledgements)
from support import I64_MAX, I64_MIN, Flags, decimal, explicit_consumer, fail, poll

CLIENT_ID = "shoal-example-atomic-dead-letter"
USAGE = ("usage: atomic_dead_letter --bootstrap B --input IN --output OUT "
         "--dead-letter DLQ --group G --transactional-id TID [--records-per-txn N]")
GROUP_ENABLE = "errors.deadletterqueue.group.enable"


def judge(m, output):
    """The check and the transformation: a decimal integer doubles (returns the output
    record's topic, value and headers); anything else is a dead letter (None: rejected, and
    the broker writes it)."""
    n = decimal(m.value())
    if n is not None and I64_MIN <= 2 * n <= I64_MAX:
        return output, str(2 * n).encode(), list(m.headers() or [])
    return None


def configure_dead_letters(bootstrap, group, dead_letter):
    """Makes ``dead_letter`` a dead-letter topic (created when missing, enabled for share
    groups) and ``group``'s dead-letter queue, copying the rejected records' keys and
    values."""
    with AdminClient({"bootstrap.servers": bootstrap}) as admin:
        created = admin.create_topics([NewTopic(dead_letter, config={GROUP_ENABLE: "true"})])
        try:
            created[dead_letter].result()
        except KafkaException as e:
            if e.name != "TOPIC_ALREADY_EXISTS":
                raise
        # An existing topic may not be enabled yet.
        admin.set_topic_configs(dead_letter, {GROUP_ENABLE: "true"})
        admin.set_group_configs(group, {
            "share.auto.offset.reset": "earliest",
            "errors.deadletterqueue.topic.name": dead_letter,
            "errors.deadletterqueue.copy.record.enable": "true",
        })


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

    configure_dead_letters(bootstrap, group, dead_letter)
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
            judged = judge(m, output)
            if judged is None:
                # The broker writes the dead letter when these acknowledgements are staged.
                txn.rejected += 1
                consumer.acknowledge(m, AcknowledgeType.REJECT)
                continue
            to, value, headers = judged
            txn.accepted += 1
            try:
                producer.produce(to, value=value, key=m.key(), headers=headers)
                failed = None
            except KafkaException as e:
                failed = e
            consumer.acknowledge(m, AcknowledgeType.ACCEPT)
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
