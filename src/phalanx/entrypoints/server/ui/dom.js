// Building DOM nodes from data without innerHTML: text from the API is always set as text, never parsed as markup.
export function h(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

export function phaseBadge(phase) {
  return h("span", { class: `phase phase-${phase}`, "data-phase": phase }, phase);
}

export function errorBox(error) {
  return h("p", { class: "error", role: "alert" }, error.message || String(error));
}

export function table(headings, rows) {
  return h("table", {}, h("thead", {}, h("tr", {}, headings.map((text) => h("th", {}, text)))), h("tbody", {}, rows));
}

// The queue a job asked for (spec.scheduling.queue; "default" when it names none).
export function queueOf(job) {
  return ((job.spec || {}).scheduling || {}).queue || "default";
}

// A number as people read it: integers whole, others to 4 significant digits (0.0116, not 0.011600000000000001).
export function number(value) {
  if (typeof value !== "number") return value ?? "—";
  return Number.isInteger(value) ? String(value) : String(Number(value.toPrecision(4)));
}
