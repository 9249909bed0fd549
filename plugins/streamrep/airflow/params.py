"""DAG params for streamrep DAGs, validated by a JSON schema at trigger time.

The patterns are built from the path and name rules of ``streamrep.model.paths``, so the
trigger form refuses what ``streamrep`` itself would refuse (a topic in a stream path, an
empty component, a bad cluster name) before any task runs. The task then parses the path
again with the same rules, against the cluster registry.
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import Param

from streamrep.model.network import DEFAULT_NETWORK_COMPRESSION, KAFKA_CODECS
from streamrep.model.paths import CLUSTER_NAME, MAPR_ROOT, MAX_PATH_LENGTH, PATH_COMPONENT


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
PARAM_ERROR_PREFIX = "Invalid input for param "  # how Airflow's param validation starts its error


def one_line_param_error(detail: str) -> str:
    """Airflow's error for a bad DAG param as one line: jsonschema's first line (without the
    schema and instance it dumps after it), a streamrep pattern replaced by what it means."""
    line = detail.strip().splitlines()[0] if detail.strip() else detail
    for pattern, meaning in PATTERN_MEANINGS.items():
        line = line.replace(f"does not match {pattern!r}", f"is not {meaning}")
    return line


def names_a_streamrep_pattern(detail: str) -> bool:
    return any(repr(pattern) in detail for pattern in PATTERN_MEANINGS)


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


def seconds_param(default: float, title: str, description: str, maximum: float = 86_400) -> Param:
    """A number of seconds, 0 to ``maximum``."""
    return Param(
        default,
        type="number",
        minimum=0,
        maximum=maximum,
        title=title,
        description=f"{description} Seconds, 0 to {maximum:g}.",
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
            type=["string", "integer"],  # 10M or 10000000; the core library checks the value
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
