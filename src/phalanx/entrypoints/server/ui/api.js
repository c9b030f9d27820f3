// The one way pages talk to the server: GET under the API prefix with the session's token, a refusal as an
// ApiError carrying the server's own sentence, and `watchList`, the single place live updates come from.
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

export async function getText(path) {
  const response = await fetch(PREFIX + path, { headers: headers() });
  if (!response.ok) throw await refusal(response);
  return response.text();
}

// Calls onList(list) now and whenever the list may have changed, onError(error) when a read fails; returns a
// function that stops it. Polls every 2 s for now: when the watch route (?watch=true, SSE read with fetch
// streaming) is served, this one function changes and no page does.
export function watchList(path, onList, onError) {
  let stopped = false;
  let timer = null;
  async function tick() {
    try {
      const list = await getJson(path);
      if (!stopped) onList(list);
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

// The same for one object (a job page): onObject(obj) every 2 s while the page shows it.
export function watchObject(path, onObject, onError) {
  return watchList(path, onObject, onError);
}
