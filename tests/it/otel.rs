//! Traces over OTLP/HTTP: the real binary with `--otel`, exporting to an in-process OTLP receiver
//! (axum, protobuf decoded with `opentelemetry-proto`) or to a collector that never answers.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::routing::post;
use axum::{Json, Router};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use prost::Message as _;
use serde_json::{json, Value};
use tokio::sync::Notify;
use tokio::time::timeout;

use crate::common::process::{self, listening_addr, Process};
use crate::common::{
    black_hole, fixture_pcm, http_get, is_turn_complete, metric, silence, Client, WAIT,
};

/// The client's trace: every span of the call belongs to it.
const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT_SPAN: &str = "00f067aa0ba902b7";
const RUN_TRACE_ID: &str = "0af7651916cd43dd8448eb211c80319c";

/// One exported span, flattened: what the assertions read.
#[derive(Debug, Clone)]
struct Span {
    name: String,
    trace_id: String,
    span_id: String,
    parent: String,
    attributes: HashMap<String, Value>,
    service: Option<String>,
}

impl Span {
    fn attr(&self, key: &str) -> &Value {
        self.attributes.get(key).unwrap_or(&Value::Null)
    }
}

fn value_of(kv: &KeyValue) -> Value {
    match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
        Some(AnyValue::StringValue(s)) => json!(s),
        Some(AnyValue::BoolValue(b)) => json!(b),
        Some(AnyValue::IntValue(i)) => json!(i),
        Some(AnyValue::DoubleValue(d)) => json!(d),
        other => json!(format!("{other:?}")),
    }
}

/// What the receiver got, and a wake-up for each export.
#[derive(Default)]
struct Received {
    spans: Mutex<Vec<Span>>,
    arrived: Notify,
}

impl Received {
    /// Waits (bounded) until a span satisfies `found`; all spans so far.
    async fn until(&self, found: impl Fn(&Span) -> bool) -> Vec<Span> {
        let waited = timeout(WAIT, async {
            loop {
                let arrived = self.arrived.notified();
                {
                    let spans = self.spans.lock().unwrap();
                    if spans.iter().any(&found) {
                        return spans.clone();
                    }
                }
                arrived.await;
            }
        })
        .await;
        waited.unwrap_or_else(|_| {
            panic!("the span never came; got {:#?}", self.spans.lock().unwrap())
        })
    }
}

