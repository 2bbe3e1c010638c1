//! The web client in a real browser: headless Chromium driven over WebDriver (chromedriver), with
//! a fake microphone that plays `tests/fixtures/hello.wav`, against a real gateway on `sim`.
//!
//! Needs Debian's `chromium` and `chromium-driver`, so the tests are ignored in a plain
//! `cargo test`; `.ci/run` installs both and runs them with `--include-ignored`. `CHROMIUM` and
//! `CHROMEDRIVER` override the binaries' paths. Every wait is a bounded poll of page state
//! (`window.livegate` and the DOM), never a fixed sleep.

use std::future::Future;
use std::net::{SocketAddr, TcpListener};
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::common::*;
use fantoccini::{Client, ClientBuilder, Locator};
use futures::FutureExt;
use livegate::gateway::config::Pacing;
use serde_json::{json, Value};
use tokio::process::{Child, Command};

/// How often page state is polled.
const POLL: Duration = Duration::from_millis(50);

/// One browser at a time: they share two cores, and real-time audio must not starve.
static ONE_BROWSER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// `target/screenshots` (under `CARGO_TARGET_DIR` when it is set).
fn screenshot_dir() -> PathBuf {
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    tmp.parent().unwrap_or(tmp).join("screenshots")
}

fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("a free port");
    listener.local_addr().expect("its address").port()
}

/// chromedriver and the Chromium it drives, with a fresh profile.
struct Browser {
    client: Client,
    _driver: Child,
    _profile: tempfile::TempDir,
}

impl Browser {
    async fn launch() -> Browser {
        let driver_bin = std::env::var("CHROMEDRIVER").unwrap_or_else(|_| "chromedriver".into());
        let chromium = std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
        let port = free_port();
        let driver = Command::new(&driver_bin)
            .arg(format!("--port={port}"))
            .arg("--allowed-ips=127.0.0.1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("{driver_bin} starts (install chromium-driver): {e}"));
        let driver_addr = SocketAddr::from(([127, 0, 0, 1], port));
        let started = Instant::now();
        while tokio::net::TcpStream::connect(driver_addr).await.is_err() {
            assert!(started.elapsed() < WAIT, "chromedriver listens in time");
            tokio::time::sleep(POLL).await;
        }

        let profile = tempfile::tempdir().expect("a profile directory");
        let wav = fixture("hello.wav");
        let args = [
            "--headless=new".to_owned(),
            "--no-sandbox".into(),
            "--disable-gpu".into(),
            "--disable-background-networking".into(),
            "--disable-component-update".into(),
            "--disable-dev-shm-usage".into(),
            "--no-first-run".into(),
            format!("--user-data-dir={}", profile.path().display()),
            "--use-fake-ui-for-media-stream".into(),
            "--use-fake-device-for-media-stream".into(),
            format!("--use-file-for-fake-audio-capture={}%noloop", wav.display()),
            "--autoplay-policy=no-user-gesture-required".into(),
            // A 12-hour locale, so a time written without the locale (24-hour) stands out.
            "--lang=en-US".into(),
            "--window-size=1280,800".into(),
        ];
        let mut caps = serde_json::Map::new();
        caps.insert("browserName".into(), json!("chrome"));
        caps.insert(
            "goog:chromeOptions".into(),
            json!({"binary": chromium, "args": args}),
        );
        let client = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
            .capabilities(caps)
            .connect(&format!("http://{driver_addr}"))
            .await
            .expect("a Chromium session (install chromium)");
        Browser {
            client,
            _driver: driver,
            _profile: profile,
        }
    }
}

/// Runs `body` with a fresh browser and always closes the browser afterwards, even when the body
/// panics (a killed chromedriver would leave Chromium running).
async fn with_browser<F, Fut>(body: F)
where
    F: FnOnce(Client) -> Fut,
    Fut: Future<Output = ()>,
{
    let _one = ONE_BROWSER.lock().await;
    let browser = Browser::launch().await;
    let page = browser.client.clone();
    let outcome = AssertUnwindSafe(async move {
        body(page.clone()).await;
        let errors = eval(&page, "window.livegate ? livegate.errors : []").await;
        assert_eq!(errors, json!([]), "no script errors in the page");
    })
    .catch_unwind()
    .await;
    let _ = browser.client.clone().close().await;
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}

/// Evaluates `expr` in the page.
async fn eval(page: &Client, expr: &str) -> Value {
    page.execute(&format!("return ({expr});"), vec![])
        .await
        .unwrap_or_else(|e| panic!("script `{expr}` runs: {e}"))
}

/// Polls `expr` every 50 ms until it is truthy, up to `timeout`; returns its value.
async fn wait_until(page: &Client, what: &str, expr: &str, timeout: Duration) -> Value {
    let started = Instant::now();
    loop {
        let value = eval(page, expr).await;
        let truthy = match &value {
            Value::Null => false,
            Value::Bool(b) => *b,
            Value::Number(n) => n.as_f64() != Some(0.0),
            Value::String(s) => !s.is_empty(),
            _ => true,
        };
        if truthy {
            return value;
        }
        if started.elapsed() > timeout {
            let state = eval(page, DIAGNOSTICS).await;
            panic!("timed out waiting for {what} (`{expr}` = {value}); page: {state:#}");
        }
        tokio::time::sleep(POLL).await;
    }
}

/// What the page looked like, for failure messages.
const DIAGNOSTICS: &str = r##"(() => {
  const lg = window.livegate || {};
  return {
    status: lg.status, session: lg.sessionId, playedSamples: lg.playedSamples,
    audioBytes: lg.audioBytes,
    kinds: (lg.events || []).slice(-40).map((e) => Object.keys(e).filter((k) => !["id","invocationId","author","actions","nodeInfo","timestamp","modelVersion"].includes(k)).join("+")),
    messages: [...document.querySelectorAll("#messages > *")].map((m) => m.className + ": " + m.textContent.slice(0, 80)),
  };
})()"##;

async fn open(page: &Client, addr: SocketAddr, query: &str) {
    page.goto(&format!("http://{addr}/?{query}"))
        .await
        .expect("the page loads");
    wait_connected(page).await;
}

async fn wait_connected(page: &Client) {
    wait_until(
        page,
        "the connection",
        "window.livegate && livegate.status === 'connected' && livegate.historyLoaded",
        WAIT,
    )
    .await;
}

/// Makes the page's viewport exactly `width` × `height` (emulated through DevTools: resizing the
/// window raced the page's reading of its own size, and headless windows have a minimum width).
async fn set_viewport(page: &Client, width: u32, height: u32) {
    let params = json!({"width": width, "height": height, "deviceScaleFactor": 0, "mobile": false});
    page.issue_cmd(Cdp {
        cmd: "Emulation.setDeviceMetricsOverride",
        params,
    })
    .await
    .expect("viewport emulation");
    wait_until(
        page,
        "the viewport size",
        &format!("innerWidth === {width} && innerHeight === {height}"),
        WAIT,
    )
    .await;
}

/// A Chrome DevTools Protocol command, through chromedriver's `goog/cdp/execute`.
#[derive(Debug)]
struct Cdp {
    cmd: &'static str,
    params: Value,
}

impl fantoccini::wd::WebDriverCompatibleCommand for Cdp {
    fn endpoint(
        &self,
        base: &url::Url,
        session: Option<&str>,
    ) -> Result<url::Url, url::ParseError> {
        base.join(&format!(
            "session/{}/goog/cdp/execute",
            session.unwrap_or_default()
        ))
    }

    fn method_and_body(&self, _: &url::Url) -> (http::Method, Option<String>) {
        let body = json!({"cmd": self.cmd, "params": self.params});
        (http::Method::POST, Some(body.to_string()))
    }
}

/// Makes the page see `prefers-color-scheme: light` or `dark`.
async fn color_scheme(page: &Client, scheme: &str) {
    let params = json!({"features": [{"name": "prefers-color-scheme", "value": scheme}]});
    page.issue_cmd(Cdp {
        cmd: "Emulation.setEmulatedMedia",
        params,
    })
    .await
    .expect("media emulation");
    let matches = eval(
        page,
        &format!("matchMedia('(prefers-color-scheme: {scheme})').matches"),
    )
    .await;
    assert_eq!(matches, json!(true), "{scheme} scheme emulated");
}

async fn save_screenshot(page: &Client, name: &str) {
    let png = page.screenshot().await.expect("a screenshot");
    let dir = screenshot_dir();
    std::fs::create_dir_all(&dir).expect("screenshot directory");
    std::fs::write(dir.join(name), png).expect("screenshot saved");
}

async fn click(page: &Client, css: &str) {
    page.find(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("{css} is on the page: {e}"))
        .click()
        .await
        .unwrap_or_else(|e| panic!("{css} can be clicked: {e}"));
}

