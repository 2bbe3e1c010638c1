//! The REST API over real HTTP: sessions (list, create, read paginated, delete), artifacts (list,
//! download raw or as WAV), their 400/404 answers, and serving another web client (`--web-root`).

use std::net::SocketAddr;

use crate::common::*;
use serde_json::{json, Value};
use tokio::time::timeout;

fn url(addr: SocketAddr, path: &str) -> String {
    format!("http://{addr}{path}")
}

async fn send(request: reqwest::RequestBuilder) -> reqwest::Response {
    timeout(WAIT, request.send())
        .await
        .expect("answer in time")
        .expect("request sent")
}

async fn get(addr: SocketAddr, path: &str) -> reqwest::Response {
    send(reqwest::Client::new().get(url(addr, path))).await
}

async fn get_json(addr: SocketAddr, path: &str) -> (u16, Value) {
    let response = get(addr, path).await;
    let status = response.status().as_u16();
    (status, response.json().await.expect("a JSON body"))
}

async fn post_json(addr: SocketAddr, path: &str, body: Value) -> (u16, Value) {
    let response = send(reqwest::Client::new().post(url(addr, path)).json(&body)).await;
    let status = response.status().as_u16();
    (status, response.json().await.expect("a JSON body"))
}

/// A session with one spoken turn, so it has events and both recordings.
async fn spoken_session(addr: SocketAddr, session: &str) {
    let mut client = Client::connect(addr, "u1", session, "").await;
    let mut pcm = fixture_pcm("hello.wav");
    pcm.extend(silence(1000));
    client.stream_pcm(&pcm).await;
    client.events_until_turn_complete().await;
    client.close().await;
}

#[tokio::test]
async fn sessions_can_be_created_listed_read_page_by_page_and_deleted() {
    let server = start(test_args()).await;
    let addr = server.addr;
    let (status, created) = post_json(
        addr,
        "/api/sessions",
        json!({"userId": "u1", "sessionId": "a", "state": {"mood": "calm"}}),
    )
    .await;
    assert_eq!(status, 201);
    assert_eq!(
        (created["id"].as_str(), created["state"]["mood"].as_str()),
        (Some("a"), Some("calm"))
    );
    let (status, fresh) = post_json(addr, "/api/sessions", json!({"user_id": "u1"})).await;
    assert_eq!(status, 201);
    assert_eq!(fresh["id"].as_str().unwrap().len(), 36, "a generated id");
    let (status, _) = post_json(
        addr,
        "/api/sessions",
        json!({"userId": "u1", "sessionId": "a"}),
    )
    .await;
    assert_eq!(status, 409);

    spoken_session(addr, "a").await;
    timeout(WAIT, server.gateway().registry.idle())
        .await
        .unwrap();
    let (status, list) = get_json(addr, "/api/sessions?user_id=u1").await;
    assert_eq!(status, 200);
    let ids: Vec<&str> = list["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), 2);
    assert_eq!(ids[0], "a", "most recently updated first");
    let (_, other_user) = get_json(addr, "/api/sessions?user_id=u2").await;
    assert_eq!(other_user["sessions"], json!([]));

    let (status, all) = get_json(addr, "/api/sessions/u1/a").await;
    assert_eq!(status, 200);
    let total = all["total"].as_u64().unwrap() as usize;
    assert!(total >= 3, "the turn's events are stored: {all}");
    assert_eq!(all["events"].as_array().unwrap().len(), total);
    assert_eq!(all["session"]["state"]["mood"], "calm");
    let (_, page) = get_json(addr, "/api/sessions/u1/a?offset=1&limit=2").await;
    assert_eq!(page["events"].as_array().unwrap().len(), 2);
    assert_eq!(page["events"][0], all["events"][1]);
    assert_eq!(
        (page["offset"].as_u64(), page["limit"].as_u64()),
        (Some(1), Some(2))
    );
    let (_, beyond) = get_json(addr, &format!("/api/sessions/u1/a?offset={}", total + 5)).await;
    assert_eq!(beyond["events"], json!([]));

    let deleted = send(reqwest::Client::new().delete(url(addr, "/api/sessions/u1/a"))).await;
    assert_eq!(deleted.status().as_u16(), 204);
    let (status, _) = get_json(addr, "/api/sessions/u1/a").await;
    assert_eq!(status, 404);
    let again = send(reqwest::Client::new().delete(url(addr, "/api/sessions/u1/a"))).await;
    assert_eq!(again.status().as_u16(), 404);
    server.shutdown(WAIT).await;
}

#[tokio::test]
async fn bad_requests_and_unknown_things_get_clear_json_errors() {
    let server = start(test_args()).await;
    let addr = server.addr;
    post_json(
        addr,
        "/api/sessions",
        json!({"userId": "u1", "sessionId": "s"}),
    )
    .await;
    for (path, status, says) in [
        ("/api/sessions", 400, "user_id is required"),
        ("/api/sessions?user_id=bad%20id", 400, "invalid user id"),
        ("/api/sessions/u1/no-such", 404, "not found"),
        ("/api/sessions/u1/bad%20id", 400, "invalid session id"),
        ("/api/sessions/u1/s?limit=0", 400, "limit"),
        ("/api/sessions/u1/s?offset=-1", 400, "offset"),
        ("/api/sessions/u1/no-such/artifacts", 404, "not found"),
        ("/api/sessions/u1/s/artifacts/missing.pcm", 404, "not found"),
        (
            "/api/sessions/u1/s/artifacts/x.pcm?version=one",
            400,
            "version",
        ),
        (
            "/api/sessions/u1/s/artifacts/x.pcm?format=mp3",
            400,
            "format",
        ),
    ] {
        let (got, body) = get_json(addr, path).await;
        assert_eq!(got, status, "{path}: {body}");
        let message = body["error"]
            .as_str()
            .unwrap_or_else(|| panic!("{path}: {body}"));
        assert!(message.contains(says), "{path}: {message}");
    }
    let (status, body) = post_json(addr, "/api/sessions", json!({"sessionId": "x"})).await;
    assert_eq!(status, 400, "{body}");
    let (status, _) = post_json(addr, "/api/sessions", json!({"userId": "../etc"})).await;
    assert_eq!(status, 400);
    let reserved = json!({"userId": "u1", "sessionId": "_user"});
    let (status, body) = post_json(addr, "/api/sessions", reserved).await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body["error"].as_str().unwrap_or("").contains("reserved"),
        "{body}"
    );
    server.shutdown(WAIT).await;
}

