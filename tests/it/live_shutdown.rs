//! Graceful shutdown (a rolling restart's drain): live runs end and flush their recordings, then
//! their clients are closed with 1012 to reconnect elsewhere.

use crate::common::*;
use livegate::artifact::ArtifactScope;
use livegate::gateway::config::Pacing;

#[tokio::test]
async fn shutdown_flushes_recordings_then_closes_live_runs_with_1012() {
    let mut args = test_args();
    args.sim_pacing = Pacing::RealTime;
    let server = start(args).await;
    let mut client = Client::connect(server.addr, "u1", "s1", "").await;
    client
        .send_text("tell me something long enough to be cut off by a shutdown")
        .await;
    loop {
        if let Frame::Audio(_) = client.next_frame().await {
            break;
        }
    }
    let artifacts = server.gateway().runner.artifacts.clone();
    let shutdown = tokio::spawn(server.shutdown(WAIT));
    let close = loop {
        if let Frame::Closed(close) = client.next_frame().await {
            break close;
        }
    };
    assert_eq!(close.map(|(code, _)| code), Some(1012));
    // Already saved when the client hears 1012: a reconnect elsewhere finds it.
    let scope = ArtifactScope {
        app_name: "livegate",
        user_id: "u1",
        session_id: "s1",
    };
    let names = artifacts.list_names(scope).await.unwrap();
    assert!(
        names.iter().any(|n| n.contains("_output_audio_")),
        "the cut-off answer is recorded before the close: {names:?}"
    );
    tokio::time::timeout(WAIT, shutdown)
        .await
        .expect("shutdown within the grace period")
        .unwrap();
}
