// Turns the cluster answers into a topology model (clusters, streams, links),
// then lays it out with ELK: layered, left to right, clusters as compound
// nodes holding their streams (INCLUDE_CHILDREN), so each link is routed
// between its own two streams and around other clusters' boxes.
import ELK from "elkjs/lib/elk.bundled.js";
import type { ElkExtendedEdge, ElkNode } from "elkjs/lib/elk-api";
import type { Cluster, Link, Overview } from "./api";
import { shortState } from "./api";
import { count, duration } from "./format";
import { verificationWord } from "./Verification";

export type ClusterState =
  | { status: "loading" }
  | { status: "ok"; data: Cluster }
  | { status: "failed"; error: string; forbidden?: boolean };

export interface ClusterBox {
  name: string;
  kind: string;
  status: ClusterState["status"];
  error: string | null;
  desired: string | null;
  live: number;
  gateways: number;
  streams: number;
}

export interface StreamBox {
  path: string;
  cluster: string;
  name: string;
  messages: number | null;
  topics: number | null;
  partitions: number | null;
  error: string | null;
  placeholder: boolean;
}

export interface LinkModel {
  id: string;
  link: Link;
  state: string;
  sampleSeconds: number | null;
}

export interface Model {
  clusters: ClusterBox[];
  streams: StreamBox[];
  /** links drawn in the topology (both endpoints placed) */
  edges: LinkModel[];
  /** every known link, for the table and the charts */
  links: LinkModel[];
}

/** The cluster named in a /mapr/<cluster>/... path, if it is one we list. */
function clusterInPath(path: string, names: Set<string>): string | null {
  const m = /^\/mapr\/([^/]+)\//.exec(path);
  return m && names.has(m[1]) ? m[1] : null;
}

export function buildModel(overview: Overview, states: Record<string, ClusterState>): Model {
  const names = new Set(overview.clusters.map((c) => c.name));
  const clusters: ClusterBox[] = overview.clusters.map((c) => {
    const st = states[c.name] ?? { status: "loading" };
    const data = st.status === "ok" ? st.data : null;
    return {
      name: c.name,
      kind: data?.kind ?? c.kind,
      status: st.status,
      error: st.status === "failed" ? st.error : (data?.error ?? null),
      desired: data?.desired ?? null,
      live: data?.gateways.filter((g) => g.status === "live").length ?? 0,
      gateways: data?.gateways.length ?? 0,
      streams: data?.streams.length ?? 0,
    };
  });

  const streams = new Map<string, StreamBox>();
  for (const c of overview.clusters) {
    const st = states[c.name];
    if (st?.status !== "ok") continue;
    for (const s of st.data.streams)
      streams.set(s.path, {
        path: s.path,
        cluster: c.name,
        name: s.name,
        messages: s.messages,
        topics: s.topics,
        partitions: s.partitions,
        error: s.error,
        placeholder: false,
      });
  }

  // One link per source -> replica; a full "replica" link beats an upstream-only half.
  const links = new Map<string, LinkModel & { owner: string }>();
  for (const c of overview.clusters) {
    const st = states[c.name];
    if (st?.status !== "ok") continue;
    for (const l of st.data.links) {
      const id = `${l.source}->${l.replica}`;
      const prev = links.get(id);
      if (prev && !(prev.link.kind === "upstream-only" && l.kind === "replica")) continue;
      links.set(id, { id, link: l, state: shortState(l), sampleSeconds: st.data.sampleSeconds, owner: c.name });
    }
  }

  // Where does an endpoint live? Known streams first, then what the link says.
  const clusterOf = (path: string, lm: LinkModel & { owner: string }, isReplica: boolean) => {
    const known = streams.get(path);
    if (known) return known.cluster;
    const l = lm.link;
    if (l.kind === "replica") {
      if (!isReplica) return lm.owner;
      if (l.cluster && names.has(l.cluster)) return l.cluster;
    } else if (isReplica) return lm.owner;
    const inPath = clusterInPath(path, names);
    if (inPath) return inPath;
    if (l.kind === "upstream-only" && l.cluster && l.cluster !== lm.owner && names.has(l.cluster))
      return l.cluster;
    return null;
  };

  const edges: LinkModel[] = [];
  for (const lm of links.values()) {
    const ends = [
      [lm.link.source, clusterOf(lm.link.source, lm, false)],
      [lm.link.replica, clusterOf(lm.link.replica, lm, true)],
    ] as const;
    // Draw once both ends are known: wait for a cluster still loading.
    if (ends.some(([, c]) => c == null || states[c]?.status === "loading" || !states[c])) continue;
    for (const [path, c] of ends) {
      if (streams.has(path)) continue;
      streams.set(path, {
        path,
        cluster: c!,
        name: path.replace(/^\/mapr\/[^/]+/, "") || path,
        messages: null,
        topics: null,
        partitions: null,
        error: states[c!]?.status === "ok" && !clusters.find((b) => b.name === c)?.error ? "not listed by its cluster" : null,
        placeholder: true,
      });
    }
    edges.push(lm);
  }

  return { clusters, streams: [...streams.values()], edges, links: [...links.values()] };
}

