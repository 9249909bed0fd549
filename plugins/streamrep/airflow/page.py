"""The "Stream replication" page: clusters, streams, the replica/upstream topology (drawn as
inline SVG), each replica's state, lag and pending messages, and the gateways' liveness.

``topology(admin)`` gathers the data through the client and replication layers (the same
``replica list`` rows as the CLI); ``render_page`` draws it; ``create_app`` serves both as a
FastAPI app that the Airflow plugin mounts at ``/streamrep``.

Who may see what (Airflow does not put a plugin's app behind its login, so the app asks
Airflow's auth manager itself, the way Airflow's own routes do):

- the page and its JSON: an authenticated user (the UI's session cookie or a JWT bearer token)
  whom the auth manager allows the custom view ``Stream replication`` (the simple auth
  manager: every role, from viewer up). Otherwise 401 (not logged in) or 403.
- where the clusters are (their ``embedded:`` URLs, and file paths such as ``STREAMREP_HOME``
  in error messages): only users who may read Airflow connections, since the URLs come from
  them (the simple auth manager: op and admin). Others see the topology with the URL left out
  and paths in errors replaced by ``(hidden)``.

- starting and stopping a cluster's gateways (the page's buttons, ``POST
  /api/gateways/<cluster>/start|stop``): only users whom the auth manager allows to trigger the
  ``stream_gateway_service`` DAG (``is_authorized_dag`` POST on its runs; the simple auth
  manager: user, op and admin, not viewer), since that DAG does the same. The change is made as
  the hook's identity (the one the DAGs act as), so its cluster adminperm applies too. The
  buttons post with the UI's session cookie, which Airflow sets ``SameSite=Lax``: another
  site cannot make a browser post it.

With login off (``AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS=True``) everyone is an admin.
"""

from __future__ import annotations

import html
import math
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request

from streamrep.airflow import rows as presented
from streamrep.airflow.hook import StreamrepHook
from streamrep.client.admin import StreamAdmin
from streamrep.client.config import KAFKA_SCHEME
from streamrep.errors import StreamrepError
from streamrep.model.paths import StreamPath
from streamrep.replication import service
from streamrep.replication.flows import flows_into
from streamrep.replication.lag import SAMPLE_SECONDS, lag_history
from streamrep.replication.service import all_gateways
from streamrep.replication.status import replica_status

STATE_PREFIX = "REPLICA_STATE_"


# -- data ------------------------------------------------------------------------------
def topology(admin: StreamAdmin) -> dict[str, Any]:
    """Everything the page shows, as JSON-ready data."""
    now = time.time()
    clusters = admin.clusters.list()
    names = [c.name for c in clusters]
    gateways = all_gateways(admin, names, now)
    out: dict[str, Any] = {"generated": now, "clusters": [], "links": []}
    for info in clusters:
        service = gateways.get(info.name)
        cluster: dict[str, Any] = {
            "name": info.name,
            "kind": info.kind,
            "url": info.url,
            "error": None,
            "streams": [],
            "gateways": [] if service is None else [presented.gateway_row(gw) for gw in service.gateways],
            "desired": None if service is None else service.desired,
        }
        out["clusters"].append(cluster)
        try:
            entries = sorted(admin.list_streams(info.name), key=lambda e: e.path)
        except StreamrepError as err:
            cluster["error"] = str(err)
            continue
        for entry in entries:
            path = str(StreamPath(info.name, entry.path))
            stream: dict[str, Any] = {
                "path": path,
                "name": entry.path,
                "uuid": entry.uuid,
                "topics": 0,
                "partitions": 0,
                "messages": 0,
                "upstreams": [u.path for u in entry.upstreams],
                "error": None,
            }
            # Two reads, each failing on its own: topic counts need a read right on the stream, the
            # replica list its adminperm, so a stream the page may count but not administer still shows.
            try:
                topics = admin.list_topics(path)
                stream.update(
                    topics=len(topics),
                    partitions=sum(t.partitions for t in topics),
                    messages=sum(t.messages for t in topics),
                )
            except StreamrepError as err:
                stream["error"] = str(err)
            try:
                for status in replica_status(admin, path):
                    row = presented.replica_status_row(status)
                    out["links"].append(
                        {
                            "kind": "replica",
                            "source": path,
                            "replica": row["replicaPath"],
                            **row,
                            "lagHistory": _history(admin, path, row["replicaPath"]),
                        }
                    )
            except StreamrepError as err:
                stream["error"] = stream["error"] or str(err)
            cluster["streams"].append(stream)
        try:  # upstreams whose source does not list this replica: half of an agreement
            _, blocked = flows_into(admin, info.name)
        except StreamrepError:
            blocked = []
        for b in blocked:
            listed = any(link["source"] == str(b.source) and link["replica"] == str(b.replica) for link in out["links"])
            if not listed:
                out["links"].append(
                    {
                        "kind": "upstream-only",
                        "source": str(b.source),
                        "replica": str(b.replica),
                        "replicaState": "UPSTREAM_ONLY",
                        "errors": b.reason,
                        "paused": False,
                    }
                )
    return out


