//! Driving an agent tree through one run: before/after-agent callbacks, one live flow per
//! model-backed agent, transfers between agents, the steps of sequences, and the commit of every
//! event before it is yielded.

use std::sync::Arc;
use std::time::Duration;

use futures::{FutureExt, Stream, StreamExt};
use serde_json::Map;
use tokio::sync::oneshot;
use tokio_util::task::TaskTracker;

use super::handles::HandleKeeper;
use super::history::{bound_history, history_contents};
use crate::agent::{Agent, AgentHooks, Context, Invocation, LlmAgent};
use crate::event::{Content, Event, UsageMetadata};
use crate::live::flow::{
    FlowEnd, FlowEndReason, FlowItem, HistorySource, LiveFlow, RecordingTarget,
};
use crate::live::{LiveRequestReceiver, RunConfig};
use crate::session::{Session, SessionError, SessionService};

/// A session's history as the store has it: what a flow that reconnects without a resumption
/// handle replays (every event the flow yielded is committed before it goes on).
#[derive(Debug)]
struct StoredHistory {
    sessions: Arc<dyn SessionService>,
    invocation: Arc<Invocation>,
    agent: String,
    limit: super::history::HistoryLimit,
}

#[async_trait::async_trait]
impl HistorySource for StoredHistory {
    async fn history(&self) -> Result<Vec<Content>, SessionError> {
        let inv = &self.invocation;
        let session = self
            .sessions
            .get_session(
                &inv.app_name,
                &inv.user_id,
                &inv.session_id,
                &self.limit.read(),
            )
            .await?
            .ok_or_else(|| SessionError::NotFound(inv.session_id.clone()))?;
        let contents = history_contents(&session.events, &self.agent);
        Ok(bound_history(contents, self.limit.bytes))
    }
}

/// How events reach the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Mode {
    /// A live run: every event ADK's live runtime yields.
    Live,
    /// A turn-based run: content events (usage attached), partial text only when `streaming`, no
    /// live control events.
    Turn {
        /// Yield partial text as it streams.
        streaming: bool,
    },
}

/// The run's copy of the session. It drops its events once a flow has its history and after each
/// commit (which adds one): a live session would otherwise hold every event it commits for as long
/// as it runs. Only a flow's history needs them, and the next flow reloads them from the store,
/// which has every committed event (events are committed before the run goes on).
struct RunSession {
    session: Session,
    /// The events are what the store gives a run (its newest, up to the history limit).
    events_complete: bool,
}

impl RunSession {
    fn drop_events(&mut self) {
        self.session.events = Vec::new();
        self.events_complete = false;
    }
}

/// One run's fixed inputs.
pub(super) struct Drive {
    pub root: Agent,
    pub sessions: Arc<dyn SessionService>,
    pub invocation: Arc<Invocation>,
    pub run_config: RunConfig,
    pub mode: Mode,
    /// The user message a turn-based agent answers.
    pub prompt: Option<Content>,
    pub handoff_delay: Duration,
    pub history: super::history::HistoryLimit,
    /// The model's resumption handle stored with the session: the run's first flow resumes the
    /// model's own context with it (and replays the history if the model refuses it).
    pub resume: Option<String>,
    /// Where a live run's resumption handles go (set when the run starts).
    pub handles: Option<HandleKeeper>,
    /// Where the handles' writes run (the runner's, which waits for them at shutdown).
    pub background: TaskTracker,
    /// The session store's commits, added up on the run's trace span.
    pub commits: super::traced::CommitTally,
    /// The session's usage totals, stored with each usage event (never locked across an await).
    pub usage: std::sync::Mutex<super::usage::UsageTotals>,
}

