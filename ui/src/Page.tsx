// The "Stream replication" page: the cluster list first, then every cluster's
// answer in parallel, each drawn as soon as it arrives; refreshed in place.
import { Alert, Badge, Box, Button, Flex, Heading, HStack, Link, SimpleGrid, Spinner, Stack, Text } from "@chakra-ui/react";
import { useCallback, useEffect, useMemo, useRef, useState } from "react";
import { LuPlay, LuSquare } from "react-icons/lu";
import { api, ApiError, apiUrl, type Overview } from "./api";
import { hms } from "./format";
import { LagChart } from "./LagChart";
import { buildModel, layoutKey, type ClusterState } from "./layout";
import { GatewaysTable, ReplicasTable } from "./tables";
import { desiredPalette } from "./theme";
import { Topology } from "./Topology";

const REFRESH_MS = 15_000;

type Hint = { ok: boolean; text: string; detail?: string };

const message = (e: unknown) => (e instanceof Error ? e.message : String(e));
const forbidden = (e: unknown) => e instanceof ApiError && (e.status === 401 || e.status === 403);

// The two buttons of a cluster's gateways: what they post, and how they look.
const GATEWAY_ACTIONS = [
  { action: "start", palette: "green", Icon: LuPlay, label: "Start gateways" },
  { action: "stop", palette: "red", Icon: LuSquare, label: "Stop gateways" },
] as const;

function ClusterPanel(props: {
  name: string;
  kind: string;
  url: string | null;
  state: ClusterState;
  mayControl: boolean;
  seesLocations: boolean;
  busy: boolean;
  hint: Hint | undefined;
  onControl: (action: "start" | "stop") => void;
}) {
  const { name, state, hint } = props;
  const data = state.status === "ok" ? state.data : null;
  const error = state.status === "failed" ? state.error : data?.error;
  return (
    <Box borderWidth="1px" borderColor="border" borderRadius="lg" p={4} data-testid="cluster-panel" data-cluster={name}>
      <Flex align="center" gap={2} wrap="wrap">
        <Text fontWeight="semibold">{name}</Text>
        <Badge variant="outline">{data?.kind ?? props.kind}</Badge>
        {state.status === "loading" ? (
          <Spinner size="xs" color="fg.muted" />
        ) : (
          <Badge colorPalette={desiredPalette(data?.desired ?? null)} data-testid="desired-state" data-cluster={name}>
            {data?.desired ?? "not managed"}
          </Badge>
        )}
        {props.mayControl && (
          <HStack gap={2} ml="auto">
            {GATEWAY_ACTIONS.map(({ action, palette, Icon, label }) => (
              <Button
                key={action}
                size="xs"
                variant="outline"
                colorPalette={palette}
                loading={props.busy}
                onClick={() => props.onControl(action)}
                data-testid={`gateway-${action}`}
                data-cluster={name}
              >
                <Icon /> {label}
              </Button>
            ))}
          </HStack>
        )}
      </Flex>
      {props.seesLocations && (data?.url ?? props.url) && (
        <Text fontSize="xs" color="fg.muted" fontFamily="mono" mt={1} wordBreak="break-all">
          {data?.url ?? props.url}
        </Text>
      )}
      <Stack gap={3} mt={3}>
        {hint && (
          <Alert.Root status={hint.ok ? "info" : "error"} size="sm" data-testid="gateway-hint" data-cluster={name}>
            <Alert.Indicator />
            <Alert.Content>
              <Alert.Description whiteSpace="pre-wrap" wordBreak="break-word">
                {hint.text}
                {hint.detail && <Box mt={1}>{hint.detail}</Box>}
              </Alert.Description>
            </Alert.Content>
          </Alert.Root>
        )}
        {error && (
          <Alert.Root status="error" size="sm">
            <Alert.Indicator />
            <Alert.Content>
              <Alert.Description whiteSpace="pre-wrap" wordBreak="break-word">
                {error}
              </Alert.Description>
            </Alert.Content>
          </Alert.Root>
        )}
        {data && <GatewaysTable gateways={data.gateways} cluster={name} />}
      </Stack>
    </Box>
  );
}

