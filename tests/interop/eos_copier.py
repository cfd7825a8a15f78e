"""Transactional consume-transform-produce copier for test_eos.py (one process = one
copier instance; modelled on Kafka's TransactionalMessageCopier).

    python eos_copier.py BOOTSTRAP INPUT OUTPUT GROUP TXN_ID [--batch N] [--max-seconds S]

Loop: consume a batch (read_committed, group GROUP, no auto commit), begin a transaction,
produce each record to OUTPUT (same partition, value b"copy-" + value, key
"<in-partition>:<in-offset>"), send_offsets_to_transaction(position(assignment)),
commit_transaction. An abortable error aborts the transaction and rewinds the consumer to
the first offset of the batch; a retriable error is retried (bounded); anything fatal or
exhausted exits non-zero (4 when a call blocks past its timeout). SIGTERM finishes the
current iteration and exits 0.
Progress goes to stdout as `COMMIT n=<records in txn> total=<records this instance>`.
"""

import argparse
import faulthandler
import os
import signal
import sys
import threading
import time

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

RETRY_BUDGET = 120.0   # seconds a single transactional step may keep retrying
OP_TIMEOUT = 30.0
# librdkafka can block in send_offsets_to_transaction far past its timeout when a
# coordinator's broker handle was decommissioned during a broker restart
# (confluentinc/librdkafka#5456, #5511): a call stuck this long exits with code 4.
STUCK_CALL = OP_TIMEOUT + 15.0

current_call = None   # (name, started) of the transactional call in progress

stop = False


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def on_term(_sig, _frm):
    global stop
    stop = True


class Abortable(Exception):
    pass


def retrying(what, fn):
    """Run a transactional call: retry retriable errors for up to RETRY_BUDGET seconds,
    turn abortable errors into Abortable, let fatal ones propagate."""
    deadline = time.monotonic() + RETRY_BUDGET
    attempt = 0
    global current_call
    while True:
        attempt += 1
        try:
            current_call = (what, time.monotonic())
            return fn()
        except KafkaException as e:
            err = e.args[0]
            if err.fatal():
                log(f"FATAL in {what}: {err}")
                raise
            if err.txn_requires_abort():
                log(f"abortable error in {what}: {err}")
                raise Abortable(str(err)) from e
            if err.retriable() and time.monotonic() < deadline:
                log(f"retriable error in {what} (attempt {attempt}): {err}")
                time.sleep(min(1.0, 0.1 * attempt))
                continue
            log(f"giving up in {what}: {err} (retriable={err.retriable()})")
            raise
        finally:
            current_call = None


def watchdog():
    while True:
        time.sleep(1.0)
        call = current_call
        if call is not None and time.monotonic() - call[1] > STUCK_CALL:
            log(f"WATCHDOG: {call[0]} blocked for {time.monotonic() - call[1]:.0f}s -> exit 4")
            faulthandler.dump_traceback(all_threads=True)
            os._exit(4)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bootstrap")
    ap.add_argument("input")
    ap.add_argument("output")
    ap.add_argument("group")
    ap.add_argument("txn_id")
    ap.add_argument("--batch", type=int, default=100)
    ap.add_argument("--max-seconds", type=float, default=600.0)
    a = ap.parse_args()
    signal.signal(signal.SIGTERM, on_term)
    faulthandler.register(signal.SIGUSR1)  # the test dumps our stacks on a stall
    end_at = time.monotonic() + a.max_seconds
    threading.Thread(target=watchdog, daemon=True).start()

    def on_client_error(err):
        log(f"client error: {err}")
        if err.fatal():
            log("fatal client error -> exit 3")
            sys.stdout.flush()
            # a fatal error leaves the transactional producer unusable
            os._exit(3)

    common = {"bootstrap.servers": a.bootstrap, "socket.timeout.ms": 10000,
              "reconnect.backoff.ms": 100, "reconnect.backoff.max.ms": 1000,
              "error_cb": on_client_error, "log_level": 3,
              # With one broker, a restart means "all brokers down", which by default makes
              # librdkafka re-bootstrap and decommission the learned broker; a coordinator
              # cached on that handle then hangs send_offsets_to_transaction
              # (confluentinc/librdkafka#5511). The broker comes back at the same address.
              "metadata.recovery.strategy": "none"}
    if os.environ.get("EOS_COPIER_DEBUG"):   # librdkafka debug contexts, e.g. eos,cgrp
        common.update({"debug": os.environ["EOS_COPIER_DEBUG"], "log_level": 7})
    producer = Producer(dict(common, **{
        "transactional.id": a.txn_id,
        "transaction.timeout.ms": 60000,
        "linger.ms": 5,
        "message.timeout.ms": 60000,
    }))
    # Fence any previous instance with this transactional.id (aborting its open
    # transaction) before the consumer reads the group's committed offsets.
    retrying("init_transactions", lambda: producer.init_transactions(OP_TIMEOUT))
    log(f"init_transactions done (txn_id={a.txn_id})")

    def on_assign(_c, parts):
        log(f"assigned {[p.partition for p in parts]}")

    def on_revoke(_c, parts):
        log(f"revoked {[p.partition for p in parts]}")

    consumer = Consumer(dict(common, **{
        "group.id": a.group,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        "isolation.level": "read_committed",
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 1000,
        "max.poll.interval.ms": 120000,
    }))
    consumer.subscribe([a.input], on_assign=on_assign, on_revoke=on_revoke)

    total = 0
    txns = 0
    aborts = 0
    try:
        while not stop and time.monotonic() < end_at:
            msgs = []
            for m in consumer.consume(num_messages=a.batch, timeout=0.5):
                if m.error():
                    if m.error().fatal():
                        raise KafkaException(m.error())
                    log(f"consumer error (ignored): {m.error()}")
                    continue
                msgs.append(m)
            if not msgs:
                continue
            first = {}
            for m in msgs:
                first.setdefault(m.partition(), m.offset())
            try:
                retrying("begin_transaction", producer.begin_transaction)
                for m in msgs:
                    while True:
                        try:
                            producer.produce(a.output, value=b"copy-" + m.value(),
                                             key=f"{m.partition()}:{m.offset()}".encode(),
                                             partition=m.partition())
                            break
                        except BufferError:
                            producer.poll(0.1)
                positions = consumer.position(consumer.assignment())
                retrying("send_offsets_to_transaction",
                         lambda: producer.send_offsets_to_transaction(
                             positions, consumer.consumer_group_metadata(), OP_TIMEOUT))
                retrying("commit_transaction", lambda: producer.commit_transaction(OP_TIMEOUT))
            except Abortable:
                aborts += 1
                retrying("abort_transaction", lambda: producer.abort_transaction(OP_TIMEOUT))
                # rewind: the batch's output was aborted, so re-read it
                for p, off in first.items():
                    try:
                        consumer.seek(TopicPartition(a.input, p, off))
                    except KafkaException as e:
                        # not assigned any more (rebalance): the new owner starts from
                        # the committed offset anyway
                        log(f"seek {p}@{off} failed: {e}")
                log(f"ABORT n={len(msgs)} rewound to {first}")
                continue
            txns += 1
            total += len(msgs)
            log(f"COMMIT n={len(msgs)} total={total} txns={txns} "
                f"pos={[(tp.partition, tp.offset) for tp in positions]}")
    except KafkaException as e:
        log(f"exiting on error: {e}")
        return 2
    finally:
        log(f"closing: total={total} txns={txns} aborts={aborts} stop={stop}")
        try:
            consumer.close()
        except Exception as e:  # noqa: BLE001
            log(f"consumer close: {e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