/// Types `text` into the message box and presses Send, as a person would.
async fn send_text(page: &Client, text: &str) {
    let input = page
        .find(Locator::Css("#text-input"))
        .await
        .expect("the message box");
    input.send_keys(text).await.expect("typing works");
    click(page, "#send").await;
}

/// The session the page shows as current in its list.
const CURRENT_SESSION: &str =
    "(document.querySelector('#sessions [aria-current=\"true\"]') || {dataset: {}}).dataset.id";

/// How many `turnComplete` events the page has received.
const TURNS_COMPLETE: &str = "livegate.events.filter((e) => e.turnComplete === true).length";

/// The conversation's bubbles as `[class list, text]`.
const BUBBLES: &str = "[...document.querySelectorAll('#messages .msg:not(.system)')].map((b) => [b.className, b.querySelector('.text').textContent])";

/// `{checked, bad}`: how many elements with their own text were checked, and those whose contrast
/// with the background behind them is below 4.5:1 (3:1 for large text). Disabled controls are
/// exempt, as WCAG says.
const LOW_CONTRAST: &str = r##"(() => {
  const rgba = (c) => (c.match(/[\d.]+/g) || [0, 0, 0, 0]).map(Number).concat([1]).slice(0, 4);
  const lum = ([r, g, b]) => {
    const f = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); };
    return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b);
  };
  const over = (top, bottom) => top.slice(0, 3).map((v, i) => v * top[3] + bottom[i] * (1 - top[3])).concat([1]);
  const background = (el) => {
    const layers = [];
    for (let e = el; e; e = e.parentElement) {
      const c = rgba(getComputedStyle(e).backgroundColor);
      if (c[3] > 0) layers.push(c);
      if (c[3] >= 1) break;
    }
    let color = [255, 255, 255, 1];
    for (const layer of layers.reverse()) color = over(layer, color);
    return color;
  };
  const bad = [];
  let checked = 0;
  for (const el of document.querySelectorAll("body *")) {
    const own = [...el.childNodes].some((n) => n.nodeType === 3 && n.textContent.trim());
    if (!own || !el.getClientRects().length || el.closest(":disabled, .visually-hidden, [hidden]")) continue;
    const style = getComputedStyle(el);
    if (style.visibility !== "visible" || Number(style.opacity) === 0) continue;
    checked += 1;
    const bg = background(el);
    const fg = over(rgba(style.color), bg);
    const [a, b] = [lum(fg), lum(bg)].sort((x, y) => y - x);
    const ratio = (a + 0.05) / (b + 0.05);
    const size = parseFloat(style.fontSize);
    const large = size >= 24 || (size >= 18.66 && Number(style.fontWeight) >= 700);
    if (ratio < (large ? 3 : 4.5)) bad.push(`${el.tagName.toLowerCase()}.${el.className} "${el.textContent.trim().slice(0, 30)}" ${ratio.toFixed(2)}`);
  }
  return { checked, bad };
})()"##;

/// Asserts the page's text contrast (see `LOW_CONTRAST`).
async fn assert_contrast(page: &Client, when: &str) {
    let report = eval(page, LOW_CONTRAST).await;
    assert!(report["checked"].as_u64() > Some(10), "{when}: {report}");
    assert_eq!(report["bad"], json!([]), "text contrast {when}");
}

/// `[console time, recordings time]` with digits as 0 and the console's milliseconds dropped.
const TIME_SHAPES: &str = r##"(() => {
  const shape = (s) => s.replace(/[.,]\d{3}/, "").replace(/\d/g, "0").trim();
  const log = document.querySelector("#log .entry .time").textContent;
  const rec = document.querySelector("#recordings .rec .rec-label .muted").textContent;
  return [shape(log), shape(rec)];
})()"##;

/// How far `#log-panel` (the element that scrolls the console) is from its bottom, in pixels,
/// and how much it can scroll at all.
const CONSOLE_SCROLL: &str = "(() => { const p = document.querySelector('#log-panel'); return { fromBottom: p.scrollHeight - p.scrollTop - p.clientHeight, overflow: p.scrollHeight - p.clientHeight, top: p.scrollTop }; })()";

/// Horizontal overflow: elements wider than the viewport (the page must work at phone width).
const OVERFLOWING: &str = r##"[...document.querySelectorAll("body *")].filter((el) => {
  const r = el.getBoundingClientRect();
  return r.width > 0 && (r.right > innerWidth + 1 || r.left < -1) && !el.closest(".visually-hidden, .skip-link, [hidden]");
}).map((el) => el.tagName.toLowerCase() + "#" + el.id + "." + el.className)"##;

#[tokio::test]
#[ignore = "needs chromium and chromium-driver"]
async fn a_text_turn_streams_into_one_final_answer() {
    let server = start(test_args()).await;
    let addr = server.addr;
    with_browser(|page| async move {
        open(&page, addr, "user=b1&session=text-1&modality=TEXT").await;
        send_text(&page, "hello there").await;
        wait_until(&page, "the turn end", &format!("{TURNS_COMPLETE} === 1"), WAIT).await;
        wait_until(&page, "the turn's caption", "livegate.turns.length === 1", WAIT).await;

        let partials = eval(&page, "livegate.events.filter((e) => e.partial === true && e.content).length").await;
        assert!(partials.as_u64() >= Some(2), "the answer streamed in pieces: {partials}");
        let merged = eval(
            &page,
            "livegate.events.filter((e) => e.partial === false && e.content).map((e) => e.content.parts.map((p) => p.text || '').join(''))",
        )
        .await;
        let merged = merged.as_array().expect("an array");
        assert_eq!(merged.len(), 1, "one merged answer: {merged:?}");
        let answer = merged[0].as_str().expect("text");
        assert!(answer.contains("hello there"), "{answer}");

        let bubbles = eval(&page, BUBBLES).await;
        assert_eq!(
            bubbles,
            json!([["msg user final", "hello there"], ["msg agent final", answer]]),
            "the user's message and exactly one finalized answer, shown once"
        );
        let typing = eval(&page, "document.querySelectorAll('#messages .typing, #messages [aria-busy]').length").await;
        assert_eq!(typing, json!(0), "nothing is still streaming");

        let turn = eval(&page, "livegate.turns[0]").await;
        assert_eq!(turn["from"], "text", "{turn}");
        assert!(turn["latencyMs"].as_u64().is_some(), "{turn}");
        assert!(turn["usage"]["totalTokenCount"].as_u64() > Some(0), "{turn}");
        let caption = eval(&page, "document.querySelector('#messages .caption').textContent").await;
        let caption = caption.as_str().unwrap_or_default();
        assert!(
            caption.contains("ms from sending to first text") && caption.contains("tokens"),
            "{caption}"
        );
        let model = eval(&page, "document.querySelector('#messages .caption .model').textContent").await;
        assert_eq!(model, json!("sim"), "the caption names the model that answered");

        // The event console: an entry expands to its JSON, and kinds can be filtered out.
        click(&page, "#log .k-turnComplete .entry-head").await;
        let json = eval(&page, "document.querySelector('#log .k-turnComplete pre').textContent").await;
        assert!(json.as_str().unwrap_or_default().contains("\"turnComplete\": true"), "{json}");
        let visible_text = "[...document.querySelectorAll('#log .g-text')].filter((e) => e.getClientRects().length).length";
        assert!(eval(&page, visible_text).await.as_u64() > Some(0));
        click(&page, "#log-filters input[value=text]").await;
        // The filter applies as the console re-renders; wait for it rather than race it.
        wait_until(&page, "text events filtered out", &format!("({visible_text}) === 0"), WAIT).await;
        wait_until(
            &page,
            "the console count shows the filter",
            "document.querySelector('#log-count').textContent.includes(' of ')",
            WAIT,
        )
        .await;
    })
    .await;
    server.shutdown(WAIT).await;
}

