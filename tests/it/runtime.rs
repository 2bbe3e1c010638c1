//! The ADK runtime through `Runner` on the `sim` model: tools, callbacks, multi-agent runs, state
//! semantics and turn-based runs. (The gateway tests drive the same runtime over sockets.)

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::stream::BoxStream;
use futures::StreamExt;
use livegate::agent::{Agent, Callbacks, FunctionTool, LlmAgent, SequentialAgent, ToolError};
use livegate::artifact::InMemoryArtifactService;
use livegate::event::{Content, Event};
use livegate::live::{live_request_queue, LiveRequestQueue, RunConfig};
use livegate::model::sim::{SimConfig, SimModel};
use livegate::model::{LiveModel, LlmResponse, Modality, SessionResumptionConfig};
use livegate::runner::Runner;
use livegate::session::{
    Fence, GetSessionConfig, InMemorySessionService, Session, SessionError, SessionService,
};
use serde_json::{json, Map, Value};
use tokio::sync::Barrier;
use tokio::time::timeout;

const WAIT: Duration = Duration::from_secs(15);

fn sim() -> Arc<dyn LiveModel> {
    Arc::new(SimModel::new(SimConfig::instant()))
}

/// The sim, noting the history each connection was opened with.
#[derive(Debug, Default)]
struct HistoryNoted {
    sim: Option<Arc<dyn LiveModel>>,
    histories: std::sync::Mutex<Vec<Vec<Content>>>,
}

#[async_trait::async_trait]
impl LiveModel for HistoryNoted {
    fn name(&self) -> &str {
        "sim"
    }

    async fn connect(
        &self,
        config: livegate::model::LiveConnectConfig,
    ) -> Result<livegate::model::LiveConnection, livegate::model::ModelError> {
        self.histories.lock().unwrap().push(config.history.clone());
        self.sim.clone().unwrap_or_else(sim).connect(config).await
    }
}

fn runner(agent: impl Into<Agent>) -> Runner {
    Runner::new(
        "app",
        agent,
        Arc::new(InMemorySessionService::default()),
        Arc::new(InMemoryArtifactService::default()),
    )
}

fn text_config() -> RunConfig {
    RunConfig {
        response_modalities: Some(vec![Modality::Text]),
        ..RunConfig::default()
    }
}

/// A live run: its queue and its events.
struct Live {
    queue: LiveRequestQueue,
    events: BoxStream<'static, Event>,
}

impl Live {
    async fn start(runner: &Runner, session: &str) -> Live {
        let (queue, requests) = live_request_queue(16);
        let run = runner
            .run_live("u", session, requests, text_config(), Fence::none())
            .await
            .expect("run starts");
        Live {
            queue,
            events: run.events,
        }
    }

    async fn say(&self, text: &str) {
        self.queue
            .send_content(Content::text("user", text))
            .await
            .expect("queue open");
    }

    async fn next(&mut self) -> Option<Event> {
        timeout(WAIT, self.events.next())
            .await
            .expect("an event in time")
    }

    /// Events up to and including the next `turnComplete`.
    async fn turn(&mut self) -> Vec<Event> {
        let mut events = Vec::new();
        while let Some(event) = self.next().await {
            let done = event.turn_complete == Some(true);
            events.push(event);
            if done {
                return events;
            }
        }
        panic!("the run ended mid-turn: {events:#?}");
    }
}

async fn stored(runner: &Runner, session: &str) -> Session {
    runner
        .sessions
        .get_session("app", "u", session, &GetSessionConfig::default())
        .await
        .unwrap()
        .expect("session exists")
}

fn final_text(events: &[Event]) -> String {
    events
        .iter()
        .filter(|e| e.partial != Some(true) && e.content.is_some())
        .filter(|e| e.function_calls().is_empty() && e.function_responses().is_empty())
        .map(|e| e.content.as_ref().unwrap().joined_text())
        .collect::<Vec<_>>()
        .join(" ")
}

