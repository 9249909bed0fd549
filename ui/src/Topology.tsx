// The replication topology: React Flow renders what ELK laid out (see layout.ts).
// Nodes and edges are drawn by our own components so that edges follow ELK's
// orthogonal routes exactly and everything takes Chakra's theme tokens.
import { Badge, Box, Flex, HStack, Spinner, Text } from "@chakra-ui/react";
import {
  Background,
  Controls,
  EdgeLabelRenderer,
  Handle,
  Position,
  ReactFlow,
  ReactFlowProvider,
  useReactFlow,
  type Edge,
  type EdgeProps,
  type Node,
  type NodeProps,
} from "@xyflow/react";
import { useEffect, useMemo, useRef, useState } from "react";
import { LuDatabase, LuServer } from "react-icons/lu";
import { count, plural } from "./format";
import {
  clusterId,
  FAILED_OVER,
  labelText,
  layout,
  layoutKey,
  streamId,
  type ClusterBox,
  type Layout,
  type LinkModel,
  type Model,
  type Point,
  type Rect,
  STREAM_NAME_PX,
  type StreamBox,
} from "./layout";
import { desiredPalette, statePalette, strokeVar, useColorMode } from "./theme";
import { VerificationBadge } from "./Verification";

type ClusterNodeT = Node<{ box: ClusterBox }, "cluster">;
type StreamNodeT = Node<{ box: StreamBox }, "stream">;
type LinkEdgeT = Edge<{ lm: LinkModel; points: Point[]; label: Rect | null }, "link">;

function ClusterNode({ data: { box } }: NodeProps<ClusterNodeT>) {
  const failed = box.error != null;
  return (
    <Box
      data-testid="cluster-node"
      data-cluster={box.name}
      data-status={box.status}
      w="100%"
      h="100%"
      borderWidth="1px"
      borderColor={failed ? "border.error" : "border.emphasized"}
      borderRadius="lg"
      bg="bg.subtle"
      px={3}
      py={2}
    >
      <Flex align="center" gap={2} h="20px">
        <Box as={LuServer} color="fg.muted" flexShrink={0} />
        <Text fontWeight="semibold" fontSize="14px" lineHeight="20px" truncate title={box.name}>
          {box.name}
        </Text>
        <Badge size="sm" variant="outline">
          {box.kind}
        </Badge>
        {box.status === "loading" && (
          <Spinner data-testid="cluster-loading" data-cluster={box.name} size="xs" color="fg.muted" ml="auto" />
        )}
      </Flex>
      <HStack gap={2} mt={1} h="20px" fontSize="xs" color="fg.muted" whiteSpace="nowrap">
        {box.status === "loading" ? (
          <Text>loading…</Text>
        ) : (
          <>
            <Text>
              gateways {box.live}/{box.gateways} live
            </Text>
            <Badge size="sm" colorPalette={desiredPalette(box.desired)}>
              {box.desired ?? "not managed"}
            </Badge>
          </>
        )}
      </HStack>
      {box.error && (
        <Text
          data-testid="cluster-error"
          data-cluster={box.name}
          mt={2}
          fontSize="13px"
          lineHeight="18px"
          color="fg.error"
          whiteSpace="pre-wrap"
          wordBreak="break-word"
        >
          {box.error}
        </Text>
      )}
    </Box>
  );
}

