//! Tools over the gateway: the default agent's built-in tools on a live socket, HTTP tools from an
//! agent file against a loopback endpoint, and the turn-based `/run` and `/run_sse` routes.

use std::net::SocketAddr;
use std::time::Duration;

use crate::common::*;
use axum::routing::post;
use axum::{Json, Router};
use livegate::session::GetSessionConfig;
use serde_json::{json, Value};
use tokio::time::timeout;

fn calls_of(events: &[Value]) -> Vec<&Value> {
    events
        .iter()
        .flat_map(|e| e["content"]["parts"].as_array().into_iter().flatten())
        .filter_map(|p| p.get("functionCall"))
        .collect()
}

fn responses_of(events: &[Value]) -> Vec<&Value> {
    events
        .iter()
        .flat_map(|e| e["content"]["parts"].as_array().into_iter().flatten())
        .filter_map(|p| p.get("functionResponse"))
        .collect()
}

fn position(events: &[Value], pred: impl Fn(&Value) -> bool) -> usize {
    events
        .iter()
        .position(pred)
        .unwrap_or_else(|| panic!("no such event in {events:#?}"))
}

#[tokio::test]
async fn the_default_agent_answers_a_time_question_with_its_tool() {
    let server = start(test_args()).await;
    let mut client = Client::connect(server.addr, "u1", "tokyo", "modality=TEXT").await;
    client.send_text("what time is it in Tokyo").await;
    let events = client.events_until_turn_complete().await;

    let call = position(&events, |e| !calls_of(std::slice::from_ref(e)).is_empty());
    let response = position(&events, |e| {
        !responses_of(std::slice::from_ref(e)).is_empty()
    });
    let answer = position(&events, |e| e["partial"] == false && !text_of(e).is_empty());
    assert!(
        call < response && response < answer && answer < events.len() - 1,
        "{events:#?}"
    );
    assert_eq!(calls_of(&events)[0]["name"], "get_current_time");
    assert_eq!(
        calls_of(&events)[0]["args"],
        json!({"timezone": "Asia/Tokyo"})
    );
    let result = &responses_of(&events)[0]["response"];
    assert_eq!(result["timezone"], "Asia/Tokyo");
    assert!(text_of(&events[answer]).contains(result["time"].as_str().unwrap()));
    client.close().await;

    let session = server
        .gateway()
        .runner
        .get_or_create_session("u1", "tokyo")
        .await
        .unwrap();
    let stored: Vec<&str> = session.events.iter().map(|e| e.id.as_str()).collect();
    for i in [call, response] {
        assert!(
            stored.contains(&events[i]["id"].as_str().unwrap()),
            "event {i} is stored"
        );
    }
    server.shutdown(WAIT).await;
}

