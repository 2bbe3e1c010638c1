//! The live flow: one agent's live conversation with a model, as a stream of events.
//!
//! A send loop task forwards client requests to the model; the stream itself reads the model's
//! responses and turns them into ADK events. Reconnects with the latest resumption handle on
//! `goAway` or a resumable drop; flushes every cached recording when it ends, whatever the reason.

mod audio_cache;
mod receive;
mod send;
#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::Duration;

use futures::Stream;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

pub use audio_cache::{AudioCache, AudioSide, RecordingTarget};
pub use receive::{ResponseProcessor, Step, FUNCTION_CALL_ID_PREFIX};

use crate::event::Event;
use crate::live::{LiveRequestReceiver, RunConfig};
use crate::model::{
    LiveConnectConfig, LiveConnection, LiveModel, LlmResponse, ModelError, SessionResumptionConfig,
};
use send::{send_loop, PersistRequest, SendContext};

/// Consecutive failed reconnects after which the run ends with an error (ADK's default).
pub const MAX_RECONNECT_ATTEMPTS: u32 = 5;

/// An event the flow produced, and whether the runner yields it (or only commits it).
#[derive(Debug, Clone, PartialEq)]
pub struct FlowItem {
    /// The event.
    pub event: Event,
    /// Yield to the caller (false: commit only, like ADK's user-content events).
    pub emit: bool,
}

impl FlowItem {
    fn emit(event: Event) -> Self {
        FlowItem { event, emit: true }
    }
}

/// Everything one agent's live flow needs.
#[derive(Debug, Clone)]
pub struct LiveFlow {
    /// The model to talk to.
    pub model: Arc<dyn LiveModel>,
    /// How to connect (built from the agent and the run config).
    pub connect_config: LiveConnectConfig,
    /// The run's settings.
    pub run_config: RunConfig,
    /// Where recordings go, and ids for events.
    pub target: RecordingTarget,
}

// A transient select result; boxing would cost an allocation per event.
#[allow(clippy::large_enum_variant)]
enum Next {
    Persist(PersistRequest),
    Model(Option<Result<LlmResponse, ModelError>>),
}

enum Outcome {
    /// The model ended the session (normally, or because the client closed).
    Ended,
    /// The model asked us to reconnect.
    GoAway,
    /// The connection failed.
    Failed(ModelError),
}

