// Sign-in for a gateway with tokens on (`--auth token`). The token arrives in the URL fragment
// (`#token=…`), which browsers never send to a server; it is kept in this tab's sessionStorage and
// removed from the address bar, so it is neither bookmarked nor shared with the link.

const KEY = "livegate.token";
const SUBPROTOCOL = "livegate.v1";

let mode = "none";
let token = null;

/** Asks the gateway whether it wants tokens; "none" when it cannot say (an older gateway). */
export async function loadAuthMode() {
  try {
    const response = await fetch("/api/config", { cache: "no-store" });
    if (response.ok) mode = (await response.json()).auth === "token" ? "token" : "none";
  } catch {
    mode = "none";
  }
  return mode;
}

/** The token from the fragment (moved to sessionStorage) or from an earlier visit in this tab. */
export function takeToken() {
  const fragment = new URLSearchParams(location.hash.slice(1));
  const fromUrl = fragment.get("token");
  if (fromUrl) {
    try {
      sessionStorage.setItem(KEY, fromUrl);
    } catch {
      /* storage disabled: the token lives as long as the page */
    }
    fragment.delete("token");
    const rest = fragment.toString();
    history.replaceState(null, "", `${location.pathname}${location.search}${rest ? "#" + rest : ""}`);
  }
  try {
    token = fromUrl || sessionStorage.getItem(KEY);
  } catch {
    token = fromUrl;
  }
  return token;
}

/** The token's claims ({sub, session_id?, exp}), or null for something that is not a JWT. */
export function claimsOf(jwt) {
  const parts = (jwt || "").split(".");
  if (parts.length !== 3) return null;
  try {
    const b64 = parts[1].replace(/-/g, "+").replace(/_/g, "/");
    const claims = JSON.parse(atob(b64 + "=".repeat((4 - (b64.length % 4)) % 4)));
    return claims && typeof claims.sub === "string" ? claims : null;
  } catch {
    return null;
  }
}

/** True when the token is past its expiry. */
export function expired(claims) {
  return !claims || (typeof claims.exp === "number" && claims.exp * 1000 <= Date.now());
}

/** Forgets the token (expired or refused). */
export function forgetToken() {
  token = null;
  try {
    sessionStorage.removeItem(KEY);
  } catch {
    /* nothing stored */
  }
}

export const authOn = () => mode === "token";

/** Headers for a REST call. */
export function authHeaders() {
  return authOn() && token ? { authorization: `Bearer ${token}` } : {};
}

/** WebSocket subprotocols: the token rides in one, and the gateway echoes livegate.v1. */
export function wsProtocols() {
  return authOn() && token ? [SUBPROTOCOL, `livegate.bearer.${token}`] : undefined;
}

/** A URL the browser fetches by itself (`<audio src>`, download links), with the token in it. */
export function withToken(url) {
  if (!authOn() || !token) return url;
  return `${url}${url.includes("?") ? "&" : "?"}token=${encodeURIComponent(token)}`;
}
