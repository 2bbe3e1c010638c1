//! The live flow: one agent's live conversation with a model, as a stream of events.
//!
//! A send loop task forwards client requests to the model (realtime media past it, from the
//! sender's own task, while nothing sent earlier is still on its way); the stream itself reads
//! the model's responses and turns them into ADK events. Reconnects with the latest resumption
//! handle on `goAway` or a resumable drop; flushes every cached recording when it ends, whatever
//! the reason.

mod audio_cache;
mod hooks;
mod receive;
mod send;
mod spill;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use crate::signal::Signal;
use futures::Stream;
use tokio::sync::{mpsc, oneshot};
use tokio::task::{AbortHandle, JoinSet};
use tokio::time::Instant;

pub use audio_cache::{
    set_max_unsaved_bytes, AudioCache, AudioSide, RecordingTarget, DEFAULT_MAX_UNSAVED_BYTES,
    RECORDING_DROPPED,
};
pub use hooks::{FlowHooks, NoHooks, Screened};
pub use receive::{ResponseProcessor, Step, FUNCTION_CALL_ID_PREFIX};

use crate::event::{Content, Event};
use crate::live::{LiveRequestReceiver, RunConfig};
use crate::model::{
    LiveConnectConfig, LiveConnection, LiveInput, LiveModel, LlmResponse, ModelError, ModelMessage,
    SessionResumptionConfig,
};
use send::{send_loop, PersistRequest, SendContext, SendInputs};

/// Consecutive failed reconnects after which the run ends with an error (ADK's default).
pub const MAX_RECONNECT_ATTEMPTS: u32 = 5;

/// How long a flow keeps listening after a hand-off (transfer or `task_completed`) for the model
/// to finish its turn (ADK waits 1 s).
pub const DEFAULT_HANDOFF_DELAY: Duration = Duration::from_secs(1);

/// How long an answer under way may go on after the model's `goAway` before the flow ends it
/// (`interrupted`, `turnComplete`) and reconnects.
pub const GO_AWAY_ANSWER_GRACE: Duration = Duration::from_secs(2);

/// Name of the tool a sequential agent's sub-agents call when their task is done.
pub const TASK_COMPLETED: &str = "task_completed";

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

/// Why a flow ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FlowEndReason {
    /// The client closed the queue, or the model ended the session.
    Closed,
    /// An unrecoverable error (already yielded as an error event).
    Failed,
    /// The model transferred the conversation to this agent.
    Transfer(String),
    /// The agent called `task_completed`.
    TaskCompleted,
    /// A tool or callback ended the invocation.
    InvocationEnded,
    /// The single turn of a turn-based run is over.
    TurnDone,
}

/// How a flow ended, with the client's requests for whoever runs next.
#[derive(Debug)]
pub struct FlowEnd {
    /// Why.
    pub reason: FlowEndReason,
    /// The request queue, unless it was lost with a failed send loop.
    pub requests: Option<LiveRequestReceiver>,
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
    /// The agent's tools and callbacks.
    pub hooks: Arc<dyn FlowHooks>,
    /// Content the model answers right after connecting (not committed: it already is).
    pub prompt: Option<Content>,
    /// End after the first complete turn (turn-based runs).
    pub single_turn: bool,
    /// How long to keep listening after a hand-off.
    pub handoff_delay: Duration,
}

// A transient select result; boxing would cost an allocation per event.
#[allow(clippy::large_enum_variant)]
enum Next {
    Persist(PersistRequest),
    Model(Option<ModelMessage>),
    ToolsDone(Option<Event>),
    HandoffTimeout,
    GoAwayDue,
}

enum Outcome {
    /// The model ended the session (normally, or because the client closed).
    Ended,
    /// The model asked us to reconnect.
    GoAway,
    /// The connection failed.
    Failed(ModelError),
    /// A callback blocked the model's answer: reconnect afresh (ADK's RESTART).
    Restart,
    /// The flow is done for another reason.
    Done(FlowEndReason),
}

/// What a yielded function-response event means for the flow.
fn handoff_of(event: &Event) -> Option<FlowEndReason> {
    if let Some(target) = &event.actions.transfer_to_agent {
        return Some(FlowEndReason::Transfer(target.clone()));
    }
    event
        .function_responses()
        .iter()
        .any(|r| r.name == TASK_COMPLETED)
        .then_some(FlowEndReason::TaskCompleted)
}

