//! `livegate loadtest` against a real gateway: a small load whose report must add up.

use std::time::Duration;

use crate::common::*;
use livegate_loadtest::{self as loadtest, LoadtestArgs};
use tokio::time::timeout;

/// `sessions` each saying hello once against the gateway at `addr`, quietly, with no pid, report
/// or plot.
fn one_turn_each(addr: std::net::SocketAddr, sessions: usize, duration: Duration) -> LoadtestArgs {
    LoadtestArgs {
        url: vec![format!("ws://{addr}/ws")],
        sessions,
        duration,
        ramp: 50.0,
        audio: vec![
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hello.wav")
        ],
        turns: 1,
        idle: false,
        in_phase: false,
        frame_ms: 20,
        query: String::new(),
        model_delay_ms: None,
        server_pid: None,
        metrics_url: None,
        report: None,
        plot: None,
        quiet: true,
        session_report: false,
        api_key: None,
        token: None,
        protocol: Default::default(),
        twilio_auth_token: None,
    }
}

/// Runs a load test that must end within a minute without failing to run.
async fn run(args: &LoadtestArgs) -> loadtest::Report {
    timeout(Duration::from_secs(60), loadtest::run(args))
        .await
        .expect("the load test ends")
        .expect("the load test runs")
}

#[tokio::test]
async fn a_small_load_reports_consistent_counts() {
    let server = start(test_args()).await;
    let dir = tempfile::tempdir().unwrap();
    let args = LoadtestArgs {
        server_pid: Some(std::process::id()),
        report: Some(dir.path().join("report.json")),
        plot: Some(dir.path().join("plot.svg")),
        ..one_turn_each(server.addr, 20, Duration::from_secs(4))
    };
    let report = run(&args).await;

    assert_eq!(
        (report.errors, report.unexpected_closes),
        (0, 0),
        "{:?}",
        report.error_samples
    );
    assert_eq!(report.connect_ms.count, 20);
    assert_eq!(report.turns_completed, 20, "one answered turn per session");
    assert_eq!(report.latency_ms.count, 20, "each answer timed once");
    assert_eq!(report.interrupted, 0);
    assert_eq!(report.timeouts_with_unread, 0);
    assert!(report.latency_ms.p50 > 0.0);
    // Gateway-added time starts when the sim's 500 ms of end-of-speech silence has been sent
    // (with no reply delay): the gateway's /metrics said so.
    assert_eq!(report.model_delay_ms, 500.0);
    assert_eq!(report.gateway_latency_ms.count, 20);
    assert!(
        report.gateway_latency_ms.p50 + 400.0 < report.latency_ms.p50,
        "{:?} vs {:?}",
        report.gateway_latency_ms,
        report.latency_ms
    );
    // Each answer's end is timed once, from its last audio to its turnComplete.
    assert_eq!(report.turn_end_ms.count, 20);
    assert_eq!(report.sent.frames, report.schedule_lag_ms.count as u64);
    assert!(report.audio_bytes_received > 0);
    let server_stats = report.server.as_ref().expect("its own /proc is readable");
    assert_eq!(server_stats.pid, Some(std::process::id()));
    assert!(server_stats.cpu_seconds > 0.0 && server_stats.peak_rss_kib > 0);
    assert!(
        report.generator_cpu_cores.is_some_and(|c| c > 0.0),
        "the generator's own CPU is reported"
    );
    // Twenty sockets' worth of frames cost the kernel time, and the kernel's share is part of
    // the whole, for the server and for the generator (here the same process).
    let system = server_stats.cpu_system_seconds.expect("from /proc");
    assert!(
        0.0 < system && system <= server_stats.cpu_seconds,
        "{server_stats:?}"
    );
    let (cores, system_cores) = (
        report.generator_cpu_cores.unwrap_or_default(),
        report.generator_cpu_system_cores.expect("from /proc"),
    );
    assert!(0.0 < system_cores && system_cores <= cores);
    assert!(report.table().contains("of it in the kernel;"));
    // And at the load itself, apart from the ramp and the drain: the sampler saw all 20
    // sessions connected for seconds (as for the machine's load below).
    assert!(
        server_stats.cpu_cores_at_peak.is_some_and(|c| c > 0.0),
        "{server_stats:?}"
    );
    assert!(report.generator_cpu_cores_at_peak.is_some_and(|c| c > 0.0));
    assert!(report
        .table()
        .contains(" with 20 sessions connected), RSS "));

    // What the generator sent the gateway recorded (each session's turn whole, but not the
    // silence it streamed after the turn until the run ended: a silent tail is no recording), and
    // what it received is what the gateway recorded as answers. That every frame arrived is
    // checked against the gateway's metrics below.
    let user = format!("load-{}", report.run_id);
    let (mut input, mut output) = (0, 0);
    for i in 0..20 {
        let (i_bytes, o_bytes) = recorded_audio(&server, &user, &format!("s{i}")).await;
        input += i_bytes as u64;
        output += o_bytes as u64;
    }
    let clip = fixture_pcm("hello.wav").len() as u64;
    assert!(
        20 * clip <= input && input <= report.audio_bytes_sent,
        "each turn recorded: {input} of {} sent",
        report.audio_bytes_sent
    );
    assert_eq!(output, report.audio_bytes_received);

    // The gateway's own metrics agree: it received every frame, and timed each answer's first
    // audio from the client audio that ended the utterance, and from the model, to the socket.
    let gateway = report
        .gateway
        .as_ref()
        .expect("the gateway serves /metrics");
    assert_eq!(gateway.audio_frames_received, report.sent.frames);
    assert_eq!(gateway.turn_complete_events, report.turns_completed);
    assert_eq!(gateway.answer_forward_ms.count, 20, "{gateway:?}");
    assert!(gateway.answer_forward_ms.p50 > 0.0, "{gateway:?}");
    assert_eq!(gateway.first_audio_ms.count, 20, "{gateway:?}");
    // And timed each answer's end, as the generator did.
    assert_eq!(gateway.turn_end_ms.count, 20, "{gateway:?}");
    // The whole includes the downstream part.
    assert!(
        gateway.first_audio_ms.mean >= gateway.answer_forward_ms.mean,
        "{gateway:?}"
    );
    assert!(report.machine_cpu_busy.is_some_and(|b| b > 0.0 && b <= 1.0));
    let peak = report
        .machine_cpu_at_peak
        .expect("the sampler saw all 20 sessions connected more than once");
    assert!(
        peak.busy > 0.0
            && peak.busy <= 1.0
            && (0.0..=peak.busy).contains(&peak.steal)
            && (0.0..=peak.busy).contains(&peak.kernel),
        "{peak:?}"
    );
    assert!(report.table().contains("sessions connected (kernel "));
    // Where the kernel keeps scheduling statistics, the time threads waited for a CPU is known.
    if std::path::Path::new("/proc/self/schedstat").exists() {
        let waits = [
            server_stats.cpu_wait_at_peak,
            report.generator_cpu_wait_at_peak,
        ];
        assert!(
            waits
                .iter()
                .all(|w| w.is_some_and(|w| w.per_wakeup_us >= 0.0 && w.threads_waiting >= 0.0)),
            "{waits:?}"
        );
        assert!(report
            .table()
            .contains("waiting for a CPU with 20 sessions connected: server "));
    }

    // Where the kernel's socket table is readable, the bytes the gateway had not read yet are
    // known for every session's socket.
    if std::path::Path::new("/proc/self/net/tcp").exists() {
        let backlog = server_stats
            .socket_backlog_at_peak
            .expect("the gateway's sockets are in its socket table");
        assert!(backlog.sockets >= 20, "{backlog:?}");
        assert!(
            (0.0..=1.0).contains(&backlog.share_with_unread),
            "{backlog:?}"
        );
        assert!(
            backlog.mean_wait_ms.is_some(),
            "audio was sent: {backlog:?}"
        );
        assert!(report
            .table()
            .contains("sockets with 20 sessions connected:"));
    }

    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("report.json")).unwrap()).unwrap();
    for field in [
        "connect_ms",
        "latency_ms",
        "gateway_latency_ms",
        "audio_gaps_ms",
        "turn_end_ms",
        "sent",
        "received",
        "schedule_lag_ms",
        "server",
        "generator_cpu_cores",
        "generator_cpu_system_cores",
        "generator_cpu_cores_at_peak",
        "machine_cpu_busy",
        "machine_cpu_at_peak",
        "generator_cpu_wait_at_peak",
        "timeouts_with_unread",
        "gateway",
        "text_latency_ms",
        "text_gateway_latency_ms",
    ] {
        assert!(json.get(field).is_some(), "the report has {field}");
    }
    assert!(json["server"]["cpu_cores_at_peak"].as_f64().is_some());
    // The report says when, with what and where it was measured.
    let started: jiff::Timestamp = json["started_at"].as_str().unwrap().parse().unwrap();
    let age = jiff::Timestamp::now().duration_since(started);
    assert!(
        age > jiff::SignedDuration::ZERO && age < jiff::SignedDuration::from_secs(120),
        "{started}"
    );
    assert_eq!(json["generator"], format!("livegate {}", livegate::BUILD));
    assert!(livegate::BUILD.starts_with(env!("CARGO_PKG_VERSION")));
    // And which gateway it measured (here the same build).
    assert_eq!(json["gateway"]["build"], livegate::BUILD);
    assert!(json["machine"]["cpus"].as_u64().is_some_and(|n| n >= 1));
    assert!(json["machine"]["memory_mib"]
        .as_u64()
        .is_some_and(|m| m > 0));
    assert!(report.table().lines().nth(1).is_some_and(|line| line
        .starts_with(&format!("{started}, livegate "))
        && line.contains(" CPUs")));
    assert!(std::fs::read_to_string(dir.path().join("plot.svg"))
        .unwrap()
        .starts_with("<svg"));
    server.shutdown(WAIT).await;
}

