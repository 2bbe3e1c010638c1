//! The send loop: live requests from the client, to the model connection; and its media
//! shortcut, which forwards media-only requests from the sender's task.

use std::sync::Arc;

use crate::byte_channel::TrySendError;
use crate::latch::Latch;
use serde_json::{Map, Value};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;

use super::audio_cache::{AudioCache, AudioSide};
use super::hooks::{FlowHooks, Screened};
use super::FlowItem;
use crate::byte_channel::Weigh;
use crate::event::{Blob, Content, Event};
use crate::live::queue::Shortcut;
use crate::live::{LiveRequest, LiveRequestReceiver};
use crate::model::{InputSender, LiveInput};

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

/// When the user's latest turn the model has not begun to answer went up: set by the send loop
/// when it forwards a turn's end (typed content that completes a turn, `activity_end`), cleared by
/// the flow at the model's first answer. The flow bounds the wait for that answer with it, and
/// knows a connection that ends in between left a turn unanswered.
#[derive(Debug, Clone)]
pub(crate) struct TurnClock(Arc<watch::Sender<Option<Instant>>>);

impl TurnClock {
    /// A clock, and the receiver that wakes when a turn goes up.
    pub(crate) fn new() -> (Self, watch::Receiver<Option<Instant>>) {
        let (tx, rx) = watch::channel(None);
        (TurnClock(Arc::new(tx)), rx)
    }

    /// A turn's end went to the model (the first unanswered one keeps its time).
    pub(crate) fn sent(&self) {
        self.0.send_if_modified(|at| {
            let first = at.is_none();
            at.get_or_insert_with(Instant::now);
            first
        });
    }

    /// The model began to answer, or the turn was given up: nothing is awaited.
    pub(crate) fn answered(&self) {
        self.0.send_if_modified(|at| at.take().is_some());
    }

    /// When the turn awaiting its answer went up, if one does.
    pub(crate) fn pending(&self) -> Option<Instant> {
        *self.0.borrow()
    }
}

/// What the send loop needs besides its channels.
#[derive(Debug, Clone)]
pub(crate) struct SendContext {
    pub invocation_id: String,
    pub save_live_blob: bool,
    pub cache: AudioCache,
    pub persist: mpsc::Sender<PersistRequest>,
    pub stop: Latch,
    pub hooks: Arc<dyn FlowHooks>,
    pub turns: TurnClock,
}

impl SendContext {
    /// The model input for a client's media chunk, recorded first when the run records audio.
    fn media(&self, blob: Blob) -> LiveInput {
        if self.save_live_blob {
            self.cache.push(AudioSide::Input, &blob);
        }
        LiveInput::Realtime(blob)
    }
}

/// The media shortcut: while the send loop runs, a media-only request (a microphone frame) goes
/// from the task that read it straight into the model connection's input, instead of through
/// the request queue and a wake-up of the send loop's task, the hottest path of a live run.
/// Media takes the queue instead whenever a queued request is still on its way (the queue's
/// `Order`), when the model's input is full, or while the loop is stopping, so the model sees
/// requests in the order they were sent.
#[derive(Debug)]
struct MediaShortcut {
    model: InputSender,
    ctx: SendContext,
}

impl Shortcut for MediaShortcut {
    fn try_forward(&self, request: LiveRequest) -> Option<LiveRequest> {
        if self.ctx.stop.is_fired() {
            return Some(request);
        }
        // Room first: a request given back must not have been recorded yet.
        let Ok(permit) = self.model.try_reserve(request.weight()) else {
            return Some(request);
        };
        self.ctx.hooks.fan_out(&request);
        if let Some(blob) = request.blob {
            permit.send(self.ctx.media(blob));
        }
        None
    }
}

/// Forwards requests to the model until the queue closes, the model goes away or `stop` fires;
/// hands the inputs back so a reconnect can go on with them.
pub(crate) async fn send_loop(
    mut inputs: SendInputs,
    model: InputSender,
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
        if !send_request(&ctx, &model, request).await {
            return inputs;
        }
    }
}

/// Sends one client request on: its state changes committed, its realtime input and its
/// content forwarded. False once the loop ends (the request closes the queue, `stop` fired, or
/// the model is gone).
async fn send_request(ctx: &SendContext, model: &InputSender, request: LiveRequest) -> bool {
    ctx.hooks.fan_out(&request);
    let is_function_response = request
        .content
        .as_ref()
        .is_some_and(|c| c.parts.iter().any(|p| p.function_response.is_some()));
    let creates_content_event =
        request.content.is_some() && !request.close && !request.partial && !is_function_response;
    if let Some(delta) = &request.state_delta {
        if !creates_content_event {
            let mut event = Event::new(&ctx.invocation_id, "user");
            event.actions.state_delta = delta.clone();
            if !persist(ctx, event, false).await {
                return false;
            }
        }
    }
    if request.close {
        return false;
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
        if !forward(ctx, model, input).await {
            return false;
        }
    }

    // Content is handled in addition to the realtime branch, as ADK does.
    let Some(content) = request.content else {
        return true;
    };
    if is_function_response && content.parts.iter().all(|p| p.function_response.is_some()) {
        let responses = content
            .parts
            .into_iter()
            .filter_map(|p| p.function_response)
            .collect();
        return forward(ctx, model, LiveInput::ToolResponse(responses)).await;
    }
    let event_delta = creates_content_event.then(|| request.state_delta.unwrap_or_default());
    send_content(ctx, model, content, event_delta, !request.partial).await
}

