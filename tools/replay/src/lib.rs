//! `livegate replay`: recorded calls as regression tests. `export` fetches sessions from a
//! gateway as bundles (its REST API's `…/export`); `run` replays each bundle's user side against
//! a target gateway and compares what the agent does now with what it did then, turn by turn,
//! under a few rules. Knows a gateway only by its REST API and WebSocket protocol.
//! The bundle format and the method: docs/REPLAY.md.

pub mod bundle;
pub mod client;
pub mod compare;
pub mod play;
pub mod report;
pub mod script;
pub mod turns;

use std::path::{Path, PathBuf};
use std::time::Duration;

use bundle::{Bundle, BundleError};
use compare::Rules;
use report::{Report, SessionReport, TurnReport};
use script::Script;

/// Longest a REST request may take (an export streams up to its limit).
const HTTP_TIMEOUT: Duration = Duration::from_secs(300);

/// Why a replay or an export could not run (a difference is not an error: it is in the report).
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// A bundle is unusable.
    #[error(transparent)]
    Bundle(#[from] BundleError),
    /// The rules file is unusable.
    #[error(transparent)]
    Rules(#[from] compare::RulesError),
    /// The gateway could not be reached or refused.
    #[error("{url}: {reason}")]
    Http {
        /// The request.
        url: String,
        /// What went wrong.
        reason: String,
    },
    /// A replay could not start.
    #[error(transparent)]
    Play(#[from] play::PlayError),
    /// Bad options.
    #[error("{0}")]
    Invalid(String),
    /// Writing a report failed.
    #[error("writing {path}: {source}")]
    Write {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
}

/// Options of `livegate replay export`.
#[derive(Debug, Clone, clap::Args)]
pub struct ExportArgs {
    /// The gateway's HTTP base URL.
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    pub url: String,
    /// Whose sessions.
    #[arg(long)]
    pub user: String,
    /// Sessions to export (repeat it); all of the user's when absent.
    #[arg(long)]
    pub session: Vec<String>,
    /// The folder bundles are written into (one folder each, named by session).
    #[arg(long, default_value = "bundles")]
    pub out: PathBuf,
    /// A client token or operator API key, sent as `Authorization: Bearer`.
    #[arg(long, env = "LIVEGATE_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
}

/// Options of `livegate replay run`.
#[derive(Debug, Clone, clap::Args)]
pub struct RunArgs {
    /// Bundle folders, or folders of bundles (as `export` writes them).
    #[arg(required = true)]
    pub bundles: Vec<PathBuf>,
    /// The gateway to replay against (its HTTP base URL; its WebSocket is beside it).
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    pub target: String,
    /// Pauses and audio this many times faster than the recorded call (where the model allows).
    #[arg(long, default_value_t = 1.0)]
    pub speed: f64,
    /// The rules (TOML); defaults: tool calls, transfers, interruptions and errors must match,
    /// text at least 80 % alike.
    #[arg(long)]
    pub rules: Option<PathBuf>,
    /// Replay as this user (default: each bundle's own).
    #[arg(long)]
    pub user: Option<String>,
    /// Write the JSON report here.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Write a JUnit XML report here.
    #[arg(long)]
    pub junit: Option<PathBuf>,
    /// Write the HTML page here.
    #[arg(long)]
    pub html: Option<PathBuf>,
    /// A client token or operator API key for the target, sent as `Authorization: Bearer`.
    #[arg(long, env = "LIVEGATE_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
}

fn http_error(url: &str, reason: impl ToString) -> ReplayError {
    ReplayError::Http {
        url: url.to_owned(),
        reason: reason.to_string(),
    }
}

/// GETs `url`, at most `limit` bytes of body.
async fn get(
    http: &reqwest::Client,
    url: &str,
    token: Option<&str>,
    limit: u64,
) -> Result<Vec<u8>, ReplayError> {
    let mut request = http.get(url);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let mut response = request.send().await.map_err(|e| http_error(url, e))?;
    let status = response.status();
    if !status.is_success() {
        let body = response.text().await.unwrap_or_default();
        return Err(http_error(url, format!("{status}: {}", body.trim())));
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| http_error(url, e))? {
        if (body.len() + chunk.len()) as u64 > limit {
            return Err(http_error(url, format!("more than {limit} bytes")));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// Exports sessions as bundles under `args.out`; the bundles' folders.
pub async fn export(args: &ExportArgs) -> Result<Vec<PathBuf>, ReplayError> {
    let http = reqwest::Client::builder()
        .timeout(HTTP_TIMEOUT)
        .build()
        .map_err(|e| http_error(&args.url, e))?;
    let base = args.url.trim_end_matches('/');
    let token = args.token.as_deref();
    let sessions = if args.session.is_empty() {
        let url = format!("{base}/api/sessions?user_id={}", args.user);
        let listing: serde_json::Value =
            serde_json::from_slice(&get(&http, &url, token, 16 * 1024 * 1024).await?)
                .map_err(|e| http_error(&url, e))?;
        listing["sessions"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s["id"].as_str().map(str::to_owned))
            .collect()
    } else {
        args.session.clone()
    };
    let mut written = Vec::new();
    for session in sessions {
        let url = format!("{base}/api/sessions/{}/{session}/export", args.user);
        let tar = get(&http, &url, token, bundle::MAX_BUNDLE_BYTES + 1024 * 1024).await?;
        written.extend(bundle::unpack(&tar, &args.out)?);
    }
    Ok(written)
}

/// The target's WebSocket base from its HTTP base.
fn ws_base(target: &str) -> Result<String, ReplayError> {
    let target = target.trim_end_matches('/');
    if let Some(rest) = target.strip_prefix("http://") {
        Ok(format!("ws://{rest}"))
    } else if let Some(rest) = target.strip_prefix("https://") {
        Ok(format!("wss://{rest}"))
    } else if target.starts_with("ws://") || target.starts_with("wss://") {
        Ok(target.to_owned())
    } else {
        Err(ReplayError::Invalid(format!(
            "--target {target:?}: an http:// or https:// URL"
        )))
    }
}

/// Replays every bundle, one after another, and compares.
pub async fn run(args: &RunArgs) -> Result<Report, ReplayError> {
    if !(args.speed > 0.0 && args.speed <= 100.0) {
        return Err(ReplayError::Invalid(
            "--speed must be above 0, at most 100".into(),
        ));
    }
    let rules = match &args.rules {
        Some(path) => Rules::load(path)?,
        None => Rules::default(),
    };
    let mut bundles = Vec::new();
    for path in &args.bundles {
        for dir in bundle::find(path)? {
            let bundle = Bundle::open(&dir)?;
            let script = Script::of(&bundle)?;
            bundles.push((bundle, script));
        }
    }
    let target = play::Target {
        ws_base: ws_base(&args.target)?,
        token: args.token.clone(),
        speed: args.speed,
    };
    let run_id = uuid::Uuid::new_v4().simple().to_string();
    let mut sessions = Vec::new();
    let (mut then_audio, mut now_audio) = (Vec::new(), Vec::new());
    for (bundle, script) in &bundles {
        let user = args.user.as_deref().unwrap_or(&bundle.manifest.user_id);
        let original = &bundle.manifest.session_id;
        let keep = original.chars().take(100).collect::<String>();
        let replay_id = format!("{keep}-replay-{}", &run_id[..12]);
        let played = play::play(&target, user, &replay_id, script).await?;
        let turns = compare_turns(&rules, bundle, script, &played);
        then_audio.extend(turns.iter().filter_map(|t| t.then.first_audio_ms));
        now_audio.extend(turns.iter().filter_map(|t| t.now.first_audio_ms));
        sessions.push(SessionReport {
            bundle: bundle.dir.display().to_string(),
            session_id: original.clone(),
            replay_session_id: replay_id,
            original_ms: script.length_ms,
            replay_ms: played.length_ms,
            turns,
            problems: played.problems,
        });
    }
    let report = Report {
        livegate: livegate::BUILD.to_owned(),
        target: target.ws_base.clone(),
        speed: args.speed,
        sessions,
        run_checks: compare::first_audio_check(&rules, &then_audio, &now_audio)
            .into_iter()
            .collect(),
    };
    write_reports(args, &report)?;
    Ok(report)
}

/// Each input's turn, then and now, with its checks and audio.
fn compare_turns(
    rules: &Rules,
    bundle: &Bundle,
    script: &Script,
    played: &play::Played,
) -> Vec<TurnReport> {
    script
        .then
        .iter()
        .enumerate()
        .map(|(i, then)| {
            let now = played.turns.get(i).cloned().unwrap_or_default();
            let then_audio = then
                .audio
                .iter()
                .filter_map(|path| bundle.recording(path))
                .fold(None::<(Vec<u8>, u32)>, |acc, r| {
                    let (mut pcm, _) = acc.unwrap_or_default();
                    pcm.extend_from_slice(&r.pcm);
                    Some((pcm, r.rate))
                });
            TurnReport {
                index: i + 1,
                input: script
                    .actions
                    .get(i)
                    .map_or_else(|| "(none)".into(), |a| a.input.label()),
                checks: compare::turn_checks(rules, then, &now),
                then: then.clone(),
                now,
                then_audio,
                now_audio: played
                    .audio
                    .get(i)
                    .map(|pcm| (pcm.clone(), played.audio_rate)),
            }
        })
        .collect()
}

fn write_reports(args: &RunArgs, report: &Report) -> Result<(), ReplayError> {
    let write = |path: &Option<PathBuf>, text: String| match path {
        Some(path) => std::fs::write(path, text).map_err(|source| ReplayError::Write {
            path: path.display().to_string(),
            source,
        }),
        None => Ok(()),
    };
    write(&args.json, report.json())?;
    write(&args.junit, report.junit())?;
    write(&args.html, report.html())
}

/// Bundles under each path, read and checked (for the load generator's `--replay`).
pub fn open_all(paths: &[&Path]) -> Result<Vec<Bundle>, BundleError> {
    let mut out = Vec::new();
    for path in paths {
        for dir in bundle::find(path)? {
            out.push(Bundle::open(&dir)?);
        }
    }
    Ok(out)
}
