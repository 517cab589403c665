// Draws the report's charts as SVG from the JSON block `report-data` (aggregated by itermem:
// every array here is bounded, so drawing is quick whatever the recording's size). No library,
// no network: the page must open offline from disk.
"use strict";
(function () {
  const data = JSON.parse(document.getElementById("report-data").textContent);
  const t = data.timeline;
  const NS = "http://www.w3.org/2000/svg";
  const LEFT = 150, RIGHT = 16, TOP = 14, AXIS = 24;
  const span = Math.max(t.end - t.start, 1);

  const group = (n) => Math.round(n).toLocaleString("en-US");
  function bytes(n) {
    const units = ["KiB", "MiB", "GiB", "TiB"];
    let v = n, u = "B";
    for (const unit of units) { if (v < 1024) break; v /= 1024; u = unit; }
    return u === "B" ? group(n) + " B" : v.toFixed(1) + " " + u;
  }
  function when(x) {
    if (!data.timed) return "event " + group(x);
    const ns = x - t.start;
    if (ns === 0) return "0";
    if (ns < 1e3) return ns.toFixed(0) + " ns";
    if (ns < 1e6) return (ns / 1e3).toFixed(1) + " µs";
    if (ns < 1e9) return (ns / 1e6).toFixed(1) + " ms";
    return (ns / 1e9).toFixed(2) + " s";
  }
  function el(parent, name, attrs, text) {
    const node = document.createElementNS(NS, name);
    for (const key in attrs) node.setAttribute(key, attrs[key]);
    if (text !== undefined) node.textContent = text;
    parent.appendChild(node);
    return node;
  }
  // A chart of `height` plot pixels: the svg sized, the time axis drawn, the x scale returned.
  function frame(id, height, from = t.start, to = t.end) {
    const span = Math.max(to - from, 1);
    const svg = document.getElementById(id);
    const width = Math.max(svg.clientWidth || 0, 600);
    svg.setAttribute("viewBox", "0 0 " + width + " " + (TOP + height + AXIS));
    svg.setAttribute("height", TOP + height + AXIS);
    const plot = width - LEFT - RIGHT;
    const x = (time) => LEFT + ((time - from) / span) * plot;
    el(svg, "line", { class: "axis", x1: LEFT, x2: LEFT + plot, y1: TOP + height, y2: TOP + height });
    for (let i = 0; i <= 6; i++) {
      const time = from + (span * i) / 6;
      el(svg, "text", { x: x(time), y: TOP + height + 16, "text-anchor": i === 0 ? "start" : i === 6 ? "end" : "middle" }, when(time));
    }
    return { svg, x, plot, height };
  }
  function iterationLines(c) {
    for (const start of t.iteration_starts) {
      el(c.svg, "line", { class: "iter", x1: c.x(start), x2: c.x(start), y1: TOP, y2: TOP + c.height });
    }
  }

  function memory() {
    const c = frame("memory", 240);
    const top = Math.max(t.peak_bytes, data.limit_bytes || 0, data.pool ? data.pool.bytes : 0, 1) * 1.1;
    const y = (b) => TOP + c.height - (b / top) * c.height;
    for (let i = 0; i <= 4; i++) {
      const b = (top * i) / 4;
      el(c.svg, "line", { class: "grid", x1: LEFT, x2: LEFT + c.plot, y1: y(b), y2: y(b) });
      el(c.svg, "text", { x: LEFT - 6, y: y(b) + 4, "text-anchor": "end" }, bytes(b));
    }
    iterationLines(c);
    const n = t.live.length;
    const at = (i) => c.x(t.start + ((i + 0.5) * span) / n).toFixed(1);
    const upper = t.live.map((cell, i) => at(i) + "," + y(cell[1]).toFixed(1));
    const lower = t.live.map((cell, i) => at(i) + "," + y(cell[0]).toFixed(1)).reverse();
    el(c.svg, "path", { id: "live-band", class: "band", d: "M" + upper.join("L") + "L" + lower.join("L") + "Z" });
    el(c.svg, "circle", { cx: c.x(t.peak_time), cy: y(t.peak_bytes), r: 3, fill: "#2f64d6" });
    el(c.svg, "text", { id: "peak-label", x: c.x(t.peak_time) + 6, y: y(t.peak_bytes) - 4 }, "peak " + group(t.peak_bytes) + " B");
    if (data.limit_bytes !== null) {
      el(c.svg, "line", { id: "limit-line", class: "limit", x1: LEFT, x2: LEFT + c.plot, y1: y(data.limit_bytes), y2: y(data.limit_bytes) });
      el(c.svg, "text", { id: "limit-label", x: LEFT + c.plot - 4, y: y(data.limit_bytes) - 5, "text-anchor": "end", fill: "#d23c3c" }, "limit " + group(data.limit_bytes) + " B");
    }
    if (data.pool !== null) {
      const from = c.x(data.pool.from);
      el(c.svg, "line", { id: "pool-line", class: "pool", x1: from, x2: LEFT + c.plot, y1: y(data.pool.bytes), y2: y(data.pool.bytes) });
      el(c.svg, "text", { id: "pool-label", x: from + 4, y: y(data.pool.bytes) + 14, fill: "#1b9e5a" }, "pool " + group(data.pool.bytes) + " B from here");
    }
    const readout = document.createElement("div");
    readout.id = "readout";
    document.body.appendChild(readout);
    c.svg.addEventListener("mousemove", (event) => {
      const box = c.svg.getBoundingClientRect();
      const px = ((event.clientX - box.left) / box.width) * (c.plot + LEFT + RIGHT);
      const i = Math.floor(((px - LEFT) / c.plot) * n);
      if (i < 0 || i >= n) { readout.style.display = "none"; return; }
      readout.textContent = when(t.start + ((i + 0.5) * span) / n) + ": " + group(t.live[i][1]) + " B live";
      readout.style.left = event.clientX + 12 + "px";
      readout.style.top = event.clientY + 12 + "px";
      readout.style.display = "block";
    });
    c.svg.addEventListener("mouseleave", () => { readout.style.display = "none"; });
  }

  function placement() {
    const p = t.placement;
    const c = frame("placement", 260);
    const help = document.getElementById("placement-help");
    if (p.rects.length === 0) {
      el(c.svg, "text", { x: LEFT + 10, y: TOP + 30 }, "This recording has no addresses (" + data.format + ").");
      return;
    }
    const y = (a) => TOP + c.height - (a / p.height) * c.height;
    for (const cluster of p.clusters) {
      el(c.svg, "line", { class: "grid", x1: LEFT, x2: LEFT + c.plot, y1: y(cluster[0]), y2: y(cluster[0]) });
      if ((cluster[2] / p.height) * c.height > 12) {
        el(c.svg, "text", { x: LEFT - 6, y: y(cluster[0]) - 3, "text-anchor": "end" }, "0x" + cluster[1].toString(16));
      }
    }
    const g = el(c.svg, "g", { id: "placement-rects" });
    for (const r of p.rects) {
      const hue = (r[2] * 2654435761) % 360;
      el(g, "rect", {
        x: c.x(r[0]).toFixed(1), width: Math.max(c.x(r[1]) - c.x(r[0]), 0.8).toFixed(1),
        y: y(r[2] + r[3]).toFixed(1), height: Math.max((r[3] / p.height) * c.height, 0.6).toFixed(1),
        fill: "hsl(" + hue + ",55%,60%)",
      });
    }
    let text = "Each allocation at its address (gaps between address ranges left out; " +
      p.clusters.length + " range" + (p.clusters.length === 1 ? "" : "s") + ") over its lifetime: " +
      group(p.rects.length) + " of " + group(p.allocations) + " allocations drawn";
    if (p.left_out > 0) text += ", the " + group(p.left_out) + " smallest left out (" + (p.left_out_share * 100).toFixed(1) + " % of bytes × time)";
    help.textContent = text + ".";
  }

  // The label of kernel lane `i`. Stream handles are pointers, too long for a label: lanes are
  // numbered busiest first, with the handle in the label's tooltip.
  function laneLabel(c, i) {
    const lane = t.lanes[i];
    const name = lane.stream === null ? "other streams" : lane.stream === 0 ? "default stream" : "stream " + (i + 1);
    const text = el(c.svg, "text", { x: LEFT - 6, y: TOP + i * 24 + 16, "text-anchor": "end" }, "kernels, " + name);
    if (lane.stream !== null) el(text, "title", {}, "stream handle 0x" + lane.stream.toString(16));
  }

  function schedule() {
    const s = data.schedule;
    const rows = t.lanes.length + (s ? 2 : 0);
    const c = frame("schedule", Math.max(rows, 1) * 24);
    const help = document.getElementById("schedule-help");
    iterationLines(c);
    let row = 0;
    const most = Math.max(1, ...t.lanes.flatMap((lane) => lane.counts));
    const width = c.plot / t.lane_buckets;
    for (const lane of t.lanes) {
      laneLabel(c, row);
      const g = el(c.svg, "g", { class: "lane" });
      lane.counts.forEach((count, i) => {
        if (count > 0) el(g, "rect", { class: "kernel", x: (LEFT + i * width).toFixed(1), width: Math.max(width, 1).toFixed(1), y: TOP + row * 24 + 4, height: 16, "fill-opacity": (0.25 + (0.75 * count) / most).toFixed(2) });
      });
      row++;
    }
    if (!s) {
      help.textContent = (t.lanes.length ? "The program's kernels per stream. " : "") +
        "No swap schedule: it is drawn from a swap-mode run's plan (--plan-out) and statistics (--stats).";
      if (!t.lanes.length) el(c.svg, "text", { x: LEFT + 10, y: TOP + 16 }, "No kernel launches: " + (data.format === "itermem trace" ? "the program launched none." : "a " + data.format + " records none."));
      return;
    }
    copyRows(c, s, row, "swap-", () => true);
    help.textContent = "The program's kernels per stream against the swap plan's copies, " +
      s.out.length + " out and " + s.back.length + " back in " + s.iterations_drawn + " of " + s.iterations +
      " planned iterations. Planned times: the run records no copy times, so each copy starts when the program " +
      "issued the op the plan issues it at, and lasts what the plan's copy model gives.";
  }

  // The copies out and back in two rows from `row` on, those `keep` accepts, in groups with ids
  // `prefix` + "out" / "in".
  function copyRows(c, s, row, prefix, keep) {
    for (const [name, copies, cls] of [["copies to host", s.out, "out"], ["copies back", s.back, "in"]]) {
      el(c.svg, "text", { x: LEFT - 6, y: TOP + row * 24 + 16, "text-anchor": "end" }, name);
      const g = el(c.svg, "g", { id: prefix + cls });
      for (const copy of copies.filter(keep)) {
        el(g, "rect", { class: cls, x: c.x(copy[0]).toFixed(1), width: Math.max(c.x(copy[1]) - c.x(copy[0]), 1.5).toFixed(1), y: TOP + row * 24 + 4, height: 16 });
      }
      row++;
    }
  }

  // The first swapped iteration alone: each launch a tick in its stream's lane, and its copies.
  function zoom() {
    const s = data.schedule;
    const help = document.getElementById("zoom-help");
    if (!s || !s.zoom) {
      document.getElementById("zoom").style.display = "none";
      return;
    }
    const z = s.zoom;
    const c = frame("zoom", (t.lanes.length + 2) * 24, z.start, z.end);
    const lane = new Map(t.lanes.map((l, i) => [l.stream, i]));
    const other = t.lanes.findIndex((l) => l.stream === null);
    t.lanes.forEach((_, i) => laneLabel(c, i));
    const g = el(c.svg, "g", { id: "zoom-launches" });
    for (const [time, stream] of z.launches) {
      const row = lane.has(stream) ? lane.get(stream) : other;
      el(g, "rect", { class: "kernel", x: c.x(time).toFixed(1), width: 1.2, y: TOP + row * 24 + 4, height: 16 });
    }
    copyRows(c, s, t.lanes.length, "zoom-", (copy) => copy[1] >= z.start && copy[0] < z.end);
    help.textContent = "The first swapped iteration alone: its " + group(z.launches.length + z.left_out) +
      " kernel launches (as the program issued them) against the copies planned in it" +
      (z.left_out > 0 ? " (the first " + group(z.launches.length) + " launches drawn)." : ".");
  }

  memory();
  placement();
  schedule();
  zoom();
  document.body.dataset.rendered = "yes";
})();
