// The one way pages talk to the server: GET under the API prefix with the session's token, a refusal as an
// ApiError carrying the server's own sentence, and `watchList` / `watchObject`, where live updates come from.
export const PREFIX = "/apis/phalanx.dev/v1alpha1";
const TOKEN_KEY = "phalanx.token";
const POLL_MS = 2000;

export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

export function savedToken() {
  return sessionStorage.getItem(TOKEN_KEY);
}

export function saveToken(token) {
  if (token) sessionStorage.setItem(TOKEN_KEY, token);
  else sessionStorage.removeItem(TOKEN_KEY);
}

function headers() {
  const token = savedToken();
  return token ? { Authorization: `Bearer ${token}` } : {};
}

async function refusal(response) {
  // Every refusal of the API is a Status whose message is one sentence; anything else is named by its code.
  let message = `${response.status} ${response.statusText}`;
  try {
    const body = await response.json();
    if (body && body.message) message = body.message;
  } catch (_) {
    /* not JSON: keep the code */
  }
  return new ApiError(response.status, message);
}

export async function getJson(path) {
  const response = await fetch(PREFIX + path, { headers: headers() });
  if (!response.ok) throw await refusal(response);
  return response.json();
}

// Streams a text route (a followed log): onText(text) with each piece as it arrives, until the server ends the
// response or `signal` aborts it. A refusal is thrown as an ApiError before any text.
export async function streamText(path, onText, signal) {
  const response = await fetch(PREFIX + path, { headers: headers(), signal });
  if (!response.ok) throw await refusal(response);
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  for (;;) {
    const { value, done } = await reader.read();
    if (done) {
      const rest = decoder.decode();
      if (rest) onText(rest);
      return;
    }
    const text = decoder.decode(value, { stream: true });
    if (text) onText(text);
  }
}

// Calls onList(list) now and whenever the list changes, onError(error) when a read fails; returns a function
// that stops it. The list is read once, then followed through the watch route (`?watch=true`: server-sent
// events read with fetch streaming, since EventSource cannot send the Authorization header); a server whose list
// path answers no event stream is polled every 2 s instead. Which one runs is written on <body data-live>.
export function watchList(path, onList, onError) {
  let stopped = false;
  let timer = null;
  const aborter = new AbortController();
  const objects = new Map();
  const key = (obj) => `${obj.metadata.namespace || ""}/${obj.metadata.name}`;
  const current = () => ({ items: [...objects.values()].sort((a, b) => key(a).localeCompare(key(b))) });
  // A burst of events (every object ADDED when a watch starts) is drawn once, not once per event.
  let pending = null;
  const changed = () => {
    pending ||= setTimeout(() => {
      pending = null;
      if (!stopped) onList(current());
    }, 100);
  };

  async function relist() {
    const list = await getJson(path);
    objects.clear();
    for (const obj of list.items) objects.set(key(obj), obj);
    if (!stopped) onList({ ...list, items: current().items });
  }

  async function poll() {
    document.body.dataset.live = "poll";
    try {
      await relist();
    } catch (error) {
      if (!stopped) onError(error);
    }
    if (!stopped) timer = setTimeout(poll, POLL_MS);
  }

  async function follow() {
    try {
      await relist();
      const response = await fetch(PREFIX + path + (path.includes("?") ? "&" : "?") + "watch=true", {
        headers: headers(),
        signal: aborter.signal,
      });
      if (!response.ok) throw await refusal(response);
      if (!(response.headers.get("content-type") || "").startsWith("text/event-stream")) {
        poll(); // no watch route here: the list path answered a list
        return;
      }
      document.body.dataset.live = "watch";
      await readEvents(response, (type, obj) => {
        if (type === "DELETED") objects.delete(key(obj));
        else if (type === "ADDED" || type === "MODIFIED") objects.set(key(obj), obj);
        else return; // BOOKMARK: the connection is alive, nothing changed
        changed();
      });
    } catch (error) {
      if (stopped || error.name === "AbortError") return;
      onError(error);
    }
    // The stream ended (server restart, timeout) or failed: start again, from a fresh list.
    if (!stopped) timer = setTimeout(follow, POLL_MS);
  }

  follow();
  return () => {
    stopped = true;
    clearTimeout(timer);
    clearTimeout(pending);
    aborter.abort();
  };
}

// Server-sent events of a fetch response: onEvent(type, object) for each `event:` / `data:` block.
async function readEvents(response, onEvent) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += decoder.decode(value, { stream: true }).replace(/\r\n?/g, "\n"); // SSE allows CRLF and CR too
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      let type = "message";
      const data = [];
      for (const line of block.split("\n")) {
        if (line.startsWith("event:")) type = line.slice(6).trim();
        else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
      }
      if (data.length) onEvent(type, JSON.parse(data.join("\n")));
    }
  }
}

// One object (a job page): onObject(obj) every 2 s while the page shows it.
export function watchObject(path, onObject, onError) {
  let stopped = false;
  let timer = null;
  async function tick() {
    try {
      const obj = await getJson(path);
      if (!stopped) onObject(obj);
    } catch (error) {
      if (!stopped) onError(error);
    }
    if (!stopped) timer = setTimeout(tick, POLL_MS);
  }
  tick();
  return () => {
    stopped = true;
    clearTimeout(timer);
  };
}
