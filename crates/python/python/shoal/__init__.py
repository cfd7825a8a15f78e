"""Shoal's Kafka client for Python: exactly-once queues (KIP-1289).

A share group's acknowledgements commit atomically with a transactional producer's
output: ``ShareConsumer`` (explicit acknowledgement) reads a queue, ``Producer`` writes the
results, and ``Producer.send_share_acknowledgements_to_transaction`` stages the inputs'
acknowledgements in the same transaction. Built on Shoal's Rust client (``shoal-client``);
names and config keys follow confluent-kafka.
"""

from ._errors import (AbortableError, FatalError, KafkaException, RetriableError,
                      UnsupportedVersionError)
from ._shoal import (
    AcknowledgeType,
    AdminClient,
    Message,
    NewTopic,
    Producer,
    ShareAcknowledgements,
    ShareConsumer,
    ShareGroupMetadata,
    TransactionalShareAcknowledger,
)


class TopicPartition:
    """A partition of a topic and an offset in it (confluent-kafka's ``TopicPartition``), for
    ``Producer.send_offsets_to_transaction``."""

    def __init__(self, topic: str, partition: int = -1, offset: int = -1001) -> None:
        self.topic, self.partition, self.offset = topic, partition, offset

    def __repr__(self) -> str:
        return f"TopicPartition({self.topic!r}, {self.partition}, {self.offset})"


__all__ = [
    "AbortableError",
    "AcknowledgeType",
    "AdminClient",
    "FatalError",
    "KafkaException",
    "Message",
    "NewTopic",
    "Producer",
    "RetriableError",
    "ShareAcknowledgements",
    "ShareConsumer",
    "ShareGroupMetadata",
    "TopicPartition",
    "TransactionalShareAcknowledger",
    "UnsupportedVersionError",
]
