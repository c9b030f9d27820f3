// Charts as SVG drawn here (no chart library): horizontal bars for named values, e.g. a job's metrics or a
// queue's usage against its quota.
const SVG = "http://www.w3.org/2000/svg";

function s(tag, attrs = {}, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, String(value));
  if (text !== undefined) node.textContent = text;
  return node;
}

function format(value) {
  return Number.isInteger(value) ? String(value) : String(Number(value.toPrecision(4)));
}

// bars: [{label, value, max?}] -> an <svg>; each bar is scaled to its own max when given (usage/quota), else to
// the largest absolute value of all bars.
export function barChart(bars, { width = 560, rowHeight = 22, labelWidth = 150, testid = "chart" } = {}) {
  const height = Math.max(bars.length, 1) * rowHeight + 6;
  const svg = s("svg", { width, height, viewBox: `0 0 ${width} ${height}`, role: "img", "data-testid": testid });
  const largest = Math.max(1e-12, ...bars.map((bar) => Math.abs(bar.value)));
  const span = width - labelWidth - 90;
  bars.forEach((bar, row) => {
    const y = row * rowHeight + 3;
    const scale = bar.max ? Math.min(Math.abs(bar.value) / bar.max, 1) : Math.abs(bar.value) / largest;
    const group = s("g", { "data-label": bar.label, "data-value": bar.value });
    group.append(s("text", { x: 0, y: y + 14 }, bar.label));
    if (bar.max) group.append(s("rect", { x: labelWidth, y, width: span, height: rowHeight - 6, fill: "#e4e7ee" }));
    group.append(
      s("rect", { x: labelWidth, y, width: Math.max(1, scale * span), height: rowHeight - 6, fill: bar.color || "#2f5bd3" }),
    );
    const text = bar.max ? `${format(bar.value)} / ${format(bar.max)}` : format(bar.value);
    group.append(s("text", { x: labelWidth + span + 6, y: y + 14 }, text));
    svg.append(group);
  });
  return svg;
}

function elapsed(ms) {
  if (ms < 1000) return `+${ms} ms`;
  if (ms < 120000) return `+${(ms / 1000).toFixed(1)} s`;
  if (ms < 7200000) return `+${(ms / 60000).toFixed(1)} min`;
  return `+${(ms / 3600000).toFixed(1)} h`;
}

// A timeline of dated steps, [{label, time}] in time order: one row each on a vertical line, with its time and
// how long after the first step it came (steps milliseconds apart stay readable).
export function timeline(steps, { width = 560, rowHeight = 22, testid = "timeline" } = {}) {
  const height = steps.length * rowHeight + 6;
  const svg = s("svg", { width, height, viewBox: `0 0 ${width} ${height}`, role: "img", "data-testid": testid });
  svg.append(s("line", { x1: 12, y1: 12, x2: 12, y2: height - 12, stroke: "#d9dde5", "stroke-width": 2 }));
  const start = Date.parse(steps[0].time);
  steps.forEach((step, row) => {
    const y = row * rowHeight + 12;
    const when = new Date(step.time);
    const group = s("g", { "data-step": step.label, "data-time": step.time });
    group.append(s("circle", { cx: 12, cy: y, r: 5, fill: step.color || "#2f5bd3" }));
    group.append(s("text", { x: 26, y: y + 4 }, step.label));
    group.append(s("text", { x: 200, y: y + 4 }, when.toLocaleString()));
    group.append(s("text", { x: 400, y: y + 4 }, row ? elapsed(Date.parse(step.time) - start) : ""));
    svg.append(group);
  });
  return svg;
}