// ---- sizes -------------------------------------------------------------
// Every box is drawn at exactly the size given to ELK, so ELK's spacing is what
// a person sees. Text is measured on a canvas (estimated where there is none).

const FAMILY = "Inter, system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif";
const FONT = `13px ${FAMILY}`;
let ctx: CanvasRenderingContext2D | null | undefined;

export function textWidth(text: string, font = FONT): number {
  if (ctx === undefined) ctx = typeof document === "undefined" ? null : document.createElement("canvas").getContext("2d");
  if (!ctx) return text.length * (parseFloat(/(\d+)px/.exec(font)?.[1] ?? "13") * 0.62);
  ctx.font = font;
  return ctx.measureText(text).width;
}

/** Number of lines `text` wraps to in `width` px, with slack for font differences. */
export function wrappedLines(text: string, width: number, font = FONT): number {
  let lines = 1;
  let line = 0;
  const space = textWidth(" ", font);
  for (const word of text.split(/\s+/)) {
    // break-word style: a word wider than the line fills whole lines
    const w = textWidth(word, font) * 1.08;
    if (line > 0 && line + space + w > width) {
      lines++;
      line = 0;
    }
    if (w > width) {
      lines += Math.floor(w / width);
      line = w % width;
    } else line += (line > 0 ? space : 0) + w;
  }
  return lines;
}

export const STREAM_W = 184;
/** a stream's name: 13 px, so a 0.7 zoom still draws it 9 px high */
export const STREAM_NAME_PX = 13;
const CLUSTER_MIN_W = 220;
const CLUSTER_ERR_W = 340;
const PAD = 12;
const LINE = 18;

export function streamHeight(s: StreamBox): number {
  const err = s.error ? wrappedLines(s.error, STREAM_W - 20, `12px ${FAMILY}`) * 16 + 4 : 0;
  return 50 + err;
}

function clusterWidth(c: ClusterBox): number {
  return c.error ? CLUSTER_ERR_W : CLUSTER_MIN_W;
}

/** Height of the header band (name, badges, gateway summary, error). */
export function clusterHeader(c: ClusterBox): number {
  const err = c.error ? wrappedLines(c.error, clusterWidth(c) - 2 * PAD - 4) * LINE + 8 : 0;
  return 60 + err;
}

/** What a link's label says: its state (badges) over its lag. */
export function labelText(lm: LinkModel): { state: string; lag: string } {
  const l = lm.link;
  return {
    state: l.paused && lm.state !== "PAUSED" ? `${lm.state} · PAUSED` : lm.state,
    lag: l.kind === "upstream-only" ? "upstream only" : `lag ${duration(l.replicationLagMillis)} · ${count(l.pendingMessages)} pending`,
  };
}

/** A replica link's label has a third line: its last verification (Verification.tsx). */
export const labelHeight = (lm: LinkModel): number => (lm.link.kind === "replica" ? 60 : 40);
export const FAILED_OVER = "FAILED OVER";
const AGO_ROOM = "23 minutes ago"; // a longer "when" later is cut with an ellipsis
/** Room for the badges, the lag line and the verification line; a longer lag line later is cut
 * with an ellipsis. */
