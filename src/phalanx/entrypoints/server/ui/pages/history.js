// History: the jobs the history kept (finished, deleted), with charts: queueing time per queue (p50 and p95 of
// every record the filters select), each job's queueing time by when it ended, and the GPUs that recorded jobs
// held over time (from their start, end and placements). Reads GET /history (or /namespaces/NS/history).
import { getJson } from "../api.js";
import { barChart, timeSeries } from "../charts.js";
import { h, errorBox, phaseBadge, table } from "../dom.js";

const filters = { namespace: "", queue: "", phase: "" };

function historyPath() {
  const where = filters.namespace ? `/namespaces/${encodeURIComponent(filters.namespace)}/history` : "/history";
  const query = new URLSearchParams({ limit: "1000" });
  if (filters.queue) query.set("queue", filters.queue);
  if (filters.phase) query.set("phase", filters.phase);
  return `${where}?${query}`;
}

// GPUs held by the records' jobs over time: +n at each start, -n at each end, as a running sum.
function gpusOverTime(records) {
  const changes = [];
  for (const record of records) {
    const gpus = Object.values(record.placements || {}).reduce((sum, where) => sum + (where.gpus || []).length, 0);
    if (!gpus || !record.startedAt) continue;
    changes.push([Date.parse(record.startedAt), gpus]);
    changes.push([Date.parse(record.finishedAt || record.endedAt), -gpus]);
  }
  changes.sort((a, b) => a[0] - b[0]);
  let held = 0;
  return changes.map(([time, change]) => {
    held += change;
    return { time: new Date(time).toISOString(), value: held };
  });
}

function draw(body, answer) {
  const records = answer.items || [];
  const summaries = answer.queues || [];
  const queueBars = summaries.flatMap((q) => [
    { label: `${q.queue} p50`, value: q.queueingP50 ?? 0 },
    { label: `${q.queue} p95`, value: q.queueingP95 ?? 0, color: "#b7791f" },
  ]);
  const waits = records
    .filter((r) => r.queueingSeconds !== null && r.queueingSeconds !== undefined)
    .map((r) => ({ time: r.endedAt, value: r.queueingSeconds, label: `${r.namespace}/${r.name}` }))
    .sort((a, b) => Date.parse(a.time) - Date.parse(b.time));
  const held = gpusOverTime(records);
  body.replaceChildren(
    h("p", { class: "muted", id: "history-count" }, `${records.length} records`),
    h("section", { class: "card" }, h("h2", {}, "Queueing time per queue (seconds)"),
      queueBars.length ? barChart(queueBars, { testid: "queueing-per-queue" }) : h("p", { class: "muted" }, "No records.")),
    h("section", { class: "card" }, h("h2", {}, "Queueing time of each job, by when it ended"), timeSeries(waits, { unit: " s", testid: "queueing-over-time" })),
    h("section", { class: "card" }, h("h2", {}, "GPUs held by recorded jobs over time"),
      held.length ? timeSeries(held, { step: true, testid: "gpus-over-time" }) : h("p", { class: "muted" }, "No recorded job held a GPU.")),
    records.length
      ? table(
          ["Namespace", "Name", "Queue", "Phase", "Queued (s)", "Ran (s)", "Ended"],
          records.map((r) =>
            h(
              "tr",
              { "data-record": `${r.namespace}/${r.name}` },
              h("td", { class: "namespace" }, r.namespace),
              h("td", { class: "name" }, r.name),
              h("td", { class: "queue" }, r.queue),
              h("td", {}, phaseBadge(r.phase)),
              h("td", {}, r.queueingSeconds?.toFixed(2) ?? "—"),
              h("td", {}, r.runSeconds?.toFixed(2) ?? "—"),
              h("td", {}, new Date(r.endedAt).toLocaleString()),
            ),
          ),
        )
      : h("p", { class: "muted", id: "no-records" }, "No records match."),
  );
}

export function historyPage(view, onRefused) {
  const body = h("div", { id: "history-body" }, h("p", { class: "muted" }, "Loading history…"));
  let stopped = false;
  async function load() {
    try {
      const answer = await getJson(historyPath());
      if (!stopped) draw(body, answer);
    } catch (error) {
      onRefused(error);
      if (!stopped) body.replaceChildren(errorBox(error));
    }
  }
  function input(name, placeholder) {
    const field = h("input", { name, value: filters[name], placeholder });
    field.addEventListener("change", () => {
      filters[name] = field.value.trim();
      load();
    });
    return h("label", {}, name, field);
  }
  view.replaceChildren(
    h("h1", {}, "History"),
    h("form", { class: "filters", id: "history-filters", onsubmit: (event) => event.preventDefault() },
      input("namespace", "all namespaces"), input("queue", "any"), input("phase", "any")),
    body,
  );
  // History changes only when a job ends or is deleted: read once per visit (and on each filter change).
  load();
  return () => {
    stopped = true;
  };
}