def _history(admin: StreamAdmin, source: str, replica: str) -> list[dict[str, int]]:
    """The replica's recorded lag (``lag.lag_history``); none when its cluster cannot be read."""
    try:
        return [presented.lag_sample_row(sample) for sample in lag_history(admin, source, replica)]
    except StreamrepError:
        return []


# -- drawing ------------------------------------------------------------------------------
COL_W, GAP, MARGIN = 270, 210, 24
HEAD_H, STREAM_H, STREAM_GAP, PAD = 50, 58, 14, 14
GW_HEAD_H, GW_ROW_H = 28, 22

COLORS = {
    "REPLICATING": "#16a34a",
    "WAITING_FOR_GATEWAY": "#d97706",
    "WAITING_FOR_UPSTREAM": "#d97706",
    "COPY_IN_PROGRESS": "#2563eb",
    "SYNC_FELL_BACK_TO_ASYNC": "#ea580c",
    "UNEXPECTED": "#dc2626",
    "PAUSED": "#6b7280",
    "UPSTREAM_ONLY": "#9ca3af",
}
GATEWAY_COLORS = {"live": "#16a34a", "stopping": "#2563eb", "expired": "#d97706", "down": "#dc2626"}
DESIRED_COLORS = {"running": "#16a34a", "stopped": "#6b7280"}


def short_state(link: dict[str, Any]) -> str:
    """The state without MapR's prefix: ``replicaState`` already ranks an error above a pause."""
    return str(link.get("replicaState") or "").removeprefix(STATE_PREFIX)


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _count(n: Any) -> str:
    return "-" if n is None else f"{n:,}"


def _lag(ms: Any) -> str:
    if ms is None:
        return "-"
    if ms < 1000:
        return f"{ms} ms"
    if ms < 120_000:
        return f"{ms / 1000:.1f} s"
    return f"{ms / 60000:.1f} min"


def column_order(topo: dict[str, Any]) -> list[dict[str, Any]]:
    """Clusters left to right, sources before their replicas: by how many more links leave a
    cluster than arrive in it, then by name."""
    balance = {c["name"]: 0 for c in topo["clusters"]}
    for link in topo["links"]:
        for path, step in ((link["source"], -1), (link["replica"], 1)):
            cluster = path.split("/")[2] if path.startswith("/mapr/") else None
            if cluster in balance:
                balance[cluster] += step
    return sorted(topo["clusters"], key=lambda c: (balance[c["name"]], c["name"]))


