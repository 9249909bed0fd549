"""``stream replica autosetup``: the whole setup as one command, in the seeds' order."""

from __future__ import annotations

from typing import Any, Callable

from streamrep.client.admin import StreamAdmin
from streamrep.errors import AlreadyExists, NotFound
from streamrep.model.paths import StreamPath
from streamrep.replication.copy import copy_stream

Copier = Callable[[StreamAdmin, str, str], dict]


def check_autosetup(admin: StreamAdmin, path: str, replica: str) -> tuple[StreamPath, StreamPath]:
    """The precondition of autosetup: the caller may administer and copy the source, and the
    replica stream does not exist yet (autosetup creates it; the seeds: "If the replica
    already exists, the command terminates with an error message")."""
    src, dst = admin.path(path), admin.path(replica)
    admin.require(admin.entry(src), src, "adminperm", "copyperm")
    try:
        admin.entry(dst)
    except NotFound:
        return src, dst
    raise AlreadyExists(f"replica stream {dst} already exists; autosetup creates it (use the manual setup steps instead)")


def autosetup(admin: StreamAdmin, path: str, replica: str, multimaster: bool = False,
              synchronous: bool = False, copier: Copier = copy_stream) -> dict[str, Any]:
    """Create the replica, register it paused, agree upstream, copy, (reverse link for
    multi-master), resume.

    :param copier: runs the copy (in-process by default; the CLI and Airflow pass a Spark one).
    """
    src, dst = check_autosetup(admin, path, replica)
    steps = []
    admin.create_stream(str(dst), copymetafrom=str(src))
    steps.append("create")
    admin.add_replica(str(src), str(dst), paused=True, synchronous=synchronous)
    steps.append("replica add -paused true")
    admin.add_upstream(str(dst), str(src))
    steps.append("upstream add")
    copied = copier(admin, str(src), str(dst))
    steps.append("copystream")
    if multimaster:
        admin.add_replica(str(dst), str(src), paused=True, synchronous=synchronous)
        admin.add_upstream(str(src), str(dst))
        steps.append("reverse replica add + upstream add")
    admin.resume_replica(str(src), str(dst))
    if multimaster:
        admin.resume_replica(str(dst), str(src))
    steps.append("resume")
    return {"path": str(src), "replica": str(dst), "multimaster": multimaster, "synchronous": synchronous,
            "steps": steps, "copied": copied["messages"]}
