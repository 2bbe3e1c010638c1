// The gateway's REST API (docs/PROTOCOL.md, "REST API"): sessions, their events and artifacts.
// Every call rejects with an ApiError carrying the HTTP status and the gateway's `error` message.

export class ApiError extends Error {
  /** @param {number} status  0 for a network error */
  constructor(status, message) {
    super(message);
    this.name = "ApiError";
    this.status = status;
  }
}

const seg = encodeURIComponent;
const PAGE = 200;

/** An http(s) base URL from a ws(s), http(s) or empty one (the page's own origin). */
export function httpBase(url) {
  const base = url || (globalThis.location ? globalThis.location.origin : "");
  return String(base).replace(/^ws(s?):/i, "http$1:").replace(/\/+$/, "");
}

export class GatewayApi {
  /**
   * @param {object} [o]
   * @param {string} [o.url]  the gateway (http(s):// or ws(s)://); default: this page's origin
   * @param {string | (() => string | null | Promise<string | null>) | null} [o.token]
   * @param {typeof fetch} [o.fetch]
   */
  constructor({ url, token = null, fetch: fetchFn } = {}) {
    this.base = httpBase(url);
    this.token = token;
    this.fetchFn = fetchFn || ((...args) => globalThis.fetch(...args));
  }

  async currentToken() {
    return typeof this.token === "function" ? await this.token() : this.token;
  }

  async request(method, path, body, as = "json") {
    const token = await this.currentToken();
    const headers = { accept: "application/json" };
    if (token) headers.authorization = `Bearer ${token}`;
    if (body !== undefined) headers["content-type"] = "application/json";
    let response;
    try {
      response = await this.fetchFn(this.base + path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body), cache: "no-store" });
    } catch (error) {
      throw new ApiError(0, `network error: ${(error && error.message) || error}`);
    }
    if (!response.ok) {
      let message = response.statusText || `HTTP ${response.status}`;
      try {
        const json = await response.json();
        if (json && json.error) message = json.error;
      } catch {
        /* not JSON: keep the status text */
      }
      throw new ApiError(response.status, message);
    }
    if (response.status === 204) return null;
    return as === "blob" ? response.blob() : response.json();
  }

  /** `{auth: "none"|"token"}`: whether the gateway wants tokens (asked without one). */
  async config() {
    const response = await this.fetchFn(this.base + "/api/config", { cache: "no-store" }).catch(() => null);
    if (!response || !response.ok) return { auth: "none" };
    return response.json();
  }

  /** The gateway's model: `{model, provider, voices, clientSettings, modality}`. */
  liveInfo() {
    return this.request("GET", "/api/live");
  }

  /** The user's sessions, most recently updated first: [{id, lastUpdateTime, state}]. */
  async listSessions(userId) {
    const body = await this.request("GET", `/api/sessions?user_id=${seg(userId)}`);
    return Array.isArray(body.sessions) ? body.sessions : [];
  }

  /** One page of a session's events: {events, total}. */
  async events(userId, sessionId, { offset = 0, limit = PAGE } = {}) {
    const body = await this.request("GET", `/api/sessions/${seg(userId)}/${seg(sessionId)}?offset=${offset}&limit=${limit}`);
    return { events: Array.isArray(body.events) ? body.events : [], total: Number(body.total) || 0, state: body.state || {} };
  }

  /**
   * The newest `max` events of a session, oldest first, and how many it has: {events, total}.
   * An unknown session is one with no history yet.
   */
  async history(userId, sessionId, { max = 1000 } = {}) {
    let first;
    try {
      first = await this.events(userId, sessionId, { offset: 0, limit: PAGE });
    } catch (error) {
      if (error instanceof ApiError && error.status === 404) return { events: [], total: 0 };
      throw error;
    }
    const total = first.total;
    const start = Math.max(0, total - max);
    let events = start === 0 ? first.events : [];
    let offset = start === 0 ? events.length : start;
    while (offset < total) {
      const page = await this.events(userId, sessionId, { offset, limit: PAGE });
      if (!page.events.length) break;
      events = events.concat(page.events);
      offset += page.events.length;
    }
    return { events, total };
  }

  /** Deletes a session and its events (its recordings stay, as in ADK). */
  async deleteSession(userId, sessionId) {
    await this.request("DELETE", `/api/sessions/${seg(userId)}/${seg(sessionId)}`);
  }

  /** The session's artifacts: [{name, versions, mimeType, size}]; none for an unknown session. */
  async artifacts(userId, sessionId) {
    try {
      const body = await this.request("GET", `/api/sessions/${seg(userId)}/${seg(sessionId)}/artifacts`);
      return Array.isArray(body.artifacts) ? body.artifacts : [];
    } catch (error) {
      if (error instanceof ApiError && error.status === 404) return [];
      throw error;
    }
  }

  /** The session as a replay bundle (a tar: events, recordings, bundle.json; docs/REPLAY.md). */
  exportBundle(userId, sessionId) {
    return this.request("GET", `/api/sessions/${seg(userId)}/${seg(sessionId)}/export`, undefined, "blob");
  }

  /**
   * Where the browser fetches one artifact version by itself (`<audio src>`, a download link);
   * the token rides in the query, which only recording GETs accept. `wav` wraps PCM for playback.
   */
  async artifactUrl(userId, sessionId, name, version, format = "wav") {
    const query = new URLSearchParams({ version: String(version), format });
    const token = await this.currentToken();
    if (token) query.set("token", token);
    return `${this.base}/api/sessions/${seg(userId)}/${seg(sessionId)}/artifacts/${seg(name)}?${query}`;
  }
}