#[tokio::test]
async fn recordings_are_listed_and_served_raw_or_as_wav() {
    let server = start(test_args()).await;
    let addr = server.addr;
    spoken_session(addr, "rec").await;
    timeout(WAIT, server.gateway().registry.idle())
        .await
        .unwrap();
    let (status, listed) = get_json(addr, "/api/sessions/u1/rec/artifacts").await;
    assert_eq!(status, 200);
    let artifacts = listed["artifacts"].as_array().unwrap();
    let input = artifacts
        .iter()
        .find(|a| a["name"].as_str().unwrap().contains("_input_audio_"))
        .expect("input");
    let output = artifacts
        .iter()
        .find(|a| a["name"].as_str().unwrap().contains("_output_audio_"))
        .expect("output");
    assert_eq!(input["versions"], json!([0]));
    assert_eq!(input["mimeType"], "audio/pcm;rate=16000");
    assert_eq!(output["mimeType"], "audio/pcm;rate=24000");

    for (artifact, rate) in [(input, 16_000u32), (output, 24_000)] {
        let name = artifact["name"].as_str().unwrap();
        let raw = get(
            addr,
            &format!("/api/sessions/u1/rec/artifacts/{name}?version=0"),
        )
        .await;
        assert_eq!(
            raw.headers()["content-type"],
            artifact["mimeType"].as_str().unwrap()
        );
        let raw = raw.bytes().await.unwrap();
        let wav = get(
            addr,
            &format!("/api/sessions/u1/rec/artifacts/{name}?format=wav"),
        )
        .await;
        assert_eq!(wav.status().as_u16(), 200);
        assert_eq!(wav.headers()["content-type"], "audio/wav");
        assert!(wav.headers()["content-disposition"]
            .to_str()
            .unwrap()
            .contains(".wav"));
        let wav = wav.bytes().await.unwrap();
        assert_eq!(&wav[..4], b"RIFF");
        assert_eq!(&wav[8..16], b"WAVEfmt ");
        assert_eq!(u32::from_le_bytes(wav[24..28].try_into().unwrap()), rate);
        assert_eq!(
            u32::from_le_bytes(wav[40..44].try_into().unwrap()) as usize,
            raw.len()
        );
        assert_eq!(wav.len(), 44 + raw.len());
        let reader = hound::WavReader::new(std::io::Cursor::new(wav.to_vec())).unwrap();
        assert_eq!(
            reader.len() as usize,
            raw.len() / 2,
            "every sample is in the WAV"
        );
    }
    // The input recording is exactly what was streamed.
    let mut pcm = fixture_pcm("hello.wav");
    pcm.extend(silence(1000));
    let name = input["name"].as_str().unwrap();
    let raw = get(addr, &format!("/api/sessions/u1/rec/artifacts/{name}"))
        .await
        .bytes()
        .await
        .unwrap();
    assert_eq!(raw.len(), pcm.len());
    server.shutdown(WAIT).await;
}

