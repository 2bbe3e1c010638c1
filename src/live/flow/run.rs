//! The state of one running flow and its named steps. Each call to [`FlowRun::advance`] does one
//! step and leaves the events to yield in `out`; what must wait until they are taken (and so
//! committed by the runner) waits in `then` until the next call.

use std::collections::{HashMap, HashSet, VecDeque};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures::Stream;
use tokio::sync::{mpsc, oneshot};
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::audio_cache::{AudioCache, AudioSide, RecordingTarget};
use super::hooks::{FlowHooks, Screened};
use super::receive::{ResponseProcessor, Step};
use super::reconnect::{self, AfterEnd, Attempts, ConnectionEnd};
use super::screen::{screen, Blocked};
use super::send::{send_loop, PersistRequest, SendContext, SendInputs, TurnClock};
use super::traced::{self, ModelLabel, Opening, Turns};
use super::{
    FlowEnd, FlowEndReason, FlowItem, FlowLimits, HistorySource, LiveFlow, GO_AWAY_ANSWER_GRACE,
    STABLE_CONNECTION, TASK_COMPLETED,
};
use crate::event::{Content, Event, FunctionResponse};
use crate::latch::Latch;
use crate::live::{LiveRequestReceiver, RunConfig};
use crate::model::{
    LiveConnectConfig, LiveConnection, LiveInput, LiveModel, LlmResponse, ModelError, ModelMessage,
    SessionResumptionConfig,
};

/// Where a flow is.
enum Phase {
    /// Screen the turn-based prompt and queue it for the model.
    Prompt(Content),
    /// Open a model connection.
    Connect,
    /// Connected: handle what the model, the tools and the send loop bring, one thing a step.
    Listen,
    /// The connection ended: end the answer it left under way, one processor step at a time,
    /// then stop the send loop.
    EndAnswer(ConnectionEnd),
    /// Commit what the stopped send loop left, one event at a time.
    Drain(ConnectionEnd),
    /// Reconnect, restart or end.
    Decide(ConnectionEnd),
    /// Wait before reconnecting (after what the decision had to say was yielded).
    Backoff(Instant),
    /// Stop the tools and flush the recordings.
    Finish,
    /// Leave what could not be saved to be saved later.
    SaveHeld,
    /// Over.
    Done,
}

/// What waits until the events in `out` are taken.
enum Then {
    /// The send loop waits for its event's commit.
    Ack(tokio::sync::oneshot::Sender<()>),
    /// Run the calls of the function-call event just yielded (boxed: calls are rare, and the
    /// other cases would carry its size).
    CallTools {
        call_event: Box<Event>,
        ids: Vec<String>,
    },
    /// The tools' response event was yielded: now the model may have the responses.
    ToolsAnswered {
        responses: Vec<FunctionResponse>,
        handoff: Option<FlowEndReason>,
    },
}

/// What a model message said, for after its events.
#[derive(Debug, Clone, Copy)]
struct Said {
    go_away: bool,
    turn_over: bool,
    answer_ends: bool,
    answering: bool,
}

/// What woke a listening flow.
// A transient select result; boxing would cost an allocation per event.
#[allow(clippy::large_enum_variant)]
enum Wake {
    Persist(PersistRequest),
    Model(Option<ModelMessage>),
    ToolsDone(Option<Event>),
    HandoffDue,
    GoAwayDue,
    /// A user's turn went up: its answer is awaited from now.
    TurnSent,
    /// The model did not begin to answer the user's turn in time.
    AnswerLate,
}

/// One model connection and what the flow tracks on it.
struct ModelLink {
    receiver: mpsc::Receiver<ModelMessage>,
    send_task: JoinHandle<SendInputs>,
    stop: Latch,
    processor: ResponseProcessor,
    /// The processor's steps still to do for the message in hand, and what that message said.
    steps: std::vec::IntoIter<Step>,
    said: Option<Said>,
    /// The model's spoken answer so far, for after-model screening.
    spoken: String,
    /// When it opened: one that stayed up long was progress.
    opened: Instant,
    /// A resumption handle over the limit was reported on this connection.
    handle_refused: bool,
    /// Tool results went up and the model has not answered them yet: the turn that ends now
    /// (Gemini 2.5 ends the tool-call turn before the results) is not the answer.
    awaiting_answer: bool,
    /// The model is in the middle of an answer: if the connection ends now, the flow ends the
    /// answer for it, so the client is not left waiting for its turn's end.
    mid_answer: bool,
    /// After a `goAway` during an answer: when the flow stops waiting for its end.
    go_away_by: Option<Instant>,
    /// The connection's trace span (disabled when traces are off).
    span: tracing::Span,
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