impl LiveFlow {
    /// Runs the flow until the client closes, the model ends, or an unrecoverable error (yielded as
    /// an error event). Requests come from `requests`.
    pub fn run(
        self,
        requests: LiveRequestReceiver,
    ) -> impl Stream<Item = FlowItem> + Send + 'static {
        async_stream::stream! {
            let LiveFlow { model, connect_config, run_config, target } = self;
            let record_audio = run_config.save_live_blob;
            let invocation_id = target.invocation_id.clone();
            let agent_name = target.agent_name.clone();
            let cache = AudioCache::default();
            let (persist_tx, mut persist_rx) = mpsc::channel::<PersistRequest>(16);
            let mut requests = Some(requests);
            let mut handle = connect_config.session_resumption.as_ref().and_then(|r| r.handle.clone());
            let mut failures = 0u32;
            let mut first_connect = true;

            loop {
                let Some(request_rx) = requests.take() else { break };
                let mut config = connect_config.clone();
                if let Some(h) = &handle {
                    config.session_resumption = Some(SessionResumptionConfig {
                        handle: Some(h.clone()),
                        ..config.session_resumption.unwrap_or_default()
                    });
                    config.history.clear(); // the model resumes its own context
                } else if !first_connect {
                    tracing::info!(invocation_id, "reconnecting without a resumption handle; replaying history");
                }
                first_connect = false;

                let LiveConnection { sender, mut receiver } = match model.connect(config).await {
                    Ok(connection) => connection,
                    Err(error) => {
                        failures += 1;
                        if handle.is_some() && failures <= MAX_RECONNECT_ATTEMPTS && error.is_resumable() {
                            tracing::warn!(%error, failures, invocation_id, "reconnect failed; retrying");
                            tokio::time::sleep(Duration::from_millis(100 * u64::from(failures))).await;
                            requests = Some(request_rx);
                            continue;
                        }
                        tracing::warn!(%error, invocation_id, "could not connect to the model");
                        yield FlowItem::emit(Event::error(&invocation_id, &agent_name, error.code(), error.to_string()));
                        drop(request_rx);
                        break;
                    }
                };
                // A connection counts as good once the model has said something; one that ends
                // at once still counts as a failure, so a model that keeps hanging up cannot spin.
                let mut responded = false;

                let stop = CancellationToken::new();
                let send_task = tokio::spawn(send_loop(request_rx, sender, SendContext {
                    invocation_id: invocation_id.clone(),
                    record_audio,
                    cache: cache.clone(),
                    persist: persist_tx.clone(),
                    stop: stop.clone(),
                }));
                let mut processor = ResponseProcessor::new(&invocation_id, &agent_name, record_audio);

                let outcome = loop {
                    let next = tokio::select! {
                        Some(request) = persist_rx.recv() => Next::Persist(request),
                        response = receiver.recv() => Next::Model(response),
                    };
                    let response = match next {
                        Next::Persist((event, ack)) => {
                            yield FlowItem { event, emit: false };
                            let _ = ack.send(());
                            continue;
                        }
                        Next::Model(None) => break Outcome::Ended,
                        Next::Model(Some(Err(error))) => break Outcome::Failed(error),
                        Next::Model(Some(Ok(response))) => {
                            if !responded {
                                responded = true;
                                failures = 0;
                            }
                            response
                        }
                    };
                    if let Some(new_handle) = response.session_resumption_update.as_ref().and_then(|u| u.new_handle.clone()) {
                        handle = Some(new_handle);
                    }
                    let go_away = response.go_away.is_some();
                    if record_audio {
                        for blob in response.content.iter().flat_map(|c| &c.parts).filter_map(|p| p.inline_data.as_ref()) {
                            cache.push(AudioSide::Output, blob);
                        }
                    }
                    for step in processor.process(response) {
                        match step {
                            Step::Emit(event) => yield FlowItem::emit(event),
                            Step::Flush { input, output } => {
                                for event in cache.flush(&target, input, output).await {
                                    yield FlowItem::emit(event);
                                }
                            }
                        }
                    }
                    if go_away {
                        break Outcome::GoAway;
                    }
                };

                stop.cancel();
                drop(receiver);
                match send_task.await {
                    Ok(request_rx) => requests = Some(request_rx),
                    Err(error) => tracing::error!(%error, invocation_id, "send loop failed"),
                }
                while let Ok((event, ack)) = persist_rx.try_recv() {
                    yield FlowItem { event, emit: false };
                    let _ = ack.send(());
                }
                let client_closed = requests.as_ref().is_none_or(LiveRequestReceiver::is_closed);
                match outcome {
                    Outcome::GoAway if !client_closed => {
                        tracing::info!(invocation_id, resumable = handle.is_some(), "model sent goAway; reconnecting");
                        continue;
                    }
                    Outcome::Failed(error) if !client_closed && handle.is_some() && error.is_resumable() => {
                        failures += 1;
                        if failures <= MAX_RECONNECT_ATTEMPTS {
                            tracing::warn!(%error, invocation_id, "model connection dropped; resuming");
                            continue;
                        }
                        yield FlowItem::emit(Event::error(&invocation_id, &agent_name, error.code(), error.to_string()));
                        break;
                    }
                    Outcome::Failed(error) if !client_closed => {
                        tracing::warn!(%error, invocation_id, "model connection failed");
                        yield FlowItem::emit(Event::error(&invocation_id, &agent_name, error.code(), error.to_string()));
                        break;
                    }
                    Outcome::Ended if !client_closed && handle.is_some() => {
                        failures += u32::from(!responded);
                        if failures <= MAX_RECONNECT_ATTEMPTS {
                            continue;
                        }
                        let message = "the model keeps closing the session";
                        yield FlowItem::emit(Event::error(&invocation_id, &agent_name, "UNAVAILABLE", message));
                        break;
                    }
                    _ => break,
                }
            }

            // Whatever ended the run, no recording is lost.
            if record_audio {
                for event in cache.flush(&target, true, true).await {
                    yield FlowItem::emit(event);
                }
            }
        }
    }
}
