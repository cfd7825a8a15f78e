"""Share-group requests encoded by hand (ShareGroupHeartbeat v1, ShareFetch v1) on one
persistent connection, for tests that look at each ShareFetch answer as a client sees it.
kafka-python has no share-group message classes; the layouts follow Kafka's message schemas
(flexible versions: compact strings and arrays, tagged fields).

Kafka ties a share session to the connection that opened it, so every request of a test goes
through the same ``ShareConn``."""

import socket
import struct
import uuid

from kwire import OP_TIMEOUT, TAGS, Reader, _read, _uvarint, compact_array, compact_str

SHARE_GROUP_HEARTBEAT = 76
SHARE_FETCH = 78
NULL = b"\x00"  # compact nullable string / array: null


def _i32s(values):
    return _uvarint(len(values) + 1) + b"".join(struct.pack(">i", v) for v in values)


class ShareConn:
    """One blocking connection to the broker; requests are answered in order."""

    def __init__(self, broker, timeout=OP_TIMEOUT):
        self.sock = socket.create_connection(("127.0.0.1", broker.port), timeout=timeout)
        self.correlation = 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.sock.close()

    def _request(self, api_key, version, body):
        self.correlation += 1
        client_id = b"shoal-interop"
        header = struct.pack(">hhih", api_key, version, self.correlation, len(client_id))
        payload = header + client_id + TAGS + body
        self.sock.sendall(struct.pack(">i", len(payload)) + payload)
        size = struct.unpack(">i", _read(self.sock, 4))[0]
        r = Reader(_read(self.sock, size))
        assert r.i32() == self.correlation
        r.tags()
        return r

    def heartbeat(self, group, member_id, member_epoch, topics):
        """ShareGroupHeartbeat v1: (error code, member epoch, {topic id: [partitions]} or None
        when the answer carries no assignment)."""
        body = (compact_str(group) + compact_str(member_id) + struct.pack(">i", member_epoch)
                + NULL + compact_array([compact_str(t) for t in topics]) + TAGS)
        r = self._request(SHARE_GROUP_HEARTBEAT, 1, body)
        r.i32()  # throttle
        error = r.i16()
        r.compact_str()  # error message
        r.compact_str()  # member id
        epoch = r.i32()
        r.i32()  # heartbeat interval
        assignment = None
        if r.i8() >= 0:
            assignment = {}
            for _ in range(r.compact_len()):
                topic_id = uuid.UUID(bytes=r.take(16))
                assignment[topic_id] = sorted(r.i32() for _ in range(r.compact_len()))
                r.tags()
            r.tags()
        r.tags()
        return error, epoch, assignment

    def share_fetch(self, group, member_id, epoch, partitions, *, max_wait_ms=500, min_bytes=1,
                    max_bytes=52428800, max_records=500, batch_size=500):
        """ShareFetch v1 without acknowledgements. `partitions` is {topic id: [partition]}
        (added to the session). Returns (top-level error code, {(topic id, partition):
        (error code, [(first offset, last offset, delivery count)])})."""
        topics = [topic_id.bytes + compact_array(
                      [struct.pack(">i", p) + compact_array([]) + TAGS for p in parts]) + TAGS
                  for topic_id, parts in partitions.items()]
        body = (compact_str(group) + compact_str(member_id)
                + struct.pack(">iiiiii", epoch, max_wait_ms, min_bytes, max_bytes, max_records,
                              batch_size)
                + compact_array(topics) + compact_array([]) + TAGS)
        r = self._request(SHARE_FETCH, 1, body)
        r.i32()  # throttle
        error = r.i16()
        r.compact_str()  # error message
        r.i32()  # acquisition lock timeout
        out = {}
        for _ in range(r.compact_len()):
            topic_id = uuid.UUID(bytes=r.take(16))
            for _ in range(r.compact_len()):
                partition, code = r.i32(), r.i16()
                r.compact_str()
                r.i16()  # acknowledge error code
                r.compact_str()
                r.i32(), r.i32()  # current leader id, epoch
                r.tags()
                r.take(max(r.uvarint() - 1, 0))  # records
                acquired = []
                for _ in range(r.compact_len()):
                    acquired.append((r.i64(), r.i64(), r.i16()))
                    r.tags()
                r.tags()
                out[(topic_id, partition)] = (code, acquired)
            r.tags()
        for _ in range(r.compact_len()):  # node endpoints
            r.i32(), r.compact_str(), r.i32(), r.compact_str()
            r.tags()
        r.tags()
        return error, out


def acquired_count(ranges):
    """Records in a partition's acquired ranges."""
    return sum(last - first + 1 for first, last, _ in ranges)
