// The Fleet screen's charts, drawn by uPlot (a canvas chart of ~50 kB that
// redraws thousands of points in a millisecond): a sparkline of a target's
// requests and errors per second, and a route's traffic share over time as
// stacked areas. Colours are mid-tones that read on the light and the dark
// palette; axes take the page's own ink.

import { useEffect, useRef } from "react";
import uPlot from "uplot";
import "uplot/dist/uPlot.min.css";
import type { HistoryPoint } from "../lib/history";
import { formatMs, formatNumber, formatTime } from "../lib/format";

/// One colour per target, in the route's order.
export const PALETTE = ["#3b82c4", "#e0892b", "#3aa676", "#b25fc2", "#d1495b", "#8a9aab", "#c9a227", "#4cb3b3"];

const ERRORS = "#d1495b";

function cssVar(name: string, fallback: string): string {
  const value = getComputedStyle(document.documentElement).getPropertyValue(name).trim();
  return value || fallback;
}

/// A uPlot in `ref`, built once per `build` and given `data` as it changes.
function usePlot(build: (el: HTMLElement) => uPlot, data: uPlot.AlignedData, key: string) {
  const ref = useRef<HTMLDivElement | null>(null);
  const plot = useRef<uPlot | null>(null);
  useEffect(() => {
    if (!ref.current) return;
    plot.current = build(ref.current);
    return () => {
      plot.current?.destroy();
      plot.current = null;
    };
    // Rebuilt when the shape changes (`key`), not on every render.
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [key]);
  useEffect(() => {
    plot.current?.setData(data);
  }, [data]);
  return ref;
}

/// Requests per second (and errors, red) of one route target over the
/// history, with its last values in the title.
export function Sparkline(props: { points: readonly HistoryPoint[] }) {
  const { points } = props;
  const data: uPlot.AlignedData = [
    points.map((p) => p.at_unix_ms / 1000),
    points.map((p) => p.requests_per_s),
    points.map((p) => p.errors_per_s),
  ];
  const ref = usePlot(
    (el) =>
      new uPlot(
        {
          width: 100,
          height: 28,
          legend: { show: false },
          cursor: { show: false },
          axes: [{ show: false }, { show: false }],
          scales: { x: { time: true }, y: { range: (_u, _min, max) => [0, Math.max(1, max)] } },
          series: [
            {},
            { stroke: PALETTE[0], width: 1.5, fill: "rgba(59,130,196,0.15)", points: { show: false } },
            { stroke: ERRORS, width: 1, points: { show: false } },
          ],
        },
        data,
        el,
      ),
    data,
    `sparkline-${points.length >= 2}`,
  );
  const last = points[points.length - 1];
  const title = last
    ? `Last 5 s (${formatTime(last.at_unix_ms)}): ${formatNumber(last.requests_per_s, 1)} req/s, ${formatNumber(
        last.errors_per_s,
        1,
      )} errors/s, ${last.in_flight} in flight${
        last.ttft_p50_ms != null ? `, TTFT p50 ${formatMs(last.ttft_p50_ms)}, p95 ${formatMs(last.ttft_p95_ms)}` : ""
      }`
    : "No history yet: a point every 5 s";
  return (
    <div className="sparkline" title={title} data-testid="sparkline" data-points={points.length}>
      {points.length < 2 ? <span className="faint small">collecting…</span> : <div ref={ref} />}
      {last && (
        <div className="faint small">
          {formatNumber(last.requests_per_s, 1)}/s{last.ttft_p95_ms != null && ` · p95 ${formatMs(last.ttft_p95_ms)}`}
        </div>
      )}
    </div>
  );
}

/// A route's traffic share per target over time, stacked to 100 %.
export function ShareChart(props: { times: readonly number[]; shares: readonly (number | null)[][]; labels: readonly string[] }) {
  const { times, shares, labels } = props;
  // Each line is the top of its band: the sum of the shares up to it,
  // drawn largest first so each band paints over the one below.
  const tops = shares.map((_, k) =>
    times.map((_, j) => {
      if (shares.every((s) => s[j] == null)) return null;
      return shares.slice(0, k + 1).reduce((n, s) => n + (s[j] ?? 0), 0) * 100;
    }),
  );
  const order = tops.map((_, k) => tops.length - 1 - k);
  const data: uPlot.AlignedData = [times.map((t) => t / 1000), ...order.map((k) => tops[k])];
  const ref = usePlot(
    (el) => {
      const ink = cssVar("--muted", "#5d6878");
      const grid = cssVar("--line", "#e1e5eb");
      const axis = { stroke: ink, grid: { stroke: grid, width: 1 }, ticks: { stroke: grid } };
      return new uPlot(
        {
          width: Math.max(320, el.clientWidth || 600),
          height: 120,
          padding: [8, 12, 0, 12],
          legend: { show: false },
          scales: { x: { time: true }, y: { range: [0, 100] } },
          axes: [axis, { ...axis, values: (_u, ticks) => ticks.map((t) => `${t}%`), size: 56 }],
          series: [
            {},
            ...order.map((k) => ({
              label: labels[k],
              stroke: PALETTE[k % PALETTE.length],
              fill: PALETTE[k % PALETTE.length],
              width: 1,
            })),
          ],
        },
        data,
        el,
      );
    },
    data,
    `share-${labels.join(",")}-${times.length >= 2}`,
  );
  return (
    <div className="share-chart" data-testid="share-chart" data-points={times.length}>
      <div className="legend">
        <span>Traffic share, last 15 min:</span>
        {labels.map((label, i) => (
          <span key={label}>
            <i style={{ background: PALETTE[i % PALETTE.length] }} />
            {label}
          </span>
        ))}
      </div>
      {times.length < 2 ? <p className="faint small">Collecting: a point every 5 s.</p> : <div ref={ref} />}
    </div>
  );
}