impl Drive {
    /// Runs `start` (and whoever it hands over to) and yields the committed events.
    pub fn run(
        self,
        session: Session,
        start: Agent,
        requests: LiveRequestReceiver,
    ) -> impl Stream<Item = Event> + Send + 'static {
        async_stream::stream! {
            let mut run = DriveRun::new(self, session, requests);
            let mut next = Some(start);
            while let Some(agent) = next.take() {
                let llm = match run.enter(&agent).await {
                    Entered::Step(first) => {
                        next = first;
                        continue;
                    }
                    Entered::Answered(events) => {
                        for event in events {
                            yield event;
                        }
                        break;
                    }
                    Entered::Run(llm, events) => {
                        for event in events {
                            yield event;
                        }
                        llm
                    }
                };
                let Some(requests) = run.requests.take() else { break };
                if let Some(error) = run.load_events(&llm).await {
                    yield error;
                }
                let (items, end) = run.flow(&llm).run(requests);
                futures::pin_mut!(items);
                while let Some((ready, flow_done)) = run.commit_ready(&mut items).await {
                    for FlowItem { event, emit, .. } in ready {
                        if emit {
                            yield event;
                        }
                    }
                    if flow_done {
                        break;
                    }
                }
                let (reason, events) = run.flow_ended(&llm, end).await;
                for event in events {
                    yield event;
                }
                if run.drive.invocation.is_ended() {
                    break;
                }
                let (following, events) = run.hand_over(&llm, &reason).await;
                for event in events {
                    yield event;
                }
                next = following;
            }
        }
    }

    /// Who runs after `llm`'s flow ended for `reason` (nobody: the run ends).
    fn next_after(&self, llm: &LlmAgent, reason: &FlowEndReason) -> Option<Agent> {
        match reason {
            FlowEndReason::Transfer(target) => {
                let allowed = target == &llm.name
                    || self
                        .root
                        .transfer_targets(&llm.name)
                        .iter()
                        .any(|a| a.name() == target);
                self.root.find(target).filter(|_| allowed).cloned()
            }
            FlowEndReason::TaskCompleted | FlowEndReason::TurnDone => {
                match self.root.parent_of(&llm.name) {
                    Some(Agent::Sequential(sequence)) => sequence.step_after(&llm.name).cloned(),
                    _ => None,
                }
            }
            FlowEndReason::Closed | FlowEndReason::Failed | FlowEndReason::InvocationEnded => None,
        }
    }

    /// Replaces the run's copy of the session's events with the newest ones the history may use.
    async fn reload_events(&self, session: &mut RunSession) -> Result<(), SessionError> {
        let inv = &self.invocation;
        let stored = self
            .sessions
            .get_session(
                &inv.app_name,
                &inv.user_id,
                &inv.session_id,
                &self.history.read(),
            )
            .await?
            .ok_or_else(|| SessionError::NotFound(inv.session_id.clone()))?;
        session.session.events = stored.events;
        session.events_complete = true;
        Ok(())
    }

    /// The live flow of one model-backed agent, with history as the session has it now.
    fn flow_for(&self, llm: &Arc<LlmAgent>, session: &Session) -> LiveFlow {
        let turn = matches!(self.mode, Mode::Turn { .. });
        let mut events = session.events.as_slice();
        // A turn's user message is the prompt, not history.
        if turn && events.last().is_some_and(|e| e.author == "user") {
            events = &events[..events.len() - 1];
        }
        let history = bound_history(history_contents(events, &llm.name), self.history.bytes);
        let tools = llm.tools_in(&self.root);
        LiveFlow {
            model: llm.model.clone(),
            connect_config: llm.connect_config(&self.root, &tools, &self.run_config, history),
            run_config: self.run_config.clone(),
            target: RecordingTarget {
                artifacts: Some(self.invocation.artifacts.clone()),
                app_name: self.invocation.app_name.clone(),
                user_id: self.invocation.user_id.clone(),
                session_id: self.invocation.session_id.clone(),
                invocation_id: self.invocation.invocation_id.clone(),
                agent_name: llm.name.clone(),
            },
            hooks: Arc::new(AgentHooks::new(self.invocation.clone(), llm.clone(), tools)),
            prompt: if turn { self.prompt.clone() } else { None },
            single_turn: turn,
            handoff_delay: self.handoff_delay,
            history: Some(Arc::new(StoredHistory {
                sessions: self.sessions.clone(),
                invocation: self.invocation.clone(),
                agent: llm.name.clone(),
                limit: self.history,
            })),
        }
    }

    /// Reshapes a flow item for the mode: a turn-based run drops live control events, yields
    /// partial text only when streaming, and moves usage onto the next content event.
    fn shape(&self, mut item: FlowItem, usage: &mut Option<UsageMetadata>) -> Option<FlowItem> {
        let Mode::Turn { streaming } = self.mode else {
            return Some(item);
        };
        let event = &mut item.event;
        if event.content.is_none() && event.error_code.is_none() && !event.actions_changed() {
            if let Some(u) = event.usage_metadata.take() {
                *usage = Some(u);
            }
            return None;
        }
        if event.is_partial() {
            return streaming.then_some(item);
        }
        event.turn_complete = None;
        event.interrupted = None;
        if event.content.is_some() && event.usage_metadata.is_none() {
            event.usage_metadata = usage.take();
        }
        Some(item)
    }

    /// Keeps the model's latest resumption handle with the session (live runs only), so a run
    /// on any node can resume the model's context; written beside the run, never in its way.
    fn store_handle(&self, handle: &str) {
        if let Some(handles) = &self.handles {
            handles.keep(handle);
        }
    }

    /// Commits an event (when ADK's live rule says so) and records its state for the run. Returns
    /// the event, then an error event if the commit failed.
    async fn commit(&self, session: &mut RunSession, event: Event) -> Vec<Event> {
        let committed = self.commit_all(session, vec![FlowItem::emit(event)]).await;
        committed.into_iter().map(|item| item.event).collect()
    }

    /// A stored event that reports usage carries the session's new totals in its state delta,
    /// with the audio each way so far: committed with it, so they are as current as the store.
    fn add_usage(&self, event: &mut Event) {
        let Some(usage) = &event.usage_metadata else {
            return;
        };
        let Ok(mut totals) = self.usage.lock() else {
            return;
        };
        totals.add(usage);
        let (audio_in, audio_out) = self.run_config.audio.seconds();
        let mut current = *totals;
        current.audio_seconds_in += audio_in;
        current.audio_seconds_out += audio_out;
        drop(totals);
        event
            .actions
            .state_delta
            .insert(super::usage::USAGE_STATE_KEY.into(), current.to_value());
    }

    /// Commits items in order (those ADK's live rule stores, together) and records their state
    /// for the run, in order. Returns each event with whether to yield it, each failed one
    /// followed by an error event (always yielded).
    async fn commit_all(&self, session: &mut RunSession, items: Vec<FlowItem>) -> Vec<FlowItem> {
        let mut out = Vec::with_capacity(items.len());
        // Where in `out` each stored event goes, with its full delta: `temp:` keys are stripped
        // from what is stored but the rest of the run still sees them.
        let mut stored = Vec::new();
        let mut to_store = Vec::new();
        for FlowItem {
            mut event,
            emit,
            store,
        } in items
        {
            if let Some(handle) = event
                .live_session_resumption_update
                .as_ref()
                .and_then(|update| update.new_handle.as_deref())
            {
                self.store_handle(handle);
            }
            if let Some(extra) = &self.run_config.custom_metadata {
                let merged = event.custom_metadata.get_or_insert_with(Map::new);
                for (k, v) in extra {
                    merged.entry(k.clone()).or_insert_with(|| v.clone());
                }
            }
            if store && event.is_persisted_in_live() {
                self.add_usage(&mut event);
                stored.push((out.len(), event.actions.state_delta.clone()));
                to_store.push(event.clone());
            }
            out.push(FlowItem { event, emit, store });
        }
        if to_store.is_empty() {
            return out;
        }
        let (count, started) = (to_store.len(), std::time::Instant::now());
        let outcomes = self
            .sessions
            .append_events(&mut session.session, to_store)
            .await;
        let failed = outcomes.iter().filter(|o| o.is_err()).count();
        self.commits.add(count, failed, started.elapsed());
        session.drop_events();
        let inv = &self.invocation.invocation_id;
        let mut failed = Vec::new();
        for ((at, delta), outcome) in stored.into_iter().zip(outcomes) {
            match outcome {
                Ok(event) => {
                    self.invocation.commit_state(&delta);
                    out[at].event = event;
                }
                Err(error) => {
                    if matches!(error, SessionError::Fenced(_)) {
                        // Another run holds the session now: this one writes nothing more.
                        self.invocation.end();
                    }
                    tracing::error!(%error, invocation_id = inv, "committing an event failed");
                    let message = format!("could not save event: {error}");
                    failed.push((
                        at,
                        Event::error(inv, &out[at].event.author, error.code(), message),
                    ));
                }
            }
        }
        // From the back, so the places of earlier failures still hold.
        for (at, error) in failed.into_iter().rev() {
            out.insert(at + 1, FlowItem::emit(error));
        }
        out
    }
}

