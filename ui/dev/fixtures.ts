// Fixture answers for the dev harness, shaped like the plugin's real API.
// Scenarios: 1, 2, 4 and 12 clusters, plus "403" (no access).

type Json = Record<string, unknown>;
const NOW = Date.UTC(2026, 10, 30, 12, 0, 0);

function gw(id: string, status: string, extra: Json = {}): Json {
  return {
    id, status, host: "vm", pid: 17000 + id.length * 7, engine: null, master: null, appId: null, airflow: null,
    heartbeatAgeSeconds: status === "live" ? 0.4 : 95, partitions: 2, share: [], listedBy: [], desired: null, ...extra,
  };
}

function stream(cluster: string, name: string, messages = 8, error: string | null = null): Json {
  return {
    path: `/mapr/${cluster}/${name}`, name: `/${name}`, uuid: `${cluster}-${name}`, topics: 1, partitions: 2,
    messages, upstreams: [], error,
  };
}

function history(seed: number, withGap: boolean): Json[] {
  const out: Json[] = [];
  for (let i = 0; i < 180; i++) {
    if (withGap && i > 70 && i < 95) continue; // nobody sampled for ~4 min
    const m = Math.max(0, Math.round(40 + 35 * Math.sin((i + seed) / 12) + (i % 7) * 3));
    out.push({ t: NOW - (180 - i) * 10_000, messages: m, bytes: m * 120, ms: Math.round(20_000 + 15_000 * Math.cos((i + seed) / 9)) });
  }
  return out;
}

function link(src: string, dst: string, state: string, extra: Json = {}): Json {
  const [, , cluster, name] = dst.split("/");
  return {
    kind: "replica", source: src, replica: dst, cluster, stream: `/${name}`, replicaPath: dst,
    replicaState: `REPLICA_STATE_${state}`, paused: false, throttle: false, synchronous: false,
    networkcompression: "lz4", maxbytespersec: 0, uuid: `${src}>${dst}`, errors: null, gateways: ["gw1"],
    isUptodate: state === "REPLICATING", pendingMessages: 30, bytesPending: 3600, replicationLagMillis: 27000,
    maxLagMillis: null, maxLagMessages: null, failover: null, lagHistory: history(src.length + dst.length, false),
    ...extra,
  };
}

interface Spec {
  name: string;
  kind?: string;
  error?: string;
  delay?: number;
  desired?: string | null;
  streams: Json[];
  links: Json[];
  gateways?: Json[];
}

const LONG_ERR =
  "ErrClusterUnreachable: kafka bootstrap servers broker-1.chicago.example.internal:9093, broker-2.chicago.example.internal:9093 and broker-3.chicago.example.internal:9093 did not answer within 5.0 s (last error: SSL handshake failed: certificate verify failed: unable to get local issuer certificate)";