impl LiveFlow {
    /// Runs the flow until the client closes, the model ends, the agent hands off, or an
    /// unrecoverable error (yielded as an error event). Requests come from `requests`; how the
    /// flow ended, and the requests, arrive on the returned receiver once the stream is done.
    pub fn run(
        self,
        requests: LiveRequestReceiver,
    ) -> (
        impl Stream<Item = FlowItem> + Send + 'static,
        oneshot::Receiver<FlowEnd>,
    ) {
        let (end_tx, end_rx) = oneshot::channel();
        (self.events(requests, end_tx), end_rx)
    }

    fn events(
        self,
        requests: LiveRequestReceiver,
        end_tx: oneshot::Sender<FlowEnd>,
    ) -> impl Stream<Item = FlowItem> + Send + 'static {
        async_stream::stream! {
            let LiveFlow { model, connect_config, run_config, target, hooks, prompt, single_turn, handoff_delay } = self;
            let save_live_blob = run_config.save_live_blob;
            let invocation_id = target.invocation_id.clone();
            let agent_name = target.agent_name.clone();
            let cache = AudioCache::new(
                target.artifacts.as_ref().and_then(|a| a.spool_dir()).map(Into::into),
            );
            let (persist_tx, mut persist_rx) = mpsc::channel::<PersistRequest>(16);
            // Tool responses and streaming-tool results go to the model through the send loop.
            let (internal_tx, internal_rx) = mpsc::channel::<LiveInput>(64);
            let mut inputs = Some(SendInputs { requests, internal: internal_rx });
            let mut tools: JoinSet<Option<Event>> = JoinSet::new();
            // Which tool task runs which call, so a `toolCallCancellation` can stop it.
            let mut running: HashMap<String, AbortHandle> = HashMap::new();
            let mut handle = connect_config.session_resumption.as_ref().and_then(|r| r.handle.clone());
            // A handle the run started with (stored with the session) may have expired or come
            // from a model that no longer knows it: refused, the history is replayed instead.
            let mut untried_handle = handle.is_some();
            let mut failures = 0u32;
            let mut first_connect = true;
            let mut reason = FlowEndReason::Closed;
            // A hand-off waits for the model's turn to end, at most until the deadline.
            let mut handoff: Option<(FlowEndReason, Instant)> = None;

            if let Some(prompt) = prompt {
                if hooks.screens_user() {
                    match hooks.screen_user(&prompt).await {
                        Screened::Block(blocked) => {
                            yield FlowItem::emit(blocked);
                            reason = FlowEndReason::TurnDone;
                        }
                        Screened::Proceed(Some(changes)) => yield FlowItem::emit(changes),
                        Screened::Proceed(None) => {}
                    }
                }
                if reason == FlowEndReason::Closed {
                    let _ = internal_tx.try_send(LiveInput::Content { content: prompt, turn_complete: true });
                }
            }

            while reason == FlowEndReason::Closed {
                let Some(send_inputs) = inputs.take() else { break };
                let mut config = connect_config.clone();
                if let Some(h) = &handle {
                    config.session_resumption = Some(SessionResumptionConfig {
                        handle: Some(h.clone()),
                        ..config.session_resumption.unwrap_or_default()
                    });
                    config.history.clear(); // the model resumes its own context
                } else {
                    // A fresh model session (the one the run started with may have been refused).
                    if let Some(resumption) = config.session_resumption.as_mut() {
                        resumption.handle = None;
                    }
                    if !first_connect {
                        tracing::info!(invocation_id, "reconnecting without a resumption handle; replaying history");
                    }
                }
                if !first_connect {
                    run_config.on_reconnect.reconnected();
                }
                first_connect = false;

                let LiveConnection { sender, mut receiver } = match model.connect(config).await {
                    Ok(connection) => connection,
                    Err(error) => {
                        failures += 1;
                        if handle.is_some() && failures <= MAX_RECONNECT_ATTEMPTS && error.is_resumable() {
                            tracing::warn!(%error, failures, invocation_id, "reconnect failed; retrying");
                            tokio::time::sleep(Duration::from_millis(100 * u64::from(failures))).await;
                            inputs = Some(send_inputs);
                            continue;
                        }
                        if std::mem::take(&mut untried_handle) {
                            tracing::info!(%error, invocation_id, "the model refused the stored resumption handle; replaying history");
                            handle = None;
                            failures = 0;
                            first_connect = true;
                            inputs = Some(send_inputs);
                            continue;
                        }
                        tracing::warn!(%error, invocation_id, "could not connect to the model");
                        yield FlowItem::emit(Event::error(&invocation_id, &agent_name, error.code(), error.to_string()));
                        inputs = Some(send_inputs);
                        reason = FlowEndReason::Failed;
                        break;
                    }
                };
                untried_handle = false;
                // A connection counts as good once the model has said something; one that ends
                // at once still counts as a failure, so a model that keeps hanging up cannot spin.
                let mut responded = false;

                let stop = Signal::new();
                let send_task = tokio::spawn(send_loop(send_inputs, sender, SendContext {
                    invocation_id: invocation_id.clone(),
                    save_live_blob,
                    cache: cache.clone(),
                    persist: persist_tx.clone(),
                    stop: stop.clone(),
                    hooks: hooks.clone(),
                }));
                let mut processor = ResponseProcessor::new(&invocation_id, &agent_name, save_live_blob);
                // The model's spoken answer so far, for after-model screening.
                let mut spoken = String::new();
                // Tool results went up and the model has not answered them yet: the turn that
                // ends now (Gemini 2.5 ends the tool-call turn before the results) is not the answer.
                let mut awaiting_answer = false;
                // The model is in the middle of an answer: if the connection ends now, the flow
                // ends the answer for it, so the client is not left waiting for its turn's end.
                let mut mid_answer = false;
                // After a `goAway` during an answer: when the flow stops waiting for its end.
                let mut go_away_by: Option<Instant> = None;

                let outcome = 'connection: loop {
                    let deadline = handoff.as_ref().map(|(_, at)| *at);
                    let next = tokio::select! {
                        Some(request) = persist_rx.recv() => Next::Persist(request),
                        Some(done) = tools.join_next(), if !tools.is_empty() => match done {
                            Ok(event) => Next::ToolsDone(event),
                            Err(error) if error.is_cancelled() => continue,
                            Err(error) => {
                                tracing::error!(%error, invocation_id, "a tool task failed");
                                continue;
                            }
                        },
                        () = sleep_until(deadline) => Next::HandoffTimeout,
                        () = sleep_until(go_away_by) => Next::GoAwayDue,
                        response = receiver.recv() => Next::Model(response),
                    };
                    let response = match next {
                        Next::Persist(request) => {
                            let (item, ack) = *request;
                            yield item;
                            let _ = ack.send(());
                            continue;
                        }
                        Next::ToolsDone(None) => continue,
                        Next::ToolsDone(Some(event)) => {
                            for response in event.function_responses() {
                                running.remove(response.id.as_deref().unwrap_or_default());
                            }
                            let responses: Vec<_> = event.function_responses().into_iter().cloned().collect();
                            let next_reason = handoff_of(&event);
                            yield FlowItem::emit(event);
                            // Committed: now the model may go on.
                            if internal_tx.send(LiveInput::ToolResponse(responses)).await.is_err() {
                                tracing::debug!(invocation_id, "tool response after the send loop ended");
                            }
                            awaiting_answer = true;
                            if hooks.invocation_ended() {
                                break Outcome::Done(FlowEndReason::InvocationEnded);
                            }
                            if let Some(next_reason) = next_reason {
                                tracing::info!(invocation_id, agent = agent_name, reason = ?next_reason, "agent hands off");
                                hooks.stop_tools().await;
                                handoff = Some((next_reason, Instant::now() + handoff_delay));
                            }
                            continue;
                        }
                        Next::HandoffTimeout => match handoff.take() {
                            Some((next_reason, _)) => break Outcome::Done(next_reason),
                            None => continue,
                        },
                        Next::GoAwayDue => break Outcome::GoAway,
                        Next::Model(None) if go_away_by.is_some() => break Outcome::GoAway,
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
                    for id in &response.tool_call_cancellations {
                        if let Some(task) = running.remove(id) {
                            tracing::info!(invocation_id, call_id = id, "the model cancelled a tool call");
                            task.abort();
                        }
                    }
                    let go_away = response.go_away.is_some();
                    let turn_over = response.turn_complete;
                    let answer_ends = response.turn_complete || response.interrupted;
                    let answering = response.content.is_some() || response.output_transcription.is_some();
                    let answered = awaiting_answer
                        && (response.content.is_some() || response.output_transcription.is_some());
                    if save_live_blob {
                        for blob in response.content.iter().flat_map(|c| &c.parts).filter_map(|p| p.inline_data.as_ref()) {
                            cache.push(AudioSide::Output, blob);
                        }
                    }
                    for step in processor.process(*response) {
                        let mut event = match step {
                            Step::Emit(event) => event,
                            Step::Flush { input, output } => {
                                for event in cache.flush(&target, input, output).await {
                                    yield FlowItem::emit(event);
                                }
                                continue;
                            }
                        };
                        match screen(&*hooks, &event, &mut spoken).await {
                            None => {}
                            Some(Blocked::Changes(changes)) => {
                                yield FlowItem::emit(event);
                                event = changes;
                            }
                            Some(Blocked::Follows(blocked)) => {
                                yield FlowItem::emit(event);
                                yield FlowItem::emit(blocked);
                                break 'connection Outcome::Restart;
                            }
                            Some(Blocked::Replaces(blocked)) => {
                                yield FlowItem::emit(blocked);
                                break 'connection Outcome::Restart;
                            }
                        }
                        let calls = event.function_calls();
                        if !calls.is_empty() {
                            let long_running = hooks.long_running_ids(&calls);
                            let ids: Vec<String> = calls.iter().filter_map(|c| c.id.clone()).collect();
                            event.long_running_tool_ids = Some(long_running);
                            let call_event = event.clone();
                            yield FlowItem::emit(event);
                            // Off the receive loop: audio keeps flowing while tools run.
                            let hooks = hooks.clone();
                            let to_model = internal_tx.clone();
                            let task = tools.spawn(async move { hooks.call_tools(call_event, to_model).await });
                            for id in ids {
                                running.insert(id, task.clone());
                            }
                            continue;
                        }
                        yield FlowItem::emit(event);
                    }
                    if answer_ends {
                        mid_answer = false;
                    } else if answering {
                        mid_answer = true;
                    }
                    // An answer under way gets a moment to finish on the old connection.
                    if go_away && mid_answer {
                        go_away_by.get_or_insert(Instant::now() + GO_AWAY_ANSWER_GRACE);
                    } else if go_away || (go_away_by.is_some() && !mid_answer) {
                        break Outcome::GoAway;
                    }
                    if answered {
                        awaiting_answer = false;
                    }
                    if turn_over && !awaiting_answer && tools.is_empty() {
                        if let Some((next_reason, _)) = handoff.take() {
                            break Outcome::Done(next_reason);
                        }
                        if single_turn {
                            break Outcome::Done(FlowEndReason::TurnDone);
                        }
                    }
                };

                // A connection that ended (or was given up) mid-answer: end the answer here.
                if mid_answer && matches!(outcome, Outcome::GoAway | Outcome::Failed(_) | Outcome::Ended) {
                    tracing::info!(invocation_id, "the model connection ended during an answer; ending it");
                    let ends = [
                        LlmResponse { interrupted: true, ..LlmResponse::default() },
                        LlmResponse { turn_complete: true, ..LlmResponse::default() },
                    ];
                    for response in ends {
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
                    }
                }
                stop.fire();
                drop(receiver);
                match send_task.await {
                    Ok(send_inputs) => inputs = Some(send_inputs),
                    Err(error) => tracing::error!(%error, invocation_id, "send loop failed"),
                }
                while let Ok(request) = persist_rx.try_recv() {
                    let (item, ack) = *request;
                    yield item;
                    let _ = ack.send(());
                }
                let client_closed = inputs.as_ref().is_none_or(|i| i.requests.is_closed());
                match outcome {
                    Outcome::Done(done) => {
                        reason = done;
                        break;
                    }
                    Outcome::Restart if !client_closed => {
                        tracing::info!(invocation_id, "a callback blocked the answer; starting a fresh model session");
                        handle = None;
                        continue;
                    }
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
                        reason = FlowEndReason::Failed;
                        break;
                    }
                    Outcome::Failed(error) if !client_closed => {
                        tracing::warn!(%error, invocation_id, "model connection failed");
                        yield FlowItem::emit(Event::error(&invocation_id, &agent_name, error.code(), error.to_string()));
                        reason = FlowEndReason::Failed;
                        break;
                    }
                    Outcome::Ended if !client_closed && handle.is_some() => {
                        failures += u32::from(!responded);
                        if failures <= MAX_RECONNECT_ATTEMPTS {
                            continue;
                        }
                        let message = "the model keeps closing the session";
                        yield FlowItem::emit(Event::error(&invocation_id, &agent_name, "UNAVAILABLE", message));
                        reason = FlowEndReason::Failed;
                        break;
                    }
                    _ => break,
                }
            }