def _svg(topo: dict[str, Any]) -> str:
    clusters = column_order(topo)
    if not clusters:
        return '<p class="empty">No clusters yet: add one with <code>streamrep cluster add -name NAME</code>.</p>'
    boxes: dict[str, tuple[int, float, float, float]] = {}  # stream path -> (column, x, y, width)
    max_streams = max((len(c["streams"]) for c in clusters), default=0)
    max_gateways = max((len(c["gateways"]) for c in clusters), default=0)
    streams_h = max(1, max_streams) * (STREAM_H + STREAM_GAP)
    cluster_h = HEAD_H + PAD + streams_h + GW_HEAD_H + max(1, max_gateways) * GW_ROW_H + PAD
    width = MARGIN * 2 + len(clusters) * COL_W + (len(clusters) - 1) * GAP
    height = MARGIN * 2 + cluster_h + 20
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" id="topology" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="replication topology">',
        "<defs>",
    ]
    for name, color in COLORS.items():
        parts.append(
            f'<marker id="arrow-{name}" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
            f'markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="{color}"/></marker>'
        )
    parts.append("</defs>")
    for i, cluster in enumerate(clusters):
        x = MARGIN + i * (COL_W + GAP)
        y = MARGIN
        parts.append(f'<g class="cluster" data-cluster="{_e(cluster["name"])}">')
        parts.append(f'<rect x="{x}" y="{y}" width="{COL_W}" height="{cluster_h}" rx="12" class="cluster-box"/>')
        parts.append(f'<text x="{x + PAD}" y="{y + 24}" class="cluster-name">{_e(cluster["name"])}</text>')
        sub = f"{cluster['kind']} · {len(cluster['streams'])} stream{'s' if len(cluster['streams']) != 1 else ''}"
        parts.append(f'<text x="{x + PAD}" y="{y + 41}" class="cluster-sub">{_e(sub)}</text>')
        if cluster["error"]:
            parts.append(f'<text x="{x + PAD}" y="{y + HEAD_H + 24}" class="error">{_e(cluster["error"][:40])}</text>')
        for j, stream in enumerate(cluster["streams"]):
            sx, sy, sw = x + PAD, y + HEAD_H + PAD + j * (STREAM_H + STREAM_GAP), COL_W - 2 * PAD
            boxes[stream["path"]] = (i, sx, sy, sw)
            parts.append(
                f'<g class="stream" data-path="{_e(stream["path"])}">'
                f'<rect x="{sx}" y="{sy}" width="{sw}" height="{STREAM_H}" rx="8" class="stream-box"/>'
                f'<text x="{sx + 12}" y="{sy + 23}" class="stream-name">{_e(stream["name"])}</text>'
                f'<text x="{sx + 12}" y="{sy + 43}" class="stream-sub">'
                f"{_e(stream['topics'])} topics · {_e(stream['partitions'])} partitions · "
                f"{_count(stream['messages'])} msgs</text></g>"
            )
        gy = y + HEAD_H + PAD + streams_h
        parts.append(f'<text x="{x + PAD}" y="{gy + 18}" class="gw-head">gateways</text>')
        if not cluster["gateways"]:
            parts.append(f'<text x="{x + PAD}" y="{gy + GW_HEAD_H + 14}" class="gw-none">none running or listed</text>')
        for k, gw in enumerate(cluster["gateways"]):
            ry = gy + GW_HEAD_H + k * GW_ROW_H
            color = GATEWAY_COLORS.get(gw["status"], "#6b7280")
            age = "" if gw["heartbeatAgeSeconds"] is None else f" · beat {gw['heartbeatAgeSeconds']:.0f}s ago"
            parts.append(
                f'<g class="gateway" data-gateway="{_e(gw["id"])}" data-status="{_e(gw["status"])}">'
                f'<circle cx="{x + PAD + 6}" cy="{ry + 9}" r="6" fill="{color}"/>'
                f'<text x="{x + PAD + 20}" y="{ry + 14}" class="gw">{_e(gw["id"])} — {_e(gw["status"])}{_e(age)}</text></g>'
            )
        parts.append("</g>")
    # links: curves between stream boxes, labelled with state, lag and pending messages
    pairs = {(link["source"], link["replica"]) for link in topo["links"]}
    for link in topo["links"]:
        src, dst = boxes.get(link["source"]), boxes.get(link["replica"])
        if src is None or dst is None:
            continue
        state = short_state(link)
        color = COLORS.get(state, "#6b7280")
        offset = -8 if (link["replica"], link["source"]) in pairs else 0
        if (link["replica"], link["source"]) in pairs and link["source"] > link["replica"]:
            offset = 8
        (ci, src_x, src_y, src_w), (cj, dx, dy, dw) = src, dst
        y1, y2 = src_y + STREAM_H / 2 + offset, dy + STREAM_H / 2 + offset
        x1: float
        x2: float
        if ci < cj:
            x1, x2 = src_x + src_w, dx
        elif ci > cj:
            x1, x2 = src_x, dx + dw
        else:
            x1, x2 = src_x + src_w, dx + dw
        c1: tuple[float, float]
        c2: tuple[float, float]
        if ci == cj:
            bend = 70
            c1, c2 = (x1 + bend, y1), (x2 + bend, y2)
        else:
            mid = (x2 - x1) / 2
            c1, c2 = (x1 + mid, y1), (x2 - mid, y2)
        dash = ' stroke-dasharray="7 5"' if state in ("PAUSED", "UPSTREAM_ONLY", "WAITING_FOR_UPSTREAM") else ""
        parts.append(
            f'<g class="link" data-source="{_e(link["source"])}" data-replica="{_e(link["replica"])}" '
            f'data-state="{_e(state)}">'
            f'<path d="M{x1:.1f},{y1:.1f} C{c1[0]:.1f},{c1[1]:.1f} {c2[0]:.1f},{c2[1]:.1f} {x2:.1f},{y2:.1f}" '
            f'fill="none" stroke="{color}" stroke-width="3"{dash} marker-end="url(#arrow-{_e(state) if state in COLORS else "PAUSED"})"/>'
        )
        # the label sits at the curve's midpoint (t = 0.5 of the cubic Bezier)
        lx = (x1 + 3 * c1[0] + 3 * c2[0] + x2) / 8
        ly = (y1 + 3 * c1[1] + 3 * c2[1] + y2) / 8 + (-22 if offset < 0 else 22 if offset > 0 else 0)
        line2 = (
            "upstream only"
            if link["kind"] == "upstream-only"
            else f"lag {_lag(link.get('replicationLagMillis'))} · {_count(link.get('pendingMessages'))} pending"
        )
        w = max(len(state), len(line2)) * 7 + 16
        parts.append(
            f'<rect x="{lx - w / 2:.1f}" y="{ly - 17:.1f}" width="{w}" height="34" rx="6" class="label-box" '
            f'stroke="{color}"/>'
            f'<text x="{lx:.1f}" y="{ly - 3:.1f}" class="label-state" fill="{color}">{_e(state)}</text>'
            f'<text x="{lx:.1f}" y="{ly + 12:.1f}" class="label-sub">{_e(line2)}</text></g>'
        )
    parts.append("</svg>")
    return "".join(parts)


# -- the lag chart ---------------------------------------------------------------------------
CHART_W, CHART_H = 620, 230
CHART_L, CHART_R, CHART_T, CHART_B = 66, 66, 30, 42  # margins: room for the axes' labels
MESSAGES_COLOR, MS_COLOR, LIMIT_COLOR = "#2563eb", "#ea580c", "#dc2626"


def nice_max(value: float) -> float:
    """The smallest 1, 2 or 5 times a power of ten at or above ``value`` (an axis' top)."""
    if value <= 0:
        return 1
    power = 10 ** math.floor(math.log10(value))
    return next(step * power for step in (1, 2, 5, 10) if step * power >= value)


