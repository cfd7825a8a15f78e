"""What the checkpointed source and the dead-letter example share, as the Rust examples'
``support`` module does: ``--flag value`` arguments (with the Rust examples' messages on a
mistake), the group set to start at the earliest offset, an explicit-mode share consumer, a
poll that outlives a broker restart, and a value read as a decimal integer the way Rust's
``str::parse::<i64>`` reads it.
"""

import re
import sys
import time

from shoal import AdminClient, RetriableError, ShareConsumer

I64_MIN, I64_MAX = -(1 << 63), (1 << 63) - 1
DECIMAL = re.compile(r"[+-]?[0-9]+")


def fail(message):
    """Exits 1 with ``Error: message``, as a Rust example whose ``main`` returns an error."""
    sys.exit(f"Error: {message}")


class Flags:
    """``--name value`` pairs and bare ``--switch``es of the command line."""

    def __init__(self, usage, switches=(), argv=None):
        self.usage, self.values, self.switches = usage, {}, set()
        args = iter(sys.argv[1:] if argv is None else argv)
        for flag in args:
            if not flag.startswith("--"):
                fail(f"unexpected argument {flag}\n{usage}")
            name = flag[2:]
            if name in switches:
                self.switches.add(name)
                continue
            value = next(args, None)
            if value is None:
                fail(f"{flag} needs a value")
            self.values[name] = value

    def required(self, name):
        if name not in self.values:
            fail(f"--{name} is required\n{self.usage}")
        return self.values[name]

    def number(self, name, default):
        """A positive number, ``default`` when absent."""
        value = self.values.get(name)
        if value is None:
            n = default
        elif re.fullmatch(r"\+?[0-9]+", value) and int(value) < 1 << 64:
            n = int(value)
        else:
            fail(f"--{name} {value}")
        if n == 0:
            fail(f"--{name} must be at least 1")
        return n

    def switch(self, name):
        return name in self.switches


def start_at_earliest(bootstrap, group):
    """Sets ``group``'s ``share.auto.offset.reset`` to ``earliest`` (share groups start at
    the end of their topics by default), so that a new group reads what is already queued."""
    with AdminClient({"bootstrap.servers": bootstrap}) as admin:
        admin.set_group_configs(group, {"share.auto.offset.reset": "earliest"})


def explicit_consumer(bootstrap, group, topic, client_id, max_poll_records):
    """A share consumer of ``group`` on ``topic`` in explicit mode."""
    consumer = ShareConsumer({
        "bootstrap.servers": bootstrap, "client.id": client_id, "group.id": group,
        "share.acknowledgement.mode": "explicit", "max.poll.records": max_poll_records,
        "share.acquire.mode": "record_limit",  # strictly: else whole batches are acquired
    })
    consumer.subscribe([topic])
    return consumer


def poll(consumer, timeout):
    """A poll; a retriable failure (the broker restarting) is no records after a pause.
    The records stay acquired by this member and nothing was acknowledged, so polling
    again is safe."""
    try:
        return consumer.poll(timeout)
    except RetriableError as e:
        print(f"poll failed, retrying: {e}", file=sys.stderr)
        time.sleep(0.2)
        return []


def decimal(value):
    """``value`` (bytes or None) as a 64-bit decimal integer, surrounding whitespace
    ignored; None when it is not one (not UTF-8, empty, out of range, ``1_000``, ...)."""
    try:
        text = (value or b"").decode("utf-8").strip()
    except UnicodeDecodeError:
        return None
    if not DECIMAL.fullmatch(text):
        return None
    n = int(text)
    return n if I64_MIN <= n <= I64_MAX else None