/// What starting an agent led to.
enum Entered {
    /// A sequence: its first step runs (nobody: the run ends).
    Step(Option<Agent>),
    /// A before-agent callback answered for the agent: the run ends with these events.
    Answered(Vec<Event>),
    /// The model-backed agent runs its flow, after these events (its callbacks' changes).
    Run(Arc<LlmAgent>, Vec<Event>),
}

/// One run's progress through the agent tree, with the named steps [`Drive::run`] takes.
struct DriveRun {
    drive: Drive,
    session: RunSession,
    /// The client's requests, between flows.
    requests: Option<LiveRequestReceiver>,
    /// Turn-based runs carry usage on the content event it belongs to.
    usage: Option<UsageMetadata>,
    /// The model's stored resumption handle, for the run's first flow.
    resume: Option<String>,
}

impl DriveRun {
    fn new(mut drive: Drive, session: Session, requests: LiveRequestReceiver) -> Self {
        if drive.mode == Mode::Live {
            let sessions = Arc::clone(&drive.sessions);
            let keeper = HandleKeeper::new(sessions, &session, drive.background.clone());
            drive.handles = Some(keeper);
        }
        DriveRun {
            resume: drive.resume.take(),
            drive,
            session: RunSession {
                session,
                events_complete: true,
            },
            requests: Some(requests),
            usage: None,
        }
    }

