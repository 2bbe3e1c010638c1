//! The send loop: live requests from the client, to the model connection; and its shortcut, which
//! forwards media-only requests from the sender's task.

use std::sync::Arc;

use crate::signal::Signal;
use serde_json::{Map, Value};
use tokio::sync::{mpsc, oneshot};

use super::audio_cache::{AudioCache, AudioSide};
use super::hooks::{FlowHooks, Screened};
use super::FlowItem;
use crate::event::{Blob, Event, FunctionResponse};
use crate::live::{LiveRequest, LiveRequestReceiver, Shortcut};
use crate::model::LiveInput;

/// An event the send loop hands to the flow to commit (and maybe yield), and the ack that it was
/// committed. Boxed: these are rare, and a channel allocates room for 32 messages up front on
/// every connection.
pub(crate) type PersistRequest = Box<(FlowItem, oneshot::Sender<()>)>;

/// What the send loop reads: the client's requests and the flow's own inputs (tool responses).
/// Handed back when the loop ends, so a reconnect goes on with both.
#[derive(Debug)]
pub(crate) struct SendInputs {
    pub requests: LiveRequestReceiver,
    pub internal: mpsc::Receiver<LiveInput>,
}

/// What the send loop needs besides its channels.
#[derive(Debug, Clone)]
pub(crate) struct SendContext {
    pub invocation_id: String,
    pub record_audio: bool,
    pub cache: AudioCache,
    pub persist: mpsc::Sender<PersistRequest>,
    pub stop: Signal,
    pub hooks: Arc<dyn FlowHooks>,
}

impl SendContext {
    /// The model input for a client's media chunk, recorded first when the run records audio.
    fn media(&self, blob: Blob) -> LiveInput {
        if self.record_audio {
            self.cache.push(AudioSide::Input, &blob);
        }
        LiveInput::Realtime(blob)
    }
}

/// Forwards requests to the model until the queue closes, the model goes away or `stop` fires;
/// hands the inputs back so a reconnect can go on with them.
pub(crate) async fn send_loop(
    mut inputs: SendInputs,
    model: mpsc::Sender<LiveInput>,
    ctx: SendContext,
) -> SendInputs {
    // Made once, not per request: a pinned wait polled again costs an atomic load.
    let stopped = ctx.stop.fired();
    tokio::pin!(stopped);
    let _shortcut = inputs.requests.open_shortcut(Arc::new(MediaShortcut {
        model: model.clone(),
        ctx: ctx.clone(),
    }));
    loop {
        let request = tokio::select! {
            biased;
            () = &mut stopped => return inputs,
            Some(input) = inputs.internal.recv() => {
                if !forward(&ctx, &model, input).await {
                    return inputs;
                }
                continue;
            }
            request = inputs.requests.recv() => request,
        };
        // Until this request is through, media takes the queue behind it, not the shortcut.
        let _in_hand = inputs.requests.in_hand();
        ctx.hooks.fan_out(&request);
        let is_function_response = request
            .content
            .as_ref()
            .is_some_and(|c| c.parts.iter().any(|p| p.function_response.is_some()));
        let creates_content_event = request.content.is_some()
            && !request.close
            && !request.partial
            && !is_function_response;
        if let Some(delta) = &request.state_delta {
            if !creates_content_event {
                let mut event = Event::new(&ctx.invocation_id, "user");
                event.actions.state_delta = delta.clone();
                if !persist(&ctx, event, false).await {
                    return inputs;
                }
            }
        }
        if request.close {
            return inputs;
        }

        let realtime = if request.activity_start {
            Some(LiveInput::ActivityStart)
        } else if request.activity_end {
            Some(LiveInput::ActivityEnd)
        } else if request.audio_stream_end {
            Some(LiveInput::AudioStreamEnd)
        } else {
            request.blob.map(|blob| ctx.media(blob))
        };
        if let Some(input) = realtime {
            if !forward(&ctx, &model, input).await {
                return inputs;
            }
        }

        // Content is handled in addition to the realtime branch, as ADK does.
        if let Some(mut content) = request.content {
            if is_function_response && content.parts.iter().all(|p| p.function_response.is_some()) {
                let responses: Vec<FunctionResponse> = content
                    .parts
                    .into_iter()
                    .filter_map(|p| p.function_response)
                    .collect();
                if !forward(&ctx, &model, LiveInput::ToolResponse(responses)).await {
                    return inputs;
                }
                continue;
            }
            if content.role.as_deref().is_none_or(str::is_empty) {
                content.role = Some("user".into());
            }
            if creates_content_event {
                let mut event = Event::new(&ctx.invocation_id, "user");
                event.content = Some(content.clone());
                event.actions.state_delta = request
                    .state_delta
                    .unwrap_or_else(Map::<String, Value>::new);
                if !persist(&ctx, event, false).await {
                    return inputs;
                }
            }
            if ctx.hooks.screens_user() {
                match ctx.hooks.screen_user(&content).await {
                    Screened::Block(blocked) => {
                        // A callback answered instead: the model never sees this content.
                        if !persist(&ctx, blocked, true).await {
                            return inputs;
                        }
                        continue;
                    }
                    Screened::Proceed(Some(changes)) => {
                        if !persist(&ctx, changes, true).await {
                            return inputs;
                        }
                    }
                    Screened::Proceed(None) => {}
                }
            }
            let input = LiveInput::Content {
                content,
                turn_complete: !request.partial,
            };
            if !forward(&ctx, &model, input).await {
                return inputs;
            }
        }
    }
}

/// What the send loop does with a media-only request, done by the task that sends it.
#[derive(Debug)]
struct MediaShortcut {
    model: mpsc::Sender<LiveInput>,
    ctx: SendContext,
}

impl Shortcut for MediaShortcut {
    fn try_forward(&self, request: LiveRequest) -> Option<LiveRequest> {
        if self.ctx.stop.is_fired() {
            return Some(request);
        }
        // Room first: a request given back must not have been copied or recorded yet.
        let Ok(permit) = self.model.try_reserve() else {
            return Some(request);
        };
        self.ctx.hooks.fan_out(&request);
        if let Some(blob) = request.blob {
            permit.send(self.ctx.media(blob));
        }
        None
    }
}

async fn forward(ctx: &SendContext, model: &mpsc::Sender<LiveInput>, input: LiveInput) -> bool {
    ctx.stop.send_unless_fired(model, input).await
}

/// Commits an event through the flow (yielding it too when `emit`) and waits until it is committed.
async fn persist(ctx: &SendContext, event: Event, emit: bool) -> bool {
    let (ack, committed) = oneshot::channel();
    let request = Box::new((FlowItem { event, emit }, ack));
    if !ctx.stop.send_unless_fired(&ctx.persist, request).await {
        return false;
    }
    tokio::select! {
        biased;
        _ = ctx.stop.fired() => false,
        done = committed => done.is_ok(),
    }
}
