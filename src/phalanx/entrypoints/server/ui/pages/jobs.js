// The jobs list: every job the token may read, filtered by namespace and label (asked of the server) and by
// queue and phase (applied here), redrawn whenever watchList reports a change.
import { watchList } from "../api.js";
import { h, queueOf, errorBox, phaseBadge, table } from "../dom.js";

const PHASES = ["Pending", "Queued", "Admitted", "Downloading", "Running", "Restarting", "Storing", "Succeeded",
  "Failed", "Preempted", "Halting", "Halted"];

// Kept across visits of the page, so going back from a job keeps the filters.
const filters = { namespace: "", label: "", queue: "", phase: "" };

function listPath() {
  const where = filters.namespace ? `/namespaces/${encodeURIComponent(filters.namespace)}/trainingjobs` : "/trainingjobs";
  return filters.label ? `${where}?labelSelector=${encodeURIComponent(filters.label)}` : where;
}

function replicaCount(job) {
  return Object.values(job.spec.replicas || {}).reduce((sum, role) => sum + (role.count || 0), 0);
}

function row(job) {
  const { namespace, name } = job.metadata;
  const status = job.status || {};
  const phase = status.phase || "Pending";
  return h(
    "tr",
    { "data-job": `${namespace}/${name}` },
    h("td", { class: "namespace" }, namespace),
    h("td", { class: "name" }, h("a", { href: `#/jobs/${encodeURIComponent(namespace)}/${encodeURIComponent(name)}` }, name)),
    h("td", { class: "queue" }, queueOf(job)),
    h("td", { class: "phase-cell" }, phaseBadge(phase)),
    h("td", { class: "replicas" }, replicaCount(job)),
    h("td", { class: "message muted" }, status.message || ""),
  );
}

export function jobsPage(view, onRefused) {
  const body = h("div", { id: "jobs-body" }, h("p", { class: "muted" }, "Loading jobs…"));
  const count = h("span", { class: "muted", id: "job-count" });
  const queueSelect = h("select", { name: "queue" }, h("option", { value: "" }, "any"));
  let stopWatch = () => {};
  let lastList = null;

  function draw() {
    if (!lastList) return;
    const queues = [...new Set(lastList.items.map((job) => queueOf(job)))].sort();
    const current = queueSelect.value;
    queueSelect.replaceChildren(h("option", { value: "" }, "any"), ...queues.map((q) => h("option", { value: q }, q)));
    queueSelect.value = queues.includes(current) ? current : "";
    const shown = lastList.items.filter(
      (job) =>
        (!filters.queue || queueOf(job) === filters.queue) &&
        (!filters.phase || ((job.status || {}).phase || "Pending") === filters.phase),
    );
    count.textContent = `${shown.length} of ${lastList.items.length} jobs`;
    body.replaceChildren(
      shown.length
        ? table(["Namespace", "Name", "Queue", "Phase", "Replicas", "Message"], shown.map(row))
        : h("p", { class: "muted", id: "no-jobs" }, "No jobs match."),
    );
  }

  function watch() {
    stopWatch();
    lastList = null;
    stopWatch = watchList(
      listPath(),
      (list) => {
        lastList = list;
        draw();
      },
      (error) => {
        onRefused(error);
        body.replaceChildren(errorBox(error));
      },
    );
  }

  function input(name, placeholder) {
    const field = h("input", { name, value: filters[name], placeholder });
    field.addEventListener("change", () => {
      filters[name] = field.value.trim();
      watch();
    });
    return h("label", {}, name, field);
  }

  const phaseSelect = h("select", { name: "phase" }, h("option", { value: "" }, "any"), PHASES.map((p) => h("option", { value: p }, p)));
  phaseSelect.value = filters.phase;
  phaseSelect.addEventListener("change", () => {
    filters.phase = phaseSelect.value;
    draw();
  });
  queueSelect.addEventListener("change", () => {
    filters.queue = queueSelect.value;
    draw();
  });
  view.replaceChildren(
    h("h1", {}, "Jobs ", count),
    h(
      "form",
      { class: "filters", id: "job-filters", onsubmit: (event) => event.preventDefault() },
      input("namespace", "all namespaces"),
      h("label", {}, "queue", queueSelect),
      h("label", {}, "phase", phaseSelect),
      input("label", "key=value"),
    ),
    body,
  );
  watch();
  return () => stopWatch();
}
