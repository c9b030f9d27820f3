// One job: its phase and why it waits, the phase timeline, where each replica runs (node, GPUs, CPUs), its
// metrics as a chart, redrawn every time the job is read again, and the tail of a replica's log, followed live
// (the log route's follow=true streams what the replica writes until the job stops).
import { ApiError, getJson, streamText, watchObject } from "../api.js";
import { barChart, timeline } from "../charts.js";
import { h, queueOf, errorBox, phaseBadge, table } from "../dom.js";

const WAITING = new Set(["Pending", "Queued"]);
const COLOURS = { Succeeded: "#1f8a4c", Failed: "#c33b32", Queued: "#b7791f", Pending: "#b7791f" };
const LOG_LINES = 200;

function replicaNames(job) {
  const names = [];
  for (const [role, spec] of Object.entries(job.spec.replicas || {})) {
    // As the log route names them: ROLE-INDEX (the placements' keys put the job's name first).
    for (let index = 0; index < (spec.count || 0); index += 1) names.push(`${role}-${index}`);
  }
  return names;
}

// The steps the job went through, from its events when the server serves them, else from its status: its
// creation, admission and start times, its conditions, and its end.
async function steps(path, job) {
  try {
    const events = await getJson(`${path}/events`);
    const when = (e) => e.time || e.lastTimestamp || e.eventTime || e.firstTimestamp;
    const dated = events.items.filter((e) => e.reason && when(e));
    if (dated.length) {
      return dated
        .map((e) => ({ label: e.reason, time: when(e), color: e.type === "Warning" ? "#c33b32" : COLOURS[e.reason] }))
        .sort((a, b) => Date.parse(a.time) - Date.parse(b.time));
    }
  } catch (error) {
    if (!(error instanceof ApiError && error.status === 404)) throw error;
  }
  const status = job.status || {};
  const dated = [
    { label: "Created", time: job.metadata.creationTimestamp },
    { label: "Admitted", time: status.admittedTime },
    { label: "Started", time: status.startTime },
    ...(status.conditions || []).map((c) => ({ label: c.type, time: c.lastTransitionTime })),
    { label: status.phase, time: status.completionTime },
  ].filter((step) => step.label && step.time);
  // One dot per step, at its first time: conditions repeat what the status times say.
  const first = new Map();
  for (const step of dated) {
    if (!first.has(step.label) || Date.parse(step.time) < Date.parse(first.get(step.label).time)) first.set(step.label, step);
  }
  return [...first.values()]
    .map((step) => ({ ...step, color: COLOURS[step.label] }))
    .sort((a, b) => Date.parse(a.time) - Date.parse(b.time));
}

// The one sentence why the job waits: the explain route's, else the scheduler's status message.
async function explanation(path, job) {
  try {
    return (await getJson(`${path}/explain`)).message;
  } catch (error) {
    if (error instanceof ApiError && error.status === 404) return job.status.message || "waiting to be scheduled";
    throw error;
  }
}

function placementTable(job) {
  const placements = Object.entries(job.status.placements || {}).sort(([a], [b]) => a.localeCompare(b));
  if (!placements.length) return h("p", { class: "muted", id: "no-placement" }, "Not placed (no replica holds resources).");
  return table(
    ["Replica", "Node", "GPUs", "CPUs"],
    placements.map(([replica, where]) =>
      h(
        "tr",
        { "data-replica": replica },
        h("td", {}, replica),
        h("td", { class: "node" }, where.node),
        h("td", { class: "gpus" }, (where.gpus || []).join(", ") || (where.gpuMilli ? `${where.gpuMilli}m shared` : "none")),
        h("td", { class: "cpus" }, (where.cpus || []).join(", ") || "shared"),
      ),
    ),
  );
}

function metricsChart(job) {
  const metrics = Object.entries(job.status.metrics || {}).sort(([a], [b]) => a.localeCompare(b));
  if (!metrics.length) return h("p", { class: "muted", id: "no-metrics" }, "No metrics reported.");
  return barChart(metrics.map(([label, value]) => ({ label, value })), { testid: "metrics-chart" });
}