#[cfg(target_os = "linux")]
#[tokio::test]
async fn without_a_pid_the_server_is_measured_through_its_metrics() {
    let server = start(test_args()).await;
    let args = one_turn_each(server.addr, 5, Duration::from_secs(3));
    let report = run(&args).await;
    assert_eq!((report.errors, report.turns_completed), (0, 5));

    let stats = report
        .server
        .as_ref()
        .expect("the gateway's /metrics has process_*");
    assert_eq!(stats.pid, None);
    // Five sessions streaming for seconds cost the (in-process) gateway some CPU.
    assert!(
        stats.cpu_seconds > 0.0 && stats.cpu_cores > 0.0,
        "{stats:?}"
    );
    assert!(stats.baseline_rss_kib > 0 && stats.peak_rss_kib >= stats.baseline_rss_kib);
    // Sampled every 2 s from the start: at 0 s and 2 s at least.
    assert!(stats.samples.len() >= 2, "{:?}", stats.samples);
    assert!(stats.samples.windows(2).all(|w| w[0].t < w[1].t));
    assert!(stats
        .samples
        .iter()
        .all(|s| s.rss_kib > 0 && s.cpu_seconds >= 0.0));
    // What only /proc can tell is left out rather than made up.
    assert_eq!(
        (
            stats.cpu_wait_at_peak,
            stats.socket_backlog_at_peak,
            stats.cpu_system_seconds
        ),
        (None, None, None)
    );
    assert!(report.table().contains("server (its /metrics): CPU "));
    server.shutdown(WAIT).await;
}

