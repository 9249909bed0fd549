// Turns the cluster answers into a topology model (clusters, streams, links),
// then lays it out with ELK: layered, left to right, clusters as compound
// nodes holding their streams (INCLUDE_CHILDREN), so each link is routed
// between its own two streams and around other clusters' boxes.
import ELK from "elkjs/lib/elk.bundled.js";
import type { ElkExtendedEdge, ElkNode } from "elkjs/lib/elk-api";
import type { Cluster, Link, Overview } from "./api";
import { shortState } from "./api";

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

const FONT = "13px Inter, system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif";
let ctx: CanvasRenderingContext2D | null = null;

/** Number of lines `text` wraps to in `width` px; measured, plus slack for font differences. */
export function wrappedLines(text: string, width: number, font = FONT): number {
  ctx ??= document.createElement("canvas").getContext("2d");
  if (!ctx) return Math.ceil((text.length * 8) / width) + 1;
  ctx.font = font;
  let lines = 1;
  let line = 0;
  const space = ctx.measureText(" ").width;
  for (const word of text.split(/\s+/)) {
    // break-all style: a word wider than the line fills whole lines
    const w = ctx.measureText(word).width * 1.08;
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

export const STREAM_W = 230;
const CLUSTER_MIN_W = 270;
const CLUSTER_ERR_W = 380;
const PAD = 16;
const LINE = 18;

export function streamHeight(s: StreamBox): number {
  const err = s.error ? wrappedLines(s.error, STREAM_W - 24) * LINE + 6 : 0;
  return 62 + err;
}

function clusterWidth(c: ClusterBox): number {
  return c.error ? CLUSTER_ERR_W : CLUSTER_MIN_W;
}

/** Height of the header band (name, badges, gateway summary, error). */
export function clusterHeader(c: ClusterBox): number {
  const err = c.error ? wrappedLines(c.error, clusterWidth(c) - 2 * PAD - 24) * LINE + 20 : 0;
  return 68 + err;
}

export const LABEL_H = 44;
export function labelWidth(lm: LinkModel): number {
  const base = Math.max(lm.state.length * 7.5 + 24, 120);
  return lm.link.failover != null ? base + 96 : base;
}

// ---- layout ------------------------------------------------------------

export interface Point {
  x: number;
  y: number;
}

export interface Layout {
  width: number;
  height: number;
  /** everything drawn, labels included: what the view must fit */
  bounds: { x: number; y: number; width: number; height: number };
  clusters: { box: ClusterBox; x: number; y: number; w: number; h: number; header: number }[];
  streams: { box: StreamBox; x: number; y: number; w: number; h: number }[]; // x, y relative to the cluster
  edges: { lm: LinkModel; points: Point[]; label: Point | null }[];
}

const elk = new ELK();

/**
 * ELK puts a centre label beside its edge, in space it reserved; move it onto
 * the horizontal segment it belongs to so it sits on the edge's own path
 * (fall back to the path's midpoint).
 */
function onPath(pts: Point[], c: Point | null, h: number): Point | null {
  if (pts.length < 2) return c;
  if (c) {
    let best: number | null = null;
    for (let i = 1; i < pts.length; i++) {
      const [a, b] = [pts[i - 1], pts[i]];
      if (a.y !== b.y || c.x < Math.min(a.x, b.x) || c.x > Math.max(a.x, b.x)) continue;
      if (best == null || Math.abs(a.y - c.y) < Math.abs(best - c.y)) best = a.y;
    }
    if (best != null && Math.abs(best - c.y) <= h) return { x: c.x, y: best };
  }
  // midpoint by length
  const lens = pts.slice(1).map((p, i) => Math.hypot(p.x - pts[i].x, p.y - pts[i].y));
  let half = lens.reduce((a, b) => a + b, 0) / 2;
  for (let i = 0; i < lens.length; i++) {
    if (half <= lens[i]) {
      const t = lens[i] ? half / lens[i] : 0;
      return { x: pts[i].x + (pts[i + 1].x - pts[i].x) * t, y: pts[i].y + (pts[i + 1].y - pts[i].y) * t };
    }
    half -= lens[i];
  }
  return c;
}

export const clusterId = (name: string) => `cluster:${name}`;
export const streamId = (path: string) => `stream:${path}`;

export async function layout(model: Model): Promise<Layout> {
  const header = new Map(model.clusters.map((c) => [c.name, clusterHeader(c)]));
  const streamH = new Map(model.streams.map((s) => [s.path, streamHeight(s)]));
  const clusterOfStream = new Map(model.streams.map((s) => [s.path, s.cluster]));

  const elkEdge = (lm: LinkModel): ElkExtendedEdge => ({
    id: lm.id,
    sources: [streamId(lm.link.source)],
    targets: [streamId(lm.link.replica)],
    labels: [{ id: `${lm.id}#label`, text: lm.state, width: labelWidth(lm), height: LABEL_H }],
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
      "elk.direction": "RIGHT",
      "elk.hierarchyHandling": "INCLUDE_CHILDREN",
      "elk.edgeRouting": "ORTHOGONAL",
      "elk.layered.spacing.nodeNodeBetweenLayers": "56",
      "elk.layered.spacing.edgeNodeBetweenLayers": "24",
      "elk.spacing.nodeNode": "28",
      "elk.spacing.edgeEdge": "14",
      "elk.spacing.edgeNode": "20",
      "elk.spacing.edgeLabel": "6",
      "elk.spacing.componentComponent": "40",
      "elk.edgeLabels.placement": "CENTER",
      "elk.layered.nodePlacement.strategy": "NETWORK_SIMPLEX",
      "elk.layered.considerModelOrder.strategy": "NODES_AND_EDGES",
      "elk.aspectRatio": "2.2",
      "elk.padding": "[top=8,left=8,bottom=8,right=8]",
    },
    children: model.clusters.map((c) => {
      const h = header.get(c.name)!;
      return {
        id: clusterId(c.name),
        layoutOptions: {
          "elk.padding": `[top=${h},left=${PAD},bottom=${PAD},right=${PAD}]`,
          "elk.nodeSize.constraints": "[MINIMUM_SIZE]",
          "elk.nodeSize.minimum": `(${clusterWidth(c)},${h + (c.status === "ok" && !c.error ? 8 : 0)})`,
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
  const result: Layout = {
    width: out.width ?? 0,
    height: out.height ?? 0,
    bounds: { x: 0, y: 0, width: 0, height: 0 },
    clusters: [],
    streams: [],
    edges: [],
  };
  const lmById = new Map(model.edges.map((lm) => [lm.id, lm]));

  const takeEdges = (edges: ElkExtendedEdge[] | undefined, containerId: string) => {
    for (const e of edges ?? []) {
      // elkjs may also say where it put the edge; trust that over our guess
      const o = origin.get((e as { container?: string }).container ?? containerId) ?? origin.get(containerId)!;
      const points: Point[] = [];
      for (const s of e.sections ?? []) {
        points.push(s.startPoint, ...(s.bendPoints ?? []), s.endPoint);
      }
      const lab = e.labels?.[0];
      const abs = points.map((p) => ({ x: p.x + o.x, y: p.y + o.y }));
      const centre = lab?.x != null ? { x: lab.x + o.x + (lab.width ?? 0) / 2, y: lab.y! + o.y + (lab.height ?? 0) / 2 } : null;
      result.edges.push({ lm: lmById.get(e.id)!, points: abs, label: onPath(abs, centre, lab?.height ?? LABEL_H) });
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
    if (e.label) {
      const w = labelWidth(e.lm) / 2;
      xs.push(e.label.x - w, e.label.x + w), ys.push(e.label.y - LABEL_H / 2, e.label.y + LABEL_H / 2);
    }
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
    model.edges.map((e) => [e.id, e.state, e.link.failover != null]),
  ]);
}
