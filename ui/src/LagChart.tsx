// Lag over time for one replica link: messages behind (left axis) and lag in
// seconds (right axis). Chart.js paints a canvas, so colours are read from
// Chakra's CSS variables at render time and re-read when the theme flips.
import { Box, Flex, Text } from "@chakra-ui/react";
import {
  Chart as ChartJS,
  Legend,
  LinearScale,
  LineController,
  LineElement,
  PointElement,
  Tooltip,
  type ChartData,
  type ChartOptions,
} from "chart.js";
import { useMemo } from "react";
import { Line } from "react-chartjs-2";
import type { LinkModel } from "./layout";
import { count, duration, hms } from "./format";
import { cssVar, useColorMode } from "./theme";

ChartJS.register(LineController, LineElement, PointElement, LinearScale, Tooltip, Legend);

type Pt = { x: number; y: number | null };

/**
 * Samples as two series; where two samples are further apart than 2.5 sample
 * periods nothing was measured, so a null point breaks the line there.
 */
export function lagSeries(lm: LinkModel) {
  const period = (lm.sampleSeconds ?? 10) * 1000;
  const msgs: Pt[] = [];
  const secs: Pt[] = [];
  let gaps = 0;
  const samples = [...lm.link.lagHistory].sort((a, b) => a.t - b.t);
  samples.forEach((s, i) => {
    const prev = samples[i - 1];
    if (prev && s.t - prev.t > 2.5 * period) {
      const mid = (prev.t + s.t) / 2;
      msgs.push({ x: mid, y: null });
      secs.push({ x: mid, y: null });
      gaps++;
    }
    msgs.push({ x: s.t, y: s.messages });
    secs.push({ x: s.t, y: s.ms == null ? null : s.ms / 1000 });
  });
  return { msgs, secs, gaps, samples: samples.length, first: samples[0]?.t, last: samples.at(-1)?.t };
}

export function LagChart({ lm }: { lm: LinkModel }) {
  const mode = useColorMode();
  const series = useMemo(() => lagSeries(lm), [lm]);
  const { link } = lm;
  // Nobody measures a link no live gateway serves (none known: null counts too),
  // so its last figure is stale; a paused link is not expected to move.
  const live = (link.gateways?.length ?? 0) > 0;

  const { data, options } = useMemo(() => {
    // `mode` is only a dependency: the CSS variables have already changed with it.
    void mode;
    const c = {
      msgs: cssVar("--chakra-colors-blue-solid", "#2563eb"),
      secs: cssVar("--chakra-colors-orange-solid", "#ea580c"),
      fg: cssVar("--chakra-colors-fg-muted", "#71717a"),
      grid: cssVar("--chakra-colors-border", "#e4e4e7"),
      bg: cssVar("--chakra-colors-bg-panel", "#ffffff"),
      text: cssVar("--chakra-colors-fg", "#09090b"),
    };
    const [x0, x1] = [series.first ?? 0, series.last ?? 0];
    const threshold = (label: string, y: number, axis: string, color: string) => ({
      label,
      data: [
        { x: x0, y },
        { x: x1, y },
      ],
      yAxisID: axis,
      borderColor: color,
      borderDash: [6, 4],
      borderWidth: 1,
      pointRadius: 0,
      stepped: false as const,
    });
    const datasets: ChartData<"line", Pt[]>["datasets"] = [
      {
        label: "messages behind",
        data: series.msgs,
        yAxisID: "y1",
        borderColor: c.msgs,
        backgroundColor: c.msgs,
        stepped: true,
        spanGaps: false,
        borderWidth: 2,
        pointRadius: 0,
        pointHitRadius: 6,
      },
      {
        label: "lag (s)",
        data: series.secs,
        yAxisID: "y2",
        borderColor: c.secs,
        backgroundColor: c.secs,
        stepped: true,
        spanGaps: false,
        borderWidth: 2,
        pointRadius: 0,
        pointHitRadius: 6,
      },
    ];
    if (link.maxLagMessages != null)
      datasets.push(threshold("max messages", link.maxLagMessages, "y1", c.msgs));
    if (link.maxLagMillis != null) datasets.push(threshold("max lag (s)", link.maxLagMillis / 1000, "y2", c.secs));

    const options: ChartOptions<"line"> = {
      animation: false,
      responsive: true,
      maintainAspectRatio: false,
      interaction: { mode: "index", intersect: false },
      scales: {
        x: {
          type: "linear",
          min: x0,
          max: x1,
          ticks: { color: c.fg, maxRotation: 0, autoSkipPadding: 16, callback: (v) => hms(Number(v)) },
          grid: { color: c.grid },
          border: { color: c.grid },
        },
        y1: {
          position: "left",
          beginAtZero: true,
          title: { display: true, text: "messages", color: c.fg },
          ticks: { color: c.fg, precision: 0 },
          grid: { color: c.grid },
          border: { color: c.grid },
        },
        y2: {
          position: "right",
          beginAtZero: true,
          title: { display: true, text: "seconds", color: c.fg },
          ticks: { color: c.fg },
          grid: { drawOnChartArea: false },
          border: { color: c.grid },
        },
      },
      plugins: {
        legend: { labels: { color: c.fg, boxWidth: 12, boxHeight: 2 } },
        tooltip: {
          backgroundColor: c.bg,
          titleColor: c.text,
          bodyColor: c.text,
          borderColor: c.grid,
          borderWidth: 1,
          callbacks: { title: (items) => `${hms(items[0]?.parsed.x ?? 0)} UTC` },
        },
      },
    };
    return { data: { datasets }, options };
  }, [series, link.maxLagMessages, link.maxLagMillis, mode]);

  return (
    <Box
      data-testid="lag-chart"
      data-source={link.source}
      data-replica={link.replica}
      data-samples={series.samples}
      data-gaps={series.gaps}
      data-live-gateway={live ? "true" : "false"}
      borderWidth="1px"
      borderColor="border"
      borderRadius="lg"
      p={3}
      bg="bg"
    >
      <Flex justify="space-between" gap={2} wrap="wrap" mb={2}>
        <Text fontSize="sm" fontWeight="semibold" wordBreak="break-all">
          {link.source} → {link.replica}
        </Text>
        <Text fontSize="xs" color="fg.muted">
          now {count(link.pendingMessages)} behind · {duration(link.replicationLagMillis)}
        </Text>
      </Flex>
      {!live && !link.paused && (
        <Text data-testid="lag-not-measured" fontSize="xs" color="fg.warning" mb={2}>
          no live gateway: lag not measured since {series.last != null ? `${hms(series.last)} UTC` : "it was set up"}
        </Text>
      )}
      {series.samples === 0 ? (
        <Text fontSize="sm" color="fg.muted" py={6} textAlign="center">
          no lag samples yet
        </Text>
      ) : (
        <Box h="200px">
          <Line data={data} options={options} />
        </Box>
      )}
    </Box>
  );
}
