// Client tokens (docs/SECURITY.md): a JWT whose `sub` is the user id, maybe with `session_id`, and
// `exp`. Read here only to know who is signed in and until when; the gateway checks the signature.

/**
 * The claims of a client token ({sub, session_id?, exp?}), or null for something that is not one.
 * @param {string | null | undefined} jwt
 */
export function tokenClaims(jwt) {
  const parts = String(jwt || "").split(".");
  if (parts.length !== 3) return null;
  try {
    const b64 = parts[1].replace(/-/g, "+").replace(/_/g, "/");
    const claims = JSON.parse(atob(b64 + "=".repeat((4 - (b64.length % 4)) % 4)));
    return claims && typeof claims.sub === "string" ? claims : null;
  } catch {
    return null;
  }
}

/** True when the claims are missing or past their expiry (`skewSeconds` early). */
export function tokenExpired(claims, now = Date.now(), skewSeconds = 0) {
  return !claims || (typeof claims.exp === "number" && (claims.exp - skewSeconds) * 1000 <= now);
}