#[tokio::test]
#[ignore = "needs chromium and chromium-driver"]
async fn speech_from_the_microphone_is_transcribed_answered_and_played() {
    let server = start(test_args()).await;
    let addr = server.addr;
    with_browser(|page| async move {
        open(&page, addr, "user=b2&session=voice-1").await;
        click(&page, "#mic").await;
        wait_until(&page, "the microphone", "document.querySelector('#mic').getAttribute('aria-pressed') === 'true'", WAIT).await;

        let heard = wait_until(
            &page,
            "the user's transcript",
            "[...document.querySelectorAll('#messages .msg.user.transcript.final')].map((b) => b.textContent).join('')",
            WAIT,
        )
        .await;
        assert!(heard.as_str().unwrap_or_default().contains("speech"), "{heard}");
        let said = wait_until(
            &page,
            "the agent's transcript",
            "[...document.querySelectorAll('#messages .msg.agent.transcript.final')].map((b) => b.textContent).join('')",
            WAIT,
        )
        .await;
        assert!(said.as_str().unwrap_or_default().contains("You said something"), "{said}");
        // The voice echo is as long as the utterance: at least a second of it is heard.
        wait_until(&page, "the answer played", "livegate.playedSamples >= 24000", WAIT).await;
        let (played, received) = {
            let v = eval(&page, "[livegate.playedSamples, livegate.audioBytes]").await;
            (v[0].as_u64().unwrap(), v[1].as_u64().unwrap())
        };
        assert!(played <= received / 2, "played {played} of {} samples", received / 2);
        wait_until(&page, "the turn's caption", "livegate.turns.length >= 1", WAIT).await;
        let turn = eval(&page, "livegate.turns[0]").await;
        assert_eq!((turn["from"].as_str(), turn["first"].as_str()), (Some("speech"), Some("audio")), "{turn}");

        // Audio chunks are counted but not listed in the console by default.
        assert_eq!(eval(&page, "document.querySelectorAll('#log .g-audio').length").await, json!(0));
        // The counters are redrawn once per animation frame, so wait for the drawing.
        wait_until(
            &page,
            "the audio chunk counters",
            "document.querySelector('#audio-stats').textContent.includes('↓ audio')",
            WAIT,
        )
        .await;

        // The same button stops the microphone.
        click(&page, "#mic").await;
        wait_until(&page, "the microphone off", "document.querySelector('#mic').getAttribute('aria-pressed') === 'false'", WAIT).await;
    })
    .await;
    server.shutdown(WAIT).await;
}

#[tokio::test]
#[ignore = "needs chromium and chromium-driver"]
async fn speaking_over_the_answer_stops_playback_and_marks_it_interrupted() {
    let mut args = test_args();
    args.sim_pacing = Pacing::RealTime;
    let server = start(args).await;
    let addr = server.addr;
    with_browser(|page| async move {
        open(&page, addr, "user=b3&session=barge-1").await;
        send_text(&page, "tell me a long story about a lighthouse keeper please").await;
        wait_until(&page, "the answer to play", "livegate.playedSamples >= 4800", WAIT).await;

        click(&page, "#mic").await;
        wait_until(&page, "the barge-in", "livegate.interruptions >= 1", WAIT).await;
        // The flush is acknowledged by the player: nothing of the old answer is left to play.
        let at_flush = wait_until(
            &page,
            "playback to stop",
            "livegate.flushes >= 1 && livegate.bufferedSamples === 0 && [livegate.playedSamples, livegate.audioBytes]",
            Duration::from_secs(2),
        )
        .await;
        let story = eval(&page, "(() => { const b = document.querySelector('#messages .msg.agent'); return [b.className, b.textContent]; })()").await;
        let class = story[0].as_str().unwrap_or_default();
        assert!(class.contains("interrupted") && class.contains("final"), "{story}");

        // The barge-in utterance is transcribed and answered, and that answer is not interrupted.
        wait_until(
            &page,
            "the answer to the barge-in",
            "document.querySelectorAll('#messages .msg.agent.transcript.final:not(.interrupted)').length === 1 && document.querySelector('#messages .msg.user.transcript.final')",
            WAIT,
        )
        .await;
        wait_until(&page, "its turn end", &format!("{TURNS_COMPLETE} >= 1"), WAIT).await;
        let after = wait_until(
            &page,
            "the new answer to play out",
            "livegate.bufferedSamples === 0 && livegate.playedSamples > 0 && [livegate.playedSamples, livegate.audioBytes]",
            WAIT,
        )
        .await;
        // After the flush only audio that arrived after `interrupted` was played.
        let played_since = after[0].as_u64().unwrap() - at_flush[0].as_u64().unwrap();
        let received_since = (after[1].as_u64().unwrap() - at_flush[1].as_u64().unwrap()) / 2;
        assert!(played_since > 0, "the new answer was heard");
        assert!(
            played_since <= received_since,
            "played {played_since} samples after the flush, but only {received_since} arrived after it"
        );
        let order = eval(&page, BUBBLES).await;
        let classes: Vec<&str> = order
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b[0].as_str().unwrap_or_default())
            .collect();
        assert_eq!(classes.len(), 4, "{order}");
        assert!(classes[0].starts_with("msg user final"), "{order}");
        assert!(classes[1].contains("agent") && classes[1].contains("interrupted"), "{order}");
        assert!(classes[2].contains("user transcript"), "{order}");
        assert!(classes[3].contains("agent") && !classes[3].contains("interrupted"), "{order}");
    })
    .await;
    server.shutdown(WAIT).await;
}

#[tokio::test]
#[ignore = "needs chromium and chromium-driver"]
async fn a_reload_shows_the_history_and_playable_recordings() {
    let server = start(test_args()).await;
    let addr = server.addr;
    with_browser(|page| async move {
        set_viewport(&page, 1280, 800).await;
        open(&page, addr, "user=b4&session=reload-1").await;

        // A tool call...
        send_text(&page, "what time is it in Tokyo?").await;
        wait_until(&page, "the tool turn", &format!("{TURNS_COMPLETE} === 1"), WAIT).await;
        let tool = wait_until(
            &page,
            "the tool card",
            "(() => { const t = document.querySelector('#messages .tool:not(.pending)'); return t && t.textContent; })()",
            WAIT,
        )
        .await;
        let tool = tool.as_str().unwrap_or_default().to_owned();
        assert!(tool.contains("get_current_time") && tool.contains("Asia/Tokyo"), "{tool}");
        // ...and a voice turn.
        click(&page, "#mic").await;
        wait_until(&page, "the voice turn", &format!("{TURNS_COMPLETE} === 2"), WAIT).await;
        wait_until(&page, "the spoken answer to play", "livegate.playedSamples > 0 && livegate.bufferedSamples === 0", WAIT).await;
        click(&page, "#mic").await;
        wait_until(&page, "the recordings", "livegate.recordings.filter((r) => r.side === 'input').length >= 1 && livegate.recordings.filter((r) => r.side === 'output').length >= 2", WAIT).await;
        eval(&page, "document.querySelector('#text-input').blur() || true").await;

        assert_contrast(&page, "at desktop width").await;
        save_screenshot(&page, "desktop.png").await;
        color_scheme(&page, "dark").await;
        assert_contrast(&page, "in the dark theme").await;
        save_screenshot(&page, "desktop-dark.png").await;
        color_scheme(&page, "light").await;
        set_viewport(&page, 390, 844).await;
        wait_until(&page, "the panels to fold into tabs", "document.querySelector('#log-panel').hidden", WAIT).await;
        assert_eq!(eval(&page, OVERFLOWING).await, json!([]), "nothing wider than a phone");
        assert_contrast(&page, "at phone width").await;
        save_screenshot(&page, "phone.png").await;
        set_viewport(&page, 1280, 800).await;

        let live = eval(&page, BUBBLES).await;
        page.refresh().await.expect("the page reloads");
        wait_connected(&page).await;
        assert_eq!(eval(&page, "livegate.sessionId").await, json!("reload-1"));
        let history: Vec<Value> = eval(&page, BUBBLES)
            .await
            .as_array()
            .unwrap()
            .iter()
            .map(|b| json!([b[0].as_str().unwrap().replace(" history", ""), b[1]]))
            .collect();
        assert_eq!(Value::Array(history), live, "the same conversation, from the stored events");
        let tool_again = eval(&page, "document.querySelector('#messages .tool.history').textContent").await;
        assert_eq!(tool_again.as_str(), Some(tool.as_str()), "the tool call is in the history");
        let picked = eval(&page, CURRENT_SESSION).await;
        assert_eq!(picked, json!("reload-1"));

        // The recordings list has playable WAVs.
        click(&page, "#tab-rec").await;
        let rows = wait_until(&page, "the recordings list", "document.querySelectorAll('#recordings .rec').length >= 3 && livegate.recordings", WAIT).await;
        let http = reqwest::Client::new();
        for row in rows.as_array().unwrap() {
            let url = row["url"].as_str().unwrap().to_owned();
            assert!(url.starts_with(&format!("http://{addr}/")), "{url}");
            let wav = http.get(&url).send().await.unwrap();
            assert_eq!(wav.headers()["content-type"], "audio/wav", "{url}");
            let wav = wav.bytes().await.unwrap();
            let raw = http
                .get(url.replace("format=wav", "format=raw"))
                .send()
                .await
                .unwrap()
                .bytes()
                .await
                .unwrap();
            let le32 = |at: usize| u32::from_le_bytes(wav[at..at + 4].try_into().unwrap()) as usize;
            assert_eq!((&wav[0..4], &wav[8..16]), (&b"RIFF"[..], &b"WAVEfmt "[..]), "{url}");
            assert_eq!(le32(4), wav.len() - 8, "RIFF size of {url}");
            assert_eq!(&wav[36..40], b"data");
            assert_eq!(le32(40), raw.len(), "data size of {url}");
            assert_eq!(wav.len(), 44 + raw.len(), "{url}");
            assert!(!raw.is_empty(), "{url}");
            let rate = if row["side"] == "input" { 16_000 } else { 24_000 };
            assert_eq!(le32(24), rate, "sample rate of {url}");
        }
        // One time format, the user's locale, in the event console and the recordings panel.
        let shapes = eval(&page, TIME_SHAPES).await;
        assert_eq!(shapes[0], shapes[1], "console and recordings times: {shapes}");
        assert!(shapes[0].as_str().is_some_and(|s| s.contains("00:00:00")), "{shapes}");

        // And the browser plays one.
        click(&page, "#recordings .rec.input .rec-play").await;
        wait_until(&page, "a recording to play", "document.querySelector('#recordings .rec.input .rec-play').getAttribute('aria-pressed') === 'true'", WAIT).await;

        // A new session starts empty; picking the old one again brings its history back.
        click(&page, "#new-session").await;
        wait_connected(&page).await;
        let fresh = eval(&page, "livegate.sessionId").await;
        assert_ne!(fresh, json!("reload-1"));
        assert_eq!(eval(&page, "document.querySelectorAll('#messages > *').length").await, json!(0));
        assert_eq!(eval(&page, CURRENT_SESSION).await, fresh);
        // The console starts over too, and nothing asked for the new session's recordings (the
        // gateway has not stored it yet: a 404 in the browser's console).
        let old_entries = "document.querySelectorAll('#log .k-turnComplete, #log .k-file, #log .k-history').length";
        assert_eq!(eval(&page, old_entries).await, json!(0), "the old session's events are gone");
        let failed = format!(
            "performance.getEntriesByType('resource').filter((r) => r.responseStatus >= 400 || r.name.includes({fresh}))\
               .filter((r) => r.name.includes('/artifacts')).map((r) => r.name + ' ' + r.responseStatus)"
        );
        assert_eq!(eval(&page, &failed).await, json!([]), "no request for the new session's recordings");
        click(&page, "#tab-session").await;
        wait_until(&page, "the old session in the list", "document.querySelector('#sessions button[data-id=\"reload-1\"]')", WAIT).await;
        click(&page, "#sessions button[data-id=\"reload-1\"]").await;
        wait_until(&page, "the old session", "livegate.sessionId === 'reload-1' && livegate.historyLoaded && livegate.status === 'connected'", WAIT).await;
        assert_eq!(eval(&page, "document.querySelectorAll('#messages .msg.history').length").await, json!(live.as_array().unwrap().len()));
        // The microphone's silence after the voice turn, until it was stopped and the page left
        // the session, is no recording of its own: one turn spoken, one input recording. (The old
        // run has ended: the session was only taken up again after it had.)
        let inputs = wait_until(&page, "the old session's recordings", "livegate.recordings.length >= 3 && livegate.recordings.filter((r) => r.side === 'input').length", WAIT).await;
        assert_eq!(inputs, json!(1), "{:#}", eval(&page, "livegate.recordings").await);
    })
    .await;
    server.shutdown(WAIT).await;
}