fn response_of<'a>(events: &'a [Event], tool: &str) -> &'a Value {
    events
        .iter()
        .flat_map(|e| e.function_responses())
        .find(|r| r.name == tool)
        .map(|r| &r.response)
        .unwrap_or_else(|| panic!("no response from {tool}: {events:#?}"))
}

fn default_agent() -> LlmAgent {
    LlmAgent::new("assistant", "Be brief.", sim())
        .with_tool(livegate::agent::builtin::get_current_time_tool())
        .with_tool(livegate::agent::builtin::calculate_tool())
}

#[tokio::test]
async fn a_time_question_calls_the_tool_then_answers_and_both_tool_events_are_stored() {
    let runner = runner(default_agent());
    let mut live = Live::start(&runner, "s1").await;
    live.say("what time is it in Tokyo").await;
    let events = live.turn().await;

    let call = events
        .iter()
        .position(|e| !e.function_calls().is_empty())
        .expect("a function call");
    let response = events
        .iter()
        .position(|e| !e.function_responses().is_empty())
        .expect("a function response");
    let answer = events
        .iter()
        .position(|e| {
            e.partial == Some(false)
                && e.content
                    .as_ref()
                    .is_some_and(|c| !c.joined_text().is_empty())
        })
        .expect("an answer");
    assert!(call < response && response < answer && answer < events.len() - 1);
    assert_eq!(events[call].function_calls()[0].name, "get_current_time");
    assert_eq!(
        events[call].function_calls()[0].args,
        Some(json!({"timezone": "Asia/Tokyo"}))
    );
    assert_eq!(events[call].long_running_tool_ids, Some(vec![]));
    let result = response_of(&events, "get_current_time");
    assert_eq!(result["timezone"], "Asia/Tokyo");
    assert!(result["datetime"].as_str().unwrap().ends_with("+09:00"));
    assert_eq!(events[response].author, "assistant");
    assert_eq!(
        events[response].content.as_ref().unwrap().role.as_deref(),
        Some("user")
    );
    let time = result["time"].as_str().unwrap();
    assert!(
        final_text(&events).contains(time),
        "{}",
        final_text(&events)
    );

    live.queue.close();
    while live.next().await.is_some() {}
    let session = stored(&runner, "s1").await;
    let ids: Vec<&str> = session.events.iter().map(|e| e.id.as_str()).collect();
    assert!(ids.contains(&events[call].id.as_str()));
    assert!(ids.contains(&events[response].id.as_str()));
}

#[tokio::test]
async fn two_calls_in_one_message_run_concurrently() {
    // Each tool waits for the other at a barrier: run one after the other, both would time out.
    let barrier = Arc::new(Barrier::new(2));
    let slow = |name: &str| {
        let barrier = barrier.clone();
        FunctionTool::new(
            name,
            "waits for its partner",
            json!({"type": "object"}),
            move |_, _| {
                let barrier = barrier.clone();
                async move {
                    timeout(Duration::from_secs(5), barrier.wait())
                        .await
                        .map_err(|_| ToolError::Failed("ran alone".into()))?;
                    Ok(json!({"met": true}))
                }
            },
        )
    };
    let agent = LlmAgent::new("assistant", "", sim())
        .with_tool(slow("slow_a"))
        .with_tool(slow("slow_b"));
    let runner = runner(agent);
    let mut live = Live::start(&runner, "s").await;
    live.say("please run slow_a and slow_b").await;
    let events = live.turn().await;
    let calls: Vec<Event> = events
        .iter()
        .filter(|e| !e.function_calls().is_empty())
        .cloned()
        .collect();
    assert_eq!(calls.len(), 1, "one model message");
    assert_eq!(calls[0].function_calls().len(), 2);
    let responses: Vec<&Event> = events
        .iter()
        .filter(|e| !e.function_responses().is_empty())
        .collect();
    assert_eq!(responses.len(), 1, "merged into one event");
    assert_eq!(response_of(&events, "slow_a"), &json!({"met": true}));
    assert_eq!(response_of(&events, "slow_b"), &json!({"met": true}));
}