#[tokio::test]
async fn answers_in_text_are_timed_by_their_first_text() {
    let server = start(test_args()).await;
    let dir = tempfile::tempdir().unwrap();
    let args = LoadtestArgs {
        query: "modality=TEXT".into(),
        plot: Some(dir.path().join("plot.svg")),
        ..one_turn_each(server.addr, 5, Duration::from_secs(3))
    };
    let report = run(&args).await;

    assert_eq!(
        (report.errors, report.turns_completed),
        (0, 5),
        "{:?}",
        report.error_samples
    );
    assert_eq!(report.audio_bytes_received, 0, "answers in text only");
    assert_eq!(report.latency_ms.count, 0);
    assert_eq!(report.text_latency_ms.count, 5, "each answer timed once");
    assert_eq!(report.text_gateway_latency_ms.count, 5);
    // As for audio: gateway-added time starts after the sim's 500 ms of end-of-speech silence.
    assert!(
        report.text_gateway_latency_ms.p50 + 400.0 < report.text_latency_ms.p50,
        "{:?} vs {:?}",
        report.text_gateway_latency_ms,
        report.text_latency_ms
    );
    assert_eq!(
        report.turn_end_ms.count, 5,
        "timed from each answer's last text"
    );
    assert!(report.table().contains("first text"));
    // The gateway timed them too, from the audio that ended each utterance to the first text.
    let gateway = report
        .gateway
        .as_ref()
        .expect("the gateway serves /metrics");
    assert_eq!(gateway.first_text_ms.count, 5, "{gateway:?}");
    assert_eq!(gateway.first_audio_ms.count, 0, "{gateway:?}");
    // And each answer's way down and its end, from its first and its last text.
    assert_eq!(gateway.answer_forward_ms.count, 5, "{gateway:?}");
    assert_eq!(gateway.turn_end_ms.count, 5, "{gateway:?}");
    assert!(
        gateway.first_text_ms.mean + 400.0 < report.text_latency_ms.p50,
        "{gateway:?}"
    );
    assert!(report
        .table()
        .contains("gateway-added, text (utterance end read"));
    let plot = std::fs::read_to_string(dir.path().join("plot.svg")).unwrap();
    assert!(plot.contains("first-text latency: n=5"), "{plot}");
    assert!(
        plot.contains(">first-text latency (ms)<"),
        "the x axis is labelled"
    );
    server.shutdown(WAIT).await;
}

