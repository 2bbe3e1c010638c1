//! The real `livegate` binary as a child process: one whose output a test reads, or a gateway
//! node that a test can pause, drain and kill.

use std::net::SocketAddr;
use std::process::Stdio;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::Child;
use tokio::time::timeout;

use super::WAIT;

/// A running `livegate` process and everything it printed so far.
pub struct Process {
    child: tokio::process::Child,
    stdout: tokio::task::JoinHandle<String>,
    stderr: tokio::task::JoinHandle<String>,
}

/// What a process printed, by stream.
pub struct Output {
    pub stdout: String,
    pub stderr: String,
}

/// Runs the real binary with `args`; returns it and the first stdout line containing `marker`.
pub async fn spawn(args: &[&str], envs: &[(&str, &str)], marker: &str) -> (Process, String) {
    spawn_program(
        std::path::Path::new(env!("CARGO_BIN_EXE_livegate")),
        args,
        envs,
        marker,
    )
    .await
}

/// [`spawn`] for another program (one of the crate's examples, say).
pub async fn spawn_program(
    program: &std::path::Path,
    args: &[&str],
    envs: &[(&str, &str)],
    marker: &str,
) -> (Process, String) {
    let mut child = tokio::process::Command::new(program)
        .args(args)
        .envs(envs.iter().copied())
        .env("RUST_LOG", "debug")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("{} runs: {e}", program.display()));
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let (found_tx, found_rx) = tokio::sync::oneshot::channel();
    let marker = marker.to_owned();
    // One task reads stdout to the end, so the child never blocks on a full pipe.
    let stdout = tokio::spawn(async move {
        let mut all = String::new();
        let mut found = Some(found_tx);
        while let Ok(Some(line)) = lines.next_line().await {
            if line.contains(&marker) {
                if let Some(tx) = found.take() {
                    let _ = tx.send(line.clone());
                }
            }
            all.push_str(&line);
            all.push('\n');
        }
        all
    });
    // The logs go to stderr: read it as it comes too, or a full pipe would stall the child.
    let mut pipe = child.stderr.take().unwrap();
    let stderr = tokio::spawn(async move {
        let mut all = String::new();
        let _ = pipe.read_to_string(&mut all).await;
        all
    });
    let line = timeout(WAIT, found_rx)
        .await
        .expect("starts in time")
        .expect("prints its address");
    (
        Process {
            child,
            stdout,
            stderr,
        },
        line,
    )
}

/// Stops a process and returns all it printed.
pub async fn output_of(mut process: Process) -> Output {
    let _ = process.child.start_kill();
    let _ = timeout(WAIT, process.child.wait()).await;
    let stdout = timeout(WAIT, process.stdout).await.unwrap();
    let stderr = timeout(WAIT, process.stderr).await.unwrap();
    Output {
        stdout: stdout.unwrap_or_default(),
        stderr: stderr.unwrap_or_default(),
    }
}

/// Where a gateway process says it listens, from its `listening on http://ADDR` line.
pub fn listening_addr(line: &str) -> SocketAddr {
    line.rsplit("http://")
        .next()
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// A gateway node in a child process (`livegate serve`), that the test can signal: pause
/// (SIGSTOP), resume, drain (SIGTERM) and kill.
pub struct Node {
    pub child: Child,
    pub addr: SocketAddr,
}

impl Node {
    /// Starts `livegate serve` with `args` after it and `env` set, once it says where it listens.
    pub async fn spawn(args: &[String], env: &[(&str, &str)]) -> Node {
        let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_livegate"))
            .arg("serve")
            .args(args)
            .envs(env.iter().copied())
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("the gateway binary starts");
        let stdout = child.stdout.take().expect("stdout piped");
        let mut lines = BufReader::new(stdout).lines();
        let addr = timeout(WAIT, async {
            while let Some(line) = lines.next_line().await.expect("stdout readable") {
                if let Some(addr) = line.strip_prefix("livegate listening on http://") {
                    return addr.parse::<SocketAddr>().expect("an address");
                }
            }
            panic!("the gateway exited before listening");
        })
        .await
        .expect("the gateway listens in time");
        // Keep reading, so the child never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Node { child, addr }
    }

    /// Sends the signal `name` (`STOP`, `CONT`, `TERM`).
    pub fn signal(&self, name: &str) {
        let pid = self.child.id().expect("still running");
        let status = std::process::Command::new("kill")
            .args([format!("-{name}"), pid.to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success(), "kill -{name} {pid}");
    }

    /// SIGSTOP: the process stops where it is, its sockets and leases left as they are.
    pub fn pause(&self) {
        self.signal("STOP");
    }

    /// SIGCONT.
    pub fn resume(&self) {
        self.signal("CONT");
    }

    /// SIGKILL, and waits for the process to be gone.
    pub async fn kill(mut self) {
        self.child.start_kill().expect("kill -9");
        timeout(WAIT, self.child.wait())
            .await
            .expect("gone in time")
            .expect("waited");
    }
}
