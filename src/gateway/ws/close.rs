//! The WebSocket close codes the gateway sends, in one place (RFC 6455 section 7.4.1, plus the
//! gateway's own 4000). 1012 and 1013 ask the client to reconnect; 4000 asks it not to.

/// The run ended normally, or the client's own close is echoed.
pub const NORMAL: u16 = 1000;
/// The client broke the WebSocket protocol (a reserved opcode, bad framing).
pub const PROTOCOL_ERROR: u16 = 1002;
/// A text frame that is not valid UTF-8.
pub const INVALID_PAYLOAD: u16 = 1007;
/// A policy was broken: the client stopped reading, stayed idle too long or reached the maximum
/// session duration.
pub const POLICY: u16 = 1008;
/// A message over the socket's size limit.
pub const TOO_BIG: u16 = 1009;
/// The gateway could not serve the connection (the live run could not start).
pub const INTERNAL: u16 = 1011;
/// The gateway is draining (SIGTERM): reconnect, to another node, and carry on.
pub const SERVICE_RESTART: u16 = 1012;
/// Try again later: the model is unavailable (its server kept failing or hanging up), or the
/// session store is, so the session's lease could not be taken or kept (an outage, not a
/// takeover). Reconnect with backoff.
pub const TRY_AGAIN_LATER: u16 = 1013;
/// The session was taken over by a newer connection: final, do not reconnect.
pub const TAKEN_OVER: u16 = 4000;
