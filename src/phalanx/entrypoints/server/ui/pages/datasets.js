// Datasets and node caches: each Dataset's phase, version, size and the nodes whose cache holds it; then each
// node's cache (GET /nodes/NAME/caches where the server serves it).
import { getJson, watchList } from "../api.js";
import { h, errorBox, table } from "../dom.js";

function size(bytes) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let value = bytes || 0;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return `${unit ? value.toFixed(1) : value} ${units[unit]}`;
}

function datasetRow(dataset) {
  const { namespace, name } = dataset.metadata;
  const status = dataset.status || {};
  return h(
    "tr",
    { "data-dataset": `${namespace}/${name}` },
    h("td", { class: "namespace" }, namespace),
    h("td", { class: "name" }, name),
    h("td", { class: "phase-cell" }, status.phase || "Pending"),
    h("td", { class: "version" }, status.version ? status.version.slice(0, 19) : "—"),
    h("td", { class: "size" }, size(status.bytes)),
    h("td", { class: "files" }, status.files || 0),
    h("td", { class: "nodes" }, (status.nodes || []).join(", ") || "none"),
  );
}

async function cachesOf(nodes) {
  const sections = [];
  for (const node of nodes) {
    const name = node.metadata.name;
    try {
      const caches = await getJson(`/nodes/${encodeURIComponent(name)}/caches`);
      const entries = caches.items || [];
      sections.push(
        h(
          "section",
          { class: "card", "data-cache-node": name },
          h("h2", {}, `Cache of ${name}`),
          entries.length
            ? table(["Entry", "Size"], entries.map((e) => h("tr", {}, h("td", {}, e.name || e.dataset || e.version || JSON.stringify(e)), h("td", {}, size(e.bytes)))))
            : h("p", { class: "muted" }, "Empty."),
        ),
      );
    } catch (error) {
      sections.push(h("section", { class: "card", "data-cache-node": name }, h("h2", {}, `Cache of ${name}`), errorBox(error)));
    }
  }
  return sections;
}

export function datasetsPage(view, onRefused) {
  const body = h("div", { id: "datasets-body" }, h("p", { class: "muted" }, "Loading datasets…"));
  const caches = h("div", { id: "caches-body" });
  view.replaceChildren(h("h1", {}, "Datasets"), body, caches);
  return watchList(
    "/datasets",
    async (list) => {
      body.replaceChildren(
        list.items.length
          ? table(["Namespace", "Name", "Phase", "Version", "Size", "Files", "Cached on"], list.items.map(datasetRow))
          : h("p", { class: "muted", id: "no-datasets" }, "No datasets."),
      );
      try {
        caches.replaceChildren(...(await cachesOf((await getJson("/nodes")).items)));
      } catch (error) {
        caches.replaceChildren(h("p", { class: "muted", id: "caches-note" }, `Node caches are not shown: ${error.message}`));
      }
    },
    (error) => {
      onRefused(error);
      body.replaceChildren(errorBox(error));
    },
  );
}
