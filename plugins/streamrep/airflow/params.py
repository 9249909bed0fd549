"""DAG params for streamrep DAGs, validated by a JSON schema at trigger time.

The patterns are built from the path and name rules of ``streamrep.model.paths``, so the
trigger form refuses what ``streamrep`` itself would refuse (a topic in a stream path, an
empty component, a bad cluster name) before any task runs. The task then parses the path
again with the same rules, against the cluster registry.
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import Param
from jsonschema import FormatChecker

from streamrep.errors import InvalidArgument
from streamrep.model.network import (
    DEFAULT_NETWORK_COMPRESSION,
    KAFKA_CODECS,
    MAX_BYTES_PER_SEC,
    MIN_BYTES_PER_SEC,
    parse_max_bytes_per_sec,
)
from streamrep.model.paths import CLUSTER_NAME, MAPR_ROOT, MAX_PATH_LENGTH, PATH_COMPONENT
from streamrep.model.replication import validate_gateways
from streamrep.replication.failover import MAX_WAIT_SECONDS


def _body(pattern: str) -> str:
    """A ``^...$`` pattern without its anchors, to compose it into a larger one."""
    return pattern.removeprefix("^").removesuffix("$")


_COMPONENT = _body(PATH_COMPONENT.pattern)
CLUSTER_PATTERN = CLUSTER_NAME.pattern
# /mapr/<cluster>/<path> (the leading '/' may be left out, as in the seeds), or a path on the
# default cluster (which cannot start with 'mapr').
STREAM_PATH_PATTERN = (
    rf"^/?(?:{MAPR_ROOT}/{_body(CLUSTER_NAME.pattern)}/|(?!{MAPR_ROOT}(?:/|$))){_COMPONENT}(?:/{_COMPONENT})*/?$"
)


OPTIONAL_CLUSTER_PATTERN = rf"^(?:{_body(CLUSTER_NAME.pattern)})?$"
STREAM_PATH_MEANING = "a stream path: /mapr/<cluster>/<stream>, with no ':topic'"
CLUSTER_MEANING = "a cluster name: letters, digits, '.', '_' or '-', starting with a letter or digit"
# What each pattern of streamrep's params means, for the one-line error of a bad value
# (``one_line_param_error``): jsonschema's own names the raw pattern, then dumps the schema.
PATTERN_MEANINGS = {
    STREAM_PATH_PATTERN: STREAM_PATH_MEANING,
    CLUSTER_PATTERN: CLUSTER_MEANING,
    OPTIONAL_CLUSTER_PATTERN: f"empty or {CLUSTER_MEANING}",
}


def _gateway_list_or_empty(value: object) -> bool:
    """The ``gateways`` param: empty (the source clusters' lists) or what ``validate_gateways``
    takes."""
    if not isinstance(value, str):
        return False  # the schema's type names the error
    if value.strip():
        validate_gateways(value)
    return True


def _bytes_per_sec(value: object) -> bool:
    parse_max_bytes_per_sec(value)
    return True


# Rules that no JSON schema keyword can express, checked by the very functions the tasks call:
# maxbytespersec's range depends on its unit (500 and 200G are refused, 10M is not), and a gateway
# list must not name a gateway twice. Airflow validates params with ``jsonschema.FormatChecker()``
# and has no hook for a checker of its own; a checker in the class's table is used by every such
# instance (jsonschema's deprecated ``cls_checks`` does the same). A process that never imported
# this module (none of Airflow's: the DAG files and the plugin import it) would pass these formats
# unchecked, and the task's own check would still refuse the value.
BYTES_PER_SEC_FORMAT = "streamrep-bytes-per-sec"
GATEWAYS_FORMAT = "streamrep-gateways"
FormatChecker.checkers[BYTES_PER_SEC_FORMAT] = (_bytes_per_sec, InvalidArgument)
FormatChecker.checkers[GATEWAYS_FORMAT] = (_gateway_list_or_empty, InvalidArgument)
FORMAT_MEANINGS = {
    BYTES_PER_SEC_FORMAT: f"bytes a second: 0 (no limit) or {MIN_BYTES_PER_SEC:,} to {MAX_BYTES_PER_SEC // 10**9}G, "
    "a number with an optional unit K, M or G (10M)",
    GATEWAYS_FORMAT: "empty or gateway names, space separated, each a host name (optionally with :port) listed once",
}
PARAM_ERROR_PREFIX = "Invalid input for param "  # how Airflow's param validation starts its error


def one_line_param_error(detail: str) -> str:
    """Airflow's error for a bad DAG param as one line: jsonschema's first line (without the
    schema and instance it dumps after it), a streamrep pattern replaced by what it means."""
    line = detail.strip().splitlines()[0] if detail.strip() else detail
    for pattern, meaning in PATTERN_MEANINGS.items():
        line = line.replace(f"does not match {pattern!r}", f"is not {meaning}")
    for format_, meaning in FORMAT_MEANINGS.items():
        line = line.replace(f"is not a {format_!r}", f"is not {meaning}")
    return line


def names_a_streamrep_pattern(detail: str) -> bool:
    """Whether a param error comes from a streamrep pattern or format (of any DAG's param)."""
    return any(repr(rule) in detail for rule in (*PATTERN_MEANINGS, *FORMAT_MEANINGS))


def stream_path_param(default: str | None, title: str, description: str) -> Param:
    """A stream path: ``/mapr/<cluster>/<stream>``."""
    kwargs: dict[str, Any] = {} if default is None else {"default": default}
    return Param(
        type="string",
        pattern=STREAM_PATH_PATTERN,
        minLength=1,
        maxLength=MAX_PATH_LENGTH,
        title=title,
        description=f"{description} {STREAM_PATH_MEANING[0].upper()}{STREAM_PATH_MEANING[1:]}.",
        **kwargs,
    )


def cluster_param(default: str | None, description: str) -> Param:
    """A cluster name."""
    kwargs: dict[str, Any] = {} if default is None else {"default": default}
    return Param(
        type="string",
        pattern=CLUSTER_PATTERN,
        title="Cluster",
        description=f"{description} Letters, digits, '.', '_' or '-'.",
        **kwargs,
    )


def optional_cluster_param(description: str) -> Param:
    """A cluster name, or empty (every cluster)."""
    return Param(
        "",
        type="string",
        pattern=OPTIONAL_CLUSTER_PATTERN,
        title="Cluster",
        description=f"{description} Letters, digits, '.', '_' or '-'.",
    )


def seconds_param(default: float, title: str, description: str, maximum: float = MAX_WAIT_SECONDS) -> Param:
    """A number of seconds, 0 to ``maximum`` (the failover's waits: 0 is no wait, and valid)."""
    return Param(
        default,
        type="number",
        minimum=0,
        maximum=maximum,
        title=title,
        description=f"{description} Seconds, 0 to {maximum:g}.",
    )


def gateways_param() -> Param:
    """Gateway names that override the source clusters' lists, or empty (the lists)."""
    return Param(
        "",
        type="string",
        format=GATEWAYS_FORMAT,
        title="Gateways",
        description="Gateway names, space separated (default: the lists of the source clusters).",
    )


def flag_param(default: bool, title: str, description: str) -> Param:
    return Param(default, type="boolean", title=title, description=description)


def network_params() -> dict[str, Param]:
    """A replica's network options (``model/network.py``), as MapR's ``replica add`` and
    ``autosetup`` take them, with MapR's defaults."""
    return {
        "throttle": flag_param(
            False, "Throttle", "MapR's -throttle: the gateways back off while the replica's cluster is under load."
        ),
        "networkencryption": flag_param(
            False,
            "Network encryption",
            "Replicate over TLS only: refused unless each Kafka cluster of the pair "
            "uses security.protocol SSL or SASL_SSL.",
        ),
        "networkcompression": Param(
            DEFAULT_NETWORK_COMPRESSION,
            type="string",
            enum=list(KAFKA_CODECS),
            title="Network compression",
            description="The codec the gateways write the replica with on Kafka: off, lz4, "
            "zlib (as gzip), gzip, snappy or zstd. MapR's lzf has no Kafka codec.",
        ),
        "maxbytespersec": Param(
            "0",
            type=["string", "integer"],  # 10M or 10000000
            format=BYTES_PER_SEC_FORMAT,  # parse_max_bytes_per_sec, as the task parses it
            title="Max bytes per second",
            description="streamrep's limit on the bytes a second replicated into the replica, over all "
            "its gateways: a number with an optional decimal unit K, M or G (10M is 10,000,000); 0 is no limit.",
        ),
    }


def as_bool(value: Any) -> bool:
    """A templated flag as a bool (``"True"``/``"false"``/``1``... are accepted)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return bool(value)
    text = str(value).strip().lower()
    if text in ("true", "yes", "1", "on"):
        return True
    if text in ("false", "no", "0", "off", "", "none"):
        return False
    raise ValueError(f"not a boolean: {value!r}")
