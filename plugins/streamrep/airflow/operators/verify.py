"""Operators beside diffstreams (``diffstreams.StreamDiffOperator``): the replica links to
compare (``ReplicaLinksOperator``, for the ``stream_replica_verify`` DAG), and ``importstream``,
which applies the ops directories a compare wrote (``StreamImportOperator``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from streamrep.airflow.operators.base import StreamrepOperator, known_clusters, log_rows
from streamrep.client.admin import StreamAdmin
from streamrep.model import replication as rules
from streamrep.model.paths import StreamPath
from streamrep.replication.importstream import import_stream

if TYPE_CHECKING:
    from airflow.sdk import Context


class StreamImportOperator(StreamrepOperator):
    """``mapr importstream -src <ops dir> -dst <stream>``: apply an ``opsForDst`` or ``opsForSrc``
    directory that ``StreamDiffOperator`` (diffstreams) wrote, exactly once
    (``replication.importstream.import_stream``): a retry, or a second run, applies nothing twice.
    Its ``differs`` lines (a changed or misplaced message, which a log cannot fix in place) are
    left for a person, and the result's summary says so.

    :param folder: the ops directory, e.g. ``{{ ti.xcom_pull(task_ids='diff')['outdir'] }}/opsForDst``. (templated)
    :param destination: the stream the directory was made for. (templated)
    :return: (XCom) what was applied, already present and left for a person, and the summary line.
    """

    template_fields: Sequence[str] = (*StreamrepOperator.template_fields, "folder", "destination")

    def __init__(self, *, folder: str, destination: str, **kwargs: Any):
        super().__init__(**kwargs)
        self.folder = folder
        self.destination = destination

    def run(self, admin: StreamAdmin, context: Context) -> dict[str, Any]:
        done = import_stream(admin, self.folder, self.destination)
        self.log.info("importstream -src %s -dst %s: %s", self.folder, self.destination, done.summary())
        return done.to_dict()


class ReplicaLinksOperator(StreamrepOperator):
    """Every replica link of the streams on ``cluster``: each stream there and each replica its
    ``replica list`` names (on any cluster), as ``{"source", "destination"}`` kwargs for a
    ``StreamDiffOperator`` mapped over them (``expand_kwargs``). A failed-over link is left out: its
    replica was promoted and takes writes of its own, so it is no longer a copy of the source.

    :param cluster: the source cluster (default: every cluster the hook knows). (templated)
    :return: (XCom) the links, by source then replica path.
    """

    template_fields: Sequence[str] = (*StreamrepOperator.template_fields, "cluster")

    def __init__(self, *, cluster: str | None = None, **kwargs: Any):
        super().__init__(**kwargs)
        self.cluster = cluster

    def run(self, admin: StreamAdmin, context: Context) -> list[dict[str, str]]:
        names = [self.cluster] if self.cluster else known_clusters(admin)
        links = []
        for name in names:
            for entry in admin.list_streams(name):  # NotFound for an unknown cluster
                source = StreamPath(name, entry.path)
                for link in entry.replicas:
                    if link.state is rules.ReplicaState.FAILED_OVER:
                        self.log.info("%s -> %s: failed over, not verified", source, link.path)
                        continue
                    links.append({"source": str(source), "destination": str(admin.path(link.path))})
        links.sort(key=lambda found: (found["source"], found["destination"]))
        log_rows(self.log, f"replica links of {', '.join(names) or 'no cluster'}", links, ("source", "destination"))
        return links
