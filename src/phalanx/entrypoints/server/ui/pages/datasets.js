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

// One node's cache as GET /nodes/NAME/caches answers it: use against capacity, its entries, counters by Dataset.
function cacheCard(name, cache) {
  const entries = cache.entries || [];
  const counters = Object.entries(cache.counters || {});
  const capacity = cache.capacity ? ` of ${size(cache.capacity)}` : "";
  return h(
    "section",
    { class: "card", "data-cache-node": name },
    h("h2", {}, `Cache of ${name}`),
    h("p", { class: "muted used" }, `${size(cache.used)} used${capacity}, ${entries.length} entries`),
    entries.length
      ? table(
          ["Dataset", "Key", "Size", "State", "Pinned by"],
          entries.map((e) =>
            h(
              "tr",
              { "data-entry": e.key },
              h("td", { class: "dataset" }, e.dataset),
              h("td", {}, String(e.key).slice(0, 19)),
              h("td", {}, size(e.bytes)),
              h("td", { class: "state" }, e.state),
              h("td", {}, (e.pinnedBy || []).join(", ") || "—"),
            ),
          ),
        )
      : h("p", { class: "muted" }, "Empty."),
    counters.length
      ? table(
          ["Dataset", "Hits", "Misses", "From cache", "Fetched", "Evictions"],
          counters.map(([dataset, c]) =>
            h(
              "tr",
              { "data-counters": dataset },
              h("td", {}, dataset),
              h("td", { class: "hits" }, c.hits),
              h("td", { class: "misses" }, c.misses),
              h("td", {}, size(c.bytesFromCache)),
              h("td", {}, size(c.bytesFetched)),
              h("td", {}, c.evictions),
            ),
          ),
        )
      : null,
  );
}

async function cachesOf(nodes) {
  const sections = [];
  for (const node of nodes) {
    const name = node.metadata.name;
    try {
      sections.push(cacheCard(name, await getJson(`/nodes/${encodeURIComponent(name)}/caches`)));
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
