// Pipeline runs: each run's phase and its DAG, every step coloured by the state of its instances (a step feeds
// another through `after` or a {{steps.NAME.outputs...}} reference).
import { getJson, watchList } from "../api.js";
import { dag } from "../charts.js";
import { h, errorBox, phaseBadge } from "../dom.js";

const STATE_COLOURS = { Succeeded: "#1f8a4c", Failed: "#c33b32", Running: "#2f5bd3", Skipped: "#98a2b3", Cached: "#1f8a4c" };
const REFERENCE = /steps\.([a-z0-9]([-a-z0-9]*[a-z0-9])?)\./g;

function edges(steps) {
  const names = new Set(steps.map((s) => s.name));
  const found = [];
  for (const step of steps) {
    const sources = new Set(step.after || []);
    for (const match of JSON.stringify(step).matchAll(REFERENCE)) sources.add(match[1]);
    for (const source of sources) if (names.has(source) && source !== step.name) found.push([source, step.name]);
  }
  return found;
}

// A step's state: its only instance's phase, or (fanned out) how many instances are in each phase.
function stateOf(step, instances) {
  const mine = instances.filter((i) => i.step === step);
  if (!mine.length) return "Pending";
  const phases = new Set(mine.map((i) => i.phase));
  if (phases.size === 1) return mine[0].phase;
  return [...phases].map((p) => `${mine.filter((i) => i.phase === p).length} ${p}`).join(", ");
}

async function stepsOf(run, pipelines) {
  if (run.spec.pipelineSpec) return run.spec.pipelineSpec.steps;
  const ref = run.spec.pipelineRef.name;
  const key = `${run.metadata.namespace}/${ref}`;
  if (!pipelines.has(key)) {
    pipelines.set(key, (await getJson(`/namespaces/${encodeURIComponent(run.metadata.namespace)}/pipelines/${encodeURIComponent(ref)}`)).spec.steps);
  }
  return pipelines.get(key);
}

async function runCard(run, pipelines) {
  const { namespace, name } = run.metadata;
  const status = run.status || {};
  const card = h("section", { class: "card", "data-run": `${namespace}/${name}` }, h("h2", {}, `${namespace}/${name} `, phaseBadge(status.phase || "Pending")));
  if (status.message) card.append(h("p", { class: "muted" }, status.message));
  try {
    const steps = await stepsOf(run, pipelines);
    const nodes = steps.map((step) => {
      const state = stateOf(step.name, status.instances || []);
      return { name: step.name, state, color: STATE_COLOURS[state] };
    });
    card.append(dag(nodes, edges(steps), { testid: `dag-${name}` }));
  } catch (error) {
    card.append(errorBox(error));
  }
  return card;
}

export function pipelinesPage(view, onRefused) {
  const body = h("div", { id: "runs-body" }, h("p", { class: "muted" }, "Loading pipeline runs…"));
  const pipelines = new Map();
  view.replaceChildren(h("h1", {}, "Pipeline runs"), body);
  return watchList(
    "/pipelineruns",
    async (list) => {
      const cards = await Promise.all(list.items.map((run) => runCard(run, pipelines)));
      body.replaceChildren(...(cards.length ? cards : [h("p", { class: "muted", id: "no-runs" }, "No pipeline runs.")]));
    },
    (error) => {
      onRefused(error);
      body.replaceChildren(errorBox(error));
    },
  );
}
