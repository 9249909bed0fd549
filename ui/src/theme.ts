// Colours for replica states and the light/dark switch. Everything is a Chakra
// CSS variable so it follows Airflow's theme; canvas code (Chart.js) resolves
// them with cssVar() at draw time.
import { useEffect, useState } from "react";

export type Palette = "green" | "orange" | "blue" | "red" | "gray";

/** Chakra colour palette for a short replica state. */
export function statePalette(state: string): Palette {
  if (state === "REPLICATING") return "green";
  if (state.startsWith("WAITING") || state === "SYNC_FELL_BACK_TO_ASYNC") return "orange";
  if (state === "COPY_IN_PROGRESS") return "blue";
  if (state === "UNEXPECTED" || state === "UNKNOWN" || state.startsWith("ERR")) return "red";
  return "gray"; // PAUSED, UPSTREAM_ONLY and anything new
}

/** Stroke colour for an edge of that palette (gray uses the muted foreground). */
export function strokeVar(p: Palette): string {
  return p === "gray" ? "var(--chakra-colors-fg-subtle)" : `var(--chakra-colors-${p}-solid)`;
}

/** A link's last verification: green same, red differs, grey never. */
export function verificationPalette(result: string | null): Palette {
  return result === "same" ? "green" : result === "differs" ? "red" : "gray";
}

export function gatewayPalette(status: string): Palette {
  return status === "live" ? "green" : status === "stopping" ? "orange" : status === "down" ? "red" : "gray";
}

export function desiredPalette(desired: string | null): Palette {
  return desired === "running" ? "green" : desired === "stopped" ? "orange" : "gray";
}

/** Resolve `var(--x)` (or a bare `--x`) on <html>, where Chakra defines its tokens. */
export function cssVar(name: string, fallback = ""): string {
  const bare = name.replace(/^var\((--[^,)]+).*$/, "$1");
  const v = getComputedStyle(document.documentElement).getPropertyValue(bare).trim();
  return v || fallback;
}

function currentMode(): "dark" | "light" {
  return document.documentElement.classList.contains("dark") ? "dark" : "light";
}

/** Airflow toggles `dark`/`light` on <html>; canvas and React Flow need to know. */
export function useColorMode(): "dark" | "light" {
  const [mode, setMode] = useState(currentMode);
  useEffect(() => {
    const obs = new MutationObserver(() => setMode(currentMode()));
    obs.observe(document.documentElement, { attributes: true, attributeFilter: ["class", "style"] });
    return () => obs.disconnect();
  }, []);
  return mode;
}