    /// The flow's steps (`FlowRun::advance`) and the events each leaves to yield. A step runs
    /// only once the events before it were taken: the runner commits an event before it polls
    /// for the next, so what a step does after an event (run its tool calls, send its tool
    /// responses up, ack the send loop) follows the event's commit.
    fn events(
        self,
        requests: LiveRequestReceiver,
        end_tx: oneshot::Sender<FlowEnd>,
    ) -> impl Stream<Item = FlowItem> + Send + 'static {
        async_stream::stream! {
            let mut run = FlowRun::new(self, requests);
            while run.advance().await {
                while let Some(item) = run.out.pop_front() {
                    yield item;
                }
            }
            let _ = end_tx.send(run.end());
        }
    }
}

/// The `customMetadata` key of the event telling the client which tool calls were cancelled
/// (what the browser client library reads as a `toolCancelled` event).
pub const TOOL_CALL_CANCELLATION: &str = "toolCallCancellation";

/// One running flow.
pub(super) struct FlowRun {
    model: Arc<dyn LiveModel>,
    connect_config: LiveConnectConfig,
    run_config: RunConfig,
    target: RecordingTarget,
    hooks: Arc<dyn FlowHooks>,
    single_turn: bool,
    handoff_delay: Duration,
    cache: AudioCache,
    persist_tx: mpsc::Sender<PersistRequest>,
    persist_rx: mpsc::Receiver<PersistRequest>,
    /// Tool responses and streaming-tool results go to the model through the send loop.
    internal_tx: mpsc::Sender<LiveInput>,
    inputs: Option<SendInputs>,
    tools: JoinSet<Option<Event>>,
    /// The tasks of non-blocking calls: the model goes on while they run, so they hold no turn.
    non_blocking: HashSet<tokio::task::Id>,
    /// Each running call's own cancellation, so a `toolCallCancellation` stops only the calls
    /// it names.
    running: HashMap<String, CancellationToken>,
    handle: Option<String>,
    /// A handle the run started with (stored with the session) may have expired or come from a
    /// model that no longer knows it: refused, the history is replayed instead.
    untried_handle: bool,
    failures: u32,
    first_connect: bool,
    limits: FlowLimits,
    /// The user's turn awaiting its answer, and the flow's view of it.
    turns: TurnClock,
    turn_sent: tokio::sync::watch::Receiver<Option<Instant>>,
    /// Tool-call rounds since the user's last turn.
    tool_rounds: u32,
    history: Option<Arc<dyn HistorySource>>,
    /// A hand-off waits for the model's turn to end, at most until the deadline.
    handoff: Option<(FlowEndReason, Instant)>,
    reason: FlowEndReason,
    conn: Option<ModelLink>,
    phase: Phase,
    /// The events to yield now.
    pub out: VecDeque<FlowItem>,
    then: Option<Then>,
    /// The model, as the trace spans name it.
    label: ModelLabel,
    /// The wake's three deadlines: the hand-off's, the model's goAway's and the answer's.
    timers: [Timer; 3],
    /// The turn under way, for its trace span.
    traced: Turns,
}

impl FlowRun {
    pub(super) fn new(flow: LiveFlow, requests: LiveRequestReceiver) -> Self {
        let cache = AudioCache::new(
            flow.target
                .artifacts
                .as_ref()
                .and_then(|a| a.spool_dir())
                .map(Into::into),
        );
        let (persist_tx, persist_rx) = mpsc::channel(16);
        let (internal_tx, internal_rx) = mpsc::channel(64);
        let handle = flow
            .connect_config
            .session_resumption
            .as_ref()
            .and_then(|r| r.handle.clone());
        let (turns, turn_sent) = TurnClock::new();
        let label = ModelLabel::new(flow.model.provider(), flow.model.name());
        FlowRun {
            limits: flow.run_config.limits,
            turns,
            turn_sent,
            tool_rounds: 0,
            history: flow.history,
            untried_handle: handle.is_some(),
            handle,
            phase: match flow.prompt {
                Some(prompt) => Phase::Prompt(prompt),
                None => Phase::Connect,
            },
            model: flow.model,
            connect_config: flow.connect_config,
            run_config: flow.run_config,
            target: flow.target,
            hooks: flow.hooks,
            single_turn: flow.single_turn,
            handoff_delay: flow.handoff_delay,
            cache,
            persist_tx,
            persist_rx,
            internal_tx,
            inputs: Some(SendInputs {
                requests,
                internal: internal_rx,
            }),
            tools: JoinSet::new(),
            non_blocking: HashSet::new(),
            running: HashMap::new(),
            failures: 0,
            first_connect: true,
            handoff: None,
            reason: FlowEndReason::Closed,
            conn: None,
            out: VecDeque::new(),
            then: None,
            label,
            timers: Default::default(),
            traced: Turns::default(),
        }
    }