#[tokio::test]
#[ignore = "needs chromium and chromium-driver"]
async fn the_page_reconnects_to_the_same_session_when_the_gateway_comes_back() {
    let server = start(test_args()).await;
    let addr = server.addr;
    let restarted = std::sync::Arc::new(tokio::sync::Mutex::new(Some(server)));
    let handle = restarted.clone();
    with_browser(|page| async move {
        // This page gets its audio inside the JSON (ADK's base64 mode) instead of binary frames.
        open(&page, addr, "user=b5&session=again-1&audio=base64").await;
        let server = handle.lock().await.take().expect("the first gateway");
        server.shutdown(WAIT).await;
        wait_until(&page, "the drop to show", "livegate.status === 'reconnecting' && document.querySelector('#retry-info').textContent.includes('retrying')", WAIT).await;
        // A drain says "restarting" (1012): the page retries within a second, not after a backoff.
        let notice = eval(&page, "[...document.querySelectorAll('#messages .msg.system')].map((m) => m.textContent).join(' | ')").await;
        assert!(notice.as_str().unwrap_or_default().contains("(1012)"), "{notice}");
        let retry = eval(&page, "document.querySelector('#retry-info').textContent").await;
        let seconds: f64 = retry.as_str().unwrap_or_default().trim_start_matches("retrying in ").trim_end_matches(" s").parse().unwrap_or(f64::MAX);
        assert!(seconds <= 1.0, "{retry}");

        let mut args = test_args();
        args.bind = addr;
        *handle.lock().await = Some(start(args).await);
        wait_until(&page, "the automatic reconnect", "livegate.status === 'connected'", WAIT).await;
        assert_eq!(eval(&page, "livegate.sessionId").await, json!("again-1"));
        let notice = eval(&page, "[...document.querySelectorAll('#messages .msg.system')].map((m) => m.textContent).join(' | ')").await;
        assert!(notice.as_str().unwrap_or_default().contains("Reconnected to session again-1"), "{notice}");
        send_text(&page, "still there?").await;
        wait_until(&page, "an answer on the new connection", &format!("{TURNS_COMPLETE} === 1"), WAIT).await;
        wait_until(&page, "its base64 audio to play", "livegate.playedSamples > 0 && livegate.bufferedSamples === 0", WAIT).await;
        let base64_audio = eval(&page, "livegate.events.filter((e) => e.content && e.content.parts.some((p) => p.inlineData && p.inlineData.data)).length").await;
        assert!(base64_audio.as_u64() > Some(0), "audio came as base64: {base64_audio}");
    })
    .await;
    let last = restarted.lock().await.take();
    if let Some(server) = last {
        server.shutdown(WAIT).await;
    }
}

#[tokio::test]
#[ignore = "needs chromium and chromium-driver"]
async fn a_second_tab_takes_the_session_over_and_reconnect_takes_it_back() {
    let server = start(test_args()).await;
    let addr = server.addr;
    with_browser(|page| async move {
        open(&page, addr, "user=b6&session=tabs-1").await;
        let first = page.window().await.expect("the first tab");
        let second = page.new_window(true).await.expect("a second tab").handle;
        page.switch_to_window(second.clone()).await.expect("to the second tab");
        open(&page, addr, "user=b6&session=tabs-1").await;
        send_text(&page, "hello from the second tab").await;
        wait_until(&page, "the second tab's answer", &format!("{TURNS_COMPLETE} === 1"), WAIT).await;

        page.switch_to_window(first.clone()).await.expect("back to the first tab");
        wait_until(&page, "the takeover banner", "livegate.status === 'disconnected' && !document.querySelector('#banner').hidden", WAIT).await;
        let banner = eval(&page, "document.querySelector('#banner').textContent").await;
        assert!(banner.as_str().unwrap_or_default().contains("open elsewhere"), "{banner}");
        // No automatic retry: the two tabs would take the session from each other forever.
        assert_eq!(eval(&page, "livegate.fatal.kind").await, json!("takenOver"));
        assert_eq!(eval(&page, "document.querySelector('#retry-info').textContent").await, json!(""));

        click(&page, "#banner-action").await;
        wait_connected(&page).await;
        let shown = wait_until(&page, "the other tab's turn", "[...document.querySelectorAll('#messages .msg.user.history')].map((b) => b.textContent).join('')", WAIT).await;
        assert_eq!(shown, json!("hello from the second tab"));
        page.switch_to_window(second).await.expect("to the second tab");
        page.close_window().await.expect("the second tab closes");
        page.switch_to_window(first).await.expect("back to the first tab");
    })
    .await;
    server.shutdown(WAIT).await;
}

#[tokio::test]
#[ignore = "needs chromium and chromium-driver"]
async fn the_event_console_follows_new_events_unless_scrolled_up() {
    let server = start(test_args()).await;
    let addr = server.addr;
    with_browser(|page| async move {
        set_viewport(&page, 1280, 800).await;
        open(&page, addr, "user=b6&session=follow-1&modality=TEXT").await;
        // Enough turns for the console to scroll (bounded: each adds a dozen entries or more).
        let mut turns = 0;
        while eval(&page, CONSOLE_SCROLL).await["overflow"].as_i64() < Some(200) {
            assert!(turns < 12, "the console never overflowed");
            turns += 1;
            send_text(
                &page,
                "tell me a long story about a lighthouse keeper please",
            )
            .await;
            wait_until(
                &page,
                "the turn end",
                &format!("{TURNS_COMPLETE} === {turns}"),
                WAIT,
            )
            .await;
        }
        let scroll = eval(&page, CONSOLE_SCROLL).await;
        assert!(
            scroll["fromBottom"].as_i64() < Some(40),
            "the newest entry is in view: {scroll}"
        );

        // Scrolled up to read, the console stays where the reader is.
        eval(&page, "document.querySelector('#log-panel').scrollTop = 0").await;
        turns += 1;
        send_text(&page, "hello again").await;
        wait_until(
            &page,
            "the turn end",
            &format!("{TURNS_COMPLETE} === {turns}"),
            WAIT,
        )
        .await;
        assert_eq!(eval(&page, CONSOLE_SCROLL).await["top"], json!(0));
    })
    .await;
    server.shutdown(WAIT).await;
}