export function labelWidth(lm: LinkModel): number {
  const { state, lag } = labelText(lm);
  const badge = (t: string) => textWidth(t, `500 12px ${FAMILY}`) + 14;
  const small = (t: string) => textWidth(t, `11px ${FAMILY}`) * 1.15;
  const badges = badge(state) + (lm.link.failover != null ? badge(FAILED_OVER) + 4 : 0);
  const l = lm.link;
  const verified = l.kind !== "replica" ? 0 : badge(verificationWord(l)) + (l.lastVerification ? 4 + small(AGO_ROOM) : 0);
  return Math.ceil(Math.max(badges, small(lag), verified, 96) + 14);
}

// ---- layout ------------------------------------------------------------

export interface Point {
  x: number;
  y: number;
}

export interface Rect {
  x: number;
  y: number;
  w: number;
  h: number;
}

export type Direction = "RIGHT" | "DOWN";

export interface Layout {
  direction: Direction;
  /** everything drawn, labels included: what the view must fit */
  bounds: { x: number; y: number; width: number; height: number };
  clusters: (Rect & { box: ClusterBox; header: number })[];
  streams: (Rect & { box: StreamBox })[]; // x, y relative to the cluster
  edges: { lm: LinkModel; points: Point[]; label: Rect | null }[]; // absolute
}

const elk = new ELK();

export const clusterId = (name: string) => `cluster:${name}`;
export const streamId = (path: string) => `stream:${path}`;