/// A loopback endpoint for HTTP tools: `/echo` returns the arguments, `/hang` never answers,
/// `/fail` is a 500, `/text` is not JSON.
async fn tool_endpoint() -> SocketAddr {
    let app = Router::new()
        .route(
            "/echo",
            post(|Json(args): Json<Value>| async move { Json(json!({"got": args})) }),
        )
        .route("/hang", post(std::future::pending::<String>))
        .route(
            "/fail",
            post(|| async {
                (
                    axum::http::StatusCode::INTERNAL_SERVER_ERROR,
                    "database down",
                )
            }),
        )
        .route("/text", post(|| async { "plain words" }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

#[tokio::test]
async fn http_tools_from_the_agent_file_post_the_arguments_and_errors_do_not_stop_the_run() {
    let endpoint = tool_endpoint().await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("agent.toml");
    let tool = |name: &str, path: &str| {
        format!(
            "[[http_tools]]\nname = \"{name}\"\ndescription = \"{name}\"\nurl = \"http://{endpoint}{path}\"\ntimeout_ms = 300\n"
        )
    };
    let text = format!(
        "name = \"helper\"\ninstruction = \"Use your tools.\"\n{}{}{}{}",
        tool("lookup", "/echo"),
        tool("stuck", "/hang"),
        tool("broken", "/fail"),
        tool("chatty", "/text"),
    );
    std::fs::write(&file, text).unwrap();
    let mut args = test_args();
    args.agent = Some(file);
    let server = start(args).await;
    let mut client = Client::connect(server.addr, "u", "s", "modality=TEXT").await;

    client.send_text("lookup order=42 rush=true").await;
    let events = client.events_until_turn_complete().await;
    assert_eq!(
        responses_of(&events)[0]["response"],
        json!({"got": {"order": 42, "rush": true}})
    );
    assert!(events.iter().all(|e| e["author"] != "assistant"));
    assert_eq!(events[0]["author"], "helper");

    for (name, expected) in [
        ("stuck", "timed out"),
        ("broken", "HTTP 500"),
        ("chatty", "not JSON"),
    ] {
        client.send_text(&format!("please call {name}")).await;
        let events = client.events_until_turn_complete().await;
        let error = responses_of(&events)[0]["response"]["error"]
            .as_str()
            .unwrap_or_else(|| panic!("{name}: an error response in {events:#?}"))
            .to_owned();
        assert!(error.contains(expected), "{name}: {error}");
        let answer = events
            .iter()
            .rev()
            .find(|e| e["partial"] == false && !text_of(e).is_empty());
        assert!(answer.is_some(), "the run goes on after {name}");
    }
    client.close().await;
    server.shutdown(WAIT).await;
}

#[tokio::test]
async fn a_bad_agent_file_stops_the_gateway_from_starting() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("agent.toml");
    std::fs::write(&file, "name = \"a\"\nbuiltin_tools = [\"rm_rf\"]\n").unwrap();
    let mut args = test_args();
    args.agent = Some(file);
    let error = livegate::gateway::start(&args).await.expect_err("refused");
    assert!(
        error.to_string().contains("unknown built-in tool"),
        "{error}"
    );
}

async fn post_json(addr: SocketAddr, path: &str, body: Value) -> reqwest::Response {
    timeout(
        WAIT,
        reqwest::Client::new()
            .post(format!("http://{addr}{path}"))
            .json(&body)
            .send(),
    )
    .await
    .expect("answer in time")
    .expect("request sent")
}

fn run_request(session: &str, text: &str, streaming: bool) -> Value {
    json!({
        "appName": "livegate",
        "userId": "u",
        "sessionId": session,
        "newMessage": {"role": "user", "parts": [{"text": text}]},
        "streaming": streaming,
        "stateDelta": {"mood": "curious"},
    })
}

#[tokio::test]
async fn run_returns_the_turns_events_and_persists_them() {
    let server = start(test_args()).await;
    let created = post_json(
        server.addr,
        "/apps/livegate/users/u/sessions/t1",
        json!({"state": {"k": 1}}),
    )
    .await;
    assert_eq!(created.status(), 200, "ADK's route answers 200");
    let again = post_json(server.addr, "/apps/livegate/users/u/sessions/t1", json!({})).await;
    assert_eq!(again.status(), 409);

    let reply = post_json(
        server.addr,
        "/run",
        run_request("t1", "what is 12 * (3 + 4)?", false),
    )
    .await;
    assert_eq!(reply.status(), 200);
    let events: Vec<Value> = reply.json().await.unwrap();
    for event in &events {
        adk_schema::check_event(event);
    }
    assert_eq!(events.len(), 3, "{events:#?}");
    assert_eq!(calls_of(&events)[0]["name"], "calculate");
    assert_eq!(responses_of(&events)[0]["response"]["formatted"], "84");
    assert!(text_of(&events[2]).contains("= 84"));
    assert!(events[2]["usageMetadata"].is_object());

    let session = server
        .gateway()
        .runner
        .sessions
        .get_session("livegate", "u", "t1", &GetSessionConfig::default())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(session.events.len(), 4, "the message and the three events");
    assert_eq!(session.events[0].author, "user");
    assert_eq!(session.state.get("mood"), Some(&json!("curious")));
    assert_eq!(session.state.get("k"), Some(&json!(1)));

    let missing = post_json(server.addr, "/run", run_request("nope", "hi", false)).await;
    assert_eq!(missing.status(), 404);
    let bad = post_json(server.addr, "/run", json!({"appName": "livegate"})).await;
    assert_eq!(bad.status(), 400);
    let body: Value = bad.json().await.unwrap();
    assert!(body["error"]
        .as_str()
        .unwrap()
        .contains("invalid run request"));
    server.shutdown(WAIT).await;
}

#[tokio::test]
async fn run_sse_streams_each_event_as_a_server_sent_event() {
    let server = start(test_args()).await;
    post_json(server.addr, "/apps/livegate/users/u/sessions/t2", json!({})).await;
    let reply = post_json(
        server.addr,
        "/run_sse",
        run_request("t2", "tell me about the sea and the sky", true),
    )
    .await;
    assert_eq!(reply.status(), 200);
    assert!(reply.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/event-stream"));
    let body = timeout(WAIT, reply.text()).await.unwrap().unwrap();
    let events: Vec<Value> = body
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|d| serde_json::from_str(d).expect("each data line is an event"))
        .collect();
    for event in &events {
        adk_schema::check_event(event);
    }
    let partials: String = events
        .iter()
        .filter(|e| e["partial"] == true)
        .map(text_of)
        .collect();
    let last = events.last().expect("events");
    assert_eq!(last["partial"], false);
    assert_eq!(
        text_of(last),
        partials,
        "the final text is the streamed partials"
    );
    assert!(text_of(last).contains("You said"));
    server.shutdown(WAIT).await;
}

#[tokio::test]
async fn run_sse_without_streaming_sends_only_final_events() {
    let server = start(test_args()).await;
    post_json(server.addr, "/apps/livegate/users/u/sessions", json!({})).await;
    post_json(server.addr, "/apps/livegate/users/u/sessions/t3", json!({})).await;
    let reply = post_json(server.addr, "/run_sse", run_request("t3", "hello", false)).await;
    let body = timeout(Duration::from_secs(20), reply.text())
        .await
        .unwrap()
        .unwrap();
    let events: Vec<&str> = body
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .collect();
    assert_eq!(events.len(), 1, "{body}");
}

/// A loopback endpoint whose `/book` answers `{"booked": <arguments>}` only once the test lets
/// it: one call a permit.
async fn gated_endpoint() -> (SocketAddr, std::sync::Arc<tokio::sync::Semaphore>) {
    let gate = std::sync::Arc::new(tokio::sync::Semaphore::new(0));
    let open = gate.clone();
    let app = Router::new().route(
        "/book",
        post(move |Json(args): Json<Value>| {
            let open = open.clone();
            async move {
                if let Ok(permit) = open.acquire().await {
                    permit.forget();
                }
                Json(json!({ "booked": args }))
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (addr, gate)
}

/// A gateway whose agent has the non-blocking HTTP tool `book` (with `scheduling`), on `args`'
/// model; the endpoint's gate holds each call until the test opens it.
pub(crate) async fn gateway_with_booking(
    mut args: livegate::gateway::ServeArgs,
    scheduling: &str,
) -> (
    livegate::gateway::Server,
    std::sync::Arc<tokio::sync::Semaphore>,
    tempfile::TempDir,
) {
    let (endpoint, gate) = gated_endpoint().await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("agent.toml");
    let text = format!(
        "name = \"helper\"\ninstruction = \"Book what is asked.\"\n[[http_tools]]\nname = \"book\"\n\
         url = \"http://{endpoint}/book\"\nbehavior = \"non_blocking\"\nscheduling = \"{scheduling}\"\n"
    );
    std::fs::write(&file, text).unwrap();
    args.agent = Some(file);
    (start(args).await, gate, dir)
}

/// Asks for a booking: the call event, then the model going on with the call still running
/// (the endpoint has not answered: its gate is shut), then, once the gate opens, the result's
/// event. Returns the call's id.
async fn booking_runs_while_the_model_talks(
    client: &mut Client,
    gate: &tokio::sync::Semaphore,
    scheduling: &str,
    going_on: &str,
) -> String {
    client.send_text("book seat=12A").await;
    let events = client.events_until_turn_complete().await;
    let call = calls_of(&events)
        .first()
        .map(|c| (*c).clone())
        .unwrap_or_else(|| panic!("a call in {events:#?}"));
    assert_eq!(call["name"], "book");
    assert!(
        responses_of(&events).is_empty(),
        "the turn ends before the result: {events:#?}"
    );
    let said: String = events.iter().map(text_of).collect();
    assert!(said.contains(going_on), "the model goes on: {said}");
    gate.add_permits(1);
    let is_response = |e: &Value| !responses_of(std::slice::from_ref(e)).is_empty();
    client.frames_until(is_response).await;
    let response = client.events.iter().rev().find(|e| is_response(e)).unwrap();
    let response = responses_of(std::slice::from_ref(response))[0];
    assert_eq!(response["id"], call["id"]);
    assert_eq!(response["response"], json!({"booked": {"seat": "12A"}}));
    assert_eq!(response["scheduling"], scheduling);
    call["id"].as_str().unwrap().to_owned()
}

/// `when_idle`: the model reads the result out once it is free; `silent`: it only knows it (the
/// next turn's answer is the user's, with no word of the booking before it).
/// What the model says on going on without the result, and on reading it.
struct Says {
    going_on: &'static str,
    read: &'static str,
}

/// sim (and mock-gemini's) go on at once and read the result as a tool answer.
const SIM_SAYS: Says = Says {
    going_on: "book is running",
    read: "book returned {\"booked\"",
};

async fn non_blocking_results_are_taken_up_as_scheduled(
    args: livegate::gateway::ServeArgs,
    says: Says,
) {
    let (server, gate, _dir) = gateway_with_booking(args.clone(), "when_idle").await;
    let mut client = Client::connect(server.addr, "u", "s", "modality=TEXT").await;
    booking_runs_while_the_model_talks(&mut client, &gate, "WHEN_IDLE", says.going_on).await;
    let events = client.events_until_turn_complete().await;
    let said: String = events.iter().map(text_of).collect();
    assert!(said.contains(says.read), "the result is read: {said}");
    client.close().await;
    server.shutdown(WAIT).await;

    let (server, gate, _dir) = gateway_with_booking(args, "silent").await;
    let mut client = Client::connect(server.addr, "u", "s", "modality=TEXT").await;
    booking_runs_while_the_model_talks(&mut client, &gate, "SILENT", says.going_on).await;
    let seen = client.events.len();
    client.send_text("hello there").await;
    client
        .frames_until(|e| text_of(e).contains("hello there") && e["partial"] != true)
        .await;
    let said: String = client.events[seen..].iter().map(text_of).collect();
    assert!(
        !said.contains(says.read),
        "a silent result is not read: {said}"
    );
    client.close().await;
    server.shutdown(WAIT).await;
}

#[tokio::test]
async fn non_blocking_tools_run_while_sim_talks_and_answer_as_scheduled() {
    non_blocking_results_are_taken_up_as_scheduled(test_args(), SIM_SAYS).await;
}

#[tokio::test]
async fn non_blocking_tools_run_while_gemini_talks_and_answer_as_scheduled() {
    // mock-gemini's sim goes on only if the setup declared the tool NON_BLOCKING, and reads
    // or keeps the result only as the response's `scheduling` says.
    let (_upstream, args) = on_mock_gemini(test_args()).await;
    non_blocking_results_are_taken_up_as_scheduled(args, SIM_SAYS).await;
}

#[tokio::test]
async fn non_blocking_tools_are_emulated_on_openai() {
    // mock-openai's sim knows nothing of non-blocking tools: it goes on because the gateway
    // answered the call "running" at once, and reads the result from the system message the
    // gateway adds when the call ends (and asks a response for only when not silent).
    // mock-openai refuses a second output for a call, and a response asked for while one is
    // under way.
    let (_upstream, args) = on_mock_openai(test_args()).await;
    let says = Says {
        going_on: "\"status\":\"running\"",
        read: "Noted: The background function call book",
    };
    non_blocking_results_are_taken_up_as_scheduled(args, says).await;
}