    /// Does what waited for the last events to be taken, then steps until there are events to
    /// yield (true) or the flow is over (false).
    pub(super) async fn advance(&mut self) -> bool {
        if let Some(then) = self.then.take() {
            if let Some(end) = self.after_yield(then).await {
                self.phase = self.hang_up(end);
            }
        }
        while self.out.is_empty() {
            self.phase = match std::mem::replace(&mut self.phase, Phase::Done) {
                Phase::Prompt(prompt) => self.send_prompt(prompt).await,
                Phase::Connect => self.connect().await,
                Phase::Listen => match self.listen().await {
                    Some(end) => self.hang_up(end),
                    None => Phase::Listen,
                },
                Phase::EndAnswer(end) => self.end_answer(end).await,
                Phase::Drain(end) => self.drain(end),
                Phase::Decide(end) => self.decide(end),
                Phase::Backoff(until) => {
                    tokio::time::sleep_until(until).await;
                    Phase::Connect
                }
                Phase::Finish => self.finish().await,
                Phase::SaveHeld => {
                    self.cache.save_held_later(&self.target).await;
                    Phase::Done
                }
                Phase::Done => return false,
            };
        }
        true
    }

    /// How the flow ended, with the requests for whoever runs next.
    pub(super) fn end(self) -> FlowEnd {
        FlowEnd {
            reason: self.reason,
            requests: self.inputs.map(|i| i.requests),
        }
    }

    fn invocation_id(&self) -> &str {
        &self.target.invocation_id
    }

    fn emit(&mut self, event: Event) {
        self.out.push_back(FlowItem::emit(event));
    }

    fn error(&mut self, code: &str, message: String) {
        let event = Event::error(
            &self.target.invocation_id,
            &self.target.agent_name,
            code,
            message,
        );
        self.emit(event);
    }

    /// A turn-based run's prompt: screened by the before-model callbacks, then queued for the
    /// model (the send loop forwards it once connected).
    async fn send_prompt(&mut self, prompt: Content) -> Phase {
        if self.hooks.screens_user() {
            match self.hooks.screen_user(&prompt).await {
                Screened::Block(blocked) => {
                    self.emit(blocked);
                    self.reason = FlowEndReason::TurnDone;
                    return Phase::Finish;
                }
                Screened::Proceed(Some(changes)) => self.emit(changes),
                Screened::Proceed(None) => {}
            }
        }
        let prompt = LiveInput::Content {
            content: prompt,
            turn_complete: true,
        };
        let _ = self.internal_tx.try_send(prompt);
        Phase::Connect
    }

    /// The connect config for now: resuming with the latest handle, or a fresh model session
    /// with the history.
    fn connect_config(&mut self) -> LiveConnectConfig {
        let mut config = self.connect_config.clone();
        if let Some(h) = &self.handle {
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
            if !self.first_connect {
                tracing::info!(
                    invocation_id = self.invocation_id(),
                    "reconnecting without a resumption handle; replaying history"
                );
            }
        }
        if !self.first_connect {
            self.run_config.on_reconnect.reconnected();
        }
        self.first_connect = false;
        config
    }

    /// Opens a model connection and starts its send loop.
    async fn connect(&mut self) -> Phase {
        if self.inputs.is_none() {
            // Lost with a failed send loop: nothing more can reach a model.
            return Phase::Finish;
        }
        if self.handle.is_none() && !self.first_connect {
            self.refresh_history().await;
        }
        let opening = Opening {
            reconnect: !self.first_connect,
            resumed: self.handle.is_some(),
            replayed: !self.first_connect && self.handle.is_none(),
        };
        let config = self.connect_config();
        let span = traced::connection_span(&self.label, opening);
        let started = std::time::Instant::now();
        let LiveConnection { sender, receiver } = match self.model.connect(config).await {
            Ok(connection) => {
                traced::connected(&span, started, None);
                connection
            }
            Err(error) => {
                traced::connected(&span, started, Some(error.code()));
                return Phase::Decide(ConnectionEnd::Refused(error));
            }
        };
        self.traced.resumption_updates = 0;
        let Some(inputs) = self.inputs.take() else {
            return Phase::Finish;
        };
        self.untried_handle = false;
        let save_live_blob = self.run_config.save_live_blob;
        let stop = Latch::new();
        let send_task = tokio::spawn(send_loop(
            inputs,
            sender,
            SendContext {
                invocation_id: self.target.invocation_id.clone(),
                save_live_blob,
                cache: self.cache.clone(),
                persist: self.persist_tx.clone(),
                stop: stop.clone(),
                hooks: self.hooks.clone(),
                turns: self.turns.clone(),
                audio: self.run_config.audio.clone(),
            },
        ));
        let processor = ResponseProcessor::new(
            &self.target.invocation_id,
            &self.target.agent_name,
            save_live_blob,
        )
        .with_max_turn_bytes(self.limits.max_turn_bytes);
        self.conn = Some(ModelLink {
            receiver,
            send_task,
            stop,
            processor,
            steps: Vec::new().into_iter(),
            said: None,
            spoken: String::new(),
            opened: Instant::now(),
            handle_refused: false,
            awaiting_answer: false,
            mid_answer: false,
            go_away_by: None,
            span,
        });
        Phase::Listen
    }

