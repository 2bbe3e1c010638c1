// Signing in to a gateway with tokens on (`--auth token`). A token arrives in the URL fragment
// (`#token=…`, never sent to a server) or is pasted; it is kept in localStorage, so every tab of
// this gateway is signed in until the token expires or the user signs out (in any tab).

import { tokenClaims, tokenExpired } from "/lib/index.js";

const KEY = "livegate.token";

function stored() {
  try {
    return localStorage.getItem(KEY);
  } catch {
    return null; // storage off: the token lives as long as the page
  }
}

function store(token) {
  try {
    if (token) localStorage.setItem(KEY, token);
    else localStorage.removeItem(KEY);
  } catch {
    /* storage off */
  }
}

export class SignIn {
  /**
   * @param {object} o
   * @param {import("/lib/index.js").GatewayApi} o.api
   * @param {(why: string) => void} o.onChange  another tab signed in or out
   */
  constructor({ api, onChange }) {
    this.api = api;
    this.mode = "none";
    this.token = null;
    this.claims = null;
    this.expiredClaims = null; // the last token, when it expired: "expired at …" rather than "needed"
    window.addEventListener("storage", (e) => {
      if (e.key !== KEY || this.mode !== "token") return;
      this.use(e.newValue);
      onChange(this.token ? "signed in in another tab" : "signed out in another tab");
    });
  }

  get required() {
    return this.mode === "token";
  }

  get signedIn() {
    return !this.required || (this.claims !== null && !tokenExpired(this.claims));
  }

  /** Asks the gateway whether it wants tokens and takes the token from the link or storage. */
  async init() {
    this.mode = (await this.api.config()).auth === "token" ? "token" : "none";
    const fragment = new URLSearchParams(location.hash.slice(1));
    const fromUrl = fragment.get("token");
    if (fromUrl) {
      fragment.delete("token");
      const rest = fragment.toString();
      history.replaceState(null, "", `${location.pathname}${location.search}${rest ? "#" + rest : ""}`);
    }
    if (this.mode === "token") this.use(fromUrl || stored(), Boolean(fromUrl));
    return this.mode;
  }

  /** Uses `token` if it is a client token that has not expired; returns an error text if not. */
  use(token, save = false) {
    const claims = tokenClaims(token);
    if (!claims) {
      this.token = this.claims = null;
      return token ? "That is not a livegate token (a JWT with the user in `sub`)." : "";
    }
    if (tokenExpired(claims)) {
      this.expiredClaims = claims;
      this.token = this.claims = null;
      store(null);
      return "That token has expired.";
    }
    this.token = token;
    this.claims = claims;
    if (save) store(token);
    return "";
  }

  /** Signs in with a pasted token; returns an error text, or "" when signed in. */
  signIn(token) {
    const error = this.use(String(token || "").trim(), true);
    return error || (this.token ? "" : "Paste a token first.");
  }

  /** Forgets the token here and in every tab. */
  signOut() {
    this.token = this.claims = null;
    store(null);
  }

  /** Why a sign-in is needed now. */
  reason() {
    if (this.expiredClaims) return `Your sign-in expired at ${new Date(this.expiredClaims.exp * 1000).toLocaleTimeString()}.`;
    return "This gateway needs a sign-in.";
  }
}
