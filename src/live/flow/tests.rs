//! The live flow against a scripted model: reconnects, errors, persistence rules, final flush.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use tokio::sync::mpsc;
use tokio::time::timeout;

use super::*;
use crate::artifact::{ArtifactScope, ArtifactService, InMemoryArtifactService};
use crate::event::{Blob, Content, SessionResumptionUpdate};
use crate::live::{live_request_queue, OnReconnect};
use crate::model::{
    GoAway, LiveConnection, LiveInput, LlmResponse, ModelError, ModelMessage,
    SessionResumptionConfig,
};

const WAIT: Duration = Duration::from_secs(5);

/// A model message carrying `response`.
fn ok(response: LlmResponse) -> ModelMessage {
    Ok(Box::new(response))
}

/// One connection the flow opened: its config, what it sends, and a way to answer.
struct Upstream {
    config: LiveConnectConfig,
    inputs: crate::model::InputReceiver,
    responses: mpsc::Sender<ModelMessage>,
}

/// A model whose connections are handed to the test.
#[derive(Debug)]
struct ScriptedModel {
    connections: mpsc::Sender<Upstream>,
}

impl std::fmt::Debug for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Upstream")
    }
}

#[async_trait]
impl LiveModel for ScriptedModel {
    fn name(&self) -> &str {
        "scripted"
    }

    async fn connect(&self, config: LiveConnectConfig) -> Result<LiveConnection, ModelError> {
        let (sender, inputs) = crate::byte_channel::channel(16, usize::MAX);
        let (responses, receiver) = mpsc::channel(16);
        self.connections
            .send(Upstream {
                config,
                inputs,
                responses,
            })
            .await
            .map_err(|_| ModelError::Gone)?;
        Ok(LiveConnection { sender, receiver })
    }
}

fn flow(
    record: bool,
) -> (
    LiveFlow,
    mpsc::Receiver<Upstream>,
    Arc<InMemoryArtifactService>,
) {
    let (connections, upstreams) = mpsc::channel(4);
    let artifacts = Arc::new(InMemoryArtifactService::default());
    let flow = LiveFlow {
        model: Arc::new(ScriptedModel { connections }),
        connect_config: LiveConnectConfig::default(),
        run_config: RunConfig {
            save_live_blob: record,
            ..RunConfig::default()
        },
        target: RecordingTarget {
            artifacts: Some(artifacts.clone()),
            app_name: "app".into(),
            user_id: "u".into(),
            session_id: "s".into(),
            invocation_id: "e-1".into(),
            agent_name: "agent".into(),
        },
        hooks: Arc::new(NoHooks),
        prompt: None,
        single_turn: false,
        handoff_delay: DEFAULT_HANDOFF_DELAY,
        history: None,
    };
    (flow, upstreams, artifacts)
}

async fn next<S: futures::Stream<Item = FlowItem> + Unpin>(items: &mut S) -> FlowItem {
    timeout(WAIT, items.next())
        .await
        .expect("an item in time")
        .expect("stream goes on")
}

/// Polls the flow to its end in the background, as the runner does.
fn drain(
    flow: LiveFlow,
    requests: crate::live::LiveRequestReceiver,
) -> tokio::task::JoinHandle<Vec<FlowItem>> {
    tokio::spawn(async move { flow.run(requests).0.collect::<Vec<_>>().await })
}

#[tokio::test]
async fn user_text_is_committed_not_yielded_and_sent_as_a_complete_turn() {
    let (flow, mut upstreams, _) = flow(false);
    let (queue, requests) = live_request_queue(8);
    let run = drain(flow, requests);
    queue
        .send_content(Content::text("user", "hi"))
        .await
        .unwrap();
    let mut up = upstreams.recv().await.unwrap();
    let sent = timeout(WAIT, up.inputs.recv()).await.unwrap().unwrap();
    assert!(matches!(
        sent,
        LiveInput::Content {
            turn_complete: true,
            ..
        }
    ));
    queue.close();
    drop(up);
    let out = timeout(WAIT, run)
        .await
        .expect("the run ends after close")
        .unwrap();
    assert_eq!(out.len(), 1);
    assert!(!out[0].emit, "user content is persisted only");
    assert_eq!(out[0].event.author, "user");
}