def _ms_unit(top_ms: float) -> tuple[str, float]:
    """The lag axis' unit and how many ms it holds: ms below 2 s, s below 5 min, else min."""
    if top_ms < 2000:
        return "ms", 1
    if top_ms < 300_000:
        return "s", 1000
    return "min", 60_000


def _clock(t_ms: int) -> str:
    return time.strftime("%H:%M:%S", time.gmtime(t_ms / 1000))


def lag_chart(link: dict[str, Any]) -> str:
    """One replica's recorded lag as an inline SVG chart: messages behind (left axis) and the lag
    in time (right axis) over time (UTC), with the replica's alert thresholds as red dashed lines.
    Samples are drawn as steps: each holds until the next, since nothing is known in between (a
    line would show a drain that took a second as a slope over minutes). A replica that is not
    paused and has no live gateway is marked: nothing replicates it, and nothing samples its lag
    after the last sample. The figures are in ``data-*`` attributes too, for tests and scripts."""
    samples = link.get("lagHistory") or []
    source, replica = _e(link["source"]), _e(link["replica"])
    if not samples:
        return (
            f'<p class="empty lag-none" data-source="{source}" data-replica="{replica}">No lag recorded yet: '
            f"a running gateway of the replica's cluster samples it every {SAMPLE_SECONDS:g} s.</p>"
        )
    limit_msgs, limit_ms = link.get("maxLagMessages"), link.get("maxLagMillis")
    top_msgs = nice_max(max([s["messages"] for s in samples] + [limit_msgs or 0]))
    highest_ms = max([s["ms"] for s in samples] + [limit_ms or 0])
    unit, per = _ms_unit(highest_ms)
    top_ms = nice_max(highest_ms / per) * per  # round ticks in the unit shown
    t0, t1 = samples[0]["t"], samples[-1]["t"]
    plot_w, plot_h = CHART_W - CHART_L - CHART_R, CHART_H - CHART_T - CHART_B
    left, right, top, bottom = CHART_L, CHART_W - CHART_R, CHART_T, CHART_H - CHART_B

    def x(t: int) -> float:
        return left + (plot_w / 2 if t1 == t0 else (t - t0) / (t1 - t0) * plot_w)

    def y(value: float, axis_top: float) -> float:
        return bottom - value / axis_top * plot_h

    last = samples[-1]
    unserved = not link.get("paused") and not link.get("gateways")
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="lag-chart" width="{CHART_W}" height="{CHART_H}" '
        f'viewBox="0 0 {CHART_W} {CHART_H}" role="img" aria-label="lag of {replica}" '
        f'data-source="{source}" data-replica="{replica}" data-samples="{len(samples)}" '
        f'data-first="{t0}" data-last="{t1}" data-last-messages="{last["messages"]}" '
        f'data-last-ms="{last["ms"]}" data-max-messages="{max(s["messages"] for s in samples)}" '
        f'data-max-ms="{max(s["ms"] for s in samples)}" data-shape="steps" '
        f'data-live-gateway="{"false" if unserved else "true"}">',
        f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" class="plot"/>',
    ]
    for frac in (0.25, 0.5, 0.75):  # grid
        gy = bottom - frac * plot_h
        parts.append(f'<line x1="{left}" y1="{gy:.1f}" x2="{right}" y2="{gy:.1f}" class="grid"/>')
    # axes, their ticks and labels
    parts.append(
        f'<g class="axis" data-axis="messages">'
        f'<line x1="{left}" y1="{top}" x2="{left}" y2="{bottom}" stroke="{MESSAGES_COLOR}"/>'
        + "".join(
            f'<text x="{left - 6}" y="{y(v, top_msgs) + 4:.1f}" class="tick" text-anchor="end">'
            f"{_e(_count(int(v)) if v == int(v) else v)}</text>"
            for v in (0, top_msgs / 2, top_msgs)
        )
        + f'<text transform="translate({16},{(top + bottom) / 2:.1f}) rotate(-90)" class="axis-label" '
        f'fill="{MESSAGES_COLOR}">messages behind</text></g>'
    )
    parts.append(
        f'<g class="axis" data-axis="lag" data-unit="{unit}">'
        f'<line x1="{right}" y1="{top}" x2="{right}" y2="{bottom}" stroke="{MS_COLOR}"/>'
        + "".join(
            f'<text x="{right + 6}" y="{y(v, top_ms) + 4:.1f}" class="tick" text-anchor="start">{v / per:g}</text>'
            for v in (0, top_ms / 2, top_ms)
        )
        + f'<text transform="translate({CHART_W - 12},{(top + bottom) / 2:.1f}) rotate(90)" '
        f'class="axis-label" fill="{MS_COLOR}">lag ({unit})</text></g>'
    )
    ticks = [t0] if t1 == t0 else [t0, (t0 + t1) // 2, t1]
    parts.append(
        f'<g class="axis" data-axis="time"><line x1="{left}" y1="{bottom}" x2="{right}" y2="{bottom}" '
        f'stroke="#64748b"/>'
        + "".join(
            f'<text x="{x(t):.1f}" y="{bottom + 15}" class="tick" text-anchor="middle">{_clock(t)}</text>'
            for t in ticks
        )
        + f'<text x="{(left + right) / 2:.1f}" y="{CHART_H - 6}" class="axis-label" text-anchor="middle">'
        f"time (UTC)</text></g>"
    )
    for limit, axis_top, name, text in (
        (limit_msgs, top_msgs, "maxLagMessages", f"alert: {_count(limit_msgs)} msgs"),
        (limit_ms, top_ms, "maxLagMillis", f"alert: {_lag(limit_ms)}"),
    ):
        if limit:
            ly = y(limit, axis_top)
            parts.append(
                f'<line class="threshold" data-threshold="{name}" data-value="{limit}" x1="{left}" '
                f'y1="{ly:.1f}" x2="{right}" y2="{ly:.1f}" stroke="{LIMIT_COLOR}" stroke-dasharray="4 3"/>'
                f'<text x="{right - 4}" y="{ly - 3:.1f}" class="tick" text-anchor="end" '
                f'fill="{LIMIT_COLOR}">{_e(text)}</text>'
            )
    for series, key, axis_top, color, dash in (
        ("messages", "messages", top_msgs, MESSAGES_COLOR, ""),
        ("ms", "ms", top_ms, MS_COLOR, ' stroke-dasharray="6 3"'),
    ):
        points = " ".join(f"{px:.1f},{py:.1f}" for px, py in steps(samples, key, x, lambda v: y(v, axis_top)))
        parts.append(
            f'<polyline class="series" data-series="{series}" data-points="{len(samples)}" '
            f'points="{points}" fill="none" stroke="{color}" stroke-width="2"{dash}/>'
        )
        if len(samples) == 1:  # one sample is a point, not a line
            cx, cy = points.split(",")
            parts.append(f'<circle cx="{cx}" cy="{cy}" r="3" fill="{color}"/>')
    if unserved:
        lx = x(t1)
        parts.append(
            f'<g class="no-gateway" data-since="{t1}"><line x1="{lx:.1f}" y1="{top}" x2="{lx:.1f}" y2="{bottom}" '
            f'stroke="{LIMIT_COLOR}" stroke-dasharray="2 2"/>'
            f'<text x="{right - 4}" y="{top + 14}" class="tick" text-anchor="end" fill="{LIMIT_COLOR}">'
            f"no live gateway: not replicated, not sampled since {_clock(t1)}</text></g>"
        )
    parts.append(
        f'<g class="legend"><rect x="{left + 8}" y="8" width="12" height="3" fill="{MESSAGES_COLOR}"/>'
        f'<text x="{left + 24}" y="13" class="tick">messages behind (now {_count(last["messages"])})</text>'
        f'<rect x="{left + 240}" y="8" width="12" height="3" fill="{MS_COLOR}"/>'
        f'<text x="{left + 256}" y="13" class="tick">lag (now {_e(_lag(last["ms"]))})</text></g>'
    )
    parts.append("</svg>")
    return "".join(parts)


def steps(samples: list[dict[str, Any]], key: str, x: Any, y: Any) -> list[tuple[float, float]]:
    """The corners of a step line through ``samples``: each value held until the next sample."""
    corners = [(x(samples[0]["t"]), y(samples[0][key]))]
    for before, sample in zip(samples, samples[1:], strict=False):
        corners += [(x(sample["t"]), y(before[key])), (x(sample["t"]), y(sample[key]))]
    return corners


def lag_section(topo: dict[str, Any]) -> str:
    """A lag chart per replica link, each under its source and replica."""
    figures = [
        f'<figure class="lag" data-source="{_e(link["source"])}" data-replica="{_e(link["replica"])}">'
        f"<figcaption>{_e(link['source'])} → {_e(link['replica'])}</figcaption>{lag_chart(link)}</figure>"
        for link in topo["links"]
        if link["kind"] == "replica"
    ]
    return f'<div id="lag-charts">{"".join(figures) or "<p class=empty>no replicas</p>"}</div>'


STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:20px;color:#111827;background:#f8fafc}
h1{font-size:22px;margin:0 0 4px} h2{font-size:16px;margin:26px 0 8px}
.meta{color:#6b7280;font-size:13px;margin-bottom:14px}
.canvas{overflow-x:auto;background:#fff;border:1px solid #e5e7eb;border-radius:12px;padding:8px}
.cluster-box{fill:#f1f5f9;stroke:#94a3b8;stroke-width:1.5}
.cluster-name{font-size:17px;font-weight:700;fill:#0f172a} .cluster-sub{font-size:12px;fill:#64748b}
.stream-box{fill:#fff;stroke:#3b82f6;stroke-width:1.5} .stream-name{font-size:14px;font-weight:600;fill:#1e3a8a}
.stream-sub{font-size:11.5px;fill:#475569} .gw-head{font-size:12px;font-weight:700;fill:#334155;letter-spacing:.05em}
.gw{font-size:12px;fill:#1f2937} .gw-none{font-size:12px;fill:#9ca3af} .error{font-size:12px;fill:#dc2626}
.label-box{fill:#fff;stroke-width:1.2} .label-state{font-size:11px;font-weight:700;text-anchor:middle}
.label-sub{font-size:11px;fill:#374151;text-anchor:middle}
table{border-collapse:collapse;background:#fff;font-size:13px;min-width:60%}
th,td{border:1px solid #e5e7eb;padding:5px 9px;text-align:left} th{background:#f1f5f9}
.pill{display:inline-block;padding:1px 8px;border-radius:9px;color:#fff;font-size:11.5px;font-weight:600}
.empty{color:#6b7280}
.legend{font-size:12px;color:#4b5563;padding:4px 10px 6px}
.swatch{display:inline-block;width:18px;height:4px;margin:0 5px 3px 12px;border-radius:2px;vertical-align:middle}
#lag-charts{display:flex;flex-wrap:wrap;gap:14px} figure.lag{margin:0;background:#fff;border:1px solid #e5e7eb;
border-radius:12px;padding:8px} figure.lag figcaption{font-size:13px;font-weight:600;color:#1e3a8a;margin:2px 4px 4px}
.lag-chart .plot{fill:#f8fafc;stroke:#e2e8f0} .lag-chart .grid{stroke:#e2e8f0;stroke-dasharray:2 3}
.lag-chart .tick{font-size:10.5px;fill:#475569} .lag-chart .axis-label{font-size:11px;font-weight:600;text-anchor:middle}
"""


def _pill(text: str, color: str) -> str:
    return f'<span class="pill" style="background:{color}">{_e(text)}</span>'


def _age(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds:.1f} s ago"


def where(gw: dict[str, Any]) -> str:
    """Where a gateway runs: host and pid, engine (and Spark application), Airflow task."""
    if gw["host"] is None:
        return "-"
    parts = [f"{gw['host']} (pid {gw['pid']})"]
    if gw.get("engine"):
        parts.append(
            gw["engine"]
            + (f" {gw['appId']}" if gw.get("appId") else "")
            + (f" on {gw['master']}" if gw.get("master") else "")
        )
    if gw.get("airflow"):
        parts.append(f"airflow {gw['airflow']}")
    return " · ".join(parts)


def _control(cluster: dict[str, Any]) -> str:
    """Start and stop buttons for a cluster's gateways (posting to this app, then reloading)."""
    name = _e(cluster["name"])
    return " ".join(
        f'<button class="gw-{action}" data-cluster="{name}" onclick="gatewayControl(this, \'{action}\')">{action}</button>'
        for action in ("start", "stop")
    )


CONTROL_SCRIPT = """<script>
function gatewayControl(button, action) {
  button.disabled = true;
  fetch('api/gateways/' + encodeURIComponent(button.dataset.cluster) + '/' + action, {method: 'POST'})
    .then(r => r.json()).then(d => { if (d.error) alert(d.error); location.reload(); });
}
</script>"""


def render_page(topo: dict[str, Any], refresh_seconds: int = 15, controls: bool = False) -> str:
    """The whole HTML page."""
    generated = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(topo["generated"]))
    rows = []
    for link in topo["links"]:
        state = short_state(link)
        rows.append(
            "<tr>"
            + "".join(
                f"<td>{cell}</td>"
                for cell in (
                    _e(link["source"]),
                    _e(link["replica"]),
                    _pill(state, COLORS.get(state, "#6b7280")),
                    _e(str(bool(link.get("paused"))).lower()),
                    _e(str(bool(link.get("synchronous"))).lower()),
                    _e({True: "yes", False: "no"}.get(link.get("isUptodate"), "-")),
                    _count(link.get("pendingMessages")),
                    _count(link.get("bytesPending")),
                    _e(_lag(link.get("replicationLagMillis"))),
                    _e(link.get("errors") or ""),
                )
            )
            + "</tr>"
        )
    gateways = []
    for cluster in topo["clusters"]:
        for gw in cluster["gateways"]:
            gateways.append(
                "<tr>"
                + "".join(
                    f"<td>{c}</td>"
                    for c in (
                        _e(cluster["name"]),
                        _e(gw["id"]),
                        _pill(gw["status"], GATEWAY_COLORS.get(gw["status"], "#6b7280")),
                        _e(_age(gw["heartbeatAgeSeconds"])),
                        _e(where(gw)),
                        f'<span title="{_e(" ".join(gw["share"]))}">{_e(gw["partitions"])}</span>',
                        _e(", ".join(gw["listedBy"]) or "-"),
                    )
                )
                + "</tr>"
            )
    services = "".join(
        "<tr>"
        + "".join(
            f"<td>{c}</td>"
            for c in (
                _e(c["name"]),
                _pill(c.get("desired") or "not managed", DESIRED_COLORS.get(c.get("desired"), "#9ca3af")),
                _e(sum(gw["status"] == "live" for gw in c["gateways"])),
                _e(sum(gw["partitions"] for gw in c["gateways"])),
                *([_control(c)] if controls else []),
            )
        )
        + "</tr>"
        for c in topo["clusters"]
    )
    control_head = "<th>gateways</th>" if controls else ""
    streams = []
    for cluster in topo["clusters"]:
        for s in cluster["streams"]:
            streams.append(
                "<tr>"
                + "".join(
                    f"<td>{c}</td>"
                    for c in (
                        _e(s["path"]),
                        _e(s["topics"]),
                        _e(s["partitions"]),
                        _count(s["messages"]),
                        _e(", ".join(s["upstreams"]) or "-"),
                        _e(s["error"] or ""),
                    )
                )
                + "</tr>"
            )
    clusters = ", ".join(f"{_e(c['name'])} ({_e(c['kind'])})" for c in topo["clusters"]) or "none"
    legend = " ".join(
        f'<span class="swatch" style="background:{color}"></span>{_e(state.lower().replace("_", " "))}'
        for state, color in COLORS.items()
    )
    replica_header = (
        "<tr><th>source</th><th>replica</th><th>state</th><th>paused</th><th>synchronous</th>"
        "<th>up to date</th><th>pending msgs</th><th>pending bytes</th><th>lag</th><th>errors</th></tr>"
    )
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Stream replication</title>
<meta http-equiv="refresh" content="{int(refresh_seconds)}">
<style>{STYLE}</style></head>
<body>
<h1>Stream replication</h1>
<div class="meta">Clusters: {clusters} · {len(topo["links"])} replica link{"s" if len(topo["links"]) != 1 else ""} ·
updated {_e(generated)} (refreshes every {int(refresh_seconds)} s) · <a href="api/topology">JSON</a></div>
<div class="canvas">{_svg(topo)}<div class="legend">{legend}</div></div>
<h2>Lag</h2>
<p class="meta">Recorded by the gateways every {SAMPLE_SECONDS:g} s (<code>streamrep stream replica lag</code>);
red dashed lines are the replica's alert thresholds (<code>streamrep stream replica alert</code>).</p>
{lag_section(topo)}
<h2>Replicas</h2>
<table id="replicas">{replica_header}{"".join(rows) or '<tr><td colspan="10" class="empty">no replicas</td></tr>'}</table>
<h2>Gateways</h2>
<table id="gateway-service"><tr><th>cluster</th><th>desired state</th><th>live gateways</th><th>partitions held</th>{control_head}</tr>
{services or '<tr><td colspan="4" class="empty">no clusters</td></tr>'}</table>{CONTROL_SCRIPT if controls else ""}
<p class="meta">Start or stop a cluster's gateways with <code>streamrep gateway start|stop -cluster C</code>, or trigger
the <code>stream_gateway_service</code> DAG with <code>action</code> start or stop.</p>
<table id="gateways"><tr><th>cluster</th><th>gateway</th><th>status</th><th>last heartbeat</th><th>where</th><th>partitions</th><th>listed by</th></tr>
{"".join(gateways) or '<tr><td colspan="7" class="empty">no gateways listed or running</td></tr>'}</table>
<h2>Streams</h2>
<table id="streams"><tr><th>stream</th><th>topics</th><th>partitions</th><th>messages</th><th>upstreams</th><th>errors</th></tr>
{"".join(streams) or '<tr><td colspan="6" class="empty">no streams</td></tr>'}</table>
</body></html>"""


# -- who sees what ----------------------------------------------------------------------------
PAGE_RESOURCE = "Stream replication"  # the custom view an auth manager grants for the page
HIDDEN = "(hidden)"
# An absolute file path in a message (a stream path, /mapr/..., is not one).
_FILE_PATH = re.compile(r"(?<![\w/.])/(?!mapr/)[^\s'\",;:]+")
# A broker address librdkafka resolved (``ipv4#10.0.0.2:9092``), which no cluster URL names.
_RESOLVED_ADDRESS = re.compile(r"\bipv[46]#[^\s'\",;]+")


@dataclass(frozen=True)
class PageAccess:
    """What the caller of the page may see.

    :param user: the caller's name.
    :param sees_locations: whether cluster URLs and file paths are shown too.
    :param may_control: whether the caller may start and stop gateways (the page's buttons).
    """

    user: str
    sees_locations: bool
    may_control: bool = False


SERVICE_DAG_ID = "stream_gateway_service"  # starting/stopping gateways is triggering this DAG's work


def allowed_to_control(manager: Any, user: Any) -> bool:
    """Whether the auth manager lets ``user`` trigger runs of the gateway service DAG."""
    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity, DagDetails

    return manager.is_authorized_dag(
        method="POST", access_entity=DagAccessEntity.RUN, details=DagDetails(id=SERVICE_DAG_ID), user=user
    )


async def airflow_access(request: Request) -> PageAccess:
    """The caller as Airflow's auth manager knows them (401 if not logged in, 403 if the page is
    not theirs to see), authenticated the way Airflow's own routes are (``get_user``)."""
    # Imported here: the plugin is loaded by every Airflow process, only the API server serves it.
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.core_api.security import bearer_scheme, get_user
    from fastapi import HTTPException, status

    user = await get_user(request, None, await bearer_scheme(request))
    manager = get_auth_manager()
    if not manager.is_authorized_custom_view(method="GET", resource_name=PAGE_RESOURCE, user=user):
        raise HTTPException(status.HTTP_403_FORBIDDEN, "Forbidden")
    return PageAccess(
        user.get_name(), manager.is_authorized_connection(method="GET", user=user), allowed_to_control(manager, user)
    )


async def airflow_control(request: Request) -> PageAccess:
    """``airflow_access``, and 403 unless the caller may start and stop gateways."""
    from fastapi import HTTPException, status

    caller = await airflow_access(request)
    if not caller.may_control:
        raise HTTPException(
            status.HTTP_403_FORBIDDEN,
            f"Forbidden: starting or stopping gateways needs the right to trigger the {SERVICE_DAG_ID} DAG",
        )
    return caller


def location_scrubber(urls: list[str], home: str) -> Callable[[Any], Any]:
    """What hides where the clusters are in a message: the cluster ``urls`` (and a Kafka cluster's
    bootstrap servers, one by one too), the registry folder ``home``, any other absolute file path,
    and the broker addresses Kafka's client resolved. Anything but a string passes unchanged."""
    found = {home}
    for url in urls:
        found.update({url, url.split(":", 1)[-1]})
        if url.startswith(KAFKA_SCHEME):  # Kafka's errors name the bootstrap servers, one by one too
            servers = url[len(KAFKA_SCHEME) :]
            found.update({servers, *servers.split(",")})
    secrets = sorted((s for s in found if s), key=len, reverse=True)

    def scrub(text: Any) -> Any:
        if not isinstance(text, str):
            return text
        for secret in secrets:
            text = text.replace(secret, HIDDEN)
        return _RESOLVED_ADDRESS.sub(HIDDEN, _FILE_PATH.sub(HIDDEN, text))

    return scrub


def hide_locations(topo: dict[str, Any], home: str) -> dict[str, Any]:
    """``topo`` without where the clusters are: no URL, and no location in any error
    (``location_scrubber``)."""
    scrub = location_scrubber([c.get("url") or "" for c in topo["clusters"]], home)
    clusters = [
        {
            **c,
            "url": None,
            "error": scrub(c["error"]),
            "streams": [{**s, "error": scrub(s["error"])} for s in c["streams"]],
            "gateways": [{**g, "master": None} for g in c.get("gateways", [])],
        }
        for c in topo["clusters"]
    ]
    links = [{**link, "errors": scrub(link.get("errors"))} for link in topo["links"]]
    return {**topo, "clusters": clusters, "links": links}


# -- serving ------------------------------------------------------------------------------
def current_topology(
    hook_factory: Callable[[], StreamrepHook] = StreamrepHook, access: PageAccess | None = None
) -> dict[str, Any]:
    """The topology as ``access`` may see it (everything when None)."""
    hook = hook_factory()
    try:
        hook.discover_clusters()
        topo = topology(hook.admin)
        if access is not None and not access.sees_locations:
            topo = hide_locations(topo, hook.clusters.home)
        return topo
    finally:
        hook.close()


def create_app(
    hook_factory: Callable[[], StreamrepHook] = StreamrepHook,
    access: Callable[..., Awaitable[PageAccess]] = airflow_access,
    control: Callable[..., Awaitable[PageAccess]] = airflow_control,
):
    """The FastAPI app of the page: ``/replication`` (HTML), ``/api/topology`` (JSON) and
    ``POST /api/gateways/<cluster>/start|stop`` (``gateway start|stop``; JSON).

    :param hook_factory: makes the hook that resolves the clusters.
    :param access: the FastAPI dependency that authenticates and authorizes the caller.
    :param control: the same for starting and stopping gateways.
    """
    from fastapi import Depends, FastAPI
    from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse

    app = FastAPI(title="streamrep: stream replication", docs_url=None, redoc_url=None, openapi_url=None)

    @app.get("/", include_in_schema=False)
    def index() -> RedirectResponse:
        return RedirectResponse("replication")

    @app.get("/replication", response_class=HTMLResponse)
    def replication_page(caller: PageAccess = Depends(access)) -> HTMLResponse:
        return HTMLResponse(render_page(current_topology(hook_factory, caller), controls=caller.may_control))

    @app.get("/api/topology")
    def replication_topology(caller: PageAccess = Depends(access)) -> JSONResponse:
        return JSONResponse(current_topology(hook_factory, caller))

    @app.post("/api/gateways/{cluster}/{action}")
    def gateway_control(cluster: str, action: str, caller: PageAccess = Depends(control)) -> JSONResponse:
        if action not in ("start", "stop"):
            return JSONResponse({"error": f"unknown action {action!r}: start or stop"}, status_code=404)
        hook = hook_factory()
        try:
            hook.discover_clusters()
            req = service.request(hook.admin, cluster, service.RUNNING if action == "start" else service.STOPPED)
        except StreamrepError as err:
            return JSONResponse({"error": str(err)}, status_code=400)
        finally:
            hook.close()
        return JSONResponse({**presented.service_request_row(req), "requestedBy": caller.user})

    return app