/// Sends user content on: committed as the user's event (with `event_delta`, when it makes one),
/// screened by the before-model callbacks, then forwarded. False once the loop ends.
async fn send_content(
    ctx: &SendContext,
    model: &InputSender,
    mut content: Content,
    event_delta: Option<Map<String, Value>>,
    turn_complete: bool,
) -> bool {
    if content.role.as_deref().is_none_or(str::is_empty) {
        content.role = Some("user".into());
    }
    if let Some(delta) = event_delta {
        let mut event = Event::new(&ctx.invocation_id, "user");
        event.content = Some(content.clone());
        event.actions.state_delta = delta;
        if !persist(ctx, event, false).await {
            return false;
        }
    }
    if ctx.hooks.screens_user() {
        match ctx.hooks.screen_user(&content).await {
            // A callback answered instead: the model never sees this content.
            Screened::Block(blocked) => return persist(ctx, blocked, true).await,
            Screened::Proceed(Some(changes)) => {
                if !persist(ctx, changes, true).await {
                    return false;
                }
            }
            Screened::Proceed(None) => {}
        }
    }
    let input = LiveInput::Content {
        content,
        turn_complete,
    };
    forward(ctx, model, input).await
}

/// Sends an input to the model once its input has room for its bytes and a slot; false once
/// `stop` fires or the model is gone.
async fn forward(ctx: &SendContext, model: &InputSender, input: LiveInput) -> bool {
    if ctx.stop.is_fired() {
        return false;
    }
    let ends_turn = matches!(
        input,
        LiveInput::Content {
            turn_complete: true,
            ..
        } | LiveInput::ActivityEnd
    );
    let sent = match model.try_send(input) {
        Ok(()) => true,
        Err(TrySendError::Closed(_)) => false,
        Err(TrySendError::Full(input)) => tokio::select! {
            biased;
            () = ctx.stop.fired() => false,
            sent = model.send(input) => sent.is_ok(),
        },
    };
    if sent && ends_turn {
        ctx.turns.sent();
    }
    sent
}

/// Commits an event through the flow (yielding it too when `emit`) and waits until it is committed.
async fn persist(ctx: &SendContext, event: Event, emit: bool) -> bool {
    let (ack, committed) = oneshot::channel();
    let item = FlowItem {
        event,
        emit,
        store: true,
    };
    let request = Box::new((item, ack));
    if !ctx.stop.send_unless_fired(&ctx.persist, request).await {
        return false;
    }
    tokio::select! {
        biased;
        _ = ctx.stop.fired() => false,
        done = committed => done.is_ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Blob;
    use crate::live::bounded_live_request_queue;
    use crate::live::flow::NoHooks;
    use std::time::Duration;

    fn image(bytes: usize) -> LiveRequest {
        LiveRequest {
            blob: Some(Blob::new(vec![0u8; bytes].into(), "image/jpeg")),
            ..LiveRequest::default()
        }
    }

    // Paused time: "blocked" means blocked until every task is idle, however busy the machine.
    #[tokio::test(start_paused = true)]
    async fn a_model_that_does_not_read_holds_no_more_bytes_than_the_bounds() {
        // A model whose input channel has room for 256 messages, and never reads it.
        let (tx, mut model) = crate::byte_channel::channel(256, 256 * 1024);
        let (queue, requests) = bounded_live_request_queue(256, 512 * 1024);
        let (persist, _persisted) = mpsc::channel(16);
        let (_internal_tx, internal) = mpsc::channel(16);
        let stop = Latch::new();
        let ctx = SendContext {
            invocation_id: "e-1".into(),
            save_live_blob: false,
            cache: AudioCache::new(None),
            persist,
            stop: stop.clone(),
            hooks: Arc::new(NoHooks),
            turns: TurnClock::new().0,
        };
        let inputs = SendInputs { requests, internal };
        let task = tokio::spawn(send_loop(inputs, tx, ctx));
        // 64 KiB images, as fast as they are taken: the model's inbox takes 4 (256 KiB), the
        // queue 8 (512 KiB), the send loop holds one waiting for room; then nothing more.
        let mut accepted = 0;
        for _ in 0..100 {
            let sent =
                tokio::time::timeout(Duration::from_millis(200), queue.send(image(64 * 1024)));
            match sent.await {
                Ok(Ok(())) => accepted += 1,
                _ => break,
            }
        }
        assert_eq!(accepted, 4 + 8 + 1);
        // Once the model reads, the rest flows on.
        for _ in 0..4 {
            assert!(matches!(model.recv().await, Some(LiveInput::Realtime(_))));
        }
        tokio::time::timeout(Duration::from_secs(5), queue.send(image(64 * 1024)))
            .await
            .expect("room again")
            .unwrap();
        stop.fire();
        let _ = tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .unwrap();
    }
}
