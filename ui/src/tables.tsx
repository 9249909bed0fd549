// Airflow-style tables: the replica links, and one cluster's gateways.
import { Badge, Box, Table, Text } from "@chakra-ui/react";
import type { Gateway } from "./api";
import { bytes, count, duration } from "./format";
import type { LinkModel } from "./layout";
import { gatewayPalette, statePalette } from "./theme";
import { VerificationBadge } from "./Verification";

const yesNo = (v: boolean | null) => (v == null ? "—" : v ? "yes" : "no");

export function ReplicasTable({ links }: { links: LinkModel[] }) {
  if (links.length === 0)
    return (
      <Text color="fg.muted" fontSize="sm">
        No replica links.
      </Text>
    );
  return (
    // The table fits its container: every cell may wrap (overflow-wrap: anywhere
    // lets a column shrink below its longest word), so no error is cut off.
    <Table.ScrollArea borderWidth="1px" borderRadius="md">
      <Table.Root size="sm" data-testid="replicas-table" css={{ "& th, & td": { overflowWrap: "anywhere" } }}>
        <Table.Header>
          <Table.Row>
            <Table.ColumnHeader>Source</Table.ColumnHeader>
            <Table.ColumnHeader>Replica</Table.ColumnHeader>
            <Table.ColumnHeader>State</Table.ColumnHeader>
            <Table.ColumnHeader>Paused</Table.ColumnHeader>
            <Table.ColumnHeader>Synchronous</Table.ColumnHeader>
            <Table.ColumnHeader>Up to date</Table.ColumnHeader>
            <Table.ColumnHeader textAlign="end">Pending messages</Table.ColumnHeader>
            <Table.ColumnHeader textAlign="end">Bytes pending</Table.ColumnHeader>
            <Table.ColumnHeader textAlign="end">Lag</Table.ColumnHeader>
            <Table.ColumnHeader w="28%">Errors</Table.ColumnHeader>
          </Table.Row>
        </Table.Header>
        <Table.Body>
          {links.map(({ id, link: l, state }) => (
            <Table.Row key={id} data-testid="replica-row" data-source={l.source} data-replica={l.replica}>
              <Table.Cell fontFamily="mono" fontSize="xs" wordBreak="break-all">{l.source}</Table.Cell>
              <Table.Cell fontFamily="mono" fontSize="xs" wordBreak="break-all">{l.replica}</Table.Cell>
              <Table.Cell>
                <Badge colorPalette={l.paused ? "gray" : statePalette(state)} whiteSpace="normal">
                  {state}
                </Badge>
                {l.failover != null && (
                  <Badge colorPalette="purple" variant="solid" ml={1}>
                    FAILED OVER
                  </Badge>
                )}
                {/* under the state, as on the link's label: no column of its own to widen the table */}
                {l.kind === "replica" && (
                  <Box mt={1}>
                    <VerificationBadge link={l} wrap />
                  </Box>
                )}
              </Table.Cell>
              <Table.Cell>{yesNo(l.paused)}</Table.Cell>
              <Table.Cell>{yesNo(l.synchronous)}</Table.Cell>
              <Table.Cell>{yesNo(l.isUptodate)}</Table.Cell>
              <Table.Cell textAlign="end">{count(l.pendingMessages)}</Table.Cell>
              <Table.Cell textAlign="end">{bytes(l.bytesPending)}</Table.Cell>
              <Table.Cell textAlign="end" whiteSpace="nowrap">{duration(l.replicationLagMillis)}</Table.Cell>
              <Table.Cell color="fg.error" fontSize="xs">
                {l.errors && (
                  <Text data-testid="link-errors" whiteSpace="pre-wrap">
                    {l.errors}
                  </Text>
                )}
              </Table.Cell>
            </Table.Row>
          ))}
        </Table.Body>
      </Table.Root>
    </Table.ScrollArea>
  );
}

function where(g: Gateway): string {
  if (g.appId) return `${g.appId}${g.master ? ` on ${g.master}` : ""}${g.engine ? ` (${g.engine})` : ""}`;
  if (g.airflow) return `airflow ${g.airflow}`;
  if (g.host) return `${g.host}${g.pid != null ? ` pid ${g.pid}` : ""}`;
  return g.engine ?? "—";
}

export function GatewaysTable({ gateways, cluster }: { gateways: Gateway[]; cluster: string }) {
  if (gateways.length === 0)
    return (
      <Text color="fg.muted" fontSize="sm">
        No gateways.
      </Text>
    );
  return (
    <Table.ScrollArea borderWidth="1px" borderRadius="md">
      <Table.Root size="sm" data-testid="gateways-table" data-cluster={cluster}>
        <Table.Header>
          <Table.Row>
            <Table.ColumnHeader>Gateway</Table.ColumnHeader>
            <Table.ColumnHeader>Status</Table.ColumnHeader>
            <Table.ColumnHeader>Where</Table.ColumnHeader>
            <Table.ColumnHeader textAlign="end">Heartbeat age</Table.ColumnHeader>
            <Table.ColumnHeader textAlign="end">Partitions</Table.ColumnHeader>
          </Table.Row>
        </Table.Header>
        <Table.Body>
          {gateways.map((g) => (
            <Table.Row key={g.id} data-testid="gateway-row" data-gateway={g.id}>
              <Table.Cell fontFamily="mono" fontSize="xs">{g.id}</Table.Cell>
              <Table.Cell>
                <Badge colorPalette={gatewayPalette(g.status)}>{g.status}</Badge>
              </Table.Cell>
              <Table.Cell wordBreak="break-word">{where(g)}</Table.Cell>
              <Table.Cell textAlign="end">
                {g.heartbeatAgeSeconds == null ? "—" : duration(g.heartbeatAgeSeconds * 1000)}
              </Table.Cell>
              <Table.Cell textAlign="end">{count(g.partitions)}</Table.Cell>
            </Table.Row>
          ))}
        </Table.Body>
      </Table.Root>
    </Table.ScrollArea>
  );
}
