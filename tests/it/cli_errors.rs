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

/// Which of a config file's, an environment variable's and a flag's `--model` the gateway took,
/// told by its one-line error (none of the three names a model, and each names itself).
fn model_taken(env: Option<&str>, flag: Option<&str>) -> String {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("livegate.toml");
    let data = dir.path().join("data");
    let text = format!(
        "model = \"file-model\"\nbind = \"127.0.0.1:0\"\ndata_dir = {:?}\n",
        data.to_str().unwrap()
    );
    std::fs::write(&config, text).unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_livegate"));
    command
        .args(["--config", config.to_str().unwrap()])
        .env("RUST_BACKTRACE", "1")
        .env_remove("LIVEGATE_CONFIG")
        .env_remove("LIVEGATE_MODEL")
        .env_remove("LIVEGATE_BIND")
        .env_remove("LIVEGATE_DATA_DIR");
    if let Some(model) = env {
        command.env("LIVEGATE_MODEL", model);
    }
    if let Some(model) = flag {
        command.args(["--model", model]);
    }
    let line = error_line(&command.output().expect("livegate runs"));
    let taken: Vec<&str> = ["file-model", "env-model", "flag-model"]
        .into_iter()
        .filter(|model| line.contains(&format!("{model:?}")))
        .collect();
    assert_eq!(taken.len(), 1, "{line}");
    taken[0].to_owned()
}

#[test]
fn the_config_file_wins_over_the_default() {
    assert_eq!(model_taken(None, None), "file-model");
}

#[test]
fn an_environment_variable_wins_over_the_config_file() {
    assert_eq!(model_taken(Some("env-model"), None), "env-model");
}

#[test]
fn a_flag_wins_over_its_environment_variable_and_the_config_file() {
    assert_eq!(
        model_taken(Some("env-model"), Some("flag-model")),
        "flag-model"
    );
}

#[test]
fn a_misspelt_config_key_is_one_line_with_its_line_and_the_nearest_option() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("livegate.toml");
    std::fs::write(&config, "model = \"sim\"\nmax_conections = 5\n").unwrap();
    let line = error_line(&livegate(&["--config", config.to_str().unwrap()]));
    assert!(line.contains(config.to_str().unwrap()), "{line}");
    assert!(
        line.contains("\"max-conections\" at line 2: did you mean \"max-connections\"?"),
        "{line}"
    );
}

#[test]
fn a_bad_config_value_is_one_line_naming_the_option_its_line_and_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("livegate.toml");
    std::fs::write(&config, "model = \"sim\"\nbind = \"example.com:8080\"\n").unwrap();
    let line = error_line(&livegate(&["--config", config.to_str().unwrap()]));
    assert!(line.contains("bind at line 2"), "{line}");
    assert!(line.contains("127.0.0.1:8080"), "the example: {line}");
}

#[tokio::test]
async fn a_bare_port_bind_listens_on_loopback() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().to_str().unwrap();
    let args = ["--bind", ":0", "--data-dir", data];
    let (_gateway, line) = crate::common::process::spawn(&args, &[], "listening on").await;
    assert!(line.contains("://127.0.0.1:"), "{line}");
}