    fn invocation_id(&self) -> &str {
        &self.drive.invocation.invocation_id
    }

    /// Starts an agent: its before-agent callbacks, and what runs next.
    async fn enter(&mut self, agent: &Agent) -> Entered {
        let llm = match agent {
            Agent::Sequential(sequence) => {
                let ctx = Context::new(self.drive.invocation.clone(), &sequence.name, None);
                if let Some(content) = sequence.callbacks.run_before_agent(&ctx).await {
                    let event = callback_event(&ctx, Some(content));
                    return Entered::Answered(self.drive.commit(&mut self.session, event).await);
                }
                return Entered::Step(sequence.sub_agents.first().cloned());
            }
            Agent::Llm(llm) => llm.clone(),
        };
        let ctx = Context::new(self.drive.invocation.clone(), &llm.name, None);
        match llm.callbacks.run_before_agent(&ctx).await {
            Some(content) => {
                // The callback answered for the agent: the agent is skipped and the run ends.
                let event = callback_event(&ctx, Some(content));
                Entered::Answered(self.drive.commit(&mut self.session, event).await)
            }
            None if ctx.has_changes() => {
                let event = callback_event(&ctx, None);
                let events = self.drive.commit(&mut self.session, event).await;
                Entered::Run(llm, events)
            }
            None => Entered::Run(llm, Vec::new()),
        }
    }

    /// Reloads the session's events for the next flow's history when the run dropped them; the
    /// error event to yield if that failed.
    async fn load_events(&mut self, llm: &LlmAgent) -> Option<Event> {
        if self.session.events_complete {
            return None;
        }
        let error = self.drive.reload_events(&mut self.session).await.err()?;
        let inv = self.invocation_id();
        tracing::error!(%error, invocation_id = inv, "loading the session's events failed");
        let message = format!("could not load the conversation so far: {error}");
        Some(Event::error(inv, &llm.name, error.code(), message))
    }

    /// The agent's flow, resuming the model's context on the run's first flow.
    fn flow(&mut self, llm: &Arc<LlmAgent>) -> LiveFlow {
        let mut flow = self.drive.flow_for(llm, &self.session.session);
        if let (Some(handle), Some(resumption)) = (
            self.resume.take(),
            flow.connect_config.session_resumption.as_mut(),
        ) {
            resumption.handle = Some(handle);
        }
        // The flow has its history; the events need not stay in memory (see RunSession).
        self.session.drop_events();
        flow
    }

