"""The operator for ``stream create``, the first step of a manual setup."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from streamrep.airflow import rows as presented
from streamrep.airflow.operators.base import StreamrepOperator
from streamrep.client.admin import StreamAdmin
from streamrep.replication.setup import ensure_stream

if TYPE_CHECKING:
    from airflow.sdk import Context


class StreamCreateOperator(StreamrepOperator):
    """``maprcli stream create -path <path> [-copymetafrom <source>]``.

    Succeeds on a retry when the stream already exists with the metadata it would have been
    created with; fails if it exists with other metadata (``setup.ensure_stream``).

    :param path: the stream to create. (templated)
    :param copymetafrom: a stream, on any cluster, whose metadata (settings and access control
        expressions) the new stream copies. (templated)
    :param settings: stream settings (``defaultpartitions``, ``ttl``, ``autocreate`` and the
        ``*perm`` ACEs); with ``copymetafrom`` they override the copied ones. (templated)
    :return: (XCom) ``stream info`` of the stream.
    """

    template_fields: Sequence[str] = (*StreamrepOperator.template_fields, "path", "copymetafrom", "settings")

    def __init__(
        self, *, path: str, copymetafrom: str | None = None, settings: dict[str, Any] | None = None, **kwargs: Any
    ):
        super().__init__(**kwargs)
        self.path = path
        self.copymetafrom = copymetafrom
        self.settings = settings

    def run(self, admin: StreamAdmin, context: Context) -> dict[str, Any]:
        copymetafrom = self.copymetafrom or None
        sp, created = ensure_stream(admin, self.path, copymetafrom, **(self.settings or {}))
        if created:
            self.log.info(
                "stream create -path %s%s: created", sp, f" -copymetafrom {copymetafrom}" if copymetafrom else ""
            )
        else:
            self.log.info("stream %s already exists with the same metadata: nothing to do", sp)
        return presented.stream_info_row(admin.stream_info(str(sp)))
