// One WebSocket at a time, reconnecting to the same URL with exponential backoff
// (0.5 s doubling, capped at 10 s).

const FIRST_DELAY_MS = 500;
const MAX_DELAY_MS = 10000;
// A connection that stayed open this long was healthy: the next failure starts the backoff over.
// (Resetting on open alone would retry every 0.5 s against a server that accepts, then fails.)
const HEALTHY_MS = 5000;
// Close codes after which retrying would be wrong: 4000 = the session was taken over by another
// tab (retrying would take it back, and the two tabs would fight), 1008 = policy violation.
const NO_RETRY = new Set([4000, 1008]);
// Close codes of a gateway going away on purpose (1001 going away, 1012 restarting, as in a
// rolling restart): the session carries on at whichever node answers next. The gateway was
// healthy, so the backoff starts over, after a random pause of up to this long so that a
// draining node's clients do not all reconnect in the same instant.
const RESTART = new Set([1001, 1012]);
const RESTART_JITTER_MS = 1000;

export class Connection {
  /**
   * @param {object} o
   * @param {() => string} o.url  the URL to (re)connect to, read at each attempt
   * @param {(status: "connecting"|"connected"|"disconnected") => void} o.onStatus
   * @param {(data: string|ArrayBuffer) => void} o.onMessage
   * @param {() => void} [o.onOpen]
   * @param {(close: {code:number, reason:string}, retryInMs: number|null) => void} [o.onClose]
   */
  constructor({ url, onStatus, onMessage, onOpen, onClose }) {
    this.url = url;
    this.onStatus = onStatus;
    this.onMessage = onMessage;
    this.onOpen = onOpen || (() => {});
    this.onClose = onClose || (() => {});
    this.ws = null;
    this.timer = 0;
    this.delay = FIRST_DELAY_MS;
    this.openedAt = 0;
  }

  get isOpen() {
    return this.ws !== null && this.ws.readyState === WebSocket.OPEN;
  }

  /** True while a socket exists or a retry is scheduled. */
  get isActive() {
    return this.ws !== null || this.timer !== 0;
  }

  connect() {
    this.stop();
    let ws;
    try {
      ws = new WebSocket(this.url());
    } catch (error) {
      this.onStatus("disconnected");
      this.onClose({ code: 0, reason: String(error.message || error) }, this.schedule());
      return;
    }
    ws.binaryType = "arraybuffer"; // binary frames are PCM: no Blob round trip
    this.ws = ws;
    this.onStatus("connecting");
    // Every handler checks `ws === this.ws`: a replaced socket's late events are ignored.
    ws.onopen = () => {
      if (ws !== this.ws) return;
      this.openedAt = performance.now();
      this.onStatus("connected");
      this.onOpen();
    };
    ws.onmessage = (e) => {
      if (ws === this.ws) this.onMessage(e.data);
    };
    ws.onclose = (e) => {
      if (ws !== this.ws) return;
      this.ws = null;
      if (this.openedAt && performance.now() - this.openedAt >= HEALTHY_MS) this.delay = FIRST_DELAY_MS;
      this.openedAt = 0;
      this.onStatus("disconnected");
      let retry = null;
      if (RESTART.has(e.code)) {
        this.delay = FIRST_DELAY_MS;
        retry = this.schedule(Math.round(Math.random() * RESTART_JITTER_MS));
      } else if (!NO_RETRY.has(e.code)) {
        retry = this.schedule();
      }
      this.onClose({ code: e.code, reason: e.reason }, retry);
    };
    ws.onerror = () => {}; // a close event always follows; it carries the details
  }

  /** Connects now with a fresh backoff (new session, modality change, "Reconnect" button). */
  reconnect() {
    this.delay = FIRST_DELAY_MS;
    this.connect();
  }

  /** Schedules the next attempt after `delay` (default: the backoff's, which then doubles). */
  schedule(delay) {
    if (delay === undefined) {
      delay = this.delay;
      this.delay = Math.min(delay * 2, MAX_DELAY_MS);
    }
    this.timer = setTimeout(() => {
      this.timer = 0;
      this.connect();
    }, delay);
    return delay;
  }

  /** Drops the socket (without reporting its close) and any scheduled retry. */
  stop() {
    clearTimeout(this.timer);
    this.timer = 0;
    const ws = this.ws;
    this.ws = null;
    this.openedAt = 0;
    if (ws) {
      ws.onopen = ws.onmessage = ws.onclose = ws.onerror = null;
      try {
        ws.close(1000, "client reconnecting");
      } catch {
        /* already closing */
      }
    }
  }

  /** Sends a text or binary frame; false (and nothing sent) when the socket is not open. */
  send(data) {
    if (!this.isOpen) return false;
    this.ws.send(data);
    return true;
  }
}
