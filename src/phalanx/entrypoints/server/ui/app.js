// The dashboard's entry: login when the server asks for a token, then the page the address after '#' names.
// Routes: #/jobs, #/jobs/NAMESPACE/NAME, #/queues, #/nodes, #/datasets, #/history, #/sweeps, #/pipelineruns.
// Each page is a function (view, ...params) that draws into `view` and returns a function that stops its live
// updates when another page is shown.
import { ApiError, getJson, saveToken, savedToken } from "./api.js";
import { h, errorBox } from "./dom.js";
import { jobsPage } from "./pages/jobs.js";
import { jobPage } from "./pages/job.js";
import { queuesPage } from "./pages/queues.js";
import { nodesPage } from "./pages/nodes.js";
import { datasetsPage } from "./pages/datasets.js";
import { sweepsPage } from "./pages/sweeps.js";
import { pipelinesPage } from "./pages/pipelines.js";
import { historyPage } from "./pages/history.js";

const view = document.getElementById("view");
const logout = document.getElementById("logout");
let stop = () => {};

const ROUTES = [
  [/^#\/jobs\/([^/]+)\/([^/]+)$/, jobPage, "jobs"],
  [/^#\/jobs$/, jobsPage, "jobs"],
  [/^#\/queues$/, queuesPage, "queues"],
  [/^#\/nodes$/, nodesPage, "nodes"],
  [/^#\/datasets$/, datasetsPage, "datasets"],
  [/^#\/history$/, historyPage, "history"],
  [/^#\/sweeps$/, sweepsPage, "sweeps"],
  [/^#\/pipelineruns$/, pipelinesPage, "pipelineruns"],
];

// Whether the server serves this session: a cluster-scoped list any valid token may read. 401 means a token is
// needed (none, or a wrong one); a server run with --no-auth answers 200 without one.
async function probe() {
  try {
    await getJson("/queues?limit=1");
    return null;
  } catch (error) {
    if (error instanceof ApiError && error.status === 401) return error;
    return null; // another refusal (e.g. 403) is shown by the page that meets it
  }
}

function showLogin(refused) {
  stop();
  stop = () => {};
  logout.hidden = true;
  const input = h("input", { type: "password", id: "token", name: "token", placeholder: "phx_…", autocomplete: "off" });
  const message = refused && savedToken()
    ? errorBox(new Error(`The server refused this token: ${refused.message}`))
    : h("p", { class: "muted" }, "This server needs a token: ask its owner for one (phalanx token create).");
  const form = h(
    "form",
    { class: "card login", id: "login" },
    h("h1", {}, "Log in"),
    message,
    h("label", { for: "token" }, "API token"),
    input,
    h("button", { type: "submit" }, "Log in"),
  );
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    saveToken(input.value.trim());
    start();
  });
  view.replaceChildren(form);
  input.focus();
}

function route() {
  stop();
  stop = () => {};
  const address = location.hash || "#/jobs";
  for (const [pattern, page, nav] of ROUTES) {
    const match = address.match(pattern);
    if (!match) continue;
    for (const link of document.querySelectorAll("nav a")) link.classList.toggle("current", link.dataset.nav === nav);
    const params = match.slice(1).map(decodeURIComponent);
    stop = page(view, ...params, onRefused) || (() => {});
    return;
  }
  view.replaceChildren(errorBox(new Error(`No page at ${address}; pick a page above.`)));
}

// A page whose read was refused with 401 (the token was revoked meanwhile) sends the user back to login.
function onRefused(error) {
  if (error instanceof ApiError && error.status === 401) showLogin(error);
}

async function start() {
  const refused = await probe();
  if (refused) {
    showLogin(refused);
    return;
  }
  logout.hidden = !savedToken();
  route();
}

logout.addEventListener("click", () => {
  saveToken(null);
  start();
});
window.addEventListener("hashchange", route);
start();