export function jobPage(view, namespace, name, onRefused) {
  const path = `/namespaces/${encodeURIComponent(namespace)}/trainingjobs/${encodeURIComponent(name)}`;
  const head = h("h1", {}, `${namespace}/${name} `);
  const facts = h("section", { class: "card", id: "facts" });
  const why = h("section", { class: "card", id: "explain", hidden: true });
  const phases = h("section", { class: "card", id: "timeline" });
  const placement = h("section", { class: "card", id: "placement" });
  const metrics = h("section", { class: "card", id: "metrics" });
  const replicaSelect = h("select", { name: "replica", id: "replica" });
  const log = h("pre", { class: "log", id: "log", hidden: true }, "");
  const logNote = h("p", { class: "muted", id: "log-note" });
  let job = null;
  let stopped = false;
  let logTimer = null;
  let logAborter = null;

  // Follows the chosen replica's log: what it has written, then each line as it is written, the last LOG_LINES
  // kept. The server ends the stream once the job stops; a stream that ends or fails while the job may still
  // write (a replica not started yet, a dropped connection) is followed again 2 s later.
  async function followLog() {
    if (stopped || !replicaSelect.value) return;
    if (logAborter) logAborter.abort();
    const aborter = new AbortController();
    logAborter = aborter;
    let lines = [""];
    let cut = false;
    log.textContent = "";
    logNote.textContent = "";
    log.dataset.follow = "stream";
    try {
      const route = `${path}/log?replica=${encodeURIComponent(replicaSelect.value)}&follow=true`;
      log.hidden = false;
      await streamText(
        route,
        (text) => {
          const pieces = text.split("\n");
          lines[lines.length - 1] += pieces[0]; // the rest of a line the last piece began
          lines.push(...pieces.slice(1));
          if (lines.length > LOG_LINES + 1) {
            lines = lines.slice(-(LOG_LINES + 1));
            cut = true;
          }
          log.textContent = lines.join("\n");
          logNote.textContent = cut ? `the last ${LOG_LINES} lines` : "";
          log.scrollTop = log.scrollHeight;
        },
        aborter.signal,
      );
      log.dataset.follow = "ended";
    } catch (error) {
      if (aborter.signal.aborted) return;
      log.textContent = "";
      log.hidden = true;
      logNote.textContent = error.message;
    }
    const phase = job && job.status.phase;
    if (!stopped && logAborter === aborter && phase !== "Succeeded" && phase !== "Failed") {
      logTimer = setTimeout(followLog, 2000);
    }
  }
  replicaSelect.addEventListener("change", () => {
    clearTimeout(logTimer);
    followLog();
  });

  async function draw(current) {
    const first = job === null;
    job = current;
    const status = job.status || {};
    head.replaceChildren(`${namespace}/${name} `, phaseBadge(status.phase || "Pending"));
    facts.replaceChildren(
      h(
        "dl",
        { class: "facts" },
        h("dt", {}, "Queue"), h("dd", { id: "queue" }, queueOf(job)),
        h("dt", {}, "Type"), h("dd", {}, job.spec.type),
        h("dt", {}, "Reason"), h("dd", { id: "reason" }, status.reason || "—"),
        h("dt", {}, "Message"), h("dd", { id: "message" }, status.message || "—"),
        h("dt", {}, "Restarts"), h("dd", {}, status.restarts || 0),
      ),
    );
    placement.replaceChildren(h("h2", {}, "Placement"), placementTable(job));
    metrics.replaceChildren(h("h2", {}, "Metrics"), metricsChart(job));
    try {
      const dated = await steps(path, job);
      phases.replaceChildren(
        h("h2", {}, "Timeline"),
        dated.length ? timeline(dated) : h("p", { class: "muted" }, "No transitions yet."),
      );
      why.hidden = !WAITING.has(status.phase || "Pending");
      if (!why.hidden) why.replaceChildren(h("h2", {}, "Why it waits"), h("p", { id: "explain-text" }, await explanation(path, job)));
    } catch (error) {
      onRefused(error);
      phases.replaceChildren(errorBox(error));
    }
    if (first) {
      replicaSelect.replaceChildren(...replicaNames(job).map((r) => h("option", { value: r }, r)));
      followLog();
    }
  }

  view.replaceChildren(
    h("p", {}, h("a", { href: "#/jobs" }, "← Jobs")),
    head,
    why,
    facts,
    phases,
    placement,
    metrics,
    h("section", { class: "card" }, h("h2", {}, "Log ", replicaSelect), logNote, log),
  );
  const stopWatch = watchObject(path, draw, (error) => {
    onRefused(error);
    view.replaceChildren(h("p", {}, h("a", { href: "#/jobs" }, "← Jobs")), errorBox(error));
  });
  return () => {
    stopped = true;
    clearTimeout(logTimer);
    if (logAborter) logAborter.abort();
    stopWatch();
  };
}
