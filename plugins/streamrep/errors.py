"""The errors a user can cause. Each carries one clear line; the CLI prints it, a task fails with it."""


class StreamrepError(Exception):
    """Base of every user-facing error. ``str(err)`` is the one-line message."""


class InvalidArgument(StreamrepError):
    """A malformed path, name, ACE, option value or count."""


class NotFound(StreamrepError):
    """An unknown cluster, stream, topic, replica, upstream or gateway list."""


class AlreadyExists(StreamrepError):
    """The thing to create (stream, topic, replica, upstream, cluster) is already there."""


class PermissionDenied(StreamrepError):
    """The caller's identity does not satisfy the stream's access control expression."""


class LimitExceeded(StreamrepError):
    """A documented limit (64 replicas, 64 upstreams, partitions, sizes) would be passed."""


class Conflict(StreamrepError):
    """The request contradicts the current state (topic-name conflict, loop, busy)."""


class RetryNow(Exception):
    """Not a user error: the internal signal that a write lost a race and should be retried at
    once from the state as it is now (the replication marks it expected moved: another gateway
    applied the batch; or another writer of the same transactional id fenced this one).

    Whoever retries catches it; when its retries run out it reports a ``Conflict``, the
    user-facing error. It is deliberately not a ``StreamrepError``, so no handler of user errors
    mistakes it for one.
    """


class Unavailable(StreamrepError):
    """A cluster cannot be reached right now: worth retrying (a corrupt store is ``CorruptStore``)."""


class AuthenticationFailed(StreamrepError):
    """A cluster refused the client's credentials (a wrong password or user, a SASL mechanism its
    brokers do not offer): retrying cannot help until the cluster's settings are fixed."""


class TlsHandshakeFailed(AuthenticationFailed):
    """The client and a cluster's brokers could not set up TLS (a certificate the client does not
    trust, a hostname the certificate does not name, TLS on one side only)."""


class Misinstalled(StreamrepError):
    """This machine's installation cannot run a job (no Java, no spark-submit, a missing Spark app,
    pyspark's files not its jars' release): retrying cannot help until it is fixed."""


class CorruptStore(StreamrepError):
    """A cluster's store file is corrupt, or is not a streamrep store it can read: retrying cannot
    help (unlike ``Unavailable``); restore the file, or remove the cluster and add it again."""


class AlertRaised(StreamrepError):
    """A replica's lag passed its alert threshold, or no gateway serving it is live."""


class Interrupted(StreamrepError):
    """A long command was stopped (Ctrl-C, SIGTERM); the message says what it undid or what is left."""


class StoreFull(StreamrepError):
    """A cluster's store cannot take a write: its disk is full. Nothing of the write was kept;
    retrying helps only once space is freed."""


def http_status(error: StreamrepError) -> int:
    """The HTTP status an answer over HTTP (the REST form, the page's API) gives ``error``:
    403 refused, 404 not found, 503 a cluster that cannot be reached, else 400 (the caller's to fix)."""
    for kind, status in ((PermissionDenied, 403), (NotFound, 404), (Unavailable, 503)):
        if isinstance(error, kind):
            return status
    return 400
