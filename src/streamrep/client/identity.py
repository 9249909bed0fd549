"""Who is calling: the OS user and groups, unless ``STREAMREP_USER``/``STREAMREP_GROUPS`` say otherwise."""

from __future__ import annotations

import getpass
import grp
import os
import pwd

from streamrep.model.ace import Identity


def current_identity() -> Identity:
    """The configured identity, else the OS user and its groups."""
    user = os.environ.get("STREAMREP_USER") or getpass.getuser()
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