    /// One thing on a connection: the next processor step of the message in hand, what follows
    /// the message, or the next thing that happens. Some when the connection ends.
    async fn listen(&mut self) -> Option<ConnectionEnd> {
        let Some(conn) = self.conn.as_mut() else {
            return Some(ConnectionEnd::Closed);
        };
        if let Some(step) = conn.steps.next() {
            return self.on_step(step).await;
        }
        if let Some(said) = conn.said.take() {
            if let Some(end) = self.on_message_done(said) {
                return Some(end);
            }
        }
        let wake = self.wake().await;
        self.on_wake(wake)
    }

    /// Waits for the next thing that happens on the connection.
    async fn wake(&mut self) -> Wake {
        let Some(conn) = self.conn.as_mut() else {
            return Wake::Model(None);
        };
        let handoff_at = self.handoff.as_ref().map(|(_, at)| *at);
        let answer_by = self
            .turns
            .pending()
            .map(|at| at + self.limits.answer_timeout);
        let [handoff_timer, go_away_timer, answer_timer] = &mut self.timers;
        loop {
            return tokio::select! {
                Some(request) = self.persist_rx.recv() => Wake::Persist(request),
                Some(done) = self.tools.join_next_with_id(), if !self.tools.is_empty() => match done {
                    Ok((id, event)) => {
                        self.non_blocking.remove(&id);
                        Wake::ToolsDone(event)
                    }
                    Err(error) => {
                        self.non_blocking.remove(&error.id());
                        if !error.is_cancelled() {
                            tracing::error!(%error, invocation_id = self.target.invocation_id, "a tool task failed");
                        }
                        continue;
                    }
                },
                () = handoff_timer.until(handoff_at) => Wake::HandoffDue,
                () = go_away_timer.until(conn.go_away_by) => Wake::GoAwayDue,
                () = answer_timer.until(answer_by) => Wake::AnswerLate,
                Ok(()) = self.turn_sent.changed() => Wake::TurnSent,
                response = conn.receiver.recv() => Wake::Model(response),
            };
        }
    }

    /// Handles what woke the flow. Some when it ends the connection.
    fn on_wake(&mut self, wake: Wake) -> Option<ConnectionEnd> {
        let going_away = self.conn.as_ref().is_some_and(|c| c.go_away_by.is_some());
        match wake {
            Wake::Persist(request) => {
                let (item, ack) = *request;
                self.out.push_back(item);
                self.then = Some(Then::Ack(ack));
                None
            }
            Wake::ToolsDone(None) => None,
            Wake::ToolsDone(Some(event)) => {
                self.on_tools_done(event);
                None
            }
            Wake::HandoffDue => self.handoff.take().map(|(r, _)| ConnectionEnd::Done(r)),
            Wake::GoAwayDue => Some(ConnectionEnd::GoAway),
            Wake::TurnSent => {
                if self.turns.pending().is_some() {
                    self.tool_rounds = 0;
                }
                None
            }
            Wake::AnswerLate => {
                let late = ModelError::NoAnswer(self.limits.answer_timeout);
                tracing::warn!(invocation_id = self.invocation_id(), %late, "the model did not answer");
                Some(ConnectionEnd::Dropped(late))
            }
            Wake::Model(None) if going_away => Some(ConnectionEnd::GoAway),
            Wake::Model(None) => Some(ConnectionEnd::Closed),
            Wake::Model(Some(Err(error))) => Some(ConnectionEnd::Dropped(error)),
            Wake::Model(Some(Ok(response))) => {
                self.on_model_message(*response);
                None
            }
        }
    }

    /// Takes a model message: its handle, cancellations and audio now, its events step by step.
    fn on_model_message(&mut self, mut response: LlmResponse) {
        self.take_handle(&mut response);
        if self.conn.is_some() {
            self.cancel_tools(&response.tool_call_cancellations);
        }
        let Some(conn) = self.conn.as_mut() else {
            return;
        };
        // Progress, which starts the count of reconnects afresh, is a finished answer: not any
        // message (a goAway or a resumption update would let a server that sends only those
        // reconnect forever).
        if response.turn_complete {
            self.failures = 0;
        }
        let answers = response.content.is_some()
            || response.output_transcription.is_some()
            || !response.tool_calls.is_empty()
            || response.turn_complete
            || response.interrupted;
        if answers {
            self.turns.answered();
        }
        if response.input_transcription.is_some() {
            // The user spoke: a new turn, with its own tool rounds.
            self.tool_rounds = 0;
        }
        if response.go_away.is_some() {
            conn.span.record("livegate.model.go_away", true);
        }
        let traced = response.content.is_some()
            || response.output_transcription.is_some()
            || response.interrupted
            || response.usage_metadata.is_some()
            || !response.tool_calls.is_empty();
        if traced {
            self.traced.on_message(&self.label, &response);
        }
        let answering = response.content.is_some() || response.output_transcription.is_some();
        conn.said = Some(Said {
            go_away: response.go_away.is_some(),
            turn_over: response.turn_complete,
            answer_ends: response.turn_complete || response.interrupted,
            answering,
        });
        let blobs = response.content.iter().flat_map(|c| &c.parts);
        for blob in blobs.filter_map(|p| p.inline_data.as_ref()) {
            self.run_config.audio.output(blob);
            if self.run_config.save_live_blob {
                self.cache.push(AudioSide::Output, blob);
            }
        }
        conn.steps = conn.processor.process(response).into_iter();
    }