#[tokio::test]
async fn go_away_reconnects_with_the_latest_handle_without_an_event() {
    let (flow, mut upstreams, _) = flow(false);
    let (queue, requests) = live_request_queue(8);
    let poll = drain(flow, requests);
    let first = upstreams.recv().await.unwrap();
    let update = SessionResumptionUpdate {
        new_handle: Some("h-1".into()),
        resumable: Some(true),
    };
    first
        .responses
        .send(ok(LlmResponse {
            session_resumption_update: Some(update),
            ..LlmResponse::default()
        }))
        .await
        .unwrap();
    first
        .responses
        .send(ok(LlmResponse {
            go_away: Some(GoAway::default()),
            ..LlmResponse::default()
        }))
        .await
        .unwrap();
    let second = timeout(WAIT, upstreams.recv()).await.unwrap().unwrap();
    assert_eq!(
        second
            .config
            .session_resumption
            .as_ref()
            .and_then(|r| r.handle.as_deref()),
        Some("h-1")
    );
    // The conversation goes on over the new connection.
    queue
        .send_content(Content::text("user", "still there?"))
        .await
        .unwrap();
    let mut second = second;
    assert!(matches!(
        timeout(WAIT, second.inputs.recv()).await.unwrap(),
        Some(LiveInput::Content { .. })
    ));
    queue.close();
    drop(second);
    drop(first);
    let out = timeout(WAIT, poll).await.unwrap().unwrap();
    assert!(
        out.iter().all(|i| i.event.error_code.is_none()),
        "no error event: {out:?}"
    );
    assert!(out
        .iter()
        .any(|i| i.event.live_session_resumption_update.is_some()));
}

#[tokio::test]
async fn an_unrecoverable_error_is_an_error_event_then_the_end() {
    let (flow, mut upstreams, _) = flow(false);
    let (_queue, requests) = live_request_queue(8);
    let mut items = Box::pin(flow.run(requests).0);
    let poll = tokio::spawn(async move {
        let up = upstreams.recv().await.unwrap();
        up.responses
            .send(Err(ModelError::Closed {
                code: 1011,
                reason: "boom".into(),
            }))
            .await
            .unwrap();
        up
    });
    let item = next(&mut items).await;
    assert_eq!(item.event.error_code.as_deref(), Some("INTERNAL"));
    assert!(item.event.error_message.unwrap().contains("boom"));
    assert!(timeout(WAIT, items.next()).await.unwrap().is_none());
    drop(poll);
}

#[tokio::test]
async fn pending_recordings_are_flushed_when_the_run_ends() {
    let (flow, mut upstreams, artifacts) = flow(true);
    let (queue, requests) = live_request_queue(8);
    let poll = drain(flow, requests);
    let mut up = upstreams.recv().await.unwrap();
    // Speech, not silence (a silent tail would not be saved): samples of 0x1010.
    queue
        .send_realtime(Blob::new(
            Bytes::from(vec![0x10u8; 640]),
            "audio/pcm;rate=16000",
        ))
        .await
        .unwrap();
    assert!(timeout(WAIT, up.inputs.recv()).await.unwrap().is_some());
    let audio = Content::blob(
        "model",
        Blob::new(Bytes::from(vec![2u8; 960]), "audio/pcm;rate=24000"),
    );
    up.responses
        .send(ok(LlmResponse {
            content: Some(audio),
            ..LlmResponse::default()
        }))
        .await
        .unwrap();
    // The client leaves mid-turn: no turnComplete ever comes.
    queue.close();
    drop(up);
    let out = timeout(WAIT, poll).await.unwrap().unwrap();
    let files: Vec<_> = out
        .iter()
        .filter(|i| {
            i.event
                .content
                .as_ref()
                .is_some_and(|c| c.parts[0].file_data.is_some())
        })
        .collect();
    assert_eq!(files.len(), 2, "input and output recordings: {out:?}");
    let scope = ArtifactScope {
        app_name: "app",
        user_id: "u",
        session_id: "s",
    };
    let names = artifacts.list_names(scope).await.unwrap();
    assert_eq!(names.len(), 2, "{names:?}");
}

