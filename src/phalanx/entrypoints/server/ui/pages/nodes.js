// Nodes: each node's CPUs and memory, and a grid of its GPUs (model, memory, health, NVLink peers, and which
// job holds each one, from the placements of the jobs this token may read).
import { watchList, getJson } from "../api.js";
import { h, errorBox } from "../dom.js";

// node -> gpu index -> "namespace/name" of the job placed on it.
async function holders() {
  const held = {};
  try {
    const jobs = await getJson("/trainingjobs");
    for (const job of jobs.items) {
      for (const where of Object.values((job.status || {}).placements || {})) {
        for (const gpu of where.gpus || []) {
          (held[where.node] ||= {})[gpu] = `${job.metadata.namespace}/${job.metadata.name}`;
        }
      }
    }
  } catch (_) {
    /* a token for some namespaces only: GPUs show free/used as the node object says */
  }
  return held;
}

function gpuCell(gpu, holder) {
  const peers = Object.keys(gpu.nvlinks || {});
  const classes = ["gpu", holder ? "used" : "", gpu.healthy === false ? "unhealthy" : ""].filter(Boolean).join(" ");
  return h(
    "div",
    { class: classes, "data-gpu": gpu.index, title: gpu.problem || "" },
    h("strong", {}, `GPU ${gpu.index}`),
    h("div", {}, gpu.model || "unknown"),
    h("div", {}, gpu.memory ? `${Math.round(gpu.memory / 2 ** 30)} GiB` : ""),
    h("div", { class: "health" }, gpu.healthy === false ? `unhealthy: ${gpu.problem || "?"}` : "healthy"),
    h("div", { class: "holder" }, holder || "free"),
    peers.length ? h("div", { class: "muted" }, `NVLink: ${peers.join(",")}`) : null,
  );
}

function nodeCard(node, held) {
  const name = node.metadata.name;
  const status = node.status || {};
  const gpus = status.gpus || [];
  return h(
    "section",
    { class: "card", "data-node": name },
    h("h2", {}, name, (node.spec || {}).unschedulable ? " (unschedulable)" : ""),
    h("p", { class: "muted" }, `${(status.cpus || []).length} CPUs, ${Math.round((status.memory || 0) / 2 ** 30)} GiB memory, ${gpus.length} GPUs`),
    gpus.length ? h("div", { class: "gpu-grid" }, gpus.map((gpu) => gpuCell(gpu, (held[name] || {})[gpu.index]))) : null,
  );
}

export function nodesPage(view, onRefused) {
  const body = h("div", { id: "nodes-body" }, h("p", { class: "muted" }, "Loading nodes…"));
  view.replaceChildren(h("h1", {}, "Nodes"), body);
  return watchList(
    "/nodes",
    async (list) => {
      const held = await holders();
      body.replaceChildren(...(list.items.length ? list.items.map((node) => nodeCard(node, held)) : [h("p", { class: "muted" }, "No nodes.")]));
    },
    (error) => {
      onRefused(error);
      body.replaceChildren(errorBox(error));
    },
  );
}