function StreamNode({ data: { box } }: NodeProps<StreamNodeT>) {
  return (
    <Box
      data-testid="stream-node"
      data-path={box.path}
      data-placeholder={box.placeholder ? "true" : undefined}
      w="100%"
      h="100%"
      bg="bg"
      borderWidth="1px"
      borderStyle={box.placeholder ? "dashed" : "solid"}
      borderColor={box.error && !box.placeholder ? "border.error" : "border.emphasized"}
      borderRadius="md"
      boxShadow={box.placeholder ? undefined : "xs"}
      px={3}
      py={1}
      title={box.path}
    >
      <Handle type="target" position={Position.Left} isConnectable={false} style={{ opacity: 0 }} />
      <Flex align="center" gap={1.5} h="20px">
        <Box as={LuDatabase} color="fg.muted" flexShrink={0} />
        <Text data-testid="stream-name" fontWeight="semibold" fontSize={`${STREAM_NAME_PX}px`} lineHeight="20px" truncate>
          {box.name}
        </Text>
      </Flex>
      <Text fontSize="11px" lineHeight="16px" color="fg.muted" mt={0.5} truncate>
        {box.placeholder
          ? "cluster not reachable"
          : `${plural(box.messages, "message")} · ${plural(box.topics, "topic")} · ${count(box.partitions)} part.`}
      </Text>
      {box.error && (
        <Text fontSize="12px" lineHeight="16px" color="fg.error" mt={1} whiteSpace="pre-wrap" wordBreak="break-word">
          {box.error}
        </Text>
      )}
      <Handle type="source" position={Position.Right} isConnectable={false} style={{ opacity: 0 }} />
    </Box>
  );
}

/** An orthogonal polyline with softly rounded corners. */
function roundedPath(pts: Point[], r = 6): string {
  if (pts.length === 0) return "";
  let d = `M ${pts[0].x} ${pts[0].y}`;
  for (let i = 1; i < pts.length - 1; i++) {
    const [a, b, c] = [pts[i - 1], pts[i], pts[i + 1]];
    const r1 = Math.min(r, Math.hypot(b.x - a.x, b.y - a.y) / 2, Math.hypot(c.x - b.x, c.y - b.y) / 2);
    const ux = Math.sign(b.x - a.x), uy = Math.sign(b.y - a.y);
    const vx = Math.sign(c.x - b.x), vy = Math.sign(c.y - b.y);
    d += ` L ${b.x - ux * r1} ${b.y - uy * r1} Q ${b.x} ${b.y} ${b.x + vx * r1} ${b.y + vy * r1}`;
  }
  const last = pts[pts.length - 1];
  return `${d} L ${last.x} ${last.y}`;
}

function arrowHead(pts: Point[], size = 7): string {
  const [a, b] = pts.slice(-2);
  if (!a || !b) return "";
  const len = Math.hypot(b.x - a.x, b.y - a.y) || 1;
  const ux = (b.x - a.x) / len, uy = (b.y - a.y) / len;
  const bx = b.x - ux * size, by = b.y - uy * size;
  return `M ${b.x} ${b.y} L ${bx - uy * size * 0.6} ${by + ux * size * 0.6} L ${bx + uy * size * 0.6} ${by - ux * size * 0.6} Z`;
}

function LinkEdge({ data }: EdgeProps<LinkEdgeT>) {
  if (!data) return null;
  const { lm, points, label } = data;
  const l = lm.link;
  const grey = l.paused || lm.state === "PAUSED" || lm.state === "UPSTREAM_ONLY";
  const palette = grey ? "gray" : statePalette(lm.state);
  const stroke = strokeVar(palette);
  const dashed = grey;
  const text = labelText(lm);
  return (
    <>
      <g data-testid="link-edge" data-source={l.source} data-replica={l.replica} data-state={lm.state}>
        <path
          data-testid="link-path"
          d={roundedPath(points)}
          fill="none"
          stroke={stroke}
          strokeWidth={l.paused ? 1.5 : 2}
          strokeDasharray={dashed ? "6 4" : undefined}
        />
        <path d={arrowHead(points)} fill={stroke} stroke="none" />
      </g>
      {label && (
        <EdgeLabelRenderer>
          <Box
            data-testid="link-label"
            data-source={l.source}
            data-replica={l.replica}
            className="nodrag nopan"
            position="absolute"
            // exactly the box ELK reserved for it
            transform={`translate(${label.x}px, ${label.y}px)`}
            w={`${label.w}px`}
            h={`${label.h}px`}
            overflow="hidden"
            bg="bg"
            borderWidth="1px"
            borderColor="border"
            borderRadius="md"
            px={1.5}
            py="1px"
            textAlign="center"
            pointerEvents="all"
            zIndex={1000} // above the cluster boxes (nodes) and the edge strokes
            title={l.errors ?? `${l.source} → ${l.replica}`}
          >
            <HStack gap={1} justify="center">
              <Badge size="sm" colorPalette={palette} variant={grey ? "outline" : "subtle"}>
                {text.state}
              </Badge>
              {l.failover != null && (
                <Badge size="sm" colorPalette="purple" variant="solid">
                  {FAILED_OVER}
                </Badge>
              )}
            </HStack>
            <Text fontSize="11px" lineHeight="16px" color="fg.muted" truncate>
              {text.lag}
            </Text>
            {l.kind === "replica" && <VerificationBadge link={l} />}
          </Box>
        </EdgeLabelRenderer>
      )}
    </>
  );
}