#[tokio::test]
#[ignore = "needs chromium and chromium-driver"]
async fn at_phone_width_long_session_ids_truncate_and_new_stays_on_screen() {
    let server = start(test_args()).await;
    let addr = server.addr;
    let long = |n: char| {
        format!(
            "conversation-about-the-lighthouse-keeper-{}",
            n.to_string().repeat(80)
        )
    };
    let http = reqwest::Client::new();
    for id in [long('a'), long('b')] {
        let body = json!({"userId": "b7", "sessionId": id});
        let created = http
            .post(format!("http://{addr}/api/sessions"))
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(created.status().as_u16(), 201);
    }
    with_browser(|page| async move {
        set_viewport(&page, 390, 844).await;
        open(&page, addr, &format!("user=b7&session={}", long('a'))).await;
        wait_until(
            &page,
            "both long sessions in the list",
            "document.querySelectorAll('#sessions button').length === 2",
            WAIT,
        )
        .await;
        click(&page, "#tab-session").await;
        assert_eq!(eval(&page, OVERFLOWING).await, json!([]), "nothing wider than a phone");
        let new = eval(
            &page,
            "(() => { const r = document.querySelector('#new-session').getBoundingClientRect(); return r.width > 0 && r.left >= 0 && r.right <= innerWidth; })()",
        )
        .await;
        assert_eq!(new, json!(true), "New is on screen");
        save_screenshot(&page, "phone-long-ids.png").await;
    })
    .await;
    server.shutdown(WAIT).await;
}

#[tokio::test]
#[ignore = "needs chromium and chromium-driver"]
async fn with_tokens_on_the_page_signs_in_from_its_link_and_asks_for_one_without() {
    let (args, secret) = token_args();
    let server = start(args).await;
    let addr = server.addr;
    let token = mint(&secret, "b-auth", Some("auth-1"));
    with_browser(|page| async move {
        page.goto(&format!("http://{addr}/"))
            .await
            .expect("the page loads");
        wait_until(&page, "the sign-in form", "window.livegate && livegate.status === 'sign-in needed' && !document.querySelector('#signin').hidden", WAIT).await;
        let notice = eval(&page, "document.querySelector('#signin').textContent").await;
        assert!(notice.as_str().unwrap_or_default().contains("needs a sign-in"), "{notice}");

        page.goto(&format!("http://{addr}/?modality=TEXT#token={token}"))
            .await
            .expect("the signed-in page loads");
        wait_connected(&page).await;
        assert_eq!(eval(&page, "[livegate.userId, livegate.sessionId]").await, json!(["b-auth", "auth-1"]));
        assert_eq!(eval(&page, "location.hash.includes('token')").await, json!(false), "the token left the address bar");
        assert_eq!(
            eval(&page, "localStorage.getItem('livegate.token')").await,
            json!(token),
            "kept for every tab"
        );
        send_text(&page, "hello with a token").await;
        wait_until(&page, "the turn end", &format!("{TURNS_COMPLETE} === 1"), WAIT).await;
        // REST calls carry the token too: the session list shows the session.
        wait_until(&page, "the session list", "document.querySelector('#sessions button[data-id=\"auth-1\"] .session-title').textContent === 'hello with a token'", WAIT).await;
    })
    .await;
    server.shutdown(WAIT).await;
}

#[tokio::test]
#[ignore = "needs chromium and chromium-driver"]
async fn the_settings_panel_sends_the_voice_in_the_setup_and_it_reaches_the_model() {
    // Behind the gateway, mock-gemini records the setup each run opened the model with.
    let (upstream, args) = behind_mock_gemini(None).await;
    let server = start(args).await;
    let addr = server.addr;
    with_browser(|page| async move {
        set_viewport(&page, 390, 844).await;
        open(&page, addr, "user=b9&session=settings-1").await;
        assert_eq!(eval(&page, "livegate.setup").await, json!({"type": "setup"}));
        click(&page, "#tab-settings").await;
        assert_eq!(eval(&page, OVERFLOWING).await, json!([]), "the open panel fits a phone");
        assert_contrast(&page, "with the settings panel open").await;
        save_screenshot(&page, "phone-settings.png").await;
        for (label, control) in [("Voice", "#set-voice"), ("Language", "#set-language")] {
            let name = eval(&page, &format!("document.querySelector('{control}').labels[0].textContent")).await;
            assert!(name.as_str().unwrap_or_default().contains(label), "{control} is labelled: {name}");
        }
        page.find(Locator::Css("#set-voice"))
            .await
            .expect("the voice picker")
            .select_by_value("Kore")
            .await
            .expect("Kore is a choice");
        click(&page, "#set-barge-in").await;
        // The sheet closes again to the conversation.
        click(&page, "#tab-settings").await;
        wait_until(
            &page,
            "the reconnect with the new setup",
            "livegate.status === 'connected' && livegate.setup.voice === 'Kore' && livegate.setup.barge_in === false",
            WAIT,
        )
        .await;
        send_text(&page, "hello").await;
        wait_until(&page, "the answer", &format!("{TURNS_COMPLETE} >= 1"), WAIT).await;
        let refused = eval(&page, "livegate.events.filter((e) => e.errorCode).length").await;
        assert_eq!(refused, json!(0), "the gateway took the setup");
        // The choice outlives a reload.
        page.refresh().await.expect("the page reloads");
        wait_connected(&page).await;
        assert_eq!(eval(&page, "livegate.setup.voice").await, json!("Kore"));
    })
    .await;
    let setups = upstream.setups();
    let applied = setups
        .iter()
        .filter(|s| {
            s["generationConfig"]["speechConfig"]["voiceConfig"]["prebuiltVoiceConfig"]["voiceName"]
                == "Kore"
        })
        .count();
    assert!(applied >= 1, "the model was opened with Kore: {setups:#?}");
    assert!(
        setups
            .iter()
            .any(|s| s["realtimeInputConfig"]["activityHandling"] == "NO_INTERRUPTION"),
        "{setups:#?}"
    );
    server.shutdown(WAIT).await;
    upstream.shutdown().await;
}

/// The page at desktop and phone size, light and dark: nothing wider than the screen, the page
/// itself never scrolls, text contrast holds, and on a phone every panel opens as a sheet that
/// leaves the top of the conversation in view.
async fn tour(page: &Client, label: &str) {
    for (width, height, size) in [(1280, 800, "desktop"), (390, 844, "phone")] {
        set_viewport(page, width, height).await;
        for scheme in ["light", "dark"] {
            color_scheme(page, scheme).await;
            let when = format!("{label}, {size}, {scheme}");
            assert_eq!(
                eval(page, OVERFLOWING).await,
                json!([]),
                "nothing wider than the screen: {when}"
            );
            let scroll = eval(page, "document.scrollingElement.scrollHeight - innerHeight").await;
            assert!(
                scroll.as_i64() <= Some(1),
                "the page does not scroll past its end: {when}: {scroll}"
            );
            assert_contrast(page, &when).await;
            save_screenshot(page, &format!("{label}-{size}-{scheme}.png")).await;
        }
        if size == "phone" {
            for tab in ["session", "settings", "rec", "log"] {
                click(page, &format!("#tab-{tab}")).await;
                let fit = eval(page, SHEET_FIT).await;
                assert_eq!(
                    fit["inView"],
                    json!(true),
                    "{label}: the {tab} sheet is on screen: {fit}"
                );
                assert!(
                    fit["conversationShown"].as_f64() >= Some(100.0),
                    "{label}: the {tab} sheet leaves the conversation in view: {fit}"
                );
                assert_eq!(
                    eval(page, OVERFLOWING).await,
                    json!([]),
                    "{label}: {tab} sheet"
                );
                assert_contrast(page, &format!("{label}, the {tab} sheet")).await;
                save_screenshot(page, &format!("{label}-phone-{tab}.png")).await;
                click(page, &format!("#tab-{tab}")).await;
                wait_until(
                    page,
                    "the sheet to close",
                    "!document.body.classList.contains('sheet-open')",
                    WAIT,
                )
                .await;
            }
        }
    }
    color_scheme(page, "light").await;
    set_viewport(page, 1280, 800).await;
}

