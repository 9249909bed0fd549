// Types and fetch helpers for the streamrep API served by the plugin's FastAPI app.
// Paths are relative to the page's <base> (Airflow may be mounted under a prefix).

export interface Overview {
  user: string | null;
  mayControl: boolean;
  seesLocations: boolean;
  service: { dagId: string; paused: boolean | null } | null;
  clusters: { name: string; kind: string; url: string | null }[];
}

export interface Gateway {
  id: string;
  status: string; // live | stopping | expired | down
  host: string | null;
  pid: number | null;
  engine: string | null;
  master: string | null;
  appId: string | null;
  airflow: string | null;
  heartbeatAgeSeconds: number | null;
  partitions: number | null;
  share: string[];
  listedBy: string[];
  desired: string | null;
}

export interface Stream {
  path: string;
  name: string;
  uuid: string | null;
  topics: number | null;
  partitions: number | null;
  messages: number | null;
  upstreams: string[];
  error: string | null;
}

export interface LagSample {
  t: number; // epoch ms
  messages: number | null;
  bytes: number | null;
  ms: number | null;
}

/** A link's last verification (replication/verification.py), whole. */
export interface Verification {
  at: number; // epoch ms
  same: boolean;
  missingInDst: number;
  extraInDst: number;
  changed: number;
  outOfOrder: number;
  duplicated: number;
  lost: number; // lost to the source's retention, unacknowledged
  dstBehind: number;
  compared: number;
  summary: string;
  command: string; // diffstreams | diffstreamswithcrc
  engine: string; // local | spark
  by: string;
}

export interface Link {
  kind: "replica" | "upstream-only";
  source: string;
  replica: string;
  cluster: string | null;
  stream: string | null;
  replicaPath: string | null;
  replicaState: string | null;
  paused: boolean;
  throttle: boolean;
  synchronous: boolean;
  networkcompression: string | null;
  maxbytespersec: number | null;
  uuid: string | null;
  errors: string | null;
  /** live gateways serving the link; null when its cluster did not say */
  gateways: string[] | null;
  isUptodate: boolean | null;
  pendingMessages: number | null;
  bytesPending: number | null;
  replicationLagMillis: number | null;
  maxLagMillis: number | null;
  maxLagMessages: number | null;
  failover: unknown;
  lagHistory: LagSample[];
  /** same | differs | never (null on an upstream-only half) */
  verification: string | null;
  lastVerification: Verification | null;
}

export interface Cluster {
  name: string;
  kind: string;
  url: string | null;
  error: string | null;
  elapsedMs: number | null;
  sampleSeconds: number | null;
  desired: string | null;
  gateways: Gateway[];
  streams: Stream[];
  links: Link[];
}

export interface GatewayAnswer {
  cluster?: string;
  desired?: string;
  hint?: string;
  error?: string;
}

/** An HTTP answer that is not 2xx; `status` lets the page tell 401/403 apart. */
export class ApiError extends Error {
  constructor(
    message: string,
    readonly status: number,
    readonly body: unknown,
  ) {
    super(message);
  }
}

const TIMEOUT_MS = 10_000;

export function apiUrl(path: string): string {
  return new URL(path, document.baseURI).href;
}

async function call<T>(path: string, init: RequestInit = {}): Promise<T> {
  const ctl = new AbortController();
  const timer = setTimeout(() => ctl.abort(), TIMEOUT_MS);
  try {
    const res = await fetch(apiUrl(path), {
      ...init,
      credentials: "same-origin",
      headers: { Accept: "application/json", ...init.headers },
      signal: ctl.signal,
    });
    const text = await res.text();
    let body: unknown = null;
    try {
      body = text ? JSON.parse(text) : null;
    } catch {
      body = text;
    }
    if (!res.ok) {
      const err = (body as { error?: string; detail?: unknown } | null) ?? {};
      const detail = typeof err === "object" ? (err.error ?? err.detail) : null;
      const msg = !detail
        ? `HTTP ${res.status} ${res.statusText}`
        : typeof detail === "string"
          ? detail
          : JSON.stringify(detail);
      throw new ApiError(msg, res.status, body);
    }
    return body as T;
  } catch (e) {
    if (ctl.signal.aborted) throw new ApiError(`no answer within ${TIMEOUT_MS / 1000} s`, 0, null);
    throw e;
  } finally {
    clearTimeout(timer);
  }
}

export const api = {
  overview: () => call<Overview>("streamrep/api/clusters"),
  cluster: (name: string) => call<Cluster>(`streamrep/api/clusters/${encodeURIComponent(name)}`),
  gateways: (name: string, action: "start" | "stop") =>
    call<GatewayAnswer>(`streamrep/api/gateways/${encodeURIComponent(name)}/${action}`, {
      method: "POST",
    }),
};

/** REPLICA_STATE_REPLICATING -> REPLICATING; upstream-only halves -> UPSTREAM_ONLY. */
export function shortState(link: Link): string {
  if (link.kind === "upstream-only") return "UPSTREAM_ONLY";
  return (link.replicaState ?? "UNKNOWN").replace(/^REPLICA_STATE_/, "");
}
