//! The `livegate` command's errors: one line on stderr naming what to change, exit status 1, no
//! cause chain repeated and no backtrace, even with `RUST_BACKTRACE` set in the shell.

use std::process::{Command, Output};

/// Runs the real binary with `args`, `RUST_BACKTRACE=1` as many shells have it.
fn livegate(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_livegate"))
        .args(args)
        .env("RUST_BACKTRACE", "1")
        .env_remove("LIVEGATE_CONFIG")
        .output()
        .expect("livegate runs")
}

/// The one line it printed, after checking it failed with nothing else.
fn error_line(output: &Output) -> String {
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.contains(" INFO ")).collect();
    assert_eq!(lines.len(), 1, "one line: {stderr}");
    assert!(lines[0].starts_with("livegate: "), "{stderr}");
    assert!(!stderr.contains("Caused by") && !stderr.contains("backtrace"));
    lines[0].to_owned()
}

#[test]
fn a_port_in_use_suggests_a_free_one() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let line = error_line(&livegate(&[
        "--bind",
        &addr,
        "--data-dir",
        dir.path().to_str().unwrap(),
    ]));
    assert!(line.contains(&addr), "{line}");
    assert!(line.contains("--bind 127.0.0.1:0"), "{line}");
}

#[test]
fn an_unknown_model_lists_the_valid_forms() {
    let dir = tempfile::tempdir().unwrap();
    let line = error_line(&livegate(&[
        "--model",
        "gpt-5",
        "--bind",
        "127.0.0.1:0",
        "--data-dir",
        dir.path().to_str().unwrap(),
    ]));
    assert!(line.contains("\"gpt-5\""), "{line}");
    for form in ["sim", "gemini-", "openai:"] {
        assert!(line.contains(form), "{line}");
    }
    assert_eq!(line.matches("unknown model").count(), 1, "{line}");
}

#[test]
fn a_data_dir_that_cannot_be_made_is_named_with_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a-file");
    std::fs::write(&file, "not a folder").unwrap();
    let data = file.join("data");
    let line = error_line(&livegate(&[
        "--bind",
        "127.0.0.1:0",
        "--data-dir",
        data.to_str().unwrap(),
    ]));
    assert!(line.contains(data.to_str().unwrap()), "{line}");
    assert!(line.contains("--data-dir"), "{line}");
}

#[test]
fn a_missing_config_file_is_named_with_why() {
    let line = error_line(&livegate(&["--config", "/nonexistent/livegate.toml"]));
    assert!(line.contains("/nonexistent/livegate.toml"), "{line}");
    assert!(line.contains("No such file"), "{line}");
}

#[test]
fn a_host_name_bind_is_answered_with_an_example() {
    let output = livegate(&["--bind", "example.com:8080"]);
    assert_eq!(output.status.code(), Some(2), "a usage error, as clap's");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("127.0.0.1:8080"), "{stderr}");
}
