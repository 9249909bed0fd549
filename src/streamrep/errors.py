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


class Unavailable(StreamrepError):
    """A cluster cannot be reached, or its store is unreadable or corrupt."""


class CorruptStore(StreamrepError):
    """A cluster's store file is corrupt, or is not a streamrep store it can read: retrying cannot
    help (unlike ``Unavailable``); restore the file, or remove the cluster and add it again."""


class AlertRaised(StreamrepError):
    """A replica's lag passed its alert threshold, or no gateway serving it is live."""
