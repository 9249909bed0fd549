// A link's last verification: a badge (green same, red differs, grey never) and
// when, relative to now; the compare's summary line and how it ran on hover.
import { Badge, HStack, Text } from "@chakra-ui/react";
import type { Link } from "./api";
import { ago } from "./format";
import { verificationPalette } from "./theme";

/** The badge's word for a link's verification. */
export function verificationWord(l: Link): string {
  return l.verification === "same" || l.verification === "differs" ? l.verification : "never verified";
}

/** The hover text: the summary line, then how, by whom and when (UTC). */
export function verificationTitle(l: Link): string {
  const v = l.lastVerification;
  if (!v) return "never verified: no diffstreams of this link recorded";
  const when = new Date(v.at).toISOString().replace(".000Z", "Z");
  return `${v.summary}\n${v.command} (${v.engine}) by ${v.by}, ${when}`;
}

/** On a link's label (one line, cut with an ellipsis), or in the replicas table (`wrap`: its
 * cell may shrink, so badge and time wrap rather than push the table wider). */
export function VerificationBadge({ link: l, wrap = false }: { link: Link; wrap?: boolean }) {
  const v = l.lastVerification;
  return (
    <HStack
      gap={1}
      justify={wrap ? "start" : "center"}
      flexWrap={wrap ? "wrap" : "nowrap"}
      data-testid="link-verification"
      data-source={l.source}
      data-replica={l.replica}
      data-verification={l.verification ?? "never"}
      title={verificationTitle(l)}
    >
      <Badge size="sm" colorPalette={verificationPalette(l.verification)} variant="subtle" whiteSpace="normal">
        {verificationWord(l)}
      </Badge>
      {v && (
        <Text as="span" fontSize="11px" lineHeight="16px" color="fg.muted" truncate={!wrap}>
          {ago(v.at)}
        </Text>
      )}
    </HStack>
  );
}
