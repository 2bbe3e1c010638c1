//! `livegate loadtest`, `livegate replay`, `livegate mock-gemini` and `livegate mock-openai` run the tools' own
//! binaries (crates of their own): the one next to `livegate`, else the first on `PATH`, with the
//! arguments untouched and the tool's exit status; a missing tool is an error naming the build.
#![cfg(unix)]
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// The folders the tests run `livegate` from, made once before any test runs a program: a file
/// written while another thread forks could still be open for writing in the child, and
/// executing it would then fail (`ETXTBSY`).
struct Setup {
    /// `livegate` with a stand-in `livegate-loadtest` beside it.
    beside: PathBuf,
    /// `livegate` alone.
    alone: PathBuf,
    /// A `PATH` folder with stand-ins for all three tools.
    path: PathBuf,
    /// An empty `PATH` folder.
    empty: PathBuf,
}

fn setup() -> &'static Setup {
    static SETUP: OnceLock<Setup> = OnceLock::new();
    SETUP.get_or_init(|| {
        let root = Path::new(env!("CARGO_TARGET_TMPDIR")).join("tool_commands");
        let _ = std::fs::remove_dir_all(&root);
        let folder = |name: &str| {
            let dir = root.join(name);
            std::fs::create_dir_all(&dir).expect("a test folder");
            dir
        };
        let setup = Setup {
            beside: folder("beside"),
            alone: folder("alone"),
            path: folder("path"),
            empty: folder("empty"),
        };
        for dir in [&setup.beside, &setup.alone] {
            gateway_in(dir);
        }
        stand_in(&setup.beside, "livegate-loadtest", "beside");
        for tool in ["loadtest", "replay", "mock-gemini", "mock-openai"] {
            stand_in(&setup.path, &format!("livegate-{tool}"), "on PATH");
        }
        setup
    })
}

/// The real `livegate` binary in `dir`: a hard link (a copy across file systems), so it sees
/// `dir` as its own folder.
fn gateway_in(dir: &Path) {
    let exe = dir.join("livegate");
    if std::fs::hard_link(env!("CARGO_BIN_EXE_livegate"), &exe).is_err() {
        std::fs::copy(env!("CARGO_BIN_EXE_livegate"), &exe).expect("livegate copied");
    }
}

/// A stand-in tool: prints `who`, then its arguments one a line, and exits with 7.
fn stand_in(dir: &Path, name: &str, who: &str) {
    let path = dir.join(name);
    let script =
        format!("#!/bin/sh\necho '{who}'\nfor a in \"$@\"; do echo \"$a\"; done\nexit 7\n");
    std::fs::write(&path, script).expect("a stand-in written");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("executable");
}

/// Runs `livegate` from `dir` with `PATH` set to `path` only.
fn run(dir: &Path, path: &Path, args: &[&str]) -> Output {
    Command::new(dir.join("livegate"))
        .args(args)
        .env("PATH", path)
        .output()
        .expect("livegate runs")
}

#[test]
fn the_tool_beside_livegate_runs_with_its_arguments_and_exit_status() {
    let setup = setup();
    let out = run(
        &setup.beside,
        &setup.path,
        &["loadtest", "--sessions", "3", "--help", "-x", "two words"],
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "beside\n--sessions\n3\n--help\n-x\ntwo words\n",
        "{out:?}"
    );
    assert_eq!(out.status.code(), Some(7), "{out:?}");
}

#[test]
fn without_one_beside_the_tool_on_path_runs() {
    let setup = setup();
    for tool in ["loadtest", "replay", "mock-gemini", "mock-openai"] {
        let out = run(&setup.alone, &setup.path, &[tool, "--port", "0"]);
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "on PATH\n--port\n0\n",
            "{tool}: {out:?}"
        );
        assert_eq!(out.status.code(), Some(7), "{tool}: {out:?}");
    }
}

#[test]
fn a_missing_tool_fails_naming_its_binary_and_the_build_command() {
    let setup = setup();
    for (tool, package) in [
        ("loadtest", "livegate-loadtest"),
        ("replay", "livegate-replay"),
        ("mock-gemini", "livegate-mock"),
        ("mock-openai", "livegate-mock"),
    ] {
        let out = run(&setup.alone, &setup.empty, &[tool, "--help"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{tool}: {out:?}");
        assert!(stderr.contains(&format!("livegate-{tool}")), "{stderr}");
        assert!(
            stderr.contains(&format!("cargo build -p {package}")),
            "{stderr}"
        );
    }
}

#[test]
fn the_gateways_help_lists_the_tools() {
    let setup = setup();
    let out = run(&setup.alone, &setup.empty, &["--help"]);
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    for tool in ["loadtest", "replay", "mock-gemini", "mock-openai"] {
        assert!(help.contains(tool), "{help}");
    }
}
