"""Raw Kafka requests at an exact version, for tests that compare brokers' answers
field by field (kafka-python's schema-driven message classes encode and decode them).

    with RawConn(broker) as c:
        resp = c.send(OffsetCommitRequest, 8, group_id=..., topics=[...])
"""

import socket
import struct
import time

from kafka.protocol.metadata import MetadataRequest  # noqa: F401  (re-exported)
from kafka.record.default_records import DefaultRecordBatchBuilder

TIMEOUT = 30.0


class RawConn:
    """One blocking connection to 127.0.0.1; requests are answered in order."""

    def __init__(self, broker, timeout=TIMEOUT):
        self.sock = socket.create_connection(("127.0.0.1", broker.port), timeout=timeout)
        self.correlation = 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        self.sock.close()

    def _read_exact(self, n):
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("broker closed the connection")
            buf.extend(chunk)
        return bytes(buf)

    def send(self, request_class, version, **fields):
        """Sends one request and returns the decoded response (None for acks=0)."""
        self.correlation += 1
        req = request_class[version](**_convert(request_class[version]._struct, fields, version))
        req.with_header(correlation_id=self.correlation, client_id="parity")
        self.sock.sendall(req.encode(header=True, framed=True))
        if not req.expect_response():
            return None
        size = struct.unpack(">i", self._read_exact(4))[0]
        body = self._read_exact(size)
        response_class = request_class.__name__.replace("Request", "Response")
        module = __import__(request_class.__module__, fromlist=[response_class])
        resp_cls = getattr(module, response_class)
        return resp_cls.decode(body, version=version, header=True)


def _convert(struct, fields, version):
    """Turns nested dicts and lists of dicts into the message's nested data classes."""
    out = {}
    for name, value in fields.items():
        field = struct.fields[name]
        if field.is_struct() and isinstance(value, dict):
            value = field.data_class(version=version, **_convert(field, value, version))
        elif field.is_struct_array() and isinstance(value, list):
            value = [field.data_class(version=version, **_convert(field, v, version))
                     if isinstance(v, dict) else v for v in value]
        out[name] = value
    return out


def record_batch(records, *, producer_id=-1, producer_epoch=-1, base_sequence=-1,
                 transactional=False):
    """A v2 record batch, uncompressed. `records` is a list of (key, value, timestamp_ms)."""
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=0, is_transactional=transactional,
        producer_id=producer_id, producer_epoch=producer_epoch,
        base_sequence=base_sequence, batch_size=1 << 20)
    for offset, (key, value, ts) in enumerate(records):
        ts = int(time.time() * 1000) if ts is None else ts
        builder.append(offset, ts, key, value, [])
    return bytes(builder.build())
