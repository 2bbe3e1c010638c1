//! livegate: a bidirectional live-streaming gateway re-implementing Google ADK's live runtime.