export async function layout(model: Model, direction: Direction = "RIGHT"): Promise<Layout> {
  const header = new Map(model.clusters.map((c) => [c.name, clusterHeader(c)]));
  const streamH = new Map(model.streams.map((s) => [s.path, streamHeight(s)]));
  const clusterOfStream = new Map(model.streams.map((s) => [s.path, s.cluster]));

  // Labels are inline: ELK gives each one a dummy node on its edge, so it
  // reserves the label's room and routes the edge through the label's middle.
  const elkEdge = (lm: LinkModel): ElkExtendedEdge => ({
    id: lm.id,
    sources: [streamId(lm.link.source)],
    targets: [streamId(lm.link.replica)],
    labels: [
      {
        id: `${lm.id}#label`,
        text: lm.state,
        width: labelWidth(lm),
        height: labelHeight(lm),
        layoutOptions: { "elk.edgeLabels.inline": "true", "elk.edgeLabels.placement": "CENTER" },
      },
    ],
  });
  // An edge lives in its lowest common ancestor: the cluster for an
  // intracluster replica, else the root. ELK reports its coordinates there.
  const inner = (lm: LinkModel) => {
    const a = clusterOfStream.get(lm.link.source);
    return a != null && a === clusterOfStream.get(lm.link.replica) ? a : null;
  };

  const graph: ElkNode = {
    id: "root",
    layoutOptions: {
      "elk.algorithm": "layered",
      "elk.direction": direction,
      "elk.hierarchyHandling": "INCLUDE_CHILDREN",
      "elk.edgeRouting": "ORTHOGONAL",
      "elk.layered.spacing.nodeNodeBetweenLayers": "28",
      "elk.layered.spacing.edgeNodeBetweenLayers": "14",
      "elk.layered.spacing.edgeEdgeBetweenLayers": "10",
      "elk.spacing.nodeNode": "20",
      "elk.spacing.edgeEdge": "10",
      "elk.spacing.edgeNode": "14",
      "elk.spacing.edgeLabel": "4",
      "elk.spacing.labelNode": "8",
      "elk.spacing.componentComponent": "28",
      "elk.layered.nodePlacement.strategy": "NETWORK_SIMPLEX",
      "elk.layered.considerModelOrder.strategy": "NODES_AND_EDGES",
      "elk.aspectRatio": "1.4",
      "elk.padding": "[top=4,left=4,bottom=4,right=4]",
    },
    children: model.clusters.map((c) => {
      const h = header.get(c.name)!;
      return {
        id: clusterId(c.name),
        layoutOptions: {
          "elk.padding": `[top=${h},left=${PAD},bottom=${PAD},right=${PAD}]`,
          "elk.nodeSize.constraints": "[MINIMUM_SIZE]",
          "elk.nodeSize.minimum": `(${clusterWidth(c)},${h + (c.status === "ok" && !c.error ? 4 : 0)})`,
        },
        children: model.streams
          .filter((s) => s.cluster === c.name)
          .map((s) => ({ id: streamId(s.path), width: STREAM_W, height: streamH.get(s.path)! })),
        edges: model.edges.filter((lm) => inner(lm) === c.name).map(elkEdge),
      };
    }),
    edges: model.edges.filter((lm) => inner(lm) == null).map(elkEdge),
  };

  const out = await elk.layout(graph);

  const byName = new Map(model.clusters.map((c) => [clusterId(c.name), c]));
  const streamByPath = new Map(model.streams.map((s) => [streamId(s.path), s]));
  const origin = new Map<string, Point>([["root", { x: 0, y: 0 }]]);
  const result: Layout = { direction, bounds: { x: 0, y: 0, width: 0, height: 0 }, clusters: [], streams: [], edges: [] };
  const lmById = new Map(model.edges.map((lm) => [lm.id, lm]));

  const takeEdges = (edges: ElkExtendedEdge[] | undefined, containerId: string) => {
    for (const e of edges ?? []) {
      // elkjs says where it put the edge; sections and labels are relative to it
      const o = origin.get((e as { container?: string }).container ?? containerId) ?? origin.get(containerId)!;
      const points: Point[] = [];
      for (const s of e.sections ?? []) points.push(s.startPoint, ...(s.bendPoints ?? []), s.endPoint);
      const lab = e.labels?.[0];
      result.edges.push({
        lm: lmById.get(e.id)!,
        points: points.map((p) => ({ x: p.x + o.x, y: p.y + o.y })),
        label: lab?.x != null ? { x: lab.x + o.x, y: lab.y! + o.y, w: lab.width!, h: lab.height! } : null,
      });
    }
  };

  for (const c of out.children ?? []) {
    const box = byName.get(c.id)!;
    origin.set(c.id, { x: c.x ?? 0, y: c.y ?? 0 });
    result.clusters.push({ box, x: c.x ?? 0, y: c.y ?? 0, w: c.width ?? 0, h: c.height ?? 0, header: header.get(box.name)! });
    for (const s of c.children ?? [])
      result.streams.push({ box: streamByPath.get(s.id)!, x: s.x ?? 0, y: s.y ?? 0, w: s.width ?? 0, h: s.height ?? 0 });
  }
  takeEdges(out.edges, "root");
  for (const c of out.children ?? []) takeEdges(c.edges, c.id);

  const xs: number[] = [], ys: number[] = [];
  for (const c of result.clusters) xs.push(c.x, c.x + c.w), ys.push(c.y, c.y + c.h);
  for (const e of result.edges) {
    for (const p of e.points) xs.push(p.x), ys.push(p.y);
    if (e.label) xs.push(e.label.x, e.label.x + e.label.w), ys.push(e.label.y, e.label.y + e.label.h);
  }
  const [x0, y0] = [Math.min(0, ...xs), Math.min(0, ...ys)];
  result.bounds = { x: x0, y: y0, width: Math.max(...xs, 1) - x0, height: Math.max(...ys, 1) - y0 };
  return result;
}

/** Changes only when something that moves boxes changes (not counters). */
export function layoutKey(model: Model): string {
  return JSON.stringify([
    model.clusters.map((c) => [c.name, c.status, c.error, c.desired != null]),
    model.streams.map((s) => [s.path, s.cluster, s.error, s.placeholder]),
    model.edges.map((e) => {
      const l = e.link;
      return [e.id, e.state, l.failover != null, l.verification, l.lastVerification != null];
    }),
  ]);
}