/// Where the open sheet is, and how much of the conversation (or the banner, or the sign-in
/// form above it) shows above the sheet.
const SHEET_FIT: &str = r##"(() => {
  const panel = [...document.querySelectorAll('.side .panel')].find((p) => !p.hidden);
  const r = panel.getBoundingClientRect();
  const m = document.querySelector('.chat').getBoundingClientRect();
  return { inView: r.top >= 0 && r.bottom <= innerHeight + 1 && r.height > 200, conversationShown: r.top - m.top };
})()"##;

#[tokio::test]
#[ignore = "needs chromium and chromium-driver"]
async fn on_a_phone_every_panel_is_a_sheet_over_a_long_conversation() {
    let server = start(test_args()).await;
    let addr = server.addr;
    with_browser(|page| async move {
        open(&page, addr, "user=b10&session=long-1&modality=TEXT").await;
        for turn in 1..=8 {
            send_text(
                &page,
                &format!(
                    "message number {turn}: tell me a long story about a lighthouse keeper please"
                ),
            )
            .await;
            wait_until(
                &page,
                "the turn end",
                &format!("{TURNS_COMPLETE} === {turn}"),
                WAIT,
            )
            .await;
        }
        tour(&page, "long").await;
    })
    .await;
    server.shutdown(WAIT).await;
}

/// A gateway's args for a Gemini model served by a fresh mock-gemini (which wants `api_key`).
async fn behind_mock_gemini(
    api_key: Option<&str>,
) -> (
    livegate_mock::gemini::MockGemini,
    livegate::gateway::ServeArgs,
) {
    let upstream = livegate_mock::gemini::start(
        "127.0.0.1:0".parse().unwrap(),
        livegate_mock::gemini::MockGeminiConfig {
            sim: livegate::model::sim::SimConfig::instant(),
            api_key: api_key.map(str::to_owned),
            ..Default::default()
        },
    )
    .await
    .expect("mock-gemini starts");
    let mut args = test_args();
    args.model = "gemini-2.5-flash-native-audio-preview-12-2025".into();
    args.gemini_base_url = format!("ws://{}", upstream.addr);
    (upstream, args)
}

fn token_args() -> (
    livegate::gateway::ServeArgs,
    livegate::gateway::auth::Secret,
) {
    use livegate::gateway::auth::{AuthMode, AuthSecrets, Secret};
    let secret = Secret::new("browser-test-secret-0123456789abcdef");
    let mut args = test_args();
    args.auth = Some(AuthMode::Token);
    args.secrets = AuthSecrets {
        token_secret: Some(secret.clone()),
        api_keys: None,
    };
    (args, secret)
}

fn mint(secret: &livegate::gateway::auth::Secret, user: &str, session: Option<&str>) -> String {
    livegate::gateway::auth::Minter::new(secret)
        .expect("a minter")
        .mint(user, session, None)
        .expect("a token")
        .token
}

#[tokio::test]
#[ignore = "needs chromium and chromium-driver"]
async fn signing_in_by_pasting_a_token_holds_for_every_tab_until_signing_out() {
    let (args, secret) = token_args();
    let server = start(args).await;
    let addr = server.addr;
    let token = mint(&secret, "b-paste", None);
    let bound = mint(&secret, "b-paste", Some("only-1"));
    with_browser(|page| async move {
        page.goto(&format!("http://{addr}/")).await.expect("the page loads");
        wait_until(&page, "the sign-in form", "window.livegate && livegate.status === 'sign-in needed'", WAIT).await;
        // Signed out, nothing pretends to work, and nothing says a sign-in expired.
        let controls = eval(&page, "['#new-session', '#user-id', '#mic', '#send', '#export-json', '#delete-session'].map((c) => document.querySelector(c).disabled)").await;
        assert_eq!(controls, json!([true, true, true, true, true, true]));
        let form = eval(&page, "document.querySelector('#signin').textContent").await;
        let form = form.as_str().unwrap_or_default();
        assert!(!form.contains("expired") && !form.contains('`'), "{form}");
        assert_eq!(eval(&page, "document.querySelectorAll('#signin code').length > 0").await, json!(true), "commands as code, not backticks");
        tour(&page, "signed-out").await;

        page.find(Locator::Css("#signin-token")).await.unwrap().send_keys(&token).await.unwrap();
        click(&page, "#signin-submit").await;
        wait_connected(&page).await;
        assert_eq!(eval(&page, "livegate.userId").await, json!("b-paste"));
        let who = eval(&page, "document.querySelector('#account-who').textContent").await;
        assert!(who.as_str().unwrap_or_default().starts_with("Signed in as b-paste · until"), "{who}");
        assert_eq!(eval(&page, "document.querySelector('#user-id').disabled").await, json!(true), "the user is the token's");
        send_text(&page, "hello signed in").await;
        wait_until(&page, "the turn end", &format!("{TURNS_COMPLETE} === 1"), WAIT).await;
        tour(&page, "signed-in").await;

        // A second tab is signed in already; signing out there signs this tab out too.
        let first = page.window().await.unwrap();
        let second = page.new_window(true).await.unwrap().handle;
        page.switch_to_window(second.clone()).await.unwrap();
        page.goto(&format!("http://{addr}/?session=tab-2")).await.unwrap();
        wait_connected(&page).await;
        assert_eq!(eval(&page, "livegate.userId").await, json!("b-paste"));
        click(&page, "#sign-out").await;
        wait_until(&page, "signed out", "livegate.status === 'sign-in needed'", WAIT).await;
        page.close_window().await.unwrap();
        page.switch_to_window(first).await.unwrap();
        wait_until(&page, "signed out in the first tab too", "livegate.status === 'sign-in needed' && !document.querySelector('#signin').hidden", WAIT).await;

        // A sign-in bound to one session says why New and the other sessions are unavailable.
        page.find(Locator::Css("#signin-token")).await.unwrap().send_keys(&bound).await.unwrap();
        click(&page, "#signin-submit").await;
        wait_connected(&page).await;
        assert_eq!(eval(&page, "livegate.sessionId").await, json!("only-1"));
        assert_eq!(eval(&page, "document.querySelector('#new-session').disabled").await, json!(true));
        click(&page, "#tab-session").await;
        let note = eval(&page, "document.querySelector('#identity-note').textContent").await;
        assert!(note.as_str().unwrap_or_default().contains("reaches session only-1 only"), "{note}");
        // A pasted token that is not one is refused with a reason.
        click(&page, "#sign-out").await;
        page.find(Locator::Css("#signin-token")).await.unwrap().send_keys("not a token").await.unwrap();
        click(&page, "#signin-submit").await;
        let why = eval(&page, "document.querySelector('#signin-why').textContent").await;
        assert!(why.as_str().unwrap_or_default().contains("not a livegate token"), "{why}");
    })
    .await;
    server.shutdown(WAIT).await;
}

