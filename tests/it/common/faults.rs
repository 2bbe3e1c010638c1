//! What the fault suite breaks: a PostgreSQL server of the test's own (started from the installed
//! server binaries, on a free port, stopped and started by the test), a TCP proxy that can
//! refuse, cut or black-hole connections, and gateway nodes in child processes
//! ([`Node`]) that the test can pause (SIGSTOP), resume and kill (SIGKILL).
//!
//! Run when `LIVEGATE_TEST_FAULTS` is set (`.ci/run` sets it); set, a missing PostgreSQL
//! installation fails the test rather than skip it.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

pub use super::process::Node;

/// Whether the fault suite runs (`LIVEGATE_TEST_FAULTS` set and not empty).
pub fn faults_enabled() -> bool {
    std::env::var("LIVEGATE_TEST_FAULTS").is_ok_and(|v| !v.trim().is_empty())
}

/// The newest installed PostgreSQL server's `bin` folder.
fn postgres_bin() -> PathBuf {
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .expect("LIVEGATE_TEST_FAULTS is set but no PostgreSQL is installed in /usr/lib/postgresql")
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let version = entry.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = entry.path().join("bin");
            bin.join("initdb").exists().then_some((version, bin))
        })
        .collect();
    found.sort();
    found.pop().expect("a PostgreSQL server with initdb").1
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).trim() == "0")
}

/// A free loopback port (taken back at once: a small race, fine on a test machine).
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("binds");
    listener.local_addr().expect("an address").port()
}

/// A PostgreSQL server of the test's own, in a temporary folder; stopped when dropped.
pub struct TestPostgres {
    bin: PathBuf,
    dir: tempfile::TempDir,
    port: u16,
    /// Root cannot run PostgreSQL: its commands then run as the `postgres` user.
    as_postgres: bool,
}

impl TestPostgres {
    /// Initialises a cluster (trust authentication, fsync off: nothing here outlives the test)
    /// and starts it on a free port.
    pub fn start() -> TestPostgres {
        let bin = postgres_bin();
        let dir = tempfile::tempdir().expect("a temporary folder");
        let as_postgres = is_root();
        if as_postgres {
            let status = Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(dir.path())
                .status()
                .expect("chown runs");
            assert!(status.success(), "the folder is given to the postgres user");
        }
        let server = TestPostgres {
            bin,
            dir,
            port: free_port(),
            as_postgres,
        };
        let data = server.data().display().to_string();
        server.run(
            "initdb",
            &["-D", &data, "-U", "postgres", "--auth=trust", "--no-sync"],
        );
        server.start_again();
        server
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// Runs one of the server's programs (as the postgres user when root), which must succeed.
    fn run(&self, program: &str, args: &[&str]) {
        let path = self.bin.join(program);
        let mut command = if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(&path);
            c
        } else {
            Command::new(&path)
        };
        let out = command
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("{program} runs: {e}"));
        assert!(
            out.status.success(),
            "{program} {args:?} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Starts the server (again), waiting until it takes connections.
    pub fn start_again(&self) {
        let data = self.data().display().to_string();
        let socket_dir = self.dir.path().display().to_string();
        let options = format!(
            "-p {} -c listen_addresses=127.0.0.1 -k {socket_dir} -c fsync=off \
             -c max_connections=200",
            self.port
        );
        let log = self.dir.path().join("server.log").display().to_string();
        self.run(
            "pg_ctl",
            &[
                "-D", &data, "-o", &options, "-l", &log, "-w", "-t", "30", "start",
            ],
        );
    }

    /// Stops the server at once (`immediate`: what a crash or a cut network looks like to the
    /// clients).
    pub fn stop(&self) {
        let data = self.data().display().to_string();
        self.run("pg_ctl", &["-D", &data, "-m", "immediate", "-w", "stop"]);
    }

    /// Where the server listens.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// A URL for the server at `addr` (itself, or a proxy in front of it).
    pub fn url_via(addr: SocketAddr) -> String {
        format!("postgres://postgres@{addr}/postgres")
    }

    /// The server's own URL.
    pub fn url(&self) -> String {
        Self::url_via(self.addr())
    }
}

impl Drop for TestPostgres {
    fn drop(&mut self) {
        let data = self.data().display().to_string();
        let path = self.bin.join("pg_ctl");
        let mut command = if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(&path);
            c
        } else {
            Command::new(&path)
        };
        let _ = command
            .args(["-D", &data, "-m", "immediate", "stop"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// What the proxy does with traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Forwards both ways.
    Pass,
    /// Closes every connection, new and open.
    Refuse,
    /// Accepts, but forwards nothing and closes nothing: a network that dropped every packet.
    /// Forwarding resumes when the proxy passes again.
    BlackHole,
}

/// A TCP proxy in front of one server, that a test can make refuse, cut or black-hole.
pub struct Proxy {
    addr: SocketAddr,
    mode: Arc<watch::Sender<Mode>>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    /// Starts forwarding to `upstream`.
    pub async fn start(upstream: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("binds");
        let addr = listener.local_addr().expect("an address");
        let (mode, _) = watch::channel(Mode::Pass);
        let mode = Arc::new(mode);
        let accepting = mode.clone();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let watch = accepting.subscribe();
                if *watch.borrow() == Mode::Refuse {
                    drop(client);
                    continue;
                }
                tokio::spawn(forward(client, upstream, watch));
            }
        });
        Proxy { addr, mode, task }
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Forwards again (black-holed bytes held so far go on).
    pub fn pass(&self) {
        self.mode.send_replace(Mode::Pass);
    }

