// Starts a real livegate gateway (on `sim`, in-memory stores, 127.0.0.1:0) for the Node tests:
// LIVEGATE_BIN names the binary (default: the workspace's target/debug/livegate).

import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import path from "node:path";

const here = path.dirname(fileURLToPath(import.meta.url));
const BIN = process.env.LIVEGATE_BIN || path.resolve(here, "../../../target/debug/livegate");
const START_TIMEOUT_MS = 20000;

const DEFAULTS = { bind: "127.0.0.1:0", "session-store": "memory:", "artifact-store": "memory:", "sim-pacing": "burst", "sim-reply-delay-ms": "0" };

/**
 * @param {Record<string, string>} [flags]  flags over the defaults (`{"sim-pacing": "realtime"}`)
 * @param {Record<string, string>} [env]
 * @returns {Promise<{url: string, addr: string, stop: () => Promise<void>, log: () => string}>}
 */
export async function startGateway(flags = {}, env = {}) {
  const args = Object.entries({ ...DEFAULTS, ...flags }).flatMap(([k, v]) => [`--${k}`, v]);
  const child = spawn(BIN, args, { env: { ...process.env, NO_COLOR: "1", RUST_LOG: "info", ...env }, stdio: ["ignore", "pipe", "pipe"] });
  let output = "";
  const addr = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`the gateway did not start in time:\n${output}`)), START_TIMEOUT_MS);
    const read = (chunk) => {
      output += chunk;
      const match = /listening on (127\.0\.0\.1:\d+)/.exec(output);
      if (match) {
        clearTimeout(timer);
        resolve(match[1]);
      }
    };
    child.stdout.on("data", read);
    child.stderr.on("data", read);
    child.on("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`the gateway exited (${code}):\n${output}`));
    });
  });
  const exited = new Promise((resolve) => child.on("exit", resolve));
  return {
    addr,
    url: `http://${addr}`,
    log: () => output,
    async stop() {
      if (child.exitCode !== null) return;
      child.kill("SIGTERM");
      const timer = setTimeout(() => child.kill("SIGKILL"), 10000);
      await exited;
      clearTimeout(timer);
    },
  };
}

/** Resolves with the first `type` event of `session` that `pred` accepts, or rejects after `ms`. */
export function next(session, type, pred = () => true, ms = 10000) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      off();
      reject(new Error(`no ${type} event within ${ms} ms`));
    }, ms);
    const off = session.on(type, (e) => {
      if (!pred(e)) return;
      clearTimeout(timer);
      off();
      resolve(e);
    });
  });
}

/** Collects every event of each type of `session`, by type. */
export function record(session, types) {
  const seen = {};
  for (const type of types) {
    seen[type] = [];
    session.on(type, (e) => seen[type].push(e));
  }
  return seen;
}

/** A client token signed with `secret` (HS256), as the gateway's `livegate token` mints them. */
export async function mintToken(secret, claims) {
  const { createHmac } = await import("node:crypto");
  const now = Math.floor(Date.now() / 1000);
  const b64 = (v) => Buffer.from(JSON.stringify(v)).toString("base64url");
  const body = `${b64({ alg: "HS256", typ: "JWT" })}.${b64({ iss: "livegate", iat: now, exp: now + 3600, ...claims })}`;
  return `${body}.${createHmac("sha256", secret).update(body).digest("base64url")}`;
}

/** Starts `livegate-mock-gemini` beside the gateway binary; resolves with its ws:// URL. */
export async function startMockGemini(args = []) {
  const bin = path.join(path.dirname(BIN), "livegate-mock-gemini");
  const child = spawn(bin, ["--port", "0", ...args], { stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, NO_COLOR: "1" } });
  let output = "";
  const url = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`mock-gemini did not start:\n${output}`)), START_TIMEOUT_MS);
    const read = (chunk) => {
      output += chunk;
      const match = /(127\.0\.0\.1:\d+)/.exec(output);
      if (match) {
        clearTimeout(timer);
        resolve(`ws://${match[1]}`);
      }
    };
    child.stdout.on("data", read);
    child.stderr.on("data", read);
  });
  const exited = new Promise((resolve) => child.on("exit", resolve));
  return {
    url,
    async stop() {
      if (child.exitCode === null) child.kill("SIGTERM");
      await exited;
    },
  };
}