    /// Keeps a resumption update's new handle: the latest only, so one that repeats the handle
    /// held is no event; one over the limit is dropped, with an error event (once a connection).
    fn take_handle(&mut self, response: &mut LlmResponse) {
        let Some(new_handle) = response
            .session_resumption_update
            .as_ref()
            .and_then(|u| u.new_handle.as_ref())
        else {
            return;
        };
        if self.handle.as_ref() == Some(new_handle) {
            response.session_resumption_update = None;
            return;
        }
        if new_handle.len() <= self.limits.max_handle_bytes {
            self.handle = Some(new_handle.clone());
            self.traced.resumption_updates += 1;
            return;
        }
        let bytes = new_handle.len();
        response.session_resumption_update = None;
        let Some(conn) = self.conn.as_mut() else {
            return;
        };
        if !std::mem::replace(&mut conn.handle_refused, true) {
            tracing::warn!(
                invocation_id = self.invocation_id(),
                bytes,
                "resumption handle over the limit dropped"
            );
            let limit = self.limits.max_handle_bytes;
            self.error(
                "RESOURCE_EXHAUSTED",
                format!("the model sent a resumption handle of {bytes} bytes, over the limit of {limit}; it is not kept"),
            );
        }
    }

    /// One processor step of a model message: a flush of the recordings, or an event screened
    /// by the callbacks. Some when a callback blocked the answer.
    async fn on_step(&mut self, step: Step) -> Option<ConnectionEnd> {
        let mut event = match step {
            Step::Emit(event) => event,
            Step::Flush { input, output } => {
                let flushed = self.flush_recordings(input, output).await;
                self.out.extend(flushed.into_iter().map(FlowItem::flushed));
                return None;
            }
        };
        let conn = self.conn.as_mut()?;
        match screen(&*self.hooks, &event, &mut conn.spoken).await {
            None => {}
            Some(Blocked::Changes(changes)) => {
                self.emit(event);
                event = changes;
            }
            Some(Blocked::Follows(blocked)) => {
                self.emit(event);
                self.emit(blocked);
                return Some(ConnectionEnd::Blocked);
            }
            Some(Blocked::Replaces(blocked)) => {
                self.emit(blocked);
                return Some(ConnectionEnd::Blocked);
            }
        }
        let calls = event.function_calls();
        if !calls.is_empty() {
            self.tool_rounds += 1;
            if self.tool_rounds > self.limits.max_tool_rounds {
                let rounds = self.limits.max_tool_rounds;
                tracing::warn!(
                    invocation_id = self.invocation_id(),
                    rounds,
                    "the model called tools too often in one turn"
                );
                self.error(
                    "RESOURCE_EXHAUSTED",
                    format!("the model started more than {rounds} rounds of tool calls in one turn; the run ends"),
                );
                return Some(ConnectionEnd::Done(FlowEndReason::Failed));
            }
            let long_running = self.hooks.long_running_ids(&calls);
            let ids = calls.iter().filter_map(|c| c.id.clone()).collect();
            event.long_running_tool_ids = Some(long_running);
            self.then = Some(Then::CallTools {
                call_event: Box::new(event.clone()),
                ids,
            });
        }
        if event.live_session_resumption_update.is_some() {
            // The handle is kept with the session (the runner stores the latest); an event per
            // update would grow the history with every one.
            self.out.push_back(FlowItem {
                event,
                emit: true,
                store: false,
            });
        } else {
            self.emit(event);
        }
        None
    }

    /// After a model message's events: whether its `goAway`, its turn's end or a hand-off ends
    /// the connection.
    fn on_message_done(&mut self, said: Said) -> Option<ConnectionEnd> {
        let conn = self.conn.as_mut()?;
        let answered = conn.awaiting_answer && said.answering;
        // The answer's turn is over (not a tool call's turn, which the results' answer follows).
        let tools_hold = self.tools.len() > self.non_blocking.len();
        if said.turn_over && (answered || !conn.awaiting_answer) && !tools_hold {
            self.traced.end();
        }
        if said.answer_ends {
            conn.mid_answer = false;
        } else if said.answering {
            conn.mid_answer = true;
        }
        // An answer under way gets a moment to finish on the old connection.
        if said.go_away && conn.mid_answer {
            conn.go_away_by
                .get_or_insert(Instant::now() + GO_AWAY_ANSWER_GRACE);
        } else if said.go_away || (conn.go_away_by.is_some() && !conn.mid_answer) {
            return Some(ConnectionEnd::GoAway);
        }
        if answered {
            conn.awaiting_answer = false;
        }
        if said.turn_over && !conn.awaiting_answer && !tools_hold {
            if let Some((next_reason, _)) = self.handoff.take() {
                return Some(ConnectionEnd::Done(next_reason));
            }
            if self.single_turn {
                return Some(ConnectionEnd::Done(FlowEndReason::TurnDone));
            }
        }
        None
    }