#[tokio::test]
async fn tool_errors_become_error_responses_and_the_run_goes_on() {
    let failing = FunctionTool::sync("broken", "fails", json!({"type": "object"}), |_, _| {
        Err(ToolError::Failed("disk on fire".into()))
    });
    let runner = runner(default_agent().with_tool(failing));
    let mut live = Live::start(&runner, "s").await;
    live.say("try broken now").await;
    let events = live.turn().await;
    assert_eq!(
        response_of(&events, "broken"),
        &json!({"error": "disk on fire"})
    );
    live.say("what is 6 * 7").await;
    let events = live.turn().await;
    assert_eq!(response_of(&events, "calculate")["result"], json!(42.0));
    assert!(final_text(&events).contains("6 * 7 = 42"));
}

#[tokio::test]
async fn state_written_in_a_tool_is_committed_with_its_response_and_seen_by_the_next_tool() {
    let counter = FunctionTool::new(
        "bump",
        "counts",
        json!({"type": "object"}),
        |_, ctx| async move {
            let n = ctx.state("count").and_then(|v| v.as_u64()).unwrap_or(0) + 1;
            ctx.set_state("count", json!(n));
            // Dirty read: this step sees its own write before it is committed.
            assert_eq!(ctx.state("count"), Some(json!(n)));
            ctx.set_state("temp:scratch", json!("not stored"));
            ctx.set_state("user:bumps", json!(n));
            Ok(json!({"count": n}))
        },
    );
    let runner = runner(LlmAgent::new("assistant", "", sim()).with_tool(counter));
    let mut live = Live::start(&runner, "s").await;
    live.say("bump").await;
    let first = live.turn().await;
    let response = first
        .iter()
        .find(|e| !e.function_responses().is_empty())
        .unwrap();
    assert_eq!(response.actions.state_delta.get("count"), Some(&json!(1)));
    assert!(
        !response.actions.state_delta.contains_key("temp:scratch"),
        "temp keys are not stored"
    );
    assert_eq!(
        stored(&runner, "s").await.state.get("count"),
        Some(&json!(1))
    );
    live.say("bump").await;
    let second = live.turn().await;
    assert_eq!(response_of(&second, "bump"), &json!({"count": 2}));
    live.queue.close();
    while live.next().await.is_some() {}

    let session = stored(&runner, "s").await;
    assert_eq!(session.state.get("count"), Some(&json!(2)));
    assert!(!session.state.contains_key("temp:scratch"));
    // `user:` state is shared with the user's other sessions.
    let other = runner
        .sessions
        .create_session("app", "u", Some("other"), Map::new())
        .await
        .unwrap();
    assert_eq!(other.state.get("user:bumps"), Some(&json!(2)));
    assert!(!other.state.contains_key("count"));
}

