//! ADK's live layer: `LiveRequest` / `LiveRequestQueue`, `RunConfig`, and the live flow that joins a
//! request queue to a model connection (send loop, receive loop, aggregation, audio recording).

pub mod flow;
pub(crate) mod queue;
mod run_config;
pub mod settings;

pub use queue::{
    bounded_live_request_queue, live_request_queue, LiveRequest, LiveRequestQueue,
    LiveRequestReceiver, QueueClosed, DEFAULT_QUEUE_CAPACITY, DEFAULT_QUEUE_MAX_BYTES,
};
pub use run_config::{AudioTally, OnReconnect, RunConfig};