/// Runs a load test and stops it once the gateway's `metric` reaches `value`; its report must
/// come within `bound` of the stop.
async fn stopped_at(
    args: LoadtestArgs,
    addr: std::net::SocketAddr,
    (metric, value): (&str, f64),
    bound: Duration,
) -> loadtest::Report {
    let stop = livegate::latch::Latch::new();
    let running = tokio::spawn({
        let stop = stop.clone();
        async move { loadtest::run_until(&args, stop).await }
    });
    metric_reaches(addr, metric, value).await;
    stop.fire();
    timeout(bound, running)
        .await
        .expect("a stopped run ends within its bound")
        .expect("the run's task")
        .expect("the load test runs")
}

#[tokio::test]
async fn a_stopped_run_ends_with_the_turns_under_way_and_reports_them() {
    let server = start(test_args()).await;
    // A minute of turns, and a second session that would open 50 s in: far later than the first
    // turn ends, however slow the machine.
    let args = LoadtestArgs {
        turns: 0,
        ramp: 0.02,
        ..one_turn_each(server.addr, 5, Duration::from_secs(60))
    };
    // Once the first session's first answer is complete (its next turn then under way), stop:
    // the run ends with that turn, not after its minute.
    let turn_complete = r#"livegate_events_total{kind="turn_complete"}"#;
    let report = stopped_at(
        args,
        server.addr,
        (turn_complete, 1.0),
        Duration::from_secs(30),
    )
    .await;

    assert!(report.stopped_early);
    assert!(report.elapsed_seconds < 60.0, "{}", report.elapsed_seconds);
    // The session under way finished its turn cleanly, and no further session opened.
    assert_eq!(report.errors, 0, "{:?}", report.error_samples);
    assert_eq!(report.unexpected_closes, 0);
    assert_eq!(report.connect_ms.count, 1, "sessions open 50 s apart");
    assert!(report.turns_completed >= 1);
    assert_eq!(report.latency_ms.count as u64, report.turns_completed);
    assert!(report.table().contains("stopped early (of 60 s)"));

    // Idle sessions leave at once.
    let args = LoadtestArgs {
        idle: true,
        ..one_turn_each(server.addr, 2, Duration::from_secs(60))
    };
    let report = stopped_at(args, server.addr, ("livegate_connections", 2.0), WAIT).await;
    assert!(report.stopped_early);
    assert_eq!((report.connect_ms.count, report.errors), (2, 0));
    server.shutdown(WAIT).await;
}