export function ReplicationPage() {
  const [overview, setOverview] = useState<Overview | null>(null);
  const [fatal, setFatal] = useState<{ text: string; forbidden: boolean } | null>(null);
  const [states, setStates] = useState<Record<string, ClusterState>>({});
  const [hints, setHints] = useState<Record<string, Hint>>({});
  const [busy, setBusy] = useState<Record<string, boolean>>({});
  const [doneKey, setDoneKey] = useState<string | null>(null);
  const [updated, setUpdated] = useState<number | null>(null);
  const [refreshing, setRefreshing] = useState(false);
  const inFlight = useRef(false);

  const loadCluster = useCallback(async (name: string) => {
    let next: ClusterState;
    try {
      next = { status: "ok", data: await api.cluster(name) };
    } catch (e) {
      next = { status: "failed", error: message(e), forbidden: forbidden(e) };
    }
    setStates((s) => ({ ...s, [name]: next }));
  }, []);

  const refresh = useCallback(async () => {
    if (inFlight.current) return; // a slow round must not pile up behind the timer
    inFlight.current = true;
    setRefreshing(true);
    try {
      const ov = await api.overview();
      setOverview(ov);
      setFatal(null);
      // each cluster lands on its own; never wait for the slowest before drawing
      await Promise.all(ov.clusters.map((c) => loadCluster(c.name)));
      setUpdated(Date.now());
    } catch (e) {
      setFatal({ text: message(e), forbidden: forbidden(e) });
    } finally {
      inFlight.current = false;
      setRefreshing(false);
    }
  }, [loadCluster]);

  useEffect(() => {
    void refresh();
    const t = setInterval(() => void refresh(), REFRESH_MS);
    return () => clearInterval(t);
  }, [refresh]);

  const control = async (name: string, action: "start" | "stop") => {
    setBusy((b) => ({ ...b, [name]: true }));
    try {
      const ans = await api.gateways(name, action);
      setHints((h) => ({ ...h, [name]: { ok: true, text: ans.hint ?? `desired: ${ans.desired ?? action}` } }));
    } catch (e) {
      const body = e instanceof ApiError ? (e.body as { hint?: string } | null) : null;
      setHints((h) => ({ ...h, [name]: { ok: false, text: message(e), detail: body?.hint } }));
    } finally {
      setBusy((b) => ({ ...b, [name]: false }));
      void loadCluster(name);
    }
  };

  const model = useMemo(() => (overview ? buildModel(overview, states) : null), [overview, states]);
  const loaded = overview ? overview.clusters.filter((c) => states[c.name] && states[c.name].status !== "loading").length : 0;
  const allLoaded = overview != null && loaded === overview.clusters.length;
  const done = allLoaded && model != null && (model.clusters.length === 0 || doneKey === layoutKey(model));
  const charted = model?.links.filter((l) => l.link.kind === "replica") ?? [];

  return (
    <Box p={2} data-testid="replication-page" data-layout={done ? "done" : "pending"} data-clusters-loaded={loaded}>
      <Flex align="center" gap={3} wrap="wrap" mb={4}>
        <Heading size="lg">Stream replication</Heading>
        {overview?.service && (
          <Text fontSize="sm" color="fg.muted">
            gateway service{" "}
            <Link href={apiUrl(`dags/${encodeURIComponent(overview.service.dagId)}`)} colorPalette="blue" variant="underline">
              {overview.service.dagId}
            </Link>{" "}
            {overview.service.paused == null ? "(not deployed)" : overview.service.paused ? "(paused)" : "(active)"}
          </Text>
        )}
        <HStack ml="auto" gap={2} fontSize="xs" color="fg.muted">
          {refreshing && <Spinner size="xs" />}
          {updated && <Text>updated {hms(updated)} UTC · every {REFRESH_MS / 1000} s</Text>}
        </HStack>
      </Flex>

      {fatal && (
        <Alert.Root status={fatal.forbidden ? "warning" : "error"} mb={4} data-testid="page-error">
          <Alert.Indicator />
          <Alert.Content>
            <Alert.Title>
              {fatal.forbidden ? "You are not allowed to see stream replication" : "Could not load the clusters"}
            </Alert.Title>
            <Alert.Description whiteSpace="pre-wrap" wordBreak="break-word">
              {fatal.forbidden ? `Sign in again, or ask an admin for access (the server said: ${fatal.text}).` : fatal.text}
            </Alert.Description>
          </Alert.Content>
        </Alert.Root>
      )}

      {!overview && !fatal && (
        <HStack color="fg.muted" gap={2}>
          <Spinner size="sm" /> <Text>Loading clusters…</Text>
        </HStack>
      )}

      {overview && model && (
        <Stack gap={6}>
          {model.clusters.length === 0 ? (
            <Text color="fg.muted">No clusters are configured.</Text>
          ) : (
            <Topology model={model} onLayout={setDoneKey} />
          )}

          <Box>
            <Heading as="h3" size="md" mb={2}>
              Replicas
            </Heading>
            <ReplicasTable links={model.links} />
          </Box>

          <Box>
            <Heading as="h3" size="md" mb={2}>
              Clusters
            </Heading>
            <SimpleGrid columns={{ base: 1, xl: 2 }} gap={4}>
              {overview.clusters.map((c) => (
                <ClusterPanel
                  key={c.name}
                  name={c.name}
                  kind={c.kind}
                  url={c.url}
                  state={states[c.name] ?? { status: "loading" }}
                  mayControl={overview.mayControl}
                  seesLocations={overview.seesLocations}
                  busy={!!busy[c.name]}
                  hint={hints[c.name]}
                  onControl={(a) => void control(c.name, a)}
                />
              ))}
            </SimpleGrid>
          </Box>

          <Box>
            <Heading as="h3" size="md" mb={2}>
              Lag
            </Heading>
            {charted.length === 0 ? (
              <Text color="fg.muted" fontSize="sm">
                No replica links.
              </Text>
            ) : (
              <SimpleGrid columns={{ base: 1, xl: 2 }} gap={4}>
                {charted.map((lm) => (
                  <LagChart key={lm.id} lm={lm} />
                ))}
              </SimpleGrid>
            )}
          </Box>
        </Stack>
      )}
    </Box>
  );
}