            // Tools still running answer a model that is gone; stop them.
            tools.abort_all();
            hooks.stop_tools().await;
            // Whatever ended the run, no recording is lost (but the microphone's silent tail
            // after the last turn is no recording).
            if save_live_blob {
                cache.drop_silent_input();
                for event in cache.flush(&target, true, true).await {
                    yield FlowItem::emit(event);
                }
                // What could not be saved now is saved later, where the store can.
                cache.save_held_later(&target).await;
            }
            let _ = end_tx.send(FlowEnd { reason, requests: inputs.map(|i| i.requests) });
        }
    }
}

/// Sleeps until the deadline, or forever without one.
async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// What screening an event led to.
enum Blocked {
    /// Callbacks proceeded but changed state: this event (after the screened one) commits it.
    Changes(Event),
    /// The answer is blocked: this event follows the screened one.
    Follows(Event),
    /// The answer is blocked: this event replaces the screened one.
    Replaces(Event),
}

/// Runs the screening callbacks an event calls for: a finished spoken utterance goes to the
/// before-model callbacks; the model's spoken answer so far, and its full text, to the after-model
/// callbacks.
async fn screen(hooks: &dyn FlowHooks, event: &Event, spoken: &mut String) -> Option<Blocked> {
    // Most agents have no model callbacks: nothing to screen, nothing to copy.
    if !hooks.screens_user() && !hooks.screens_model() {
        return None;
    }
    let (verdict, replaces) = if let Some(heard) = &event.input_transcription {
        if !hooks.screens_user() || heard.finished != Some(true) {
            return None;
        }
        let text = heard.text.clone().unwrap_or_default();
        if text.trim().is_empty() {
            return None;
        }
        (hooks.screen_user(&Content::text("user", text)).await, false)
    } else if event.turn_complete == Some(true) || event.interrupted == Some(true) {
        spoken.clear();
        return None;
    } else if !hooks.screens_model() {
        return None;
    } else if let Some(said) = &event.output_transcription {
        // ADK screens the whole answer so far, so a callback can stop it mid-sentence.
        let finished = said.finished == Some(true);
        if finished {
            spoken.clear();
        }
        spoken.push_str(said.text.as_deref().unwrap_or_default());
        let response = LlmResponse {
            output_transcription: Some(crate::event::Transcription::new(spoken.clone(), false)),
            ..LlmResponse::default()
        };
        if finished {
            spoken.clear();
        }
        (hooks.screen_model(&response).await, false)
    } else if event.partial == Some(false)
        && event
            .content
            .as_ref()
            .is_some_and(|c| c.parts.iter().any(|p| p.text.is_some()))
    {
        let response = LlmResponse {
            content: event.content.clone(),
            ..LlmResponse::default()
        };
        (hooks.screen_model(&response).await, true)
    } else {
        return None;
    };
    match verdict {
        Screened::Proceed(None) => None,
        Screened::Proceed(Some(changes)) => Some(Blocked::Changes(changes)),
        Screened::Block(blocked) if replaces => Some(Blocked::Replaces(blocked)),
        Screened::Block(blocked) => Some(Blocked::Follows(blocked)),
    }
}
