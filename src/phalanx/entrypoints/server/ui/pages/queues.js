// Queues: each queue's usage against its quota (a bar per resource), its cohort and borrowing limit, and the jobs
// it holds back with the sentence why each waits.
import { watchList, getJson } from "../api.js";
import { barChart } from "../charts.js";
import { h, queueOf, errorBox, table } from "../dom.js";

const UNITS = { cpu: (m) => m / 1000, memory: (b) => b / 2 ** 30, gpu: (g) => g };
const LABELS = { cpu: "cpu (cores)", memory: "memory (GiB)", gpu: "gpu" };

// Quota and usage amounts come as Kubernetes quantities ("500m", "4Gi") or numbers; the model stores millicores
// and bytes, so parse both forms.
function amount(resource, value) {
  if (value === undefined || value === null) return undefined;
  if (typeof value === "number") return resource === "cpu" ? value * 1000 : value;
  const match = String(value).match(/^([0-9.]+)([a-zA-Z]*)$/);
  if (!match) return undefined;
  const number = parseFloat(match[1]);
  const suffix = { m: 1e-3, k: 1e3, K: 1e3, M: 1e6, G: 1e9, T: 1e12, Ki: 2 ** 10, Mi: 2 ** 20, Gi: 2 ** 30, Ti: 2 ** 40 }[match[2]] ?? 1;
  return resource === "cpu" ? number * suffix * 1000 : number * suffix;
}

function usageBars(queue) {
  const quota = (queue.spec || {}).quota || {};
  const usage = (queue.status || {}).usage || {};
  return ["cpu", "memory", "gpu"]
    .filter((r) => quota[r] !== undefined || usage[r] !== undefined)
    .map((r) => {
      const used = UNITS[r](amount(r, usage[r]) || 0);
      const max = quota[r] !== undefined ? UNITS[r](amount(r, quota[r])) : undefined;
      return { label: LABELS[r], value: used, max, color: max !== undefined && used > max ? "#b7791f" : "#2f5bd3" };
    });
}

function queueCard(queue, waiting) {
  const name = queue.metadata.name;
  const spec = queue.spec || {};
  const status = queue.status || {};
  const bars = usageBars(queue);
  const held = waiting.filter((job) => queueOf(job) === name);
  return h(
    "section",
    { class: "card", "data-queue": name },
    h("h2", {}, name),
    h(
      "dl",
      { class: "facts" },
      h("dt", {}, "Admitted"), h("dd", { class: "admitted" }, status.admitted || 0),
      h("dt", {}, "Pending"), h("dd", { class: "pending" }, status.pending || 0),
      h("dt", {}, "Cohort"), h("dd", {}, spec.cohort || "none"),
      h("dt", {}, "Borrowing limit"), h("dd", {}, spec.borrowingLimit ? JSON.stringify(spec.borrowingLimit) : "—"),
      h("dt", {}, "Weight"), h("dd", {}, spec.weight ?? 1),
    ),
    bars.length ? barChart(bars, { testid: `usage-${name}` }) : h("p", { class: "muted" }, "No quota: not limited."),
    held.length
      ? table(
          ["Waiting job", "Why"],
          held.map((job) =>
            h(
              "tr",
              { "data-waiting": `${job.metadata.namespace}/${job.metadata.name}` },
              h("td", {}, h("a", { href: `#/jobs/${job.metadata.namespace}/${job.metadata.name}` }, `${job.metadata.namespace}/${job.metadata.name}`)),
              h("td", { class: "why" }, job.status.message || ""),
            ),
          ),
        )
      : h("p", { class: "muted" }, "No job waits in this queue."),
  );
}

export function queuesPage(view, onRefused) {
  const body = h("div", { id: "queues-body" }, h("p", { class: "muted" }, "Loading queues…"));
  view.replaceChildren(h("h1", {}, "Queues"), body);
  return watchList(
    "/queues",
    async (list) => {
      // The jobs that wait, to say why under their queue; a token that may not list every namespace sees none.
      let waiting = [];
      let note = null;
      try {
        const jobs = await getJson("/trainingjobs");
        waiting = jobs.items.filter((job) => ["Pending", "Queued"].includes((job.status || {}).phase || "Pending"));
      } catch (error) {
        note = h("p", { class: "muted" }, `Waiting jobs are not shown: ${error.message}`);
      }
      const queues = list.items.length
        ? list.items.map((queue) => queueCard(queue, waiting))
        : [h("p", { class: "muted" }, "No Queue objects: every job uses the default queue, limited by the nodes only.")];
      body.replaceChildren(...(note ? [note] : []), ...queues);
    },
    (error) => {
      onRefused(error);
      body.replaceChildren(errorBox(error));
    },
  );
}