const nodeTypes = { cluster: ClusterNode, stream: StreamNode };
const edgeTypes = { link: LinkEdge };

function toFlow(lay: Layout, model: Model): { nodes: Node[]; edges: Edge[] } {
  // Positions come from the layout; the boxes' contents from the latest model,
  // so a refresh updates counters without moving anything.
  const clusters = new Map(model.clusters.map((c) => [c.name, c]));
  const streams = new Map(model.streams.map((s) => [s.path, s]));
  const links = new Map(model.edges.map((e) => [e.id, e]));
  const nodes: Node[] = [];
  for (const c of lay.clusters) {
    nodes.push({
      id: clusterId(c.box.name),
      type: "cluster",
      position: { x: c.x, y: c.y },
      data: { box: clusters.get(c.box.name) ?? c.box },
      style: { width: c.w, height: c.h },
      width: c.w,
      height: c.h,
      draggable: false,
      selectable: false,
      zIndex: 0,
    });
  }
  for (const s of lay.streams) {
    nodes.push({
      id: streamId(s.box.path),
      type: "stream",
      parentId: clusterId(s.box.cluster),
      position: { x: s.x, y: s.y },
      data: { box: streams.get(s.box.path) ?? s.box },
      style: { width: s.w, height: s.h },
      width: s.w,
      height: s.h,
      draggable: false,
      selectable: false,
    });
  }
  const edges: Edge[] = lay.edges.map((e) => ({
    id: e.lm.id,
    type: "link",
    source: streamId(e.lm.link.source),
    target: streamId(e.lm.link.replica),
    data: { ...e, lm: links.get(e.lm.id) ?? e.lm },
    zIndex: 1, // above the cluster boxes they cross, below the labels
    selectable: false,
    focusable: false,
  }));
  return { nodes, edges };
}

// The canvas grows with the drawing up to MAX_H (the page scrolls), so a big
// topology is shown at a zoom where its names stay readable.
const MAX_H = 1800;
const MARGIN = { left: 16, right: 48, y: 16 }; // the zoom controls sit on the right
/** left to right is kept while it is drawn at least this large (13 px names at 10.4 px) */
const GOOD_ZOOM = 0.8;

/** The zoom that fits `b` into a canvas `width` wide and at most MAX_H high. */
function fitZoom(b: Layout["bounds"], width: number): number {
  return Math.min(1, (width - MARGIN.left - MARGIN.right) / b.width, (MAX_H - 2 * MARGIN.y) / b.height);
}

