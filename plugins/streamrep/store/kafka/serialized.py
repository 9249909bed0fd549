"""One thread at a time per Kafka store object, for every public method.

The embedded store's SQLite transactions serialise threads; a Kafka store object's readers, folds and
transactional producers hold positions and open transactions that two threads must not share
mid-call (gateways in threads of one process share a store). So ``serialized`` wraps every public
method of a class (those of the Store interface, inherited or not, and the class's own) in the
object's reentrant ``_lock``, when the class is made: a method added later is serialized without
anyone listing it. A method that must not hold the lock throughout says so with ``unheld``; it may
then touch the store only through serialized methods.
"""

from __future__ import annotations

import functools
import inspect
import threading
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

SERIALIZED = "__streamrep_serialized__"
UNHELD = "__streamrep_unheld__"

F = TypeVar("F", bound=Callable[..., Any])
C = TypeVar("C", bound=type)


class Locked(Protocol):
    _lock: threading.RLock


def unheld(method: F) -> F:
    """Leave ``method`` out of ``serialized``: it calls serialized methods only, and releases the
    lock between them (a long scan that threads sharing the store must not wait for)."""
    setattr(method, UNHELD, True)
    return method


def public_methods(cls: type) -> list[str]:
    """The names of the public methods of ``cls``, its own and inherited."""
    return sorted(name for name in dir(cls) if not name.startswith("_") and inspect.isfunction(getattr(cls, name)))


def _wrap(method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def call(self: Locked, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            return method(self, *args, **kwargs)

    setattr(call, SERIALIZED, True)
    return call


def serialized(cls: C) -> C:
    """Wrap every public method of ``cls`` not yet wrapped, and not ``unheld``, in ``self._lock``."""
    for name in public_methods(cls):
        method = getattr(cls, name)
        if not getattr(method, SERIALIZED, False) and not getattr(method, UNHELD, False):
            setattr(cls, name, _wrap(method))
    return cls