    /// The model cancelled these calls (`toolCallCancellation`, which the OpenAI backend also
    /// gives when the user speaks over calls the model waits for): each call named stops (its
    /// future is dropped; an MCP call tells its server, `notifications/cancelled`) and the
    /// client is told by an event whose `customMetadata.toolCallCancellation.ids` names them.
    /// The other calls of the same model message go on, and are answered without these. No
    /// response goes to the model for them.
    fn cancel_tools(&mut self, ids: &[String]) {
        let mut stopped: Vec<String> = Vec::new();
        for id in ids {
            let Some(cancel) = self.running.remove(id) else {
                continue;
            };
            tracing::info!(
                invocation_id = self.target.invocation_id,
                call_id = id,
                "the model cancelled a tool call"
            );
            cancel.cancel();
            stopped.push(id.clone());
        }
        if stopped.is_empty() {
            return;
        }
        let mut event = Event::new(&self.target.invocation_id, &self.target.agent_name);
        let mut metadata = serde_json::Map::new();
        metadata.insert(
            TOOL_CALL_CANCELLATION.into(),
            serde_json::json!({ "ids": stopped }),
        );
        event.custom_metadata = Some(metadata);
        self.emit(event);
    }

    /// A tool task finished with its response event: yielded, then sent up (see `after_yield`).
    fn on_tools_done(&mut self, event: Event) {
        for response in event.function_responses() {
            self.running
                .remove(response.id.as_deref().unwrap_or_default());
        }
        let responses: Vec<FunctionResponse> =
            event.function_responses().into_iter().cloned().collect();
        self.then = Some(Then::ToolsAnswered {
            responses,
            handoff: handoff_of(&event),
        });
        self.emit(event);
    }

    /// What waited for the yielded events to be taken. Some when that ends the connection.
    async fn after_yield(&mut self, then: Then) -> Option<ConnectionEnd> {
        match then {
            Then::Ack(ack) => {
                let _ = ack.send(());
                None
            }
            Then::CallTools { call_event, ids } => {
                self.call_tools(*call_event, ids);
                None
            }
            Then::ToolsAnswered { responses, handoff } => {
                let blocking = responses.iter().any(|r| r.scheduling.is_none());
                // Committed: now the model may go on.
                let sent = self.internal_tx.send(LiveInput::ToolResponse(responses));
                if sent.await.is_err() {
                    tracing::debug!(
                        invocation_id = self.invocation_id(),
                        "tool response after the send loop ended"
                    );
                }
                // A non-blocking call's result is taken up when the model sees fit (or never, if
                // silent): no answer to it is awaited.
                if let Some(conn) = self.conn.as_mut().filter(|_| blocking) {
                    conn.awaiting_answer = true;
                }
                if self.hooks.invocation_ended() {
                    return Some(ConnectionEnd::Done(FlowEndReason::InvocationEnded));
                }
                if let Some(reason) = handoff {
                    self.hand_off(reason).await;
                }
                None
            }
        }
    }

    /// Runs the calls off the receive loop: audio keeps flowing while tools run. The blocking
    /// calls of the message run in one task, answered together; each non-blocking call in a
    /// task of its own, answered when it ends. Every call has its own cancellation.
    fn call_tools(&mut self, call_event: Event, ids: Vec<String>) {
        let non_blocking = self.hooks.non_blocking_ids(&call_event.function_calls());
        let (later, now): (Vec<String>, Vec<String>) =
            ids.into_iter().partition(|id| non_blocking.contains(id));
        // Calls without an id cannot be cancelled, and run with the blocking ones.
        let without_id = call_event.function_calls().iter().any(|c| c.id.is_none());
        if !now.is_empty() || without_id {
            self.spawn_calls(&call_event, now, false);
        }
        for id in later {
            self.spawn_calls(&call_event, vec![id], true);
        }
    }

    /// Spawns one task for the calls `ids` of `call_event` (with those without an id, unless
    /// `non_blocking`).
    fn spawn_calls(&mut self, call_event: &Event, ids: Vec<String>, non_blocking: bool) {
        let mut event = call_event.clone();
        if let Some(content) = event.content.as_mut() {
            content.parts.retain(|p| match &p.function_call {
                Some(call) => match &call.id {
                    Some(id) => ids.contains(id),
                    None => !non_blocking,
                },
                None => false,
            });
        }
        let cancels: HashMap<String, CancellationToken> = ids
            .iter()
            .map(|id| (id.clone(), CancellationToken::new()))
            .collect();
        self.running.extend(cancels.clone());
        let hooks = self.hooks.clone();
        let to_model = self.internal_tx.clone();
        let task = self.tools.spawn(
            async move { hooks.call_tools_cancellable(event, to_model, cancels).await }
                .instrument(self.traced.span()),
        );
        if non_blocking {
            self.non_blocking.insert(task.id());
        }
    }

