// Small number/time formatters shared by the tables, the topology and the charts.

export function count(n: number | null | undefined): string {
  return n == null ? "—" : n.toLocaleString("en-US");
}

export function bytes(n: number | null | undefined): string {
  if (n == null) return "—";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let v = n;
  let i = 0;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return `${i === 0 ? v : v.toFixed(1)} ${units[i]}`;
}

export function duration(ms: number | null | undefined): string {
  if (ms == null) return "—";
  const s = ms / 1000;
  if (s < 1) return `${Math.round(ms)} ms`;
  if (s < 60) return `${s.toFixed(s < 10 ? 1 : 0)} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${Math.round(s % 60)} s`;
  return `${Math.floor(s / 3600)} h ${Math.round((s % 3600) / 60)} min`;
}

/** HH:MM:SS in UTC: the lag charts' time axis (no date adapter needed). */
export function hms(t: number): string {
  return new Date(t).toISOString().slice(11, 19);
}

export function plural(n: number | null | undefined, word: string): string {
  return `${count(n)} ${word}${n === 1 ? "" : "s"}`;
}

const RELATIVE = new Intl.RelativeTimeFormat("en", { numeric: "auto" });
const UNITS: [Intl.RelativeTimeFormatUnit, number][] = [
  ["year", 365 * 86_400],
  ["month", 30 * 86_400],
  ["day", 86_400],
  ["hour", 3600],
  ["minute", 60],
  ["second", 1],
];

/** "5 minutes ago", "yesterday": a past time relative to now, as Airflow's UI shows times. */
export function ago(t: number, now: number = Date.now()): string {
  const s = Math.max(0, (now - t) / 1000);
  if (s < 45) return "a few seconds ago";
  const [unit, size] = UNITS.find(([, size]) => s >= size) ?? UNITS[UNITS.length - 1];
  return RELATIVE.format(-Math.round(s / size), unit);
}
