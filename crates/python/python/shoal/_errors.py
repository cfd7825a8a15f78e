"""The exceptions shoal raises, by the class of the client's error (as Kafka's Java client
classifies them):

* ``FatalError``: the client cannot go on (fenced by a newer instance with the same
  ``transactional.id``, a broker lacking an API, a bad config, a call after ``close()``).
  Close it.
* ``AbortableError``: this operation failed for good but the client lives on; inside a
  transaction, call ``abort_transaction()`` and go on (the records come back). Misuse of a
  transaction (commit without begin) and refused acknowledgements are abortable too.
* ``RetriableError``: transient (a broker restarting, a timeout); the same call may succeed.
* ``UnsupportedVersionError``, a ``FatalError``: the broker lacks an api the call needs
  (``UNSUPPORTED_VERSION``; nothing was sent), e.g. transactional share acknowledgements
  (KIP-1289) on Apache Kafka, which has none.

Each carries ``name``, the Kafka error name (``PRODUCER_FENCED``, ``INVALID_TXN_STATE``,
``STALE_MEMBER_EPOCH``, ``INVALID_CONFIG``, ...; ``_CLOSED`` for a call after ``close()``,
which has no Kafka code) and ``code``, the Kafka error code.
"""


class KafkaException(Exception):
    """Any error of the Kafka client; see the subclasses."""

    def __init__(self, message: str, name: str, code: int) -> None:
        super().__init__(message)
        self.name = name
        self.code = code

    def fatal(self) -> bool:
        """Whether the client must be closed (confluent-kafka's ``KafkaError.fatal``)."""
        return isinstance(self, FatalError)

    def retriable(self) -> bool:
        """Whether the same call may succeed later."""
        return isinstance(self, RetriableError)

    def txn_requires_abort(self) -> bool:
        """Whether the open transaction must be aborted (and the client lives on)."""
        return isinstance(self, AbortableError)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name}: {self.args[0]!r})"


class FatalError(KafkaException):
    """The client cannot go on: close it."""


class AbortableError(KafkaException):
    """Abort the transaction (if one is open) and go on."""


class RetriableError(KafkaException):
    """Transient: the same call may succeed later."""


class UnsupportedVersionError(FatalError):
    """The broker lacks an api (or every version of it this client speaks) that the call
    needs; nothing was sent. Apache Kafka raises it for the transactional share
    acknowledgements of KIP-1289, which only Shoal has."""
