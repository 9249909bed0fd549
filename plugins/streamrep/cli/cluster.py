"""``streamrep cluster ...``: the cluster registry, a cluster's administrators and the gateways
a destination cluster is reached through."""

from __future__ import annotations

from streamrep.cli import rows
from streamrep.cli.common import Context, Rows
from streamrep.cli.grammar import Command, Option
from streamrep.client.config import read_client_settings

SOURCE_CLUSTER = Option("cluster", help="the source cluster (default: the default cluster)")
CLUSTER_NAME = Option("name", required=True, help="the cluster's name")
DSTCLUSTER = Option("dstcluster", required=True, help="the destination cluster")


def cluster_add(
    ctx: Context, name: str, url: str | None = None, default: bool = False, configfile: str | None = None
) -> Rows:
    settings = read_client_settings(configfile) if configfile is not None else None
    info = ctx.admin.add_cluster(name, url, default, settings)
    return [{"name": info.name, "kind": info.kind, "url": info.url, "default": ctx.admin.clusters.default == name}]


def cluster_list(ctx: Context) -> Rows:
    default = ctx.admin.clusters.default
    return [
        {"name": c.name, "kind": c.kind, "url": c.url, "default": c.name == default} for c in ctx.admin.clusters.list()
    ]


def cluster_remove(ctx: Context, name: str) -> Rows:
    info = ctx.admin.clusters.remove(name)
    return [{"name": info.name, "removed": True, "url": info.url}]


def cluster_default(ctx: Context, name: str) -> Rows:
    ctx.admin.clusters.set_default(name)
    return [{"name": name, "default": True}]


def cluster_ace_get(ctx: Context, cluster: str | None = None) -> Rows:
    return [rows.cluster_ace_row(ctx.admin.get_cluster_ace(cluster))]


def cluster_ace_set(ctx: Context, adminperm: str, cluster: str | None = None) -> Rows:
    return [rows.cluster_ace_row(ctx.admin.set_cluster_ace(adminperm, cluster))]


def gateway_set(ctx: Context, dstcluster: str, gateways: str, cluster: str | None = None) -> Rows:
    names = ctx.admin.set_gateways(dstcluster, gateways, cluster)
    return [{"dstcluster": dstcluster, "gateways": names}]


def gateway_list(ctx: Context, cluster: str | None = None) -> Rows:
    return [{"dstcluster": dst, "gateways": names} for dst, names in ctx.admin.gateways(cluster).items()]


def gateway_get(ctx: Context, dstcluster: str, cluster: str | None = None) -> Rows:
    return [{"dstcluster": dstcluster, "gateways": ctx.admin.get_gateways(dstcluster, cluster)}]


def gateway_delete(ctx: Context, dstcluster: str, cluster: str | None = None) -> Rows:
    ctx.admin.delete_gateways(dstcluster, cluster)
    return []


COMMANDS: tuple[Command, ...] = (
    Command(
        ("cluster", "add"),
        cluster_add,
        (
            CLUSTER_NAME,
            Option(
                "url",
                help="embedded:<file> (a relative file is taken from the current directory) "
                "or kafka://host:port[,host:port...]",
            ),
            Option("default", bool, help="make it the default cluster"),
            Option(
                "configfile",
                help="a Kafka cluster's client settings (key=value lines: security.protocol, "
                "sasl.*, ssl.*, ...), passed to the Kafka client unchanged",
            ),
        ),
        "register a cluster (no -url: an embedded cluster)",
    ),
    Command(("cluster", "list"), cluster_list, (), "list registered clusters"),
    Command(("cluster", "remove"), cluster_remove, (CLUSTER_NAME,), "forget a cluster (its data file is kept)"),
    Command(
        ("cluster", "default"),
        cluster_default,
        (CLUSTER_NAME,),
        "make a registered cluster the default (for paths without /mapr/<cluster>)",
    ),
    Command(
        ("cluster", "ace", "get"),
        cluster_ace_get,
        (Option("cluster", help="the cluster (default: the default cluster)"),),
        "show who administers a cluster",
    ),
    Command(
        ("cluster", "ace", "set"),
        cluster_ace_set,
        (
            Option("adminperm", required=True, help='an ACE, e.g. "u:alice | g:ops"'),
            Option("cluster", help="the cluster (default: the default cluster)"),
        ),
        "change who administers a cluster (needs its adminperm)",
    ),
    Command(
        ("cluster", "gateway", "set"),
        gateway_set,
        (DSTCLUSTER, Option("gateways", required=True, help="gateway ids, separated by spaces"), SOURCE_CLUSTER),
        "list the gateways of a destination cluster",
    ),
    Command(("cluster", "gateway", "list"), gateway_list, (SOURCE_CLUSTER,), "gateways of every destination cluster"),
    Command(
        ("cluster", "gateway", "get"), gateway_get, (DSTCLUSTER, SOURCE_CLUSTER), "gateways of one destination cluster"
    ),
    Command(
        ("cluster", "gateway", "delete"),
        gateway_delete,
        (DSTCLUSTER, SOURCE_CLUSTER),
        "forget the gateways of a destination cluster",
    ),
)
