"""streamrep as a queue of common-messaging's ``MessageQueueTrigger``, as the apache-kafka provider
is for ``scheme="kafka"``: an ``AssetWatcher`` can watch a topic with ::

    AssetWatcher(name="clicks", trigger=MessageQueueTrigger(
        scheme="streamrep", stream="/mapr/sanfrancisco/activity", topic="clicks"))

The provider info lists :class:`StreamrepMessageQueueProvider` under ``queues``, which is how
common-messaging finds it (``ProvidersManager().queue_class_names``). The trigger that runs is
``StreamMessageTrigger``: the arguments are its own, with the topic given as ``stream`` (and
``topic``) instead of ``path``, and the trigger serializes as a plain ``StreamMessageTrigger``,
so the triggerer runs exactly what ``StreamMessageTrigger(path=...)`` would run.

A bad argument (no stream, an unknown name, a malformed path) raises ValueError with one line
naming it; the dag-processor reports it when it serializes the DAG, as an import error of its
file that ends with that line.

Both common-messaging 2.0.x (where ``queue_matches`` and ``trigger_kwargs`` are abstract) and 2.1.x
are supported: scheme dispatch is the same in both, and the deprecated ``queue=`` dispatch takes
a topic's asset URI (``queue="streamrep://sanfrancisco/activity:clicks"``).
"""

from __future__ import annotations

from typing import Any

from airflow.providers.common.messaging.providers.base_provider import BaseMessageQueueProvider

from streamrep.airflow.provider import ASSET_SCHEME
from streamrep.airflow.triggers import DEFAULT_WATCHER_GROUP, StreamMessageTrigger
from streamrep.errors import InvalidArgument
from streamrep.model.paths import parse_stream_or_topic, validate_topic_name

SCHEME = ASSET_SCHEME
STREAM_MESSAGE_TRIGGER = f"{StreamMessageTrigger.__module__}.{StreamMessageTrigger.__qualname__}"
# What MessageQueueTrigger(scheme="streamrep", ...) takes: StreamMessageTrigger's arguments,
# with stream (and topic) for its path.
ARGUMENTS = (
    "stream",
    "topic",
    "group",
    "streamrep_conn_id",
    "cluster_conn_ids",
    "poll_interval",
    "max_messages",
    "from_start",
)
_PREFIX = f'MessageQueueTrigger(scheme="{SCHEME}")'
_EXAMPLE = 'stream="/mapr/<cluster>/<stream>", topic="<topic>"'


def _refuse(message: str) -> ValueError:
    return ValueError(f"{_PREFIX}: {message}")


def _topic_path(stream: Any, topic: Any) -> str:
    """The ``<stream>:<topic>`` path that ``stream`` (a stream path, a topic path, or a topic's
    ``streamrep://`` URI) and ``topic`` name together."""
    if not isinstance(stream, str) or not stream.strip():
        raise _refuse(f"stream must be a stream path, as in {_EXAMPLE}; got {stream!r}")
    text = stream.strip()
    try:
        if text.lower().startswith(f"{SCHEME}://"):
            from streamrep.airflow.assets import path_of

            text = path_of(text)
        # a placeholder default cluster: a path without /mapr/<cluster> is resolved in the triggerer
        _, named = parse_stream_or_topic(text, "default")
        if topic is not None:
            validate_topic_name(topic)
    except InvalidArgument as err:
        raise _refuse(str(err)) from None
    if named is None and topic is None:
        raise _refuse(f"stream {stream!r} names no topic: give topic=, as in {_EXAMPLE}")
    if named is not None and topic is not None and topic != named:
        raise _refuse(f"stream {stream!r} names topic {named!r} and topic= says {topic!r}: give one")
    return text if named is not None else f"{text}:{topic}"


def stream_message_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    """``StreamMessageTrigger``'s arguments for ``MessageQueueTrigger(scheme="streamrep", **kwargs)``.

    :raises ValueError: with one line naming the bad argument.
    """
    _refuse_unknown(kwargs)
    if "stream" not in kwargs:
        raise _refuse(f"stream is required, as in {_EXAMPLE}")
    path = _topic_path(kwargs["stream"], kwargs.get("topic"))
    group = kwargs.get("group", DEFAULT_WATCHER_GROUP)
    if not isinstance(group, str) or not group.strip():
        raise _refuse(f"group must be a consumer group name; got {group!r}")
    return {"path": path, "group": group, **_optional_arguments(kwargs)}