#[tokio::test]
async fn another_web_client_can_be_served_from_a_folder() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("js")).unwrap();
    std::fs::write(dir.path().join("index.html"), "<title>bidi-demo</title>").unwrap();
    std::fs::write(dir.path().join("js/app.js"), "export const demo = 1;").unwrap();
    let secret = dir
        .path()
        .parent()
        .unwrap()
        .join("livegate-web-root-secret.txt");
    std::fs::write(&secret, "do not serve").unwrap();
    let mut args = test_args();
    args.web_root = Some(dir.path().to_owned());
    args.audio_frames = "base64".parse().unwrap();
    let server = start(args).await;
    let page = get(server.addr, "/").await.text().await.unwrap();
    assert_eq!(page, "<title>bidi-demo</title>");
    // bidi-demo loads its modules from /static/…, which must come with a JavaScript mime type.
    let script = get(server.addr, "/static/js/app.js").await;
    assert_eq!(script.status().as_u16(), 200);
    assert!(script.headers()["content-type"]
        .to_str()
        .unwrap()
        .contains("javascript"));
    let escape = get(server.addr, "/static/..%2Flivegate-web-root-secret.txt").await;
    assert_eq!(escape.status().as_u16(), 404);
    std::fs::remove_file(secret).unwrap();

    // And audio arrives inside the JSON, as the unmodified bidi-demo client expects.
    let mut client = Client::connect(server.addr, "u1", "s1", "").await;
    client.send_text("hello").await;
    let events = client.events_until_turn_complete().await;
    assert_eq!(client.audio_bytes, 0, "no binary frames");
    assert!(events
        .iter()
        .any(|e| e["content"]["parts"][0]["inlineData"]["data"].is_string()));
    client.close().await;
    server.shutdown(WAIT).await;
}

#[tokio::test]
async fn downloads_are_never_rendered_as_pages() {
    use livegate::artifact::{Artifact, ArtifactScope};
    let server = start(test_args()).await;
    let addr = server.addr;
    spoken_session(addr, "rec").await;
    timeout(WAIT, server.gateway().registry.idle())
        .await
        .unwrap();
    let scope = ArtifactScope {
        app_name: "livegate",
        user_id: "u1",
        session_id: "rec",
    };
    let page = b"<html><script>alert(document.cookie)</script></html>".to_vec();
    let artifacts = &server.gateway().runner.artifacts;
    // Types a tool (or an older gateway) may have stored: none is served as what it claims.
    for (name, mime) in [
        ("page.html", "text/html"),
        ("evil.pcm", "audio/pcm,text/html"),
        ("split.pcm", "audio/pcm;rate=16000\r\nSet-Cookie: a=b"),
        ("vector.svg", "image/svg+xml"),
    ] {
        let artifact = Artifact {
            data: page.clone().into(),
            mime_type: mime.into(),
        };
        artifacts.save(scope, name, artifact).await.unwrap();
        let response = get(addr, &format!("/api/sessions/u1/rec/artifacts/{name}")).await;
        assert_eq!(response.status().as_u16(), 200, "{name}: never a 500");
        let headers = response.headers();
        assert_eq!(
            headers["content-type"], "application/octet-stream",
            "{name}"
        );
        assert!(
            headers["content-disposition"]
                .to_str()
                .unwrap()
                .starts_with("attachment"),
            "{name}"
        );
        assert_eq!(headers["x-content-type-options"], "nosniff");
        assert_eq!(headers["content-security-policy"], "sandbox");
        assert!(!headers.contains_key("set-cookie"), "{name}");
    }
    // A recording for the page's player plays inline, and is still neither sniffed nor run.
    let (_, listed) = get_json(addr, "/api/sessions/u1/rec/artifacts").await;
    let recording = listed["artifacts"]
        .as_array()
        .unwrap()
        .iter()
        .find_map(|a| a["name"].as_str().filter(|n| n.contains("_input_audio_")))
        .expect("a recording")
        .to_owned();
    let wav = get(
        addr,
        &format!("/api/sessions/u1/rec/artifacts/{recording}?format=wav"),
    )
    .await;
    let headers = wav.headers();
    assert_eq!(headers["content-type"], "audio/wav");
    assert!(headers["content-disposition"]
        .to_str()
        .unwrap()
        .starts_with("inline"));
    assert_eq!(headers["x-content-type-options"], "nosniff");
    assert_eq!(headers["content-security-policy"], "sandbox");
    let raw = get(addr, &format!("/api/sessions/u1/rec/artifacts/{recording}")).await;
    assert!(raw.headers()["content-disposition"]
        .to_str()
        .unwrap()
        .starts_with("attachment"));
    server.shutdown(WAIT).await;
}

