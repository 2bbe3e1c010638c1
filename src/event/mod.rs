//! ADK's event model and its JSON: `Event`, `EventActions`, `Content`, `Part`, `Blob` and friends.
//!
//! Serialized like ADK's `model_dump_json(exclude_none=True, by_alias=True)`: camelCase keys, absent
//! values omitted, bytes as base64 (URL-safe with padding on output, either alphabet on input).

mod b64;
mod content;
#[allow(clippy::module_inception)]
mod event;

pub use b64::{decode_base64, encode_base64};
pub use content::{Blob, Content, FileData, FunctionCall, FunctionResponse, Part, Scheduling};
pub use event::{
    new_event_id, new_invocation_id, now_timestamp, Event, EventActions, ModalityTokenCount,
    NodeInfo, SessionResumptionUpdate, Transcription, UsageMetadata,
};