#[tokio::test]
async fn a_model_that_keeps_hanging_up_ends_the_run_with_an_error() {
    let (mut flow, mut upstreams, _) = flow(false);
    flow.connect_config.session_resumption = Some(SessionResumptionConfig {
        handle: Some("h".into()),
        transparent: None,
    });
    let reconnects = Arc::new(std::sync::atomic::AtomicU32::new(0));
    flow.run_config.on_reconnect = OnReconnect::new({
        let reconnects = Arc::clone(&reconnects);
        move || {
            reconnects.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    });
    let (_queue, requests) = live_request_queue(8);
    let run = drain(flow, requests);
    let mut connects = 0;
    while let Ok(Some(up)) = timeout(WAIT, upstreams.recv()).await {
        connects += 1;
        drop(up); // hang up at once, every time
        if connects > MAX_RECONNECT_ATTEMPTS + 1 {
            break;
        }
    }
    let out = timeout(WAIT, run).await.expect("the run ends").unwrap();
    assert_eq!(connects, MAX_RECONNECT_ATTEMPTS + 1);
    assert_eq!(
        reconnects.load(std::sync::atomic::Ordering::Relaxed),
        MAX_RECONNECT_ATTEMPTS,
        "every connect after the first is reported"
    );
    assert_eq!(
        out.last().and_then(|i| i.event.error_code.as_deref()),
        Some("UNAVAILABLE")
    );
}

/// Hooks whose tools never finish; dropping a call's future (an abort) is reported.
#[derive(Debug)]
struct StuckTools {
    started: mpsc::Sender<()>,
    dropped: mpsc::Sender<()>,
}

struct ReportDrop(mpsc::Sender<()>);

impl Drop for ReportDrop {
    fn drop(&mut self) {
        let _ = self.0.try_send(());
    }
}

#[async_trait]
impl FlowHooks for StuckTools {
    async fn call_tools(&self, _event: Event, _to_model: mpsc::Sender<LiveInput>) -> Option<Event> {
        let _guard = ReportDrop(self.dropped.clone());
        let _ = self.started.send(()).await;
        std::future::pending().await
    }
}

#[tokio::test]
async fn a_tool_call_cancellation_stops_the_running_tool() {
    let (mut flow, mut upstreams, _) = flow(false);
    let (dropped, mut was_dropped) = mpsc::channel(1);
    let (started, mut was_started) = mpsc::channel(1);
    flow.hooks = Arc::new(StuckTools { started, dropped });
    let (queue, requests) = live_request_queue(8);
    let (items, _end) = flow.run(requests);
    let mut items = Box::pin(items);
    let up = tokio::spawn(async move {
        let up = upstreams.recv().await.unwrap();
        let call = crate::event::FunctionCall {
            id: Some("function-call-7".into()),
            args: None,
            name: "slow".into(),
        };
        up.responses
            .send(ok(LlmResponse {
                tool_calls: vec![call],
                ..LlmResponse::default()
            }))
            .await
            .unwrap();
        up
    });
    let call = next(&mut items).await;
    assert_eq!(call.event.function_calls().len(), 1);
    let up = up.await.unwrap();
    // Poll the flow from here on: it starts the tool and then reads the cancellation.
    let polled = tokio::spawn(async move {
        let mut told = None;
        while let Some(item) = items.next().await {
            let metadata = item.event.custom_metadata.as_ref();
            if let Some(cancelled) = metadata.and_then(|m| m.get(TOOL_CALL_CANCELLATION)) {
                told = Some(cancelled.clone());
            }
        }
        told
    });
    timeout(WAIT, was_started.recv())
        .await
        .expect("the tool starts");
    up.responses
        .send(ok(LlmResponse {
            tool_call_cancellations: vec!["function-call-7".into()],
            ..LlmResponse::default()
        }))
        .await
        .unwrap();
    timeout(WAIT, was_dropped.recv())
        .await
        .expect("the tool is stopped")
        .unwrap();
    queue.close();
    drop(up);
    let told = timeout(WAIT, polled).await.unwrap().unwrap();
    assert_eq!(
        told,
        Some(serde_json::json!({"ids": ["function-call-7"]})),
        "the client is told which call stopped"
    );
}

/// Hooks whose tools answer at once with `{"ok": true}`.
#[derive(Debug)]
struct InstantTools;

#[async_trait]
impl FlowHooks for InstantTools {
    async fn call_tools(&self, event: Event, _to_model: mpsc::Sender<LiveInput>) -> Option<Event> {
        let parts = event
            .function_calls()
            .into_iter()
            .map(|c| crate::event::Part {
                function_response: Some(crate::event::FunctionResponse {
                    id: c.id.clone(),
                    name: c.name.clone(),
                    response: serde_json::json!({"ok": true}),
                    scheduling: None,
                }),
                ..crate::event::Part::default()
            })
            .collect();
        let mut response = Event::new("e-1", "agent");
        response.content = Some(Content {
            parts,
            role: Some("user".into()),
        });
        Some(response)
    }
}

#[tokio::test]
async fn a_single_turn_waits_for_the_answer_to_its_tool_results() {
    // Gemini 2.5 ends the tool-call turn before it has the results; the answer comes in a new turn.
    let (mut flow, mut upstreams, _) = flow(false);
    flow.hooks = Arc::new(InstantTools);
    flow.single_turn = true;
    flow.prompt = Some(Content::text("user", "use the tool"));
    let (_queue, requests) = live_request_queue(8);
    let run = drain(flow, requests);
    let mut up = upstreams.recv().await.unwrap();
    assert!(matches!(
        up.inputs.recv().await,
        Some(LiveInput::Content { .. })
    ));
    let call = crate::event::FunctionCall {
        id: Some("function-call-1".into()),
        args: None,
        name: "tool".into(),
    };
    up.responses
        .send(ok(LlmResponse {
            tool_calls: vec![call],
            ..LlmResponse::default()
        }))
        .await
        .unwrap();
    let sent = timeout(WAIT, up.inputs.recv()).await.unwrap();
    assert!(matches!(sent, Some(LiveInput::ToolResponse(_))), "{sent:?}");
    // The tool-call turn ends after the results went up, then the answer follows.
    for response in [
        LlmResponse {
            turn_complete: true,
            ..LlmResponse::default()
        },
        LlmResponse::text("It worked."),
        LlmResponse {
            turn_complete: true,
            ..LlmResponse::default()
        },
    ] {
        up.responses.send(ok(response)).await.unwrap();
    }
    let items = timeout(WAIT, run).await.expect("the turn ends").unwrap();
    let texts: Vec<String> = items
        .iter()
        .filter_map(|i| i.event.content.as_ref())
        .map(Content::joined_text)
        .collect();
    assert!(texts.iter().any(|t| t == "It worked."), "{texts:?}");
}

/// Polls the flow, which must yield nothing, until the model has had `count` inputs in all.
async fn model_inputs<S: futures::Stream<Item = FlowItem> + Unpin>(
    items: &mut S,
    up: &mut Upstream,
    inputs: &mut Vec<LiveInput>,
    count: usize,
) {
    timeout(WAIT, async {
        while inputs.len() < count {
            tokio::select! {
                item = items.next() => panic!("unexpected item {item:?}"),
                input = up.inputs.recv() => inputs.push(input.expect("the send loop is alive")),
            }
        }
    })
    .await
    .expect("the model's inputs in time");
}

#[tokio::test]
async fn media_sent_after_content_reaches_the_model_after_it() {
    let (flow, mut upstreams, artifacts) = flow(true);
    let (queue, requests) = live_request_queue(8);
    let (items, _end) = flow.run(requests);
    tokio::pin!(items);
    queue
        .send_content(Content::text("user", "hi"))
        .await
        .unwrap();
    // The flow yields the user's content to be committed; until it is polled again it does not
    // acknowledge the commit, so the send loop holds the content.
    let committed = next(&mut items).await;
    assert_eq!(committed.event.author, "user");
    let mut up = upstreams.recv().await.unwrap();
    let frame = |n: u8| Blob::new(Bytes::from(vec![n; 640]), "audio/pcm;rate=16000");
    queue.send_realtime(frame(1)).await.unwrap();
    assert!(
        up.inputs.try_recv().is_err(),
        "nothing reaches the model before the content is committed"
    );
    let mut inputs = Vec::new();
    model_inputs(&mut items, &mut up, &mut inputs, 2).await;
    assert!(matches!(inputs[0], LiveInput::Content { .. }), "{inputs:?}");
    assert!(
        matches!(&inputs[1], LiveInput::Realtime(b) if b.data[0] == 1),
        "{inputs:?}"
    );

    // Later frames (past the send loop or through it) are recorded in order with the first.
    for n in 2..=4 {
        queue.send_realtime(frame(n)).await.unwrap();
    }
    model_inputs(&mut items, &mut up, &mut inputs, 5).await;
    let order: Vec<u8> = inputs[1..]
        .iter()
        .map(|i| match i {
            LiveInput::Realtime(b) => b.data[0],
            other => panic!("not a frame: {other:?}"),
        })
        .collect();
    assert_eq!(order, [1, 2, 3, 4]);
    queue.close();
    drop(up);
    let _: Vec<FlowItem> = timeout(WAIT, items.collect()).await.expect("the flow ends");
    let scope = ArtifactScope {
        app_name: "app",
        user_id: "u",
        session_id: "s",
    };
    let names = artifacts.list_names(scope).await.unwrap();
    let input = names
        .iter()
        .find(|n| n.contains("input"))
        .expect("an input recording");
    let saved = artifacts.load(scope, input, None).await.unwrap().unwrap();
    let want: Vec<u8> = (1..=4u8).flat_map(|n| vec![n; 640]).collect();
    assert_eq!(saved.data.as_ref(), want.as_slice());
}