    /// Starts a hand-off: the streaming tools stop, and the flow ends once the model's turn does
    /// (at the latest after the hand-off delay).
    async fn hand_off(&mut self, reason: FlowEndReason) {
        tracing::info!(
            invocation_id = self.invocation_id(),
            agent = self.target.agent_name,
            ?reason,
            "agent hands off"
        );
        self.hooks.stop_tools().await;
        self.handoff = Some((reason, Instant::now() + self.handoff_delay));
    }

    /// The connection ended: an answer it left under way is ended here (interrupted, then the
    /// turn's end), before the send loop stops.
    fn hang_up(&mut self, end: ConnectionEnd) -> Phase {
        let Some(conn) = self.conn.as_mut() else {
            return Phase::Decide(end);
        };
        conn.said = None;
        traced::connection_ended(&conn.span, &end);
        if self.traced.resumption_updates > 0 {
            conn.span.record(
                "livegate.model.resumption_updates",
                traced::count(self.traced.resumption_updates),
            );
        }
        let ended = matches!(
            end,
            ConnectionEnd::GoAway | ConnectionEnd::Dropped(_) | ConnectionEnd::Closed
        );
        let mut steps = Vec::new();
        if conn.mid_answer && ended {
            tracing::info!(
                invocation_id = self.target.invocation_id,
                "the model connection ended during an answer; ending it"
            );
            let ends = [
                LlmResponse {
                    interrupted: true,
                    ..LlmResponse::default()
                },
                LlmResponse {
                    turn_complete: true,
                    ..LlmResponse::default()
                },
            ];
            for response in ends {
                steps.extend(conn.processor.process(response));
            }
        }
        conn.steps = steps.into_iter();
        Phase::EndAnswer(end)
    }

    /// One step of ending the answer; once none is left, stops the send loop.
    async fn end_answer(&mut self, end: ConnectionEnd) -> Phase {
        let Some(conn) = self.conn.as_mut() else {
            return Phase::Drain(end);
        };
        match conn.steps.next() {
            Some(Step::Emit(event)) => self.emit(event),
            Some(Step::Flush { input, output }) => {
                let flushed = self.flush_recordings(input, output).await;
                self.out.extend(flushed.into_iter().map(FlowItem::flushed));
            }
            None => {
                self.close_connection().await;
                return Phase::Drain(end);
            }
        }
        Phase::EndAnswer(end)
    }

    /// Stops the send loop and takes the inputs back for the next connection.
    async fn close_connection(&mut self) {
        let Some(conn) = self.conn.take() else {
            return;
        };
        conn.stop.fire();
        drop(conn.receiver);
        if conn.opened.elapsed() >= STABLE_CONNECTION {
            self.failures = 0;
        }
        match conn.send_task.await {
            Ok(inputs) => self.inputs = Some(inputs),
            Err(error) => tracing::error!(
                %error,
                invocation_id = self.invocation_id(),
                "send loop failed"
            ),
        }
    }

    /// Commits what the send loop left behind, one event a step.
    fn drain(&mut self, end: ConnectionEnd) -> Phase {
        match self.persist_rx.try_recv() {
            Ok(request) => {
                let (item, ack) = *request;
                self.out.push_back(item);
                self.then = Some(Then::Ack(ack));
                Phase::Drain(end)
            }
            Err(_) => Phase::Decide(end),
        }
    }

    /// Reconnects, restarts or ends, as [`reconnect::next`] rules.
    fn decide(&mut self, end: ConnectionEnd) -> Phase {
        let now = Attempts {
            handle: self.handle.is_some(),
            untried_handle: self.untried_handle,
            failures: self.failures,
            client_closed: self.inputs.as_ref().is_none_or(|i| i.requests.is_closed()),
        };
        let next = reconnect::next(&end, now, &self.limits);
        log_decision(self.invocation_id(), &end, &next, now);
        let lost = matches!(
            end,
            ConnectionEnd::GoAway | ConnectionEnd::Dropped(_) | ConnectionEnd::Closed
        );
        // A flow that goes on tells the client its turn is over; one that ends says why instead.
        let goes_on = !matches!(next, AfterEnd::End(..));
        if lost && goes_on && !now.client_closed && self.turns.pending().is_some() {
            self.turns.answered();
            self.emit(lost_turn(&self.target, &end));
            let mut over = Event::new(&self.target.invocation_id, &self.target.agent_name);
            over.turn_complete = Some(true);
            self.emit(over);
        }
        match next {
            AfterEnd::Reconnect { failures, delay } => {
                self.failures = failures;
                if !delay.is_zero() {
                    return Phase::Backoff(Instant::now() + delay);
                }
            }
            AfterEnd::Restart => self.handle = None,
            AfterEnd::Replay => {
                self.handle = None;
                self.untried_handle = false;
                self.failures = 0;
                self.first_connect = true;
            }
            AfterEnd::End(reason, error) => {
                if let Some(error) = error {
                    self.error(error.code, error.message);
                }
                self.reason = reason;
                return Phase::Finish;
            }
        }
        Phase::Connect
    }