fn run_turn(parts: Value) -> Value {
    json!({
        "appName": "livegate",
        "userId": "u1",
        "sessionId": "s1",
        "newMessage": {"role": "user", "parts": parts},
    })
}

#[tokio::test]
async fn run_takes_the_sockets_limits_and_media_types() {
    let server = start(test_args()).await;
    let addr = server.addr;
    post_json(
        addr,
        "/api/sessions",
        json!({"userId": "u1", "sessionId": "s1"}),
    )
    .await;
    let too_long = "x".repeat(64 * 1024 + 1);
    let (status, body) = post_json(addr, "/run", run_turn(json!([{"text": too_long}]))).await;
    assert_eq!(status, 400);
    assert!(
        body["error"].as_str().unwrap().contains("--max-text-bytes"),
        "{body}"
    );
    for mime in ["image/png\r\nX-Evil: 1", "text/html", "audio/pcm,text/html"] {
        let part = json!([{"inlineData": {"mimeType": mime, "data": "AAAA"}}]);
        let (status, body) = post_json(addr, "/run", run_turn(part)).await;
        assert_eq!(status, 400, "{mime:?}: {body}");
    }
    let fine = run_turn(json!([{"text": "x".repeat(64 * 1024)}]));
    assert_eq!(post_json(addr, "/run", fine).await.0, 200);
    server.shutdown(WAIT).await;
}

#[tokio::test]
async fn a_page_of_large_events_is_bounded_in_bytes_and_pages_on() {
    let server = start(test_args()).await;
    let addr = server.addr;
    post_json(
        addr,
        "/api/sessions",
        json!({"userId": "u1", "sessionId": "s1"}),
    )
    .await;
    let text = "y".repeat(60 * 1024);
    for _ in 0..20 {
        let (status, _) = post_json(addr, "/run", run_turn(json!([{"text": text}]))).await;
        assert_eq!(status, 200);
    }
    let response = get(addr, "/api/sessions/u1/s1?limit=1000").await;
    let body = response.bytes().await.unwrap();
    assert!(body.len() < 1200 * 1024, "a page of {} bytes", body.len());
    let page: Value = serde_json::from_slice(&body).unwrap();
    let total = page["total"].as_u64().unwrap();
    let first = page["events"].as_array().unwrap().len() as u64;
    assert!(first < total, "{first} of {total} events on the first page");
    assert_eq!(page["nextOffset"], first);
    // Paging by nextOffset reads every event.
    let mut read = first;
    while read < total {
        let (_, page) = get_json(
            addr,
            &format!("/api/sessions/u1/s1?offset={read}&limit=1000"),
        )
        .await;
        let got = page["events"].as_array().unwrap().len() as u64;
        assert!(got > 0);
        read += got;
        assert_eq!(page["nextOffset"], read);
    }
    assert_eq!(read, total);
    server.shutdown(WAIT).await;
}