function Flow({ model, onLayout }: { model: Model; onLayout: (key: string) => void }) {
  const mode = useColorMode();
  const { setViewport } = useReactFlow();
  const key = useMemo(() => layoutKey(model), [model]);
  const [lays, setLays] = useState<{ key: string; layouts: Layout[] } | null>(null);
  const wrap = useRef<HTMLDivElement>(null);
  const [width, setWidth] = useState(0);

  useEffect(() => {
    let alive = true;
    // Left to right reads best; a graph too wide for that (a long chain) is
    // also laid out top to bottom, and the one drawn larger is shown.
    void (async () => {
      const right = await layout(model, "RIGHT");
      const layouts = [right];
      if (fitZoom(right.bounds, wrap.current?.clientWidth ?? 0) < GOOD_ZOOM) layouts.push(await layout(model, "DOWN"));
      if (alive) setLays({ key, layouts });
    })().catch((e) => console.error("streamrep: layout failed", e));
    return () => {
      alive = false;
    };
    // eslint-disable-next-line react-hooks/exhaustive-deps -- relayout only when the key changes
  }, [key]);

  useEffect(() => {
    if (!wrap.current) return;
    const obs = new ResizeObserver(([e]) => setWidth(e.contentRect.width));
    obs.observe(wrap.current);
    return () => obs.disconnect();
  }, []);

  const lay = useMemo(() => {
    if (!lays || width === 0) return null;
    const zoom = (l: Layout) => fitZoom(l.bounds, width);
    const [right, down] = lays.layouts;
    const best = !down || zoom(right) >= GOOD_ZOOM || zoom(right) >= zoom(down) ? right : down;
    return { key: lays.key, layout: best, zoom: zoom(best) };
  }, [lays, width]);

  const flow = useMemo(() => (lay ? toFlow(lay.layout, model) : { nodes: [], edges: [] }), [lay, model]);

  const height = lay ? Math.max(300, Math.ceil(lay.layout.bounds.height * lay.zoom + 2 * MARGIN.y)) : 300;

  useEffect(() => {
    if (!lay) return;
    // after React Flow has the new nodes in its store
    const id = requestAnimationFrame(() => {
      // The whole drawing, labels included (fitView only knows nodes), centred.
      const { bounds: b } = lay.layout;
      const w = width - MARGIN.left - MARGIN.right;
      void setViewport({
        x: MARGIN.left + (w - b.width * lay.zoom) / 2 - b.x * lay.zoom,
        y: (height - b.height * lay.zoom) / 2 - b.y * lay.zoom,
        zoom: lay.zoom,
      }).then(() => onLayout(lay.key));
    });
    return () => cancelAnimationFrame(id);
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [lay, height]);

  return (
    <Box
      ref={wrap}
      h={`${height}px`}
      borderWidth="1px"
      borderColor="border"
      borderRadius="lg"
      overflow="hidden"
      data-testid="topology"
      css={{
        // as Airflow's own graph sets them (brand palette when Airflow provides it)
        "--xy-background-color":
          mode === "dark"
            ? "var(--chakra-colors-brand-950, var(--chakra-colors-gray-950))"
            : "var(--chakra-colors-brand-50, var(--chakra-colors-gray-50))",
        "--xy-background-pattern-color":
          mode === "dark" ? "var(--chakra-colors-gray-700)" : "var(--chakra-colors-gray-300)",
        "--xy-controls-button-background-color":
          mode === "dark" ? "var(--chakra-colors-gray-800)" : "var(--chakra-colors-white)",
        "--xy-controls-button-background-color-hover":
          mode === "dark" ? "var(--chakra-colors-gray-700)" : "var(--chakra-colors-gray-100)",
        "--xy-controls-button-color": "var(--chakra-colors-fg)",
        "--xy-controls-button-border-color": "var(--chakra-colors-border)",
        "--xy-edge-label-background-color": "transparent",
      }}
    >
      <ReactFlow
        nodes={flow.nodes}
        edges={flow.edges}
        nodeTypes={nodeTypes}
        edgeTypes={edgeTypes}
        colorMode={mode}
        minZoom={0.05}
        maxZoom={2}
        nodesDraggable={false}
        nodesConnectable={false}
        elementsSelectable={false}
        panOnScroll={false}
        zoomOnScroll
        proOptions={{ hideAttribution: true }}
      >
        <Background />
        <Controls showInteractive={false} position="bottom-right" />
      </ReactFlow>
    </Box>
  );
}

export function Topology(props: { model: Model; onLayout: (key: string) => void }) {
  return (
    <ReactFlowProvider>
      <Flow {...props} />
    </ReactFlowProvider>
  );
}