function scenario(n: string): Spec[] {
  const A = (c: string, s = "activity") => `/mapr/${c}/${s}`;
  if (n === "1")
    return [
      {
        name: "newyork", desired: "running",
        streams: [stream("newyork", "activity", 120), stream("newyork", "activity-copy", 118)],
        links: [link(A("newyork"), A("newyork", "activity-copy"), "REPLICATING", { pendingMessages: 2, replicationLagMillis: 900 })],
        gateways: [gw("gw1", "live")],
      },
    ];
  if (n === "2")
    return [
      {
        name: "newyork", desired: "running",
        streams: [stream("newyork", "activity"), stream("newyork", "orders", 40)],
        links: [
          link(A("newyork"), A("sanfrancisco"), "REPLICATING", { lagHistory: history(3, true), maxLagMessages: 60, maxLagMillis: 60000 }),
          link(A("newyork", "orders"), A("sanfrancisco", "orders"), "PAUSED", { paused: true, lagHistory: [] }),
        ],
        gateways: [gw("gw1", "live"), gw("gw2", "stopping")],
      },
      {
        name: "sanfrancisco", desired: "stopped",
        streams: [stream("sanfrancisco", "activity"), stream("sanfrancisco", "orders", 38)],
        links: [
          link(A("sanfrancisco"), A("newyork"), "WAITING_FOR_GATEWAY", {
            errors: "ErrAllGatewaysUnreachable: no gateway of cluster newyork has a live heartbeat",
          }),
        ],
        gateways: [gw("gw1", "expired")],
      },
    ];
  if (n === "4")
    return [
      {
        name: "newyork", desired: "running",
        streams: [stream("newyork", "activity"), stream("newyork", "billing", 900)],
        links: [
          link(A("newyork"), A("boston"), "REPLICATING"),
          link(A("newyork"), A("denver"), "COPY_IN_PROGRESS", { lagHistory: history(9, true) }),
          link(A("newyork", "billing"), A("chicago", "billing"), "WAITING_FOR_GATEWAY"),
        ],
        gateways: [gw("gw1", "live"), gw("spark-1", "live", { host: null, pid: null, engine: "spark", master: "spark://m:7077", appId: "app-2026-0007" })],
      },
      {
        name: "boston", delay: 1500, desired: null,
        streams: [stream("boston", "activity"), stream("boston", "archive", 5000, "ErrStreamFenced: stream is fenced after failover")],
        links: [
          link(A("boston"), A("denver", "archive"), "SYNC_FELL_BACK_TO_ASYNC", { synchronous: true }),
          link(A("boston", "archive"), A("denver", "backup"), "REPLICATING", { failover: { at: NOW, by: "admin" } }),
        ],
        gateways: [gw("gw1", "live", { host: null, pid: null, airflow: "stream_gateway_service/run_1" })],
      },
      {
        name: "denver", desired: "running",
        streams: [stream("denver", "activity"), stream("denver", "archive"), stream("denver", "backup")],
        links: [
          {
            ...link(A("chicago", "events"), A("denver", "archive"), "UPSTREAM_ONLY"),
            kind: "upstream-only", cluster: "chicago", lagHistory: [],
          },
        ],
        gateways: [gw("gw1", "down"), gw("gw2", "live")],
      },
      { name: "chicago", kind: "kafka", error: LONG_ERR, streams: [], links: [], gateways: [] },
    ];
  if (n === "unreachable")
    // the e2e test's: a lost store (denver) and a Kafka cluster that hangs
    return [
      ...["amsterdam", "berlin", "chicago"].map((c, i) => ({
        name: c,
        streams: [stream(c, "events", 3)],
        links: [
          ...(c === "amsterdam" ? [link(A(c, "events"), A("berlin", "events"), "WAITING_FOR_GATEWAY", { gateways: [] })] : []),
          ...(c === "amsterdam" ? [link(A(c, "events"), A("denver", "events"), "UNEXPECTED", { gateways: [] })] : []),
          ...(c === "berlin" ? [link(A(c, "events"), A("chicago", "events"), "WAITING_FOR_GATEWAY", { gateways: [] })] : []),
        ],
        delay: 100 * i,
      })),
      { name: "denver", error: "cluster denver: store file /tmp/pytest-of-root/pytest-98/page-unreachable0/clusters/denver.db is missing (deleted or moved)", streams: [], links: [] },
      { name: "hung", kind: "kafka", delay: 2000, error: "Kafka cluster hung is unreachable: it did not answer within 2 s", streams: [], links: [] },
    ];
  if (n === "12") {
    const names = ["amsterdam", "berlin", "cairo", "delhi", "edinburgh", "frankfurt", "geneva", "helsinki", "istanbul", "jakarta", "kyoto", "lisbon"];
    return names.map((c, i) => {
      const next = names[(i + 1) % 12];
      const links: Json[] = [];
      if (i % 3 !== 2) links.push(link(A(c), A(next), i % 4 === 0 ? "REPLICATING" : i % 4 === 1 ? "WAITING_FOR_REPLICA" : "COPY_IN_PROGRESS"));
      if (i === 0) links.push(link(A(c), A("geneva", "fanin"), "REPLICATING"), link(A(c), A("kyoto", "fanin"), "UNEXPECTED", { errors: "ErrUnexpected: replica uuid changed" }));
      if (i === 4) links.push(link(A(c), A("geneva", "fanin"), "REPLICATING"));
      if (i === 5) links.push(link(A(c), A("edinburgh"), "REPLICATING"));
      return {
        name: c, delay: (i * 173) % 900, desired: i % 2 ? "running" : null,
        kind: i === 7 ? "kafka" : "embedded",
        error: i === 7 ? "ErrClusterUnreachable: connection refused (helsinki:9092)" : undefined,
        streams: i === 7 ? [] : [stream(c, "activity"), ...(c === "geneva" || c === "kyoto" ? [stream(c, "fanin")] : [])],
        links: i === 7 ? [] : links,
        gateways: i === 7 ? [] : [gw("gw1", "live")],
      };
    });
  }
  return [];
}

export interface Answer {
  status: number;
  body: unknown;
  delay?: number;
}

export function answer(sc: string, method: string, path: string): Answer {
  if (sc === "403") return { status: 403, body: { detail: "Forbidden" } };
  const specs = scenario(sc);
  if (method === "GET" && path === "streamrep/api/clusters")
    return {
      status: 200,
      body: {
        user: "admin", mayControl: true, seesLocations: true,
        service: { dagId: "stream_gateway_service", paused: false },
        clusters: specs.map((s) => ({ name: s.name, kind: s.kind ?? "embedded", url: s.kind === "kafka" ? null : `embedded:/tmp/sr/${s.name}` })),
      },
    };
  let m = /^streamrep\/api\/clusters\/([^/]+)$/.exec(path);
  if (method === "GET" && m) {
    const s = specs.find((x) => x.name === decodeURIComponent(m![1]));
    if (!s) return { status: 404, body: { error: `unknown cluster ${m[1]}` } };
    return {
      status: 200,
      delay: s.delay,
      body: {
        name: s.name, kind: s.kind ?? "embedded", url: `embedded:/tmp/sr/${s.name}`, error: s.error ?? null,
        elapsedMs: 12, sampleSeconds: 10, desired: s.desired ?? null,
        gateways: s.gateways ?? [], streams: s.streams, links: s.links,
      },
    };
  }
  m = /^streamrep\/api\/gateways\/([^/]+)\/(start|stop)$/.exec(path);
  if (method === "POST" && m) {
    const s = specs.find((x) => x.name === m![1]);
    if (s?.error) return { status: 409, body: { error: `cluster ${s.name} is not reachable: ${s.error}` } };
    return {
      status: 200,
      body: {
        cluster: m[1], desired: m[2] === "start" ? "running" : "stopped", by: "admin", at: NOW, live: [], requestedBy: "admin",
        hint: m[2] === "start"
          ? "Gateways will start on the next run of stream_gateway_service (every minute); it is unpaused."
          : "Gateways stop at their next heartbeat (within 10 s).",
      },
    };
  }
  return { status: 404, body: { error: "not found" } };
}
