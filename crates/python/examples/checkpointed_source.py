"""A stream processor's share-group source with checkpoints (KIP-1289), the Python twin of
shoal-client's ``checkpointed_source`` example, with the same flags and output.

It reads INPUT as a member of share group GROUP (explicit acknowledgement), folds each
record into its state (a count, and a sum of the values that are decimal integers), and
acknowledges nothing until a checkpoint. Every ``--checkpoint-ms`` (default 1000; keep it
well below the group's record lock duration, 30 s by default) it commits the ACCEPTs of
every record read since the last checkpoint in one transaction of their own, with a
``TransactionalShareAcknowledger``: the records are acknowledged exactly when the state that
includes them is checkpointed. A failed checkpoint (a rebalance in between: abortable) rolls
the state back to the last checkpoint and the records come back. It runs until killed,
printing one line per checkpoint to stderr:
``checkpoint C: R records acknowledged (total T, sum S)``::

    python crates/python/examples/checkpointed_source.py \\
        --bootstrap 127.0.0.1:9092 --input amounts --group amount-source \\
        --transactional-id amount-source-1 [--checkpoint-ms 1000]

A real processor writes its state snapshot durably before the acknowledgements commit (here
the state lives in memory only). It sets the group's ``share.auto.offset.reset`` to
``earliest`` first; a fatal error (another instance with the transactional id) exits
non-zero.

The Rust example's two-phase-commit mode (``--output OUT --checkpoint-file PATH``, KIP-939) is
not here yet: the bindings lack prepare and complete.
"""

import sys
import time

from shoal import (AbortableError, AcknowledgeType, KafkaException, ShareAcknowledgements,
                   TransactionalShareAcknowledger)
from support import Flags, decimal, explicit_consumer, fail, poll, start_at_earliest

CLIENT_ID = "shoal-example-checkpointed-source"
USAGE = ("usage: checkpointed_source --bootstrap B --input IN --group G "
         "--transactional-id TID [--checkpoint-ms MS] "
         "[--output OUT --checkpoint-file PATH]")


def main():
    flags = Flags(USAGE)
    bootstrap, topic, group, transactional_id = (
        flags.required(name) for name in ("bootstrap", "input", "group", "transactional-id"))
    interval = flags.number("checkpoint-ms", 1000) / 1000
    if "checkpoint-file" in flags.values:
        # The two-phase-commit mode (KIP-939) needs prepare/complete in the bindings.
        fail("--checkpoint-file: only the Rust example has the two-phase-commit mode yet")

    start_at_earliest(bootstrap, group)
    acknowledger = TransactionalShareAcknowledger({
        "bootstrap.servers": bootstrap, "client.id": CLIENT_ID,
        "transactional.id": transactional_id})
    acknowledger.init_transactions()
    consumer = explicit_consumer(bootstrap, group, topic, CLIENT_ID, 500)

    checkpointed = state = (0, 0)  # what the processor computes: (records, sum)
    buffered, metadata, checkpoints = ShareAcknowledgements(), None, 0
    next_at = time.monotonic() + interval
    while True:
        records = poll(consumer, max(next_at - time.monotonic(), 0.01))
        for m in records:
            count, total = state
            n = decimal(m.value())
            if n is not None:  # wrapping, as the Rust example's i64 sum
                total = (total + n + (1 << 63)) % (1 << 64) - (1 << 63)
            state = (count + 1, total)
            consumer.acknowledge(m, AcknowledgeType.ACCEPT)
        if records:
            # Drained before the next poll, which would otherwise carry them.
            if metadata is None:
                metadata = consumer.share_group_metadata()
            buffered.extend(consumer.acknowledgements_for_transaction())
        if time.monotonic() < next_at:
            continue
        next_at = time.monotonic() + interval
        if metadata is None:
            continue  # nothing read since the last checkpoint
        acks, member = buffered, metadata
        buffered, metadata = ShareAcknowledgements(), None
        try:
            acknowledger.commit_acknowledgements(acks, member)
        except AbortableError as e:
            # Aborted already: the records come back, so the state goes back too.
            print(f"checkpoint failed, {len(acks)} records come back: {e}", file=sys.stderr)
            state = checkpointed
            continue
        except KafkaException as e:
            fail(f"checkpoint failed ({e.name}({e.code})): {e}")
        checkpoints += 1
        print(f"checkpoint {checkpoints}: {len(acks)} records acknowledged "
              f"(total {state[0]}, sum {state[1]})", file=sys.stderr)
        checkpointed = state


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit(130)
    except KafkaException as e:  # as the Rust example's `main` returning the error
        fail(e)