    /// Saves the recordings (the input's, the output's, or both) in a span of the turn's.
    async fn flush_recordings(&mut self, input: bool, output: bool) -> Vec<Event> {
        let span = traced::recording_span(&self.traced.span());
        let flushed = self
            .cache
            .flush(&self.target, input, output)
            .instrument(span.clone())
            .await;
        span.record("livegate.recordings.saved", flushed.len() as i64);
        flushed
    }

    /// Stops the tools and flushes every recording, whatever ended the flow.
    async fn finish(&mut self) -> Phase {
        // Tools still running answer a model that is gone; stop them.
        self.tools.abort_all();
        self.hooks.stop_tools().await;
        if !self.run_config.save_live_blob {
            return Phase::Done;
        }
        // No recording is lost (but the microphone's silent tail after the last turn is no
        // recording).
        self.cache.drop_silent_input();
        let flushed = self.flush_recordings(true, true).await;
        self.traced.end();
        self.out.extend(flushed.into_iter().map(FlowItem::flushed));
        // What could not be saved now is saved later, where the store can.
        Phase::SaveHeld
    }
}

impl FlowRun {
    /// Reads the conversation so far for a fresh model session: the history the flow started
    /// with lacks what was said since.
    async fn refresh_history(&mut self) {
        let Some(source) = &self.history else {
            return;
        };
        match source.history().await {
            Ok(history) => self.connect_config.history = history,
            Err(error) => tracing::warn!(
                %error,
                invocation_id = self.target.invocation_id,
                "could not read the history to replay; replaying the run's first"
            ),
        }
    }
}

/// The error event that ends a turn the model's connection ended before answering. Not sent
/// again on the next connection: neither provider says whether a turn it was sent reached the
/// model's context (Gemini's handles carry no position, OpenAI has no resumption), so a resend
/// could be answered twice; the client, told, sends it again.
fn lost_turn(target: &RecordingTarget, end: &ConnectionEnd) -> Event {
    let (code, why) = match end {
        ConnectionEnd::Dropped(error @ ModelError::NoAnswer(_)) => {
            (error.code(), error.to_string())
        }
        ConnectionEnd::Dropped(error) => ("UNAVAILABLE", error.to_string()),
        ConnectionEnd::GoAway => (
            "UNAVAILABLE",
            "the model asked to reconnect (goAway)".into(),
        ),
        _ => ("UNAVAILABLE", "the model closed the session".into()),
    };
    let message = format!("the turn was not answered: {why}; send it again");
    Event::error(&target.invocation_id, &target.agent_name, code, message)
}

/// Logs why the flow reconnects or ends.
fn log_decision(invocation_id: &str, end: &ConnectionEnd, next: &AfterEnd, now: Attempts) {
    match (end, next) {
        (ConnectionEnd::Refused(error), AfterEnd::Reconnect { failures, .. }) => {
            tracing::warn!(%error, failures, invocation_id, "reconnect failed; retrying");
        }
        (ConnectionEnd::Refused(error), AfterEnd::Replay) => tracing::info!(
            %error,
            invocation_id,
            "the model refused the stored resumption handle; replaying history"
        ),
        (ConnectionEnd::Refused(error), AfterEnd::End(..)) => {
            tracing::warn!(%error, invocation_id, "could not connect to the model");
        }
        (ConnectionEnd::Blocked, AfterEnd::Restart) => tracing::info!(
            invocation_id,
            "a callback blocked the answer; starting a fresh model session"
        ),
        (ConnectionEnd::GoAway, AfterEnd::Reconnect { .. }) => tracing::info!(
            invocation_id,
            resumable = now.handle,
            "model sent goAway; reconnecting"
        ),
        (ConnectionEnd::Dropped(error), AfterEnd::Reconnect { .. }) => {
            tracing::warn!(%error, invocation_id, "model connection dropped; resuming");
        }
        (ConnectionEnd::Dropped(error), AfterEnd::End(..)) => {
            tracing::warn!(%error, invocation_id, "model connection failed");
        }
        _ => {}
    }
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

/// A deadline's timer, made once and moved, not made per wake: a new `Sleep` registers with the
/// timer wheel when first polled and leaves it when dropped, and the flow wakes for every event
/// of the model.
#[derive(Default)]
struct Timer(Option<Pin<Box<tokio::time::Sleep>>>);

impl Timer {
    /// Sleeps until the deadline, or forever without one.
    async fn until(&mut self, deadline: Option<Instant>) {
        let Some(at) = deadline else {
            return std::future::pending().await;
        };
        let sleep = self
            .0
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(at)));
        if sleep.deadline() != at {
            sleep.as_mut().reset(at);
        }
        sleep.as_mut().await;
    }
}