#[tokio::test]
#[ignore = "needs chromium and chromium-driver"]
async fn the_agent_state_waveform_devices_mute_and_push_to_talk() {
    let server = start(test_args()).await;
    let addr = server.addr;
    with_browser(|page| async move {
        open(&page, addr, "user=b11&session=state-1").await;
        assert_eq!(eval(&page, "livegate.agentState").await, json!("idle"));
        click(&page, "#mic").await;
        wait_until(&page, "listening", "livegate.agentState === 'listening'", WAIT).await;
        wait_until(&page, "speaking", "livegate.agentState === 'speaking'", WAIT).await;
        wait_until(&page, "the waveform drawn", "Number(document.querySelector('#waveform').dataset.drawn) > 3", WAIT).await;
        wait_until(&page, "back to listening", "livegate.agentState === 'listening' && livegate.bufferedSamples === 0", WAIT).await;
        // The microphone picker lists the (fake) device once permission is given; the speaker
        // picker is there where the browser can choose an output.
        click(&page, "#tab-settings").await;
        let mics = wait_until(&page, "the microphones", "document.querySelectorAll('#mic-device option').length > 1 && [...document.querySelectorAll('#mic-device option')].map((o) => o.textContent)", WAIT).await;
        assert!(mics.to_string().to_lowercase().contains("fake") || mics.as_array().unwrap().len() > 1, "{mics}");
        assert!(eval(&page, "document.querySelectorAll('#speaker-device option').length").await.as_u64() >= Some(1));
        page.find(Locator::Css("#mic-device")).await.unwrap().select_by_index(1).await.unwrap();
        wait_until(&page, "the microphone again", "livegate.micChunks > 0 && document.querySelector('#mic').getAttribute('aria-pressed') === 'true'", WAIT).await;

        // Muted: nothing is captured or sent, and the agent is not listening.
        click(&page, "#mute").await;
        wait_until(&page, "muted", "document.querySelector('#mute').getAttribute('aria-pressed') === 'true' && livegate.agentState !== 'listening'", WAIT).await;
        let muted = eval(&page, "[livegate.micChunks, livegate.sentChunks]").await;
        send_text(&page, "hello while muted").await;
        wait_until(&page, "an answer while muted", &format!("{TURNS_COMPLETE} >= 2"), WAIT).await;
        assert_eq!(eval(&page, "[livegate.micChunks, livegate.sentChunks]").await, muted, "nothing captured while muted");
        click(&page, "#mute").await;
        click(&page, "#mic").await;

        // Push to talk: the microphone is heard only while the button is held.
        page.find(Locator::Css("#talk-mode")).await.unwrap().select_by_value("pushToTalk").await.unwrap();
        wait_until(&page, "the talk button", "!document.querySelector('#ptt').hidden", WAIT).await;
        let turns = eval(&page, TURNS_COMPLETE).await.as_u64().unwrap();
        eval(&page, "document.querySelector('#ptt').dispatchEvent(new PointerEvent('pointerdown', {bubbles: true})) || true").await;
        wait_until(&page, "talking", "document.querySelector('#ptt').getAttribute('aria-pressed') === 'true' && livegate.sentChunks > 0", WAIT).await;
        let before = eval(&page, "livegate.sentChunks").await.as_u64().unwrap();
        wait_until(&page, "speech sent while held", &format!("livegate.sentChunks > {before} + 50"), WAIT).await;
        eval(&page, "document.querySelector('#ptt').dispatchEvent(new PointerEvent('pointerup', {bubbles: true})) || true").await;
        let released = eval(&page, "[livegate.sentChunks, livegate.micChunks]").await;
        wait_until(&page, "the answer to the held speech", &format!("{TURNS_COMPLETE} > {turns}"), WAIT).await;
        wait_until(&page, "the microphone goes on", &format!("livegate.micChunks > {} + 10", released[1]), WAIT).await;
        assert_eq!(eval(&page, "livegate.sentChunks").await, released[0], "nothing sent once released");
    })
    .await;
    server.shutdown(WAIT).await;
}

#[tokio::test]
#[ignore = "needs chromium and chromium-driver"]
async fn an_openai_model_gets_openai_voices_and_a_setting_changed_mid_answer_ends_it_visibly() {
    let upstream = livegate_mock::openai::start(
        "127.0.0.1:0".parse().unwrap(),
        livegate_mock::openai::MockOpenAiConfig {
            sim: livegate::model::sim::SimConfig::default(),
            ..Default::default()
        },
    )
    .await
    .expect("mock-openai starts");
    let mut args = test_args();
    args.model = "gpt-realtime".into();
    args.openai_base_url = format!("http://{}/v1", upstream.addr);
    args.live.client_settings = "voice,language,transcription,barge_in,vad".parse().unwrap();
    let server = start(args).await;
    let addr = server.addr;
    with_browser(|page| async move {
        open(&page, addr, "user=b12&session=openai-1").await;
        assert_eq!(eval(&page, "document.querySelector('#model').textContent").await, json!("gpt-realtime"));
        click(&page, "#tab-settings").await;
        let voices = eval(&page, "[...document.querySelectorAll('#set-voice option')].map((o) => o.value)").await;
        let voices = voices.as_array().unwrap();
        assert!(voices.contains(&json!("marin")) && !voices.contains(&json!("Kore")), "{voices:?}");
        assert_eq!(eval(&page, "[document.querySelector('#set-vad').disabled, document.querySelector('#set-silence').disabled, document.querySelector('#vad-note').hidden]").await, json!([false, false, true]));

        send_text(&page, "tell me a long story about a lighthouse keeper please").await;
        wait_until(&page, "the answer under way", "document.querySelector('#messages .msg.agent')", WAIT).await;
        page.find(Locator::Css("#set-voice")).await.unwrap().select_by_value("marin").await.unwrap();
        wait_until(&page, "the answer marked as ended", "document.querySelector('#messages .msg.agent.ended[data-ended=\"ended: settings changed\"]')", WAIT).await;
        wait_until(&page, "the new connection", "livegate.status === 'connected' && livegate.setup.voice === 'marin'", WAIT).await;
        let notices = eval(&page, "[...document.querySelectorAll('#messages .msg.system')].map((m) => m.textContent)").await;
        assert_eq!(notices, json!([]), "no reconnect notice for a settings change");
        click(&page, "#set-vad").await;
        wait_until(&page, "manual activity", "livegate.status === 'connected' && livegate.setup.vad === false", WAIT).await;
        assert_eq!(eval(&page, "livegate.events.filter((e) => e.errorCode).length").await, json!(0), "the gateway took both");
    })
    .await;
    server.shutdown(WAIT).await;
    upstream.shutdown().await;
}

#[tokio::test]
#[ignore = "needs chromium and chromium-driver"]
async fn a_spoken_answer_without_transcription_still_gets_a_bubble() {
    let server = start(test_args()).await;
    let addr = server.addr;
    with_browser(|page| async move {
        open(&page, addr, "user=b13&session=quiet-1").await;
        click(&page, "#tab-settings").await;
        click(&page, "#set-transcription").await;
        wait_until(&page, "the setup without transcription", "livegate.status === 'connected' && livegate.setup.output_transcription === false", WAIT).await;
        send_text(&page, "hello there").await;
        wait_until(&page, "the turn end", &format!("{TURNS_COMPLETE} === 1"), WAIT).await;
        let bubble = wait_until(&page, "the spoken answer's bubble", "(() => { const b = document.querySelector('#messages .msg.agent.voice.final'); return b && b.textContent; })()", WAIT).await;
        assert!(bubble.as_str().unwrap_or_default().starts_with("Spoken answer · "), "{bubble}");
        assert_eq!(eval(&page, "livegate.events.filter((e) => e.outputTranscription).length").await, json!(0));
    })
    .await;
    server.shutdown(WAIT).await;
}

#[tokio::test]
#[ignore = "needs chromium and chromium-driver"]
async fn recordings_show_their_length_progress_and_turn() {
    let server = start(test_args()).await;
    let addr = server.addr;
    with_browser(|page| async move {
        open(&page, addr, "user=b14&session=rec-1").await;
        click(&page, "#mic").await;
        wait_until(&page, "the voice turn", &format!("{TURNS_COMPLETE} === 1"), WAIT).await;
        click(&page, "#mic").await;
        click(&page, "#tab-rec").await;
        let lengths = wait_until(&page, "the recordings with lengths", "document.querySelectorAll('#recordings .rec .rec-duration').length >= 2 && [...document.querySelectorAll('#recordings .rec .rec-duration')].map((d) => d.textContent)", WAIT).await;
        for length in lengths.as_array().unwrap() {
            let seconds: f64 = length.as_str().unwrap().trim_end_matches(" s").parse().unwrap_or(0.0);
            assert!(seconds > 0.5 && seconds < 30.0, "{lengths}");
        }
        click(&page, "#recordings .rec.input .rec-play").await;
        wait_until(&page, "playback progress", "document.querySelector('#recordings .rec.input .rec-progress').value > 0", WAIT).await;
        click(&page, "#recordings .rec.input .rec-turn").await;
        let flashed = wait_until(&page, "its turn shown", "(() => { const f = document.querySelector('#messages .flash'); return f && f.className; })()", WAIT).await;
        assert!(flashed.as_str().unwrap_or_default().contains("user transcript"), "{flashed}");
    })
    .await;
    server.shutdown(WAIT).await;
}

