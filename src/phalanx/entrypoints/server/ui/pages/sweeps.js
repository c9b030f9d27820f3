// Sweeps: each Sweep's phase, trial counts and best trial, and its trials table (number, phase, parameters,
// objective value), best first marked.
import { watchList } from "../api.js";
import { h, errorBox, number, phaseBadge, table } from "../dom.js";

function sweepCard(sweep) {
  const { namespace, name } = sweep.metadata;
  const status = sweep.status || {};
  const counts = status.trials || {};
  const best = status.bestTrial;
  const objective = (sweep.spec || {}).objective || {};
  const results = [...(status.results || [])].sort((a, b) => a.number - b.number);
  return h(
    "section",
    { class: "card", "data-sweep": `${namespace}/${name}` },
    h("h2", {}, `${namespace}/${name} `, phaseBadge(status.phase || "Pending")),
    h(
      "dl",
      { class: "facts" },
      h("dt", {}, "Objective"), h("dd", {}, `${objective.direction || ""} ${objective.metric || ""}`),
      h("dt", {}, "Trials"),
      h("dd", { class: "counts" }, `${counts.succeeded || 0} succeeded, ${counts.running || 0} running, ${counts.failed || 0} failed, ${counts.stopped || 0} stopped`),
      h("dt", {}, "Best"),
      h("dd", { class: "best", "data-best": best ? best.number : "" }, best ? `trial ${best.number}: ${number(best.value)} with ${JSON.stringify(best.parameters)}` : "none yet"),
    ),
    results.length
      ? table(
          ["Trial", "Phase", "Parameters", "Value"],
          results.map((r) =>
            h(
              "tr",
              { "data-trial": r.number, class: best && best.number === r.number ? "best" : "" },
              h("td", {}, `${r.number}${best && best.number === r.number ? " ★" : ""}`),
              h("td", { class: "trial-phase" }, r.phase),
              h("td", {}, Object.entries(r.parameters || {}).map(([k, v]) => `${k}=${v}`).join(", ")),
              h("td", { class: "value" }, number(r.value)),
            ),
          ),
        )
      : h("p", { class: "muted" }, "No trials yet."),
  );
}

export function sweepsPage(view, onRefused) {
  const body = h("div", { id: "sweeps-body" }, h("p", { class: "muted" }, "Loading sweeps…"));
  view.replaceChildren(h("h1", {}, "Sweeps"), body);
  return watchList(
    "/sweeps",
    (list) =>
      body.replaceChildren(...(list.items.length ? list.items.map(sweepCard) : [h("p", { class: "muted", id: "no-sweeps" }, "No sweeps.")])),
    (error) => {
      onRefused(error);
      body.replaceChildren(errorBox(error));
    },
  );
}