#[tokio::test]
async fn a_metrics_url_given_is_the_only_one_read() {
    let server = start(test_args()).await;
    let args = LoadtestArgs {
        // Not where this gateway serves its metrics: nothing is read, and the run goes on.
        metrics_url: Some(format!("http://{}/elsewhere/metrics", server.addr)),
        ..one_turn_each(server.addr, 2, Duration::from_secs(3))
    };
    let report = run(&args).await;

    assert_eq!(report.errors, 0, "{:?}", report.error_samples);
    assert_eq!(report.turns_completed, 2);
    assert!(report.gateway.is_none(), "{:?}", report.gateway);
    assert!(report.server.is_none(), "{:?}", report.server);
    server.shutdown(WAIT).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_spread_over_nodes_and_move_on_when_one_shuts_down() {
    let node_a = start(test_args()).await;
    let node_b = start(test_args()).await;
    let args = LoadtestArgs {
        url: vec![
            format!("ws://{}/ws", node_a.addr),
            format!("ws://{}/ws/", node_b.addr),
        ],
        turns: 0,
        ..one_turn_each(node_a.addr, 8, Duration::from_secs(5))
    };
    let load = tokio::spawn(async move { run(&args).await });
    // Round-robin: sessions s0, s2, s4 and s6 on A. Once A drives them all, it shuts down as a
    // restarting node does, closing them with 1001.
    eventually(WAIT, "A drives half of the sessions", || async {
        node_a.gateway().registry.active() >= 4
    })
    .await;
    node_a.shutdown(WAIT).await;
    let report = load.await.unwrap();

    assert_eq!(
        (report.errors, report.unexpected_closes),
        (0, 0),
        "a restart close is neither: {:?}",
        report.error_samples
    );
    assert_eq!(report.reconnects, 4, "A's sessions reconnected");
    assert_eq!(report.reconnect_ms.count, 4, "each reconnect timed");
    assert!(
        report.reconnect_ms.max < 10_000.0,
        "{:?}",
        report.reconnect_ms
    );
    assert_eq!(report.connects_per_url, vec![4, 8], "A's four moved to B");
    assert_eq!(report.connect_ms.count, 8);
    let table = report.table();
    assert!(table.contains("reconnects after 1012/1001: 4"), "{table}");
    assert!(
        table.lines().any(|l| l.starts_with("reconnect ")),
        "{table}"
    );

    // The moved sessions went on under the same ids on B: each said something there.
    let user = format!("load-{}", report.run_id);
    for moved in ["s0", "s2", "s4", "s6"] {
        let (input, _) = recorded_audio(&node_b, &user, moved).await;
        assert!(input > 0, "{moved} continued on B");
    }
    node_b.shutdown(WAIT).await;
}

/// A node that accepts WebSocket sessions and closes each with 1012 (service restart) after
/// `after`, as a draining node does.
async fn restarting_node(after: Duration) -> std::net::SocketAddr {
    use futures::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
    use tokio_tungstenite::tungstenite::protocol::CloseFrame;
    use tokio_tungstenite::tungstenite::Message;

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let Ok(mut ws) = tokio_tungstenite::accept_async(stream).await else {
                    return;
                };
                let close_at = tokio::time::Instant::now() + after;
                // Takes the audio until it is time to restart.
                while let Ok(Some(Ok(_))) = tokio::time::timeout_at(close_at, ws.next()).await {}
                let restart = CloseFrame {
                    code: CloseCode::Restart,
                    reason: "restarting".into(),
                };
                let _ = ws.send(Message::Close(Some(restart))).await;
                let _ = timeout(WAIT, async { while let Some(Ok(_)) = ws.next().await {} }).await;
            });
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_closed_with_1012_continue_on_the_next_node() {
    let restarting = restarting_node(Duration::from_millis(300)).await;
    let server = start(test_args()).await;
    let args = LoadtestArgs {
        url: vec![
            format!("ws://{restarting}/ws"),
            format!("ws://{}/ws", server.addr),
        ],
        ..one_turn_each(server.addr, 6, Duration::from_secs(4))
    };
    let report = run(&args).await;
    assert_eq!(
        (report.errors, report.unexpected_closes),
        (0, 0),
        "{:?}",
        report.error_samples
    );
    assert_eq!(
        report.reconnects, 3,
        "the restarting node's three sessions moved"
    );
    assert_eq!(report.connects_per_url, vec![3, 6]);
    assert_eq!(report.reconnect_ms.count, 3);
    assert_eq!(
        report.turns_completed, 6,
        "each session's turn, said again on the next node when cut short"
    );
    server.shutdown(WAIT).await;
}

#[tokio::test]
async fn sessions_authenticate_with_a_minted_token_each_or_one_shared_token() {
    use livegate::gateway::auth::{AuthMode, AuthSecrets, Minter, Secret};
    let secret = Secret::new("loadtest-secret-0123456789abcdef-0123");
    let key = "loadtest-operator-key-0123456789";
    let mut server_args = test_args();
    server_args.auth = Some(AuthMode::Token);
    server_args.secrets = AuthSecrets {
        token_secret: Some(secret.clone()),
        api_keys: Some(Secret::new(key)),
    };
    let server = start(server_args).await;
    let unauthenticated = run(&one_turn_each(server.addr, 2, Duration::from_secs(3))).await;
    assert_eq!(
        unauthenticated.errors, 2,
        "the gateway refuses sessions without a token"
    );

    let minting = LoadtestArgs {
        api_key: Some(key.into()),
        ..one_turn_each(server.addr, 3, Duration::from_secs(3))
    };
    let report = run(&minting).await;
    assert_eq!(
        (report.errors, report.turns_completed),
        (0, 3),
        "{:?}",
        report.error_samples
    );

    let token = Minter::new(&secret)
        .unwrap()
        .mint("load-shared", None, None)
        .unwrap()
        .token;
    let shared = LoadtestArgs {
        token: Some(token),
        ..one_turn_each(server.addr, 2, Duration::from_secs(3))
    };
    let report = run(&shared).await;
    assert_eq!(
        (report.errors, report.turns_completed),
        (0, 2),
        "{:?}",
        report.error_samples
    );
    // Both sessions ran as the token's user.
    let listed: serde_json::Value = reqwest::Client::new()
        .get(format!(
            "http://{}/api/sessions?user_id=load-shared",
            server.addr
        ))
        .bearer_auth(key)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        listed["sessions"].as_array().map(Vec::len),
        Some(2),
        "{listed}"
    );
    server.shutdown(WAIT).await;
}