    /// Cuts every open connection and closes each new one at once.
    pub fn refuse(&self) {
        self.mode.send_replace(Mode::Refuse);
    }

    /// Stops forwarding without closing anything.
    pub fn black_hole(&self) {
        self.mode.send_replace(Mode::BlackHole);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.mode.send_replace(Mode::Refuse);
        self.task.abort();
    }
}

/// One proxied connection: both directions until either ends or the proxy refuses.
async fn forward(client: TcpStream, upstream: SocketAddr, mode: watch::Receiver<Mode>) {
    let Ok(server) = TcpStream::connect(upstream).await else {
        return;
    };
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    tokio::select! {
        () = pump(client_read, server_write, mode.clone()) => {}
        () = pump(server_read, client_write, mode) => {}
    }
}

/// Waits until the proxy passes traffic; false once it refuses.
async fn passing(mode: &mut watch::Receiver<Mode>) -> bool {
    loop {
        match *mode.borrow_and_update() {
            Mode::Pass => return true,
            Mode::Refuse => return false,
            Mode::BlackHole => {}
        }
        if mode.changed().await.is_err() {
            return false;
        }
    }
}

async fn pump(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, mut mode: watch::Receiver<Mode>) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        if !passing(&mut mode).await {
            return;
        }
        let read = tokio::select! {
            read = from.read(&mut buf) => read,
            // A change of mode is looked at before reading on.
            _ = mode.changed() => continue,
        };
        let n = match read {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if !passing(&mut mode).await || to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

/// A gateway node in a child process on the session store at `store`, with file artifacts in
/// `dir`, `extra` args after.
pub async fn spawn_node(store: &str, dir: &Path, extra: &[&str]) -> Node {
    let artifacts = format!("file://{}", dir.join("artifacts").display());
    spawn_node_on(store, &artifacts, dir, extra, &[]).await
}

/// A gateway node as [`spawn_node`] makes, its artifacts at `artifacts` (a bucket's URL with its
/// settings in `env`, say).
pub async fn spawn_node_on(
    store: &str,
    artifacts: &str,
    dir: &Path,
    extra: &[&str],
    env: &[(&str, &str)],
) -> Node {
    let data = dir.join(format!("node-{}", uuid::Uuid::new_v4().simple()));
    let mut args: Vec<String> = vec![
        "--bind".into(),
        "127.0.0.1:0".into(),
        "--session-store".into(),
        store.into(),
        "--artifact-store".into(),
        artifacts.into(),
        "--data-dir".into(),
        data.display().to_string(),
        "--sim-reply-delay-ms".into(),
        "0".into(),
    ];
    args.extend(extra.iter().map(|a| (*a).to_owned()));
    Node::spawn(&args, env).await
}
