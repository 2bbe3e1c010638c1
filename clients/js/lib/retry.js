// What to do after a socket closes: a pure function of the close and the last error event, so it
// is tested like a codec. Close codes: docs/PROTOCOL.md.

/** The close codes a client acts on. */
export const CloseCode = Object.freeze({
  NORMAL: 1000,
  GOING_AWAY: 1001,
  ABNORMAL: 1006,
  POLICY: 1008,
  INTERNAL: 1011,
  SERVICE_RESTART: 1012,
  TRY_AGAIN_LATER: 1013,
  TAKEN_OVER: 4000,
});

// A gateway going away on purpose (a drain, a rolling restart): the session goes on at whichever
// node answers, soon, after a random pause so a node's clients do not all come back at once.
const RESTART = new Set([CloseCode.GOING_AWAY, CloseCode.SERVICE_RESTART]);

// Error codes of a model or gateway that refused for good: a wrong key, an unknown model.
const FATAL_CODES = new Set(["UNAUTHENTICATED", "PERMISSION_DENIED", "NOT_FOUND", "FAILED_PRECONDITION", "INVALID_ARGUMENT"]);
// A model server that refused the gateway's credentials at the HTTP upgrade says so in the message.
const REFUSED = /\bHTTP (401|403|404)\b|api key|apikey|credential/i;

/**
 * Whether an error event means retrying cannot help, and why: null when it may.
 * @param {{code?: string, message?: string} | null} error
 * @returns {{kind: "model", code: string, message: string, hint: string} | null}
 */
export function fatalError(error) {
  if (!error) return null;
  const code = error.code || "";
  const message = error.message || "";
  if (!FATAL_CODES.has(code) && !REFUSED.test(message)) return null;
  const key = REFUSED.test(message) || code === "UNAUTHENTICATED" || code === "PERMISSION_DENIED";
  const hint = key
    ? "The model refused the gateway's credentials: check the API key the gateway runs with."
    : code === "NOT_FOUND"
      ? "The gateway's model is not available: check its --model."
      : "The model refused this session's request: check the gateway's model and settings.";
  return { kind: "model", code, message, hint };
}

/**
 * What to do after a close.
 * @param {{code: number, reason?: string, opened: boolean, lastError?: {code?: string, message?: string} | null}} close
 * @returns {{retry: "now" | "backoff" | "never", fatal: null | {kind: string, code: string, message: string, hint: string}}}
 */
export function afterClose({ code, reason = "", lastError = null }) {
  if (code === CloseCode.TAKEN_OVER) {
    return never("takenOver", "TAKEN_OVER", reason || "session taken over by a newer connection", "Another tab or device took this session over.");
  }
  if (code === CloseCode.POLICY) {
    return never("policy", "POLICY", reason || "policy violation", "The gateway ended the connection by its policy (idle, too slow, or too long).");
  }
  if (RESTART.has(code)) return { retry: "now", fatal: null };
  // A run that failed ends with its error event, then 1011 (or 1000): only then does the error
  // say why the socket closed (a bad client frame is answered with INVALID_ARGUMENT and goes on).
  const ended = code === CloseCode.INTERNAL || code === CloseCode.NORMAL;
  const fatal = ended ? fatalError(lastError) : null;
  if (fatal) return { retry: "never", fatal };
  return { retry: "backoff", fatal: null };
}

function never(kind, code, message, hint) {
  return { retry: "never", fatal: { kind, code, message, hint } };
}

/**
 * What an HTTP status of a probe after a refused upgrade means: null when retrying may help.
 * @param {number} status
 */
export function fatalStatus(status, message = "") {
  if (status === 401) {
    return { kind: "unauthorized", code: "UNAUTHENTICATED", message: message || "the token was refused", hint: "Sign in again: the token is missing, expired or not valid." };
  }
  if (status === 403) {
    return { kind: "forbidden", code: "PERMISSION_DENIED", message: message || "not allowed", hint: "This sign-in may not reach this user or session, or this page's origin is not allowed." };
  }
  if (status === 400) {
    return { kind: "badRequest", code: "INVALID_ARGUMENT", message: message || "bad request", hint: "Check the user and session ids (1–128 of A–Z a–z 0–9 . _ : @ -)." };
  }
  return null;
}

/** Capped exponential backoff with jitter; a connection that stayed up `healthyMs` resets it. */
export class Backoff {
  /** @param {{firstDelayMs?: number, maxDelayMs?: number, healthyMs?: number, random?: () => number}} [o] */
  constructor({ firstDelayMs = 500, maxDelayMs = 10000, healthyMs = 5000, random = Math.random } = {}) {
    this.first = firstDelayMs;
    this.max = maxDelayMs;
    this.healthyMs = healthyMs;
    this.random = random;
    this.delay = firstDelayMs;
    this.attempts = 0;
  }

  /** The connection opened at `openedAt` (ms) and closed at `closedAt`. */
  closed(openedAt, closedAt) {
    if (openedAt && closedAt - openedAt >= this.healthyMs) this.reset();
  }

  reset() {
    this.delay = this.first;
    this.attempts = 0;
  }

  /** The next delay: the current one, ±25%, which then doubles up to the cap. */
  next() {
    const base = this.delay;
    this.delay = Math.min(base * 2, this.max);
    this.attempts += 1;
    return Math.round(base * (0.75 + this.random() * 0.5));
  }

  /** A short random pause (up to a second) after a restart close; the backoff starts over. */
  soon() {
    this.reset();
    this.attempts = 1;
    return Math.round(this.random() * 1000);
  }
}