def _refuse_unknown(kwargs: dict[str, Any]) -> None:
    """ValueError naming the arguments ``StreamMessageTrigger`` does not take, with a hint for the likely mix-ups."""
    unknown = sorted(set(kwargs) - set(ARGUMENTS))
    if not unknown:
        return
    hint = ""
    if "path" in unknown:
        hint = f' (the topic is {_EXAMPLE}, or stream="/mapr/<cluster>/<stream>:<topic>")'
    elif "topics" in unknown:
        hint = ' (one topic per trigger: topic="<topic>")'
    names = ", ".join(repr(n) for n in unknown)
    raise _refuse(f"unknown argument {names}{hint}; it takes {', '.join(ARGUMENTS)}")


def _optional_arguments(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The connections and polling arguments given in ``kwargs``, each checked."""
    out: dict[str, Any] = {}
    if "streamrep_conn_id" in kwargs:
        conn_id = kwargs["streamrep_conn_id"]
        if not isinstance(conn_id, str) or not conn_id:
            raise _refuse(f"streamrep_conn_id must be a connection id; got {conn_id!r}")
        out["streamrep_conn_id"] = conn_id
    if "cluster_conn_ids" in kwargs:
        ids = kwargs["cluster_conn_ids"]
        if ids is not None and (
            not isinstance(ids, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in ids.items())
        ):
            raise _refuse(f"cluster_conn_ids must map cluster names to connection ids; got {ids!r}")
        out["cluster_conn_ids"] = ids
    if "poll_interval" in kwargs:
        value = kwargs["poll_interval"]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise _refuse(f"poll_interval must be a number of seconds above 0; got {value!r}")
        out["poll_interval"] = value
    if "max_messages" in kwargs:
        value = kwargs["max_messages"]
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise _refuse(f"max_messages must be a whole number of at least 1; got {value!r}")
        out["max_messages"] = value
    if "from_start" in kwargs:
        value = kwargs["from_start"]
        if not isinstance(value, bool):
            raise _refuse(f"from_start must be True or False; got {value!r}")
        out["from_start"] = value
    return out


class StreamQueueTrigger(StreamMessageTrigger):
    """``StreamMessageTrigger`` built from ``MessageQueueTrigger(scheme="streamrep")``'s arguments
    (``stream``, ``topic``, ...), and serialized as a ``StreamMessageTrigger``: the triggerer
    never sees this class."""

    def __init__(self, **kwargs: Any):
        super().__init__(**stream_message_kwargs(kwargs))

    def serialize(self) -> tuple[str, dict[str, Any]]:
        _, kwargs = super().serialize()
        return STREAM_MESSAGE_TRIGGER, kwargs


class StreamrepMessageQueueProvider(BaseMessageQueueProvider):
    """common-messaging's provider for ``scheme="streamrep"``: ``MessageQueueTrigger`` hands its
    arguments to :class:`StreamQueueTrigger`, that is ``StreamMessageTrigger``."""

    scheme = SCHEME

    def scheme_matches(self, scheme: str) -> bool:
        return scheme == SCHEME

    def queue_matches(self, queue: str) -> bool:
        """The deprecated ``queue=`` dispatch: a topic's asset URI, ``streamrep://<cluster>/<stream>:<topic>``."""
        return isinstance(queue, str) and queue.lower().startswith(f"{SCHEME}://")

    def trigger_class(self) -> type[StreamMessageTrigger]:
        return StreamQueueTrigger

    def trigger_kwargs(self, queue: str, **kwargs: Any) -> dict[str, Any]:
        """The arguments a ``queue=`` URI adds to ``kwargs``: its topic, as ``stream``."""
        if "stream" in kwargs:
            raise _refuse(f"queue={queue!r} and stream= both name the topic: give one")
        return {"stream": queue}