    /// Takes the flow's next event and what it has ready behind it, commits them, and returns
    /// each with whether to yield it, and whether the flow is done; None once it is.
    async fn commit_ready<S>(&mut self, items: &mut S) -> Option<(Vec<FlowItem>, bool)>
    where
        S: Stream<Item = FlowItem> + Unpin,
    {
        let first = items.next().await?;
        // What the flow has ready behind an event to store is committed with it: a turn's end
        // brings six at once. Audio is yielded as it comes, and the flow is not run past an
        // event that changes state or who runs next until it is committed.
        let mut ready = vec![first];
        let mut flow_done = false;
        while ready.len() < MAX_COMMITTED_TOGETHER
            && ready
                .last()
                .is_some_and(|item| may_gather_past(&item.event))
        {
            match items.next().now_or_never() {
                Some(Some(item)) => ready.push(item),
                Some(None) => {
                    flow_done = true;
                    break;
                }
                None => break,
            }
        }
        let ready = ready
            .into_iter()
            .filter_map(|item| self.drive.shape(item, &mut self.usage))
            .collect();
        Some((
            self.drive.commit_all(&mut self.session, ready).await,
            flow_done,
        ))
    }

    /// The flow ended: the requests come back, and the agent's after-agent callbacks run unless
    /// it failed. Returns why it ended, and the callbacks' events.
    async fn flow_ended(
        &mut self,
        llm: &LlmAgent,
        end: oneshot::Receiver<FlowEnd>,
    ) -> (FlowEndReason, Vec<Event>) {
        let FlowEnd {
            reason,
            requests: returned,
        } = end.await.unwrap_or(FlowEnd {
            reason: FlowEndReason::Failed,
            requests: None,
        });
        self.requests = returned;
        tracing::debug!(
            invocation_id = self.invocation_id(),
            agent = llm.name,
            ?reason,
            "agent's flow ended"
        );
        if reason == FlowEndReason::Failed {
            return (reason, Vec::new());
        }
        let ctx = Context::new(self.drive.invocation.clone(), &llm.name, None);
        let content = llm.callbacks.run_after_agent(&ctx).await;
        if content.is_none() && !ctx.has_changes() {
            return (reason, Vec::new());
        }
        let event = callback_event(&ctx, content);
        (reason, self.drive.commit(&mut self.session, event).await)
    }

    /// Who runs after `llm`'s flow ended for `reason`, and the error event of a transfer to an
    /// agent it may not transfer to.
    async fn hand_over(
        &mut self,
        llm: &LlmAgent,
        reason: &FlowEndReason,
    ) -> (Option<Agent>, Vec<Event>) {
        let inv = self.invocation_id();
        let next = self.drive.next_after(llm, reason);
        match (&next, reason) {
            (Some(agent), FlowEndReason::Transfer(_)) => {
                tracing::info!(
                    invocation_id = inv,
                    from = llm.name,
                    to = agent.name(),
                    "transfer"
                );
            }
            (None, FlowEndReason::Transfer(target)) => {
                let message = format!("agent {:?} cannot transfer to {target:?}", llm.name);
                let error = Event::error(inv, &llm.name, "INVALID_ARGUMENT", message);
                return (next, self.drive.commit(&mut self.session, error).await);
            }
            _ => {}
        }
        (next, Vec::new())
    }
}

/// Most events the run takes from a flow's ready ones to commit together.
const MAX_COMMITTED_TOGETHER: usize = 32;

/// True if the run may take the flow's next ready event before committing this one: it is to be
/// stored (an event that is not, such as audio, goes out at once), changes no state (which tools
/// and callbacks read as committed) and does not hand the run to another agent.
fn may_gather_past(event: &Event) -> bool {
    event.is_persisted_in_live()
        && event.actions.state_delta.is_empty()
        && event.actions.transfer_to_agent.is_none()
        && event.actions.escalate.is_none()
}

/// The event of an agent callback: its content (as the agent's answer) and its state changes.
fn callback_event(ctx: &Context, content: Option<Content>) -> Event {
    let mut event = Event::new(ctx.invocation_id(), ctx.agent_name());
    event.content = content.map(|mut c| {
        c.role.get_or_insert_with(|| "model".into());
        c
    });
    event.actions = ctx.take_actions();
    event
}
