// livegate's browser client: a live session over WebSocket with typed ADK events, reconnection
// and resumption, the REST API, and tokens. Audio (microphone, playback) is the separate
// `./audio/index.js`, so a text-only app does not load it.

export { LiveSession, ID_PATTERN, newSessionId } from "./session.js";
export { GatewayApi, ApiError } from "./api.js";
export { AgentActivity } from "./activity.js";
export { typedEvents, transcript, transcriptToText, recordingOf, sampleRateOf, base64ToBytes, bytesToBase64, fromUser } from "./events.js";
export { afterClose, fatalError, fatalStatus, Backoff, CloseCode } from "./retry.js";
export { tokenClaims, tokenExpired } from "./token.js";