#[tokio::test]
async fn a_before_tool_callback_value_replaces_the_tool_and_after_tool_can_rewrite() {
    let ran = Arc::new(AtomicUsize::new(0));
    let tool = {
        let ran = ran.clone();
        FunctionTool::sync("lookup", "", json!({"type": "object"}), move |_, _| {
            ran.fetch_add(1, Ordering::SeqCst);
            Ok(json!({"from": "tool"}))
        })
    };
    let callbacks = Callbacks::default()
        .before_tool(|call, _| async move {
            (call.args.as_ref()?.get("cached")? == &json!(true)).then(|| json!({"from": "cache"}))
        })
        .after_tool(|_, _, result| async move {
            (result["from"] == "tool").then(|| json!({"from": "tool", "checked": true}))
        });
    let agent = LlmAgent::new("assistant", "", sim())
        .with_tool(tool)
        .with_callbacks(callbacks);
    let runner = runner(agent);
    let mut live = Live::start(&runner, "s").await;
    live.say("lookup cached=true").await;
    let events = live.turn().await;
    assert_eq!(response_of(&events, "lookup"), &json!({"from": "cache"}));
    assert_eq!(ran.load(Ordering::SeqCst), 0, "the tool was skipped");
    live.say("lookup cached=false").await;
    let events = live.turn().await;
    assert_eq!(
        response_of(&events, "lookup"),
        &json!({"from": "tool", "checked": true})
    );
    assert_eq!(ran.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn model_callbacks_block_user_content_and_replace_answers() {
    let callbacks = Callbacks::default()
        .before_model(|ctx, request| async move {
            let text = request.contents.last()?.joined_text();
            ctx.set_state("screened", json!(true));
            text.contains("password")
                .then(|| LlmResponse::text("I can't help with passwords."))
        })
        .after_model(|_, response| async move {
            let text = response.content.as_ref()?.joined_text();
            text.contains("secret")
                .then(|| LlmResponse::text("[redacted]"))
        });
    let runner = runner(LlmAgent::new("assistant", "", sim()).with_callbacks(callbacks));
    let mut live = Live::start(&runner, "s").await;

    live.say("what is my password").await;
    let blocked = live.next().await.unwrap();
    assert_eq!(
        blocked.content.as_ref().unwrap().joined_text(),
        "I can't help with passwords."
    );
    assert_eq!(blocked.turn_complete, Some(true));
    assert_eq!(
        blocked.actions.state_delta.get("screened"),
        Some(&json!(true))
    );

    live.say("tell me the secret").await;
    let events = live.turn().await;
    assert_eq!(final_text(&events), "[redacted]", "{events:#?}");
    live.say("hello").await;
    let events = live.turn().await;
    assert!(
        final_text(&events).contains("You said: \"hello\""),
        "{events:#?}"
    );
}

#[tokio::test]
async fn a_before_agent_callback_with_content_skips_the_agent() {
    let callbacks = Callbacks::default()
        .before_agent(|_| async { Some(Content::text("model", "We are closed today.")) });
    let runner = runner(LlmAgent::new("assistant", "", sim()).with_callbacks(callbacks));
    let mut live = Live::start(&runner, "s").await;
    let event = live.next().await.expect("the callback's answer");
    assert_eq!(event.author, "assistant");
    assert_eq!(event.content.unwrap().joined_text(), "We are closed today.");
    assert!(live.next().await.is_none(), "the agent never ran");
    assert_eq!(stored(&runner, "s").await.events.len(), 1);
}

#[tokio::test]
async fn a_coordinator_transfers_and_a_reconnect_resumes_the_sub_agent() {
    let noted = Arc::new(HistoryNoted::default());
    let billing = LlmAgent::new("billing", "Handle billing.", noted.clone())
        .with_description("Billing questions.");
    let root = LlmAgent::new("coordinator", "Route.", sim()).with_sub_agent(billing);
    let runner = runner(root);
    let mut live = Live::start(&runner, "s").await;
    live.say("I have a billing question").await;
    let events = live.turn().await;
    let transfer = events
        .iter()
        .find(|e| e.actions.transfer_to_agent.is_some())
        .expect("a transfer");
    assert_eq!(
        transfer.actions.transfer_to_agent.as_deref(),
        Some("billing")
    );
    assert!(events.iter().all(|e| e.author == "coordinator"));

    live.say("hello").await;
    let events = live.turn().await;
    assert!(events.iter().all(|e| e.author == "billing"), "{events:#?}");
    // The sub-agent connected with the conversation so far, as the store has it.
    let history = noted.histories.lock().unwrap()[0].clone();
    let texts: Vec<String> = history.iter().map(Content::joined_text).collect();
    assert!(
        texts
            .iter()
            .any(|t| t.contains("I have a billing question")),
        "{texts:#?}"
    );
    assert!(
        texts.contains(&"For context:[coordinator] said: Transferring you to billing.".into()),
        "{texts:#?}"
    );
    live.queue.close();
    while live.next().await.is_some() {}

    // A new connection to the session goes on with the agent that last spoke.
    let mut again = Live::start(&runner, "s").await;
    again.say("hello again").await;
    let events = again.turn().await;
    assert!(events.iter().all(|e| e.author == "billing"), "{events:#?}");
}

#[tokio::test]
async fn a_three_step_sequence_ends_the_run_after_the_third_task_completed() {
    let step = |name: &str| Agent::from(LlmAgent::new(name, "Do your step.", sim()));
    let sequence = SequentialAgent::new("pipeline", vec![step("one"), step("two"), step("three")]);
    let runner = runner(sequence);
    let mut live = Live::start(&runner, "s").await;
    for name in ["one", "two", "three"] {
        live.say("next").await;
        let events = live.turn().await;
        assert!(
            events.iter().all(|e| e.author == name),
            "{name}: {events:#?}"
        );
        assert!(events
            .iter()
            .flat_map(|e| e.function_responses())
            .any(|r| r.name == "task_completed"));
    }
    assert!(
        live.next().await.is_none(),
        "the run ends after the last step"
    );
}

#[tokio::test]
async fn long_running_tools_are_listed_on_the_call_event() {
    let job = FunctionTool::new("start_job", "", json!({"type": "object"}), |_, _| async {
        Ok(json!({"status": "pending"}))
    })
    .long_running();
    let runner = runner(LlmAgent::new("assistant", "", sim()).with_tool(job));
    let mut live = Live::start(&runner, "s").await;
    live.say("start_job").await;
    let events = live.turn().await;
    let call = events
        .iter()
        .find(|e| !e.function_calls().is_empty())
        .unwrap();
    let id = call.function_calls()[0].id.clone().unwrap();
    assert_eq!(call.long_running_tool_ids, Some(vec![id]));
    assert!(call.is_final_response());
}

#[tokio::test]
async fn end_invocation_in_a_tool_ends_the_run() {
    let stop = FunctionTool::sync("hang_up", "", json!({"type": "object"}), |_, ctx| {
        ctx.end_invocation();
        Ok(json!({"ok": true}))
    });
    let runner = runner(LlmAgent::new("assistant", "", sim()).with_tool(stop));
    let mut live = Live::start(&runner, "s").await;
    live.say("hang_up").await;
    let mut events = Vec::new();
    while let Some(event) = live.next().await {
        events.push(event);
    }
    assert_eq!(response_of(&events, "hang_up"), &json!({"ok": true}));
}

#[tokio::test]
async fn run_async_answers_a_turn_with_tools_and_persists_it() {
    let runner = runner(default_agent());
    runner
        .sessions
        .create_session("app", "u", Some("t"), Map::new())
        .await
        .unwrap();
    let run = runner
        .run_async(
            "u",
            "t",
            Content::text("user", "what is 2^10"),
            Map::new(),
            RunConfig::default(),
            false,
        )
        .await
        .unwrap();
    let events: Vec<Event> = timeout(WAIT, run.events.collect()).await.unwrap();
    assert!(events
        .iter()
        .all(|e| e.partial != Some(true) && e.turn_complete.is_none()));
    assert_eq!(events.len(), 3, "call, response, answer: {events:#?}");
    assert_eq!(response_of(&events, "calculate")["formatted"], "1024");
    let answer = events.last().unwrap();
    assert!(answer.is_final_response());
    assert!(answer.usage_metadata.is_some(), "usage rides on the answer");
    let session = stored(&runner, "t").await;
    assert_eq!(
        session.events.len(),
        4,
        "the user's message and the three events"
    );
    assert_eq!(session.events[0].author, "user");

    // Streaming adds partial text; a missing session is an error.
    let run = runner
        .run_async(
            "u",
            "t",
            Content::text("user", "tell me a long story about the sea"),
            Map::new(),
            RunConfig::default(),
            true,
        )
        .await
        .unwrap();
    let events: Vec<Event> = timeout(WAIT, run.events.collect()).await.unwrap();
    assert!(events.iter().any(|e| e.partial == Some(true)));
    assert!(events.last().unwrap().is_final_response());
    assert!(runner
        .run_async(
            "u",
            "missing",
            Content::text("user", "hi"),
            Map::new(),
            RunConfig::default(),
            false
        )
        .await
        .is_err());
}

/// The in-memory store, noting the events each commit took and the resumption handles it was
/// given; with `handle_gate`, each handle waits for a permit before it is stored (a slow store).
#[derive(Debug, Default)]
struct NotingStore {
    store: InMemorySessionService,
    commits: std::sync::Mutex<Vec<Vec<Event>>>,
    handles: std::sync::Mutex<Vec<String>>,
    handle_gate: Option<tokio::sync::Semaphore>,
}

#[async_trait::async_trait]
impl SessionService for NotingStore {
    async fn create_session(
        &self,
        app_name: &str,
        user_id: &str,
        session_id: Option<&str>,
        state: Map<String, Value>,
    ) -> Result<Session, SessionError> {
        self.store
            .create_session(app_name, user_id, session_id, state)
            .await
    }

    async fn get_session(
        &self,
        app_name: &str,
        user_id: &str,
        session_id: &str,
        config: &GetSessionConfig,
    ) -> Result<Option<Session>, SessionError> {
        self.store
            .get_session(app_name, user_id, session_id, config)
            .await
    }

    async fn list_sessions(
        &self,
        app_name: &str,
        user_id: &str,
    ) -> Result<Vec<Session>, SessionError> {
        self.store.list_sessions(app_name, user_id).await
    }

    async fn delete_session(
        &self,
        app_name: &str,
        user_id: &str,
        session_id: &str,
    ) -> Result<(), SessionError> {
        self.store
            .delete_session(app_name, user_id, session_id)
            .await
    }

    async fn append_event(
        &self,
        session: &mut Session,
        event: Event,
    ) -> Result<Event, SessionError> {
        self.append_events(session, vec![event])
            .await
            .pop()
            .expect("one outcome")
    }

    async fn append_events(
        &self,
        session: &mut Session,
        events: Vec<Event>,
    ) -> Vec<Result<Event, SessionError>> {
        self.commits.lock().unwrap().push(events.clone());
        self.store.append_events(session, events).await
    }

    async fn ping(&self) -> Result<(), SessionError> {
        Ok(())
    }

    async fn resumption_handle(
        &self,
        app_name: &str,
        user_id: &str,
        session_id: &str,
    ) -> Result<Option<String>, SessionError> {
        self.store
            .resumption_handle(app_name, user_id, session_id)
            .await
    }

    async fn set_resumption_handle(
        &self,
        app_name: &str,
        user_id: &str,
        session_id: &str,
        handle: Option<&str>,
        fence: &Fence,
    ) -> Result<(), SessionError> {
        if let Some(gate) = &self.handle_gate {
            gate.acquire().await.expect("gate open").forget();
        }
        self.handles
            .lock()
            .unwrap()
            .extend(handle.map(str::to_owned));
        self.store
            .set_resumption_handle(app_name, user_id, session_id, handle, fence)
            .await
    }
}

#[tokio::test]
async fn a_slow_store_holds_up_no_turn_and_ends_with_the_latest_handle() {
    let store = Arc::new(NotingStore {
        handle_gate: Some(tokio::sync::Semaphore::new(0)),
        ..NotingStore::default()
    });
    let runner = Runner::new(
        "app",
        default_agent(),
        store.clone(),
        Arc::new(InMemoryArtifactService::default()),
    );
    let (queue, requests) = live_request_queue(16);
    let config = RunConfig {
        session_resumption: Some(SessionResumptionConfig::default()),
        ..text_config()
    };
    let run = runner
        .run_live("u", "s", requests, config, Fence::none())
        .await
        .unwrap();
    let mut live = Live {
        queue,
        events: run.events,
    };
    // Every turn ends, and then the run, although no handle can be stored yet.
    let mut events = Vec::new();
    for text in ["hello", "what can you do", "thanks"] {
        live.say(text).await;
        events.extend(live.turn().await);
    }
    live.queue.close();
    while let Some(event) = live.next().await {
        events.push(event);
    }
    let given: Vec<String> = events
        .into_iter()
        .filter_map(|e| e.live_session_resumption_update?.new_handle)
        .collect();
    assert_eq!(given.len(), 3, "one handle per turn: {given:?}");
    assert!(store.handles.lock().unwrap().is_empty());

    store.handle_gate.as_ref().unwrap().add_permits(16);
    timeout(WAIT, runner.settle())
        .await
        .expect("the writes end");
    let stored = store
        .store
        .resumption_handle("app", "u", "s")
        .await
        .unwrap();
    assert_eq!(stored.as_ref(), given.last(), "the latest handle is stored");
    let written = store.handles.lock().unwrap().clone();
    assert!(
        written.len() < given.len(),
        "handles overtaken while a write waited are skipped: {written:?}"
    );
}

#[tokio::test]
async fn events_ready_together_are_committed_together_but_never_past_a_state_change() {
    let counter = FunctionTool::new(
        "bump",
        "counts",
        json!({"type": "object"}),
        |_, ctx| async move {
            let n = ctx.state("count").and_then(|v| v.as_u64()).unwrap_or(0) + 1;
            ctx.set_state("count", json!(n));
            Ok(json!({"count": n}))
        },
    );
    // State changed by every piece of an answer, each of which comes with more behind it.
    let callbacks = Callbacks::default().after_model(|ctx, response| async move {
        if response.content.is_some() {
            let n = ctx.state("pieces").and_then(|v| v.as_u64()).unwrap_or(0) + 1;
            ctx.set_state("pieces", json!(n));
        }
        None
    });
    let store = Arc::new(NotingStore::default());
    let runner = Runner::new(
        "app",
        LlmAgent::new("assistant", "", sim())
            .with_tool(counter)
            .with_callbacks(callbacks),
        store.clone(),
        Arc::new(InMemoryArtifactService::default()),
    );
    let mut live = Live::start(&runner, "s").await;
    let mut yielded = Vec::new();
    for text in ["bump", "hello there", "bump"] {
        live.say(text).await;
        yielded.extend(live.turn().await);
    }
    live.queue.close();
    while let Some(event) = live.next().await {
        yielded.push(event);
    }

    let commits = store.commits.lock().unwrap().clone();
    assert!(
        commits.iter().any(|events| events.len() > 1),
        "a turn's events that come at once are committed together: {:?}",
        commits.iter().map(Vec::len).collect::<Vec<_>>()
    );
    for events in &commits {
        let (_, before) = events.split_last().expect("no empty commit");
        // The runner's own usage totals ride on usage events as they are committed; the flow
        // never reads them, so they may sit anywhere in a commit.
        assert!(
            before.iter().all(|e| e
                .actions
                .state_delta
                .keys()
                .all(|key| key == livegate::runner::usage::USAGE_STATE_KEY)),
            "only the last event of a commit may change state: {events:#?}"
        );
    }
    // The second bump saw the first one's count, committed before the flow went on.
    assert_eq!(response_of(&yielded, "bump"), &json!({"count": 1}));
    let responses: Vec<_> = yielded
        .iter()
        .flat_map(|e| e.function_responses())
        .map(|r| r.response.clone())
        .collect();
    assert_eq!(responses, vec![json!({"count": 1}), json!({"count": 2})]);
    // Everything committed was stored once, in the order it was yielded.
    let stored_ids: Vec<_> = stored(&runner, "s")
        .await
        .events
        .iter()
        .map(|e| e.id.clone())
        .collect();
    let committed_ids: Vec<_> = commits.iter().flatten().map(|e| e.id.clone()).collect();
    assert_eq!(stored_ids, committed_ids);
    let yielded_ids: Vec<_> = yielded.iter().map(|e| e.id.clone()).collect();
    let yielded_stored: Vec<_> = yielded_ids
        .iter()
        .filter(|id| stored_ids.contains(id))
        .cloned()
        .collect();
    let stored_yielded: Vec<_> = stored_ids
        .iter()
        .filter(|id| yielded_ids.contains(id))
        .cloned()
        .collect();
    assert_eq!(
        yielded_stored, stored_yielded,
        "yielded in the order stored"
    );
}