async fn receive(State(received): State<Arc<Received>>, headers: HeaderMap, body: Bytes) {
    assert_eq!(
        headers.get("content-type").unwrap(),
        "application/x-protobuf"
    );
    let request = ExportTraceServiceRequest::decode(body).expect("OTLP protobuf");
    let mut spans = received.spans.lock().unwrap();
    for resource_spans in request.resource_spans {
        let service = resource_spans.resource.as_ref().and_then(|r| {
            r.attributes
                .iter()
                .find(|kv| kv.key == "service.name")
                .and_then(|kv| value_of(kv).as_str().map(str::to_owned))
        });
        for scope in resource_spans.scope_spans {
            for span in scope.spans {
                spans.push(Span {
                    name: span.name,
                    trace_id: hex(&span.trace_id),
                    span_id: hex(&span.span_id),
                    parent: hex(&span.parent_span_id),
                    attributes: span
                        .attributes
                        .iter()
                        .map(|kv| (kv.key.clone(), value_of(kv)))
                        .collect(),
                    service: service.clone(),
                });
            }
        }
    }
    drop(spans);
    received.arrived.notify_waiters();
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// An OTLP/HTTP receiver on loopback: `POST /v1/traces` with protobuf bodies.
async fn otlp_receiver() -> (SocketAddr, Arc<Received>) {
    let received = Arc::new(Received::default());
    let app = Router::new()
        .route("/v1/traces", post(receive))
        .with_state(received.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (addr, received)
}

/// An HTTP tool's server that keeps the `traceparent` each call brought.
async fn tool_server() -> (SocketAddr, Arc<Mutex<Vec<String>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let kept = seen.clone();
    let app = Router::new().route(
        "/echo",
        post(move |headers: HeaderMap, Json(args): Json<Value>| {
            let kept = kept.clone();
            async move {
                if let Some(value) = headers.get("traceparent") {
                    kept.lock()
                        .unwrap()
                        .push(value.to_str().unwrap().to_owned());
                }
                Json(json!({"got": args}))
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (addr, seen)
}

/// The gateway binary with traces exported to `collector`, an agent with one HTTP tool.
async fn gateway(
    collector: SocketAddr,
    tool: SocketAddr,
    extra: &[(&str, &str)],
) -> (Process, SocketAddr, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let agent = dir.path().join("agent.toml");
    std::fs::write(
        &agent,
        format!(
            "name = \"helper\"\ninstruction = \"Use your tools.\"\n[[http_tools]]\nname = \"lookup\"\ndescription = \"lookup\"\nurl = \"http://{tool}/echo\"\ntimeout_ms = 2000\n"
        ),
    )
    .unwrap();
    let endpoint = format!("http://{collector}");
    let mut envs = vec![
        ("LIVEGATE_OTEL", "true"),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
        ("OTEL_SERVICE_NAME", "livegate-test"),
        ("OTEL_BSP_SCHEDULE_DELAY", "50"),
    ];
    envs.extend_from_slice(extra);
    let data = dir.path().to_str().unwrap().to_owned();
    let agent = agent.to_str().unwrap().to_owned();
    let args = [
        "--bind",
        "127.0.0.1:0",
        "--data-dir",
        &data,
        "--session-store",
        "memory:",
        "--artifact-store",
        "memory:",
        "--sim-pacing",
        "burst",
        "--sim-reply-delay-ms",
        "0",
        "--agent",
        &agent,
    ];
    let (child, line) = process::spawn(&args, &envs, "listening on").await;
    (child, listening_addr(&line), dir)
}

/// A spoken turn with a tool call (typed, answered in audio) and a spoken "hello".
async fn voice_turns(addr: SocketAddr, query: &str) {
    let mut client = Client::connect(addr, "u1", "s1", query).await;
    client.send_text("lookup order=42").await;
    client.frames_until(is_turn_complete).await;
    let mut pcm = fixture_pcm("hello.wav");
    pcm.extend(silence(1000));
    client.stream_pcm(&pcm).await;
    client.frames_until(is_turn_complete).await;
    client.close().await;
}

#[tokio::test]
async fn a_voice_call_is_one_trace_continuing_the_clients_with_the_genai_spans() {
    let (collector, received) = otlp_receiver().await;
    let (tool, traceparents) = tool_server().await;
    let (child, addr, _dir) = gateway(collector, tool, &[]).await;

    let query = format!("traceparent=00-{TRACE_ID}-{PARENT_SPAN}-01");
    voice_turns(addr, &query).await;
    let spans = received.until(|s| s.name == "livegate.connection").await;
    let call: Vec<&Span> = spans.iter().filter(|s| s.trace_id == TRACE_ID).collect();
    let named =
        |name: &str| -> Vec<&Span> { call.iter().copied().filter(|s| s.name == name).collect() };
    let connection = named("livegate.connection")[0];
    assert_eq!(connection.parent, PARENT_SPAN, "the client's trace goes on");
    assert_eq!(connection.attr("user_id"), "u1");
    assert_eq!(connection.attr("session_id"), "s1");
    assert_eq!(connection.service.as_deref(), Some("livegate-test"));
    let invocation = named("invoke_agent helper")[0];
    assert_eq!(invocation.parent, connection.span_id);
    assert_eq!(invocation.attr("gen_ai.operation.name"), "invoke_agent");
    assert_eq!(invocation.attr("gen_ai.agent.name"), "helper");
    assert_eq!(
        invocation.attr("livegate.invocation_id"),
        connection.attr("invocation_id")
    );
    assert!(
        invocation.attr("livegate.session.commits").as_i64() > Some(0),
        "{invocation:#?}"
    );

    let model = named("connect sim")[0];
    assert_eq!(model.parent, invocation.span_id);
    assert_eq!(model.attr("gen_ai.system"), "livegate.sim");
    assert_eq!(model.attr("gen_ai.request.model"), "sim");
    assert_eq!(model.attr("livegate.model.reconnect"), false);

    let turns = named("chat sim");
    assert_eq!(turns.len(), 2, "one span a turn: {turns:#?}");
    for turn in &turns {
        assert_eq!(turn.parent, invocation.span_id);
        assert_eq!(turn.attr("gen_ai.operation.name"), "chat");
        assert_eq!(turn.attr("gen_ai.system"), "livegate.sim");
        assert!(turn.attr("gen_ai.usage.input_tokens").as_i64().unwrap() > 0);
        assert!(turn.attr("gen_ai.usage.output_tokens").as_i64().unwrap() > 0);
        assert_eq!(turn.attr("livegate.turn.interrupted"), false);
    }
    // The spoken turn's first audio is timed from the end of the speech.
    assert!(turns.iter().any(|t| t
        .attr("livegate.turn.first_audio_seconds")
        .as_f64()
        .is_some()));

    let tool_span = named("execute_tool lookup")[0];
    assert!(turns.iter().any(|t| t.span_id == tool_span.parent));
    assert_eq!(tool_span.attr("gen_ai.operation.name"), "execute_tool");
    assert_eq!(tool_span.attr("gen_ai.tool.name"), "lookup");
    assert!(tool_span.attr("livegate.tool.args_bytes").as_i64().unwrap() > 0);
    assert_eq!(tool_span.attr("error.type"), &Value::Null);
    // The HTTP tool's server is handed the trace, with the tool's span as parent.
    let forwarded = traceparents.lock().unwrap().clone();
    assert_eq!(
        forwarded,
        vec![format!("00-{TRACE_ID}-{}-01", tool_span.span_id)]
    );
    assert!(!named("livegate.recording.save").is_empty());

    // A turn-based run continues the `traceparent` header the same way.
    let run = reqwest::Client::new();
    let base = format!("http://{addr}");
    run.post(format!("{base}/apps/livegate/users/u2/sessions/r1"))
        .send()
        .await
        .unwrap();
    let answer = run
        .post(format!("{base}/run"))
        .header("traceparent", format!("00-{RUN_TRACE_ID}-{PARENT_SPAN}-01"))
        .json(
            &json!({"appName": "livegate", "userId": "u2", "sessionId": "r1",
            "newMessage": {"role": "user", "parts": [{"text": "hello"}]}}),
        )
        .send()
        .await
        .unwrap();
    assert!(answer.status().is_success(), "{:?}", answer.text().await);
    let spans = received
        .until(|s| s.name == "livegate.run" && s.trace_id == RUN_TRACE_ID)
        .await;
    let run_span = spans.iter().find(|s| s.name == "livegate.run").unwrap();
    assert_eq!(run_span.parent, PARENT_SPAN);
    let spans = received
        .until(|s| s.name == "invoke_agent helper" && s.parent == run_span.span_id)
        .await;
    let invocation = spans.iter().find(|s| s.parent == run_span.span_id).unwrap();
    assert_eq!(invocation.attr("livegate.run_mode"), "turn");

    // Logs and traces meet: the connection's log lines carry the trace id.
    let output = process::output_of(child).await;
    assert!(
        output.stderr.contains(&format!("trace_id={TRACE_ID}")),
        "{}",
        output.stderr
    );
}

#[tokio::test]
async fn a_collector_that_never_answers_costs_spans_not_calls() {
    let collector = black_hole().await;
    let (tool, _) = tool_server().await;
    let (child, addr, _dir) = gateway(
        collector,
        tool,
        &[
            ("OTEL_BSP_EXPORT_TIMEOUT", "200"),
            ("OTEL_BSP_MAX_QUEUE_SIZE", "4"),
            ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "2"),
        ],
    )
    .await;
    // Every turn of several calls completes as without a collector.
    for session in ["a", "b", "c"] {
        let mut client = Client::connect(addr, "u1", session, "").await;
        client.send_text("lookup order=1").await;
        let frames = client.frames_until(is_turn_complete).await;
        assert!(!frames.is_empty());
        client.close().await;
    }
    // What could not go out is counted.
    let counted = timeout(WAIT, async {
        loop {
            let metrics = http_get(addr, "/metrics").await;
            let dropped = metric(&metrics, "livegate_trace_spans_dropped_total").unwrap_or(0.0);
            let failed = metric(&metrics, "livegate_trace_export_failures_total").unwrap_or(0.0);
            if dropped > 0.0 && failed > 0.0 {
                return metric(&metrics, "livegate_trace_spans_exported_total");
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("the drops are counted");
    assert_eq!(counted, Some(0.0));
    drop(process::output_of(child).await);
}