#[tokio::test]
#[ignore = "needs chromium and chromium-driver"]
async fn sessions_have_titles_export_and_delete() {
    let server = start(test_args()).await;
    let addr = server.addr;
    with_browser(|page| async move {
        open(&page, addr, "user=b15&session=first-1&modality=TEXT").await;
        send_text(&page, "plan a trip to Lisbon").await;
        wait_until(&page, "the turn end", &format!("{TURNS_COMPLETE} === 1"), WAIT).await;
        click(&page, "#tab-session").await;
        wait_until(&page, "the title", "document.querySelector('#sessions [aria-current=\"true\"] .session-title').textContent === 'plan a trip to Lisbon'", WAIT).await;

        click(&page, "#export-text").await;
        let text = wait_until(&page, "the text export", "livegate.lastExport && livegate.lastExport.type === 'text/plain' && livegate.lastExport.text", WAIT).await;
        let text = text.as_str().unwrap();
        assert!(text.starts_with("You: plan a trip to Lisbon\nAgent: "), "{text}");
        click(&page, "#export-json").await;
        let json = wait_until(&page, "the JSON export", "livegate.lastExport.type === 'application/json' && livegate.lastExport.text", WAIT).await;
        let exported: Value = serde_json::from_str(json.as_str().unwrap()).unwrap();
        assert_eq!(exported["sessionId"], "first-1");
        assert!(exported["events"].as_array().unwrap().len() >= 3, "{exported}");
        // The replay bundle: the export route's tar, fetched with the page's credentials.
        click(&page, "#export-bundle").await;
        let size = wait_until(&page, "the bundle export", "livegate.lastExport.type === 'application/x-tar' && livegate.lastExport.name === 'first-1.tar' && livegate.lastExport.text.size", WAIT).await;
        assert!(size.as_u64().unwrap() > 1024, "{size}");

        // Delete asks twice, then the session is gone and a new one is open.
        click(&page, "#delete-session").await;
        assert_eq!(eval(&page, "livegate.sessionId").await, json!("first-1"), "one click does not delete");
        click(&page, "#delete-session").await;
        wait_until(&page, "a new session", "livegate.sessionId !== 'first-1' && livegate.status === 'connected'", WAIT).await;
        let gone = reqwest::get(format!("http://{addr}/api/sessions/b15/first-1")).await.unwrap();
        assert_eq!(gone.status().as_u16(), 404);
        wait_until(&page, "the list without it", "!document.querySelector('#sessions button[data-id=\"first-1\"]')", WAIT).await;
    })
    .await;
    server.shutdown(WAIT).await;
}

#[tokio::test]
#[ignore = "needs chromium and chromium-driver"]
async fn a_model_that_refuses_the_key_shows_one_banner_and_keeps_the_message() {
    // The gateway presents no key (the tests set none); the model wants one.
    let (upstream, args) = behind_mock_gemini(Some("the-right-key")).await;
    let server = start(args).await;
    let addr = server.addr;
    with_browser(|page| async move {
        page.goto(&format!("http://{addr}/?user=b16&session=key-1"))
            .await
            .unwrap();
        wait_until(
            &page,
            "the page",
            "window.livegate && livegate.historyLoaded",
            WAIT,
        )
        .await;
        // The run fails as it starts or at the first message; type one either way.
        let typed = "hello, is anyone there?";
        if eval(&page, "livegate.status === 'connected'").await == json!(true) {
            send_text(&page, typed).await;
        }
        wait_until(
            &page,
            "the banner",
            "!document.querySelector('#banner').hidden && livegate.fatal",
            WAIT,
        )
        .await;
        let banner = eval(&page, "document.querySelector('#banner').textContent").await;
        let banner = banner.as_str().unwrap_or_default();
        assert!(
            banner.contains("API key") && banner.contains("refused"),
            "{banner}"
        );
        assert_eq!(eval(&page, "livegate.fatal.kind").await, json!("model"));
        assert_eq!(eval(&page, "livegate.status").await, json!("disconnected"));
        let closes = eval(&page, "document.querySelectorAll('#log .k-close').length").await;
        assert_eq!(closes, json!(1), "no reconnect loop");
        assert!(
            eval(
                &page,
                "document.querySelectorAll('#messages .msg.system.error').length"
            )
            .await
            .as_u64()
                <= Some(1),
            "no stack of errors"
        );
        let kept = eval(&page, "document.querySelector('#text-input').value").await;
        assert!(kept == json!(typed) || kept == json!(""), "{kept}");
        tour(&page, "model-refused").await;
    })
    .await;
    server.shutdown(WAIT).await;
    upstream.shutdown().await;
}

// ---- the client library on its own: its examples, in Chromium ------------------------------

#[tokio::test]
#[ignore = "needs chromium and chromium-driver"]
async fn the_voice_button_example_hears_the_fake_microphone_and_plays_the_answer() {
    let server = start(test_args()).await;
    let addr = server.addr;
    with_browser(|page| async move {
        page.goto(&format!("http://{addr}/examples/voice-button.html?session=button-1"))
            .await
            .expect("the example loads");
        wait_until(&page, "the session", "window.example && example.session.status === 'open'", WAIT).await;
        assert_eq!(eval(&page, "document.querySelector('#state').textContent").await, json!("idle"));
        click(&page, "#talk").await;
        wait_until(&page, "listening", "document.querySelector('#state').textContent === 'listening'", WAIT).await;
        let said = wait_until(&page, "the answer's transcript", "document.querySelector('#said').textContent", WAIT).await;
        assert!(said.as_str().unwrap_or_default().contains("You said something"), "{said}");
        // The answer plays through the library's player at 24 kHz; at least a second is heard.
        wait_until(&page, "the answer played", "example.voice.player.stats.played >= 24000", WAIT).await;
        assert_eq!(eval(&page, "example.voice.microphone.chunks > 50").await, json!(true), "20 ms chunks went up");
        click(&page, "#talk").await;
        wait_until(&page, "the microphone off", "!example.voice.microphone.active && document.querySelector('#talk').textContent === 'Talk'", WAIT).await;
    })
    .await;
    server.shutdown(WAIT).await;
}

#[tokio::test]
#[ignore = "needs chromium and chromium-driver"]
async fn the_chat_example_reconnects_after_a_restart_and_shows_nothing_twice() {
    let server = start(test_args()).await;
    let addr = server.addr;
    let restarted = std::sync::Arc::new(tokio::sync::Mutex::new(Some(server)));
    let handle = restarted.clone();
    with_browser(|page| async move {
        page.goto(&format!("http://{addr}/examples/chat.html?user=c1&session=chat-1"))
            .await
            .expect("the example loads");
        wait_until(&page, "the session", "window.example && example.session.status === 'open'", WAIT).await;
        eval(&page, "(window.ids = [], example.session.on('event', (e) => e.event.id && ids.push(e.event.id)), true)").await;
        let say = |text: &'static str| {
            let page = page.clone();
            async move {
                page.find(Locator::Css("#text")).await.unwrap().send_keys(text).await.unwrap();
                click(&page, "#form button").await;
            }
        };
        say("what is 12 * (3 + 4)?").await;
        wait_until(&page, "the answer", "[...document.querySelectorAll('.msg.model')].some((m) => m.textContent.includes('84'))", WAIT).await;

        let server = handle.lock().await.take().expect("the first gateway");
        server.shutdown(WAIT).await;
        wait_until(&page, "reconnecting", "example.session.status === 'reconnecting'", WAIT).await;
        let mut args = test_args();
        args.bind = addr;
        *handle.lock().await = Some(start(args).await);
        wait_until(&page, "back", "example.session.status === 'open'", WAIT).await;
        say("hello again").await;
        wait_until(&page, "the second answer", "document.querySelectorAll('.msg.model').length === 2", WAIT).await;
        let ids = eval(&page, "[ids.length, new Set(ids).size]").await;
        assert_eq!(ids[0], ids[1], "no event delivered twice: {ids}");
        let users = eval(&page, "[...document.querySelectorAll('.msg.user')].map((m) => m.textContent)").await;
        assert_eq!(users, json!(["what is 12 * (3 + 4)?", "hello again"]));
    })
    .await;
    let last = restarted.lock().await.take();
    if let Some(server) = last {
        server.shutdown(WAIT).await;
    }
}

/// A non-blocking tool's card: "running in the background…" while the agent goes on and its
/// turn ends, then the call's result once the tool answers.
#[tokio::test]
#[ignore = "needs chromium and chromium-driver"]
async fn a_background_tool_s_card_runs_then_shows_its_result() {
    let (server, gate, _dir) =
        crate::live_tools::gateway_with_booking(test_args(), "when_idle").await;
    let addr = server.addr;
    with_browser(|page| async move {
        open(&page, addr, "user=b7&session=background-1").await;
        send_text(&page, "book seat=12A").await;
        wait_until(&page, "the turn to end with the call running", &format!("{TURNS_COMPLETE} === 1"), WAIT).await;
        let running = eval(
            &page,
            "(() => { const t = document.querySelector('#messages .tool.background'); return t && [t.className, t.querySelector('.tool-result').textContent]; })()",
        )
        .await;
        assert!(
            running[0].as_str().is_some_and(|c| c.contains("pending")),
            "the card runs: {running}"
        );
        assert_eq!(running[1], "running in the background…", "{running}");
        gate.add_permits(1);
        let done = wait_until(
            &page,
            "the call's result on its card",
            "(() => { const t = document.querySelector('#messages .tool.background:not(.pending)'); return t && t.querySelector('.tool-result').textContent; })()",
            WAIT,
        )
        .await;
        assert!(done.as_str().is_some_and(|r| r.contains("12A")), "{done}");
    })
    .await;
    server.shutdown(WAIT).await;
}
