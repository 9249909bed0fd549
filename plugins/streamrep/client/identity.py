"""Who is calling: the OS user and groups, unless ``STREAMREP_USER``/``STREAMREP_GROUPS`` say otherwise.

``STREAMREP_USER`` *names* an identity: a cluster that authenticates someone else refuses it.
``STREAMREP_LAUNCHER_USER`` is the OS user of the process that started this one (a Spark executor
on a worker that runs as another OS user): it stands in for the OS user and names no one.
"""

from __future__ import annotations

import getpass
import grp
import os
import pwd

from streamrep.model.ace import Identity

LAUNCHER_USER = "STREAMREP_LAUNCHER_USER"


def named_user() -> str | None:
    """The user ``STREAMREP_USER`` names, if it is set."""
    return os.environ.get("STREAMREP_USER") or None


def current_identity() -> Identity:
    """The configured identity, else the OS user and its groups."""
    user = named_user() or os.environ.get(LAUNCHER_USER) or getpass.getuser()
    configured = os.environ.get("STREAMREP_GROUPS")
    if configured is not None:
        groups = {g for g in configured.replace(",", " ").split() if g}
    else:
        groups = set()
        try:
            gid = pwd.getpwnam(user).pw_gid
            groups = {grp.getgrgid(g).gr_name for g in os.getgrouplist(user, gid)}
        except (KeyError, OSError):
            pass  # a configured user unknown to the OS has no OS groups
    return Identity(user=user, groups=frozenset(groups))
