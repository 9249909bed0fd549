"""What every command module shares: the handler's context, the options several groups take,
and the errors and checks met before any work."""

from __future__ import annotations

from typing import Any, TextIO

from streamrep.cli.grammar import Option
from streamrep.client import StreamAdmin
from streamrep.errors import StreamrepError

PATH = Option("path", required=True, help="stream path, /mapr/<cluster>/<stream>")
REPLICA = Option("replica", required=True, help="replica stream path")
SPARK_MASTER = Option(
    "master",
    help="where Spark runs, as spark-submit's --master: local[N], spark://HOST:PORT, "
    "yarn, k8s://... (default: $STREAMREP_SPARK_MASTER, else local[2])",
)


class OutputFailed(StreamrepError):
    """stdout could not be written (closed, a closed pipe, a full disk)."""


def reason(error: OSError) -> str:
    return error.strerror or str(error) or type(error).__name__


class Context:
    """What a handler gets: the admin API and the output streams.

    :param admin: the admin API to act through (the REST form's, as its caller); built on first use if None.
    """

    def __init__(self, out: TextIO, err: TextIO, stdin: TextIO, admin: StreamAdmin | None = None):
        self.out, self.err, self.stdin = out, err, stdin
        self._admin = admin

    @property
    def admin(self) -> StreamAdmin:
        if self._admin is None:
            self._admin = StreamAdmin()
        return self._admin


Rows = list[dict[str, Any]]


def spark_master(master: str | None) -> None:
    """A bad -master fails before any work, even when the engine turns out not to be Spark."""
    if master is not None:
        from streamrep.spark.command import check_master  # Spark is only imported when used

        check_master(master)
