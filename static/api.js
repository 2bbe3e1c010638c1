// The gateway's REST API (docs/PROTOCOL.md, "REST API"): a user's sessions, a session's events, its artifacts.
// Every call rejects with an ApiError carrying the HTTP status and the gateway's `error` message.

export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

const seg = encodeURIComponent;

async function getJson(url) {
  let response;
  try {
    response = await fetch(url, { headers: { accept: "application/json" }, cache: "no-store" });
  } catch (error) {
    throw new ApiError(0, `network error: ${error.message || error}`);
  }
  if (!response.ok) {
    let message = response.statusText || `HTTP ${response.status}`;
    try {
      const body = await response.json();
      if (body && body.error) message = body.error;
    } catch {
      /* not JSON: keep the status text */
    }
    throw new ApiError(response.status, message);
  }
  return response.json();
}

/** The user's sessions, most recently updated first: [{id, lastUpdateTime, state, …}]. */
export async function listSessions(userId) {
  const body = await getJson(`/api/sessions?user_id=${seg(userId)}`);
  return Array.isArray(body.sessions) ? body.sessions : [];
}

const PAGE = 200;

/**
 * The newest `max` events of a session, oldest first, and how many it has in all:
 * {events, total}. An unknown session (404) is a session with no history yet.
 */
export async function loadHistory(userId, sessionId, max = 600) {
  const base = `/api/sessions/${seg(userId)}/${seg(sessionId)}`;
  let first;
  try {
    first = await getJson(`${base}?offset=0&limit=${PAGE}`);
  } catch (error) {
    if (error.status === 404) return { events: [], total: 0 };
    throw error;
  }
  const total = Number(first.total) || 0;
  const start = Math.max(0, total - max);
  let events = start === 0 ? first.events || [] : [];
  let offset = start === 0 ? events.length : start;
  while (offset < total) {
    const page = await getJson(`${base}?offset=${offset}&limit=${PAGE}`);
    const got = page.events || [];
    if (!got.length) break;
    events = events.concat(got);
    offset += got.length;
  }
  return { events, total };
}

/** The session's artifacts: [{name, versions: [0, …], mimeType}]; none for an unknown session. */
export async function listArtifacts(userId, sessionId) {
  try {
    const body = await getJson(`/api/sessions/${seg(userId)}/${seg(sessionId)}/artifacts`);
    return Array.isArray(body.artifacts) ? body.artifacts : [];
  } catch (error) {
    if (error.status === 404) return [];
    throw error;
  }
}

/** Where to download one version of an artifact; `wav` wraps PCM in a WAV header for playback. */
export function artifactUrl(userId, sessionId, name, version, format = "wav") {
  const query = new URLSearchParams({ version: String(version), format });
  return `/api/sessions/${seg(userId)}/${seg(sessionId)}/artifacts/${seg(name)}?${query}`;
}
