"""A few Kafka requests encoded by hand, for tests that need the raw answer
(ApiVersions' full table, AlterReplicaLogDirs' per-partition error codes),
which the client libraries do not expose."""

import socket
import struct

OP_TIMEOUT = 30.0


def _uvarint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def compact_str(s):
    b = s.encode()
    return _uvarint(len(b) + 1) + b


def compact_array(items):
    return _uvarint(len(items) + 1) + b"".join(items)


TAGS = b"\x00"  # no tagged fields


class Reader:
    def __init__(self, data):
        self.data = data
        self.pos = 0

    def take(self, n):
        if self.pos + n > len(self.data):
            raise ValueError("truncated response")
        b = self.data[self.pos:self.pos + n]
        self.pos += n
        return b

    def i8(self):
        return struct.unpack(">b", self.take(1))[0]

    def i16(self):
        return struct.unpack(">h", self.take(2))[0]

    def i32(self):
        return struct.unpack(">i", self.take(4))[0]

    def i64(self):
        return struct.unpack(">q", self.take(8))[0]

    def uvarint(self):
        shift = n = 0
        while True:
            b = self.take(1)[0]
            n |= (b & 0x7F) << shift
            if not b & 0x80:
                return n
            shift += 7

    def compact_str(self):
        n = self.uvarint()
        return None if n == 0 else self.take(n - 1).decode()

    def compact_len(self):
        return self.uvarint() - 1

    def tags(self):
        for _ in range(self.uvarint()):
            self.uvarint()
            self.take(self.uvarint())


def request(bootstrap, api_key, version, body, flexible=True, correlation_id=1):
    """Sends one request (header v2 when flexible, else v1) and returns the
    response body after the header (v0 header for ApiVersions, else v1 when
    flexible)."""
    host, port = bootstrap.rsplit(":", 1)
    header = struct.pack(">hhi", api_key, version, correlation_id)
    client_id = b"shoal-interop"
    header += struct.pack(">h", len(client_id)) + client_id
    if flexible:
        header += TAGS
    payload = header + body
    with socket.create_connection((host, int(port)), timeout=OP_TIMEOUT) as s:
        s.sendall(struct.pack(">i", len(payload)) + payload)
        size = struct.unpack(">i", _read(s, 4))[0]
        data = _read(s, size)
    r = Reader(data)
    assert r.i32() == correlation_id
    if flexible and api_key != 18:
        r.tags()
    return r


def _read(s, n):
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("connection closed by the broker")
        buf += chunk
    return buf


def api_versions(bootstrap, version=3):
    """ApiVersions v3 or v4 (same layout): ({api_key: (min, max)}, {feature: (min, max)} supported,
    {feature: (min, max)} finalized)."""
    body = compact_str("shoal-interop") + compact_str("1.0") + TAGS
    r = request(bootstrap, 18, version, body)
    error = r.i16()
    assert error == 0, f"ApiVersions error {error}"
    keys = {}
    for _ in range(r.compact_len()):
        k, lo, hi = r.i16(), r.i16(), r.i16()
        r.tags()
        keys[k] = (lo, hi)
    r.i32()  # throttle
    supported, finalized = {}, {}
    for _ in range(r.uvarint()):
        tag, size = r.uvarint(), r.uvarint()
        sub = Reader(r.take(size))
        if tag == 0:
            for _ in range(sub.compact_len()):
                name = sub.compact_str()
                supported[name] = (sub.i16(), sub.i16())
                sub.tags()
        elif tag == 2:
            for _ in range(sub.compact_len()):
                name = sub.compact_str()
                hi, lo = sub.i16(), sub.i16()
                finalized[name] = (lo, hi)
                sub.tags()
    return keys, supported, finalized


def alter_replica_log_dirs(bootstrap, path, topic, partitions):
    """AlterReplicaLogDirs v2: {(topic, partition): error_code}."""
    body = compact_array([
        compact_str(path) + compact_array([
            compact_str(topic) + _uvarint(len(partitions) + 1)
            + b"".join(struct.pack(">i", p) for p in partitions) + TAGS
        ]) + TAGS
    ]) + TAGS
    r = request(bootstrap, 34, 2, body)
    r.i32()  # throttle
    out = {}
    for _ in range(r.compact_len()):
        name = r.compact_str()
        for _ in range(r.compact_len()):
            p, err = r.i32(), r.i16()
            r.tags()
            out[(name, p)] = err
        r.tags()
    return out