// A DAG drawn left to right: each node in the column of its longest path from a root, edges as lines.
// nodes: [{name, state, color}], edges: [[from, to]] -> an <svg> whose <g data-node> carry each node's state.
export function dag(nodes, edges, { testid = "dag" } = {}) {
  const depth = new Map(nodes.map((n) => [n.name, 0]));
  for (let round = 0; round < nodes.length; round += 1) {
    for (const [from, to] of edges) {
      if (depth.has(from) && depth.has(to)) depth.set(to, Math.max(depth.get(to), depth.get(from) + 1));
    }
  }
  const columns = new Map();
  for (const node of nodes) {
    const column = depth.get(node.name);
    if (!columns.has(column)) columns.set(column, []);
    columns.get(column).push(node);
  }
  const boxWidth = 150;
  const boxHeight = 40;
  const where = new Map();
  let rows = 1;
  for (const [column, members] of columns) {
    members.forEach((node, row) => where.set(node.name, { x: 10 + column * (boxWidth + 50), y: 10 + row * (boxHeight + 20) }));
    rows = Math.max(rows, members.length);
  }
  const width = 20 + columns.size * (boxWidth + 50);
  const height = 20 + rows * (boxHeight + 20);
  const svg = s("svg", { width, height, viewBox: `0 0 ${width} ${height}`, role: "img", "data-testid": testid });
  for (const [from, to] of edges) {
    const a = where.get(from);
    const b = where.get(to);
    if (!a || !b) continue;
    svg.append(s("line", { x1: a.x + boxWidth, y1: a.y + boxHeight / 2, x2: b.x, y2: b.y + boxHeight / 2, stroke: "#98a2b3", "stroke-width": 1.5, "data-edge": `${from}->${to}` }));
  }
  for (const node of nodes) {
    const { x, y } = where.get(node.name);
    const group = s("g", { "data-node": node.name, "data-state": node.state });
    group.append(s("rect", { x, y, width: boxWidth, height: boxHeight, rx: 6, fill: "#fff", stroke: node.color || "#667085", "stroke-width": 2 }));
    group.append(s("text", { x: x + 8, y: y + 16 }, node.name));
    group.append(s("text", { x: x + 8, y: y + 32, fill: node.color || "#667085" }, node.state));
    svg.append(group);
  }
  return svg;
}

// Values over time: points [{time, value}] as dots (or, with step: true, a step line that holds each value until
// the next point), time on x and the value on y, with the y axis' top value and the time span written.
export function timeSeries(points, { width = 560, height = 160, step = false, unit = "", testid = "series" } = {}) {
  const svg = s("svg", { width, height, viewBox: `0 0 ${width} ${height}`, role: "img", "data-testid": testid });
  const left = 50;
  const bottom = height - 20;
  svg.append(s("line", { x1: left, y1: 10, x2: left, y2: bottom, stroke: "#d9dde5" }));
  svg.append(s("line", { x1: left, y1: bottom, x2: width - 10, y2: bottom, stroke: "#d9dde5" }));
  if (!points.length) return svg;
  const times = points.map((p) => Date.parse(p.time));
  const first = Math.min(...times);
  const last = Math.max(...times);
  const top = Math.max(1e-9, ...points.map((p) => p.value));
  const x = (t) => left + (last > first ? ((t - first) / (last - first)) * (width - left - 10) : (width - left - 10) / 2);
  const y = (v) => bottom - (v / top) * (bottom - 10);
  svg.append(s("text", { x: 2, y: 14 }, `${format(top)}${unit}`));
  svg.append(s("text", { x: 2, y: bottom }, `0${unit}`));
  svg.append(s("text", { x: left, y: height - 4 }, new Date(first).toLocaleString()));
  svg.append(s("text", { x: width - 150, y: height - 4 }, new Date(last).toLocaleString()));
  if (step) {
    let path = "";
    points.forEach((p, i) => {
      const px = x(times[i]);
      path += i ? ` L ${px} ${y(points[i - 1].value)} L ${px} ${y(p.value)}` : `M ${px} ${y(p.value)}`;
    });
    svg.append(s("path", { d: path, fill: "none", stroke: "#2f5bd3", "stroke-width": 2 }));
  }
  points.forEach((p, i) => {
    const dot = s("circle", { cx: x(times[i]), cy: y(p.value), r: step ? 2 : 4, fill: "#2f5bd3", "data-value": p.value });
    if (p.label) dot.setAttribute("data-label", p.label);
    svg.append(dot);
  });
  return svg;
}
