//! Sampling the run every 500 ms: connected sessions, the server's CPU time and resident memory
//! from `/proc/{pid}`, how long the server's and the generator's threads waited for a CPU, and
//! the bytes waiting unread in the server's sockets (Linux). Prints the progress line once a
//! second. Also what the server's samples add up to (`ServerStats`), which `scrape` builds the same
//! way from the gateway's `/metrics` when its `/proc` is out of reach.

use std::collections::HashMap;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use tokio::time::Instant;

use super::backlog::{self, SocketBacklog};
use super::session::Live;
use livegate::procfs::Usage;

/// How often the run is sampled.
const PERIOD: Duration = Duration::from_millis(500);
/// Every how many periods the server's socket tables are read: the kernel walks its whole
/// connection hash for them, which takes milliseconds with many connections.
const BACKLOG_EVERY: u64 = 4;

/// What the sampler saw.
#[derive(Debug, Default)]
pub struct Sampled {
    /// `(seconds, connected sessions)`.
    pub sessions: Vec<(f64, usize)>,
    /// The server, when a pid was given.
    pub server: Option<ServerStats>,
    /// Cores the load generator itself kept busy (it shares the machine with a local server).
    pub generator_cpu_cores: Option<f64>,
    /// Of those, the cores it kept busy in the kernel.
    pub generator_cpu_system_cores: Option<f64>,
    /// Cores the load generator kept busy while the most sessions were connected.
    pub generator_cpu_cores_at_peak: Option<f64>,
    /// The machine's CPU while the most sessions were connected.
    pub machine_at_peak: Option<MachineLoad>,
    /// How long the generator's threads waited for a CPU while the most sessions were connected.
    pub generator_cpu_wait: Option<CpuWait>,
}

impl Sampled {
    /// The most sessions connected at once: the machine's load and the memory's ramp are both
    /// measured against it.
    pub fn peak(&self) -> usize {
        self.sessions.iter().map(|s| s.1).max().unwrap_or(0)
    }
}

/// The sampling thread: its reads of `/proc` block for milliseconds, which on a runtime worker
/// would hold up the frames of the sessions on that worker.
pub struct Sampler {
    stop: mpsc::Sender<()>,
    thread: Option<std::thread::JoinHandle<Sampled>>,
}

/// A process's CPU seconds and resident memory.
fn read_process(pid: u32) -> Option<Usage> {
    Usage::read(&pid.to_string())
}

/// The machine's CPU time so far, all CPUs together, in clock ticks (from `/proc/stat`).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CpuTimes {
    /// Not idle: running something, or taken by the hypervisor (steal).
    pub busy: f64,
    /// Running the kernel: system calls, interrupts and softirqs (a socket's protocol work).
    pub kernel: f64,
    /// Taken by the hypervisor for other guests while this one had work (steal).
    pub steal: f64,
    /// All of it.
    pub total: f64,
}

impl CpuTimes {
    /// Parses the first (`cpu `) line of `/proc/stat`.
    pub fn parse(stat: &str) -> Option<Self> {
        let times: Vec<f64> = stat
            .lines()
            .next()?
            .strip_prefix("cpu ")?
            .split_whitespace()
            .filter_map(|t| t.parse().ok())
            .collect();
        // user nice system idle iowait irq softirq steal (guest time is already in user).
        let total: f64 = times.iter().take(8).sum();
        let idle = times.get(3)? + times.get(4).unwrap_or(&0.0);
        let at = |i: usize| times.get(i).copied().unwrap_or(0.0);
        Some(CpuTimes {
            busy: total - idle,
            kernel: at(2) + at(5) + at(6),
            steal: at(7),
            total,
        })
    }

    /// The machine's load from `self` until `later`.
    pub fn until(&self, later: &CpuTimes) -> MachineLoad {
        let total = (later.total - self.total).max(1.0);
        MachineLoad {
            busy: (later.busy - self.busy) / total,
            kernel: (later.kernel - self.kernel) / total,
            steal: (later.steal - self.steal) / total,
        }
    }
}

/// The machine's CPU over a span: shares of all its CPUs' time, 0 to 1.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct MachineLoad {
    /// Busy (steal included): near 1, every latency includes waiting for a CPU.
    pub busy: f64,
    /// Running the kernel (part of `busy`): system calls, interrupts and the sockets' protocol
    /// work, with the generator on the same machine the loopback's TCP work for both sides.
    pub kernel: f64,
    /// Taken by the hypervisor (steal): a VM with less CPU than it has cores.
    pub steal: f64,
}

/// The machine a run measured on: with it, a saved report says where its numbers come from.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Machine {
    /// CPUs the generator may run on.
    pub cpus: usize,
    /// The first CPU's model name (`/proc/cpuinfo`).
    pub cpu_model: Option<String>,
    /// Memory, MiB (`/proc/meminfo`).
    pub memory_mib: Option<u64>,
    /// The kernel's release (`/proc/sys/kernel/osrelease`).
    pub kernel: Option<String>,
}

impl Machine {
    /// This machine, as far as `/proc` describes it (only the CPU count elsewhere).
    pub fn this() -> Self {
        let read = |path: &str| std::fs::read_to_string(path).unwrap_or_default();
        let cpus = std::thread::available_parallelism().map_or(1, usize::from);
        Self::parse(
            cpus,
            &read("/proc/cpuinfo"),
            &read("/proc/meminfo"),
            &read("/proc/sys/kernel/osrelease"),
        )
    }

    fn parse(cpus: usize, cpuinfo: &str, meminfo: &str, osrelease: &str) -> Self {
        let field = |text: &str, name: &str| -> Option<String> {
            text.lines().find_map(|line| {
                let (key, value) = line.split_once(':')?;
                (key.trim() == name).then(|| value.trim().to_owned())
            })
        };
        let memory_kib = field(meminfo, "MemTotal")
            .and_then(|v| v.trim_end_matches("kB").trim().parse::<u64>().ok());
        let kernel = osrelease.trim();
        Machine {
            cpus,
            cpu_model: field(cpuinfo, "model name"),
            memory_mib: memory_kib.map(|kib| kib / 1024),
            kernel: (!kernel.is_empty()).then(|| kernel.to_owned()),
        }
    }

    /// `2 CPUs (AMD EPYC), 23.5 GiB, Linux 6.1.0`.
    pub fn describe(&self) -> String {
        let mut out = format!("{} CPUs", self.cpus);
        if let Some(model) = &self.cpu_model {
            out.push_str(&format!(" ({model})"));
        }
        if let Some(mib) = self.memory_mib {
            out.push_str(&format!(", {:.1} GiB", mib as f64 / 1024.0));
        }
        if let Some(kernel) = &self.kernel {
            out.push_str(&format!(", Linux {kernel}"));
        }
        out
    }
}

/// The machine's CPU time so far, from `/proc/stat` (Linux).
pub fn machine_cpu() -> Option<CpuTimes> {
    CpuTimes::parse(&std::fs::read_to_string("/proc/stat").ok()?)
}

/// The first and the last of the samples taken while `peak` sessions (the most) were connected
/// (`None` with fewer than two, or no sessions). A run's whole span also covers the ramp and the
/// drain, whose idle time hides a machine saturated in between.
fn span_at_peak<T: Copy>(samples: &[(usize, T)], peak: usize) -> Option<(T, T)> {
    if peak == 0 {
        return None;
    }
    let mut at_peak = samples.iter().filter(|(sessions, _)| *sessions == peak);
    let first = at_peak.next()?.1;
    let last = at_peak.next_back()?.1;
    Some((first, last))
}

/// The machine's load while `peak` sessions (the most) were connected.
pub fn load_at_peak(samples: &[(usize, CpuTimes)], peak: usize) -> Option<MachineLoad> {
    span_at_peak(samples, peak).map(|(first, last)| first.until(&last))
}

/// How fast a count (frames sent, CPU seconds) grew while `peak` sessions (the most) were
/// connected, per second; each sample is `(sessions, (seconds, count))`.
pub(super) fn rate_at_peak(samples: &[(usize, (f64, f64))], peak: usize) -> Option<f64> {
    span_at_peak(samples, peak)
        .filter(|((t0, _), (t1, _))| t1 > t0)
        .map(|((t0, n0), (t1, n1))| (n1 - n0).max(0.0) / (t1 - t0))
}

/// How long a process's threads waited for a CPU while `peak` sessions (the most) were
/// connected; each sample is `(sessions, (seconds, times))`.
pub fn cpu_wait_at_peak(samples: &[(usize, (f64, SchedTimes))], peak: usize) -> Option<CpuWait> {
    span_at_peak(samples, peak)
        .and_then(|((t0, first), (t1, last))| first.wait_until(&last, t1 - t0))
}

/// How long a process's threads waited for a CPU over a span.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct CpuWait {
    /// The mean wait each time a thread was ready to run (µs): tens of µs on a machine with CPU
    /// to spare (a sleeping vCPU must wake), milliseconds when threads queue for CPUs, and then
    /// every latency measured in that process includes it.
    pub per_wakeup_us: f64,
    /// Threads waiting for a CPU at any moment, on average. Near 0 the process hardly ran, and
    /// the mean above rests on few wake-ups.
    pub threads_waiting: f64,
}

/// Seconds threads spent ready to run but waiting for a CPU, and how many times they got one
/// (the kernel's `schedstat`).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SchedTimes {
    /// In the run queue: ready to run, no CPU free.
    pub waiting: f64,
    /// Times a thread was put on a CPU.
    pub runs: f64,
}

impl SchedTimes {
    /// Parses a `/proc/{pid}/task/{tid}/schedstat` line: nanoseconds running, nanoseconds
    /// waiting, times put on a CPU.
    pub fn parse(line: &str) -> Option<Self> {
        let mut fields = line.split_whitespace().map(str::parse::<u64>);
        fields.next()?.ok()?; // Running: what the process's own CPU time already says.
        let waiting = fields.next()?.ok()?;
        let runs = fields.next()?.ok()?;
        Some(SchedTimes {
            waiting: waiting as f64 / 1e9,
            runs: runs as f64,
        })
    }

    /// How long the threads waited for a CPU from `self` until `later`, `seconds` on (`None`
    /// if they never ran).
    pub fn wait_until(&self, later: &SchedTimes, seconds: f64) -> Option<CpuWait> {
        let runs = later.runs - self.runs;
        let waiting = later.waiting - self.waiting;
        (runs > 0.0 && seconds > 0.0).then(|| CpuWait {
            per_wakeup_us: waiting / runs * 1e6,
            threads_waiting: waiting / seconds,
        })
    }
}

/// The scheduling times of all of a process's threads, summed over time: each sample adds what
/// every thread ran and waited since the previous one, so a thread that exits (tokio's blocking
/// threads come and go) does not take its time back out of the sum.
#[derive(Debug, Default)]
pub struct ThreadTimes {
    /// Each thread's times at the previous sample (empty before the first).
    last: HashMap<u32, SchedTimes>,
    total: SchedTimes,
}

impl ThreadTimes {
    /// Reads every thread of `pid` again and returns the sum so far (`None` if `/proc` has no
    /// `schedstat`: a kernel built without it).
    pub fn sample(&mut self, pid: u32) -> Option<SchedTimes> {
        let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
        let threads: Vec<(u32, SchedTimes)> = tasks
            .filter_map(|task| {
                let task = task.ok()?;
                let tid = task.file_name().to_str()?.parse().ok()?;
                // A thread may exit between the listing and the read: it is just left out.
                let line = std::fs::read_to_string(task.path().join("schedstat")).ok()?;
                Some((tid, SchedTimes::parse(&line)?))
            })
            .collect();
        if threads.is_empty() {
            return None;
        }
        Some(self.update(threads))
    }

    /// Adds what each thread waited and ran since it was last seen (all of it for a thread
    /// born since); the first call (never with no threads) only takes note.
    fn update(&mut self, threads: Vec<(u32, SchedTimes)>) -> SchedTimes {
        let last = std::mem::take(&mut self.last);
        let started = !last.is_empty();
        for (tid, now) in threads {
            if started {
                let before = last.get(&tid).copied().unwrap_or_default();
                self.total.waiting += (now.waiting - before.waiting).max(0.0);
                self.total.runs += (now.runs - before.runs).max(0.0);
            }
            self.last.insert(tid, now);
        }
        self.total
    }
}

impl Sampler {
    /// Starts sampling (the server too when `pid` is given, and its sockets on `port`).
    pub fn start(
        pid: Option<u32>,
        port: Option<u16>,
        live: Arc<Live>,
        start: Instant,
        print: bool,
    ) -> Self {
        let (stop, stopped) = mpsc::channel::<()>();
        let start = start.into_std();
        let sample = move || {
            let mut sampling = Sampling::new(pid, port, live, start, print);
            loop {
                // On a fixed schedule: the first sample at once, then one each period.
                let due = start + PERIOD * u32::try_from(sampling.n).unwrap_or(u32::MAX);
                match stopped.recv_timeout(due.saturating_duration_since(std::time::Instant::now()))
                {
                    Err(RecvTimeoutError::Timeout) => {}
                    Ok(()) | Err(RecvTimeoutError::Disconnected) => break,
                }
                sampling.take();
            }
            sampling.finish()
        };
        let thread = std::thread::Builder::new()
            .name("loadtest-sampler".into())
            .spawn(sample)
            .map_err(|error| eprintln!("loadtest: cannot start the sampler ({error}); no samples"))
            .ok();
        Sampler { stop, thread }
    }

    /// Stops sampling and returns what was seen.
    pub async fn finish(self) -> Sampled {
        let _ = self.stop.send(());
        let Some(thread) = self.thread else {
            return Sampled::default();
        };
        tokio::task::spawn_blocking(move || thread.join().unwrap_or_default())
            .await
            .unwrap_or_default()
    }
}

/// The sampler thread's state: what each period's sample adds to, until `finish` sums it up.
struct Sampling {
    pid: Option<u32>,
    port: Option<u16>,
    live: Arc<Live>,
    start: std::time::Instant,
    print: bool,
    /// This process (the generator).
    me: u32,
    my_first: Option<Usage>,
    /// The server's usage at the start, when its `/proc` could be read.
    first: Option<Usage>,
    sampled: Sampled,
    samples: Vec<ServerSample>,
    machine: Vec<(usize, CpuTimes)>,
    my_threads: ThreadTimes,
    server_threads: ThreadTimes,
    my_sched: Vec<(usize, (f64, SchedTimes))>,
    server_sched: Vec<(usize, (f64, SchedTimes))>,
    unread: Vec<(usize, backlog::Unread)>,
    frames_sent: Vec<(usize, (f64, f64))>,
    my_cpu: Vec<(usize, (f64, f64))>,
    /// Samples taken so far.
    n: u64,
}

impl Sampling {
    fn new(
        pid: Option<u32>,
        port: Option<u16>,
        live: Arc<Live>,
        start: std::time::Instant,
        print: bool,
    ) -> Self {
        let me = std::process::id();
        let my_first = read_process(me);
        let first = pid.and_then(read_process);
        if pid.is_some() && first.is_none() {
            eprintln!("loadtest: cannot read /proc for the server pid; no server stats");
        }
        Sampling {
            pid,
            port,
            live,
            start,
            print,
            me,
            my_first,
            first,
            sampled: Sampled::default(),
            samples: Vec::new(),
            machine: Vec::new(),
            my_threads: ThreadTimes::default(),
            server_threads: ThreadTimes::default(),
            my_sched: Vec::new(),
            server_sched: Vec::new(),
            unread: Vec::new(),
            frames_sent: Vec::new(),
            my_cpu: Vec::new(),
            n: 0,
        }
    }

    /// One period's sample: sessions, the machine's, the generator's and the server's CPU, the
    /// server's sockets (every `BACKLOG_EVERY`th), and the progress line when asked for.
    fn take(&mut self) {
        let (me, pid, n) = (self.me, self.pid, self.n);
        let t = self.start.elapsed().as_secs_f64();
        let sessions = self
            .live
            .connected
            .load(std::sync::atomic::Ordering::Relaxed);
        self.sampled.sessions.push((t, sessions));
        if let Some(cpu) = machine_cpu() {
            self.machine.push((sessions, cpu));
        }
        if let Some(times) = self.my_threads.sample(me) {
            self.my_sched.push((sessions, (t, times)));
        }
        if let Some(times) = pid.and_then(|pid| self.server_threads.sample(pid)) {
            self.server_sched.push((sessions, (t, times)));
        }
        if let (Some(pid), Some(port), true) = (pid, self.port, n.is_multiple_of(BACKLOG_EVERY)) {
            if let Some(sockets) = backlog::sample(pid, port) {
                self.unread.push((sessions, sockets));
            }
        }
        let sent = self
            .live
            .frames_sent
            .load(std::sync::atomic::Ordering::Relaxed);
        self.frames_sent.push((sessions, (t, sent as f64)));
        if let Some(now) = read_process(me) {
            self.my_cpu.push((sessions, (t, now.cpu_seconds)));
        }
        if let (Some(pid), Some(first)) = (pid, self.first) {
            if let Some(now) = read_process(pid) {
                self.samples.push(ServerSample {
                    t,
                    sessions,
                    rss_kib: now.rss_kib,
                    cpu_seconds: now.cpu_seconds - first.cpu_seconds,
                });
            }
        }
        self.n += 1;
        if self.print && self.n.is_multiple_of(2) {
            eprintln!("{}", super::session::progress(&self.live, t));
        }
    }

    /// What was seen, summed up at the peak and over the run.
    fn finish(self) -> Sampled {
        let mut sampled = self.sampled;
        let elapsed = self.start.elapsed().as_secs_f64().max(1e-9);
        let peak = sampled.peak();
        sampled.machine_at_peak = load_at_peak(&self.machine, peak);
        sampled.generator_cpu_wait = cpu_wait_at_peak(&self.my_sched, peak);
        sampled.generator_cpu_cores_at_peak = rate_at_peak(&self.my_cpu, peak);
        if let (Some(first), Some(last)) = (self.my_first, read_process(self.me)) {
            sampled.generator_cpu_cores = Some((last.cpu_seconds - first.cpu_seconds) / elapsed);
            sampled.generator_cpu_system_cores =
                Some((last.system_seconds - first.system_seconds) / elapsed);
        }
        if let (Some(pid), Some(first)) = (self.pid, self.first) {
            let end = read_process(pid).unwrap_or(first);
            let cpu = end.cpu_seconds - first.cpu_seconds;
            sampled.server = Some(ServerStats {
                cpu_system_seconds: Some(end.system_seconds - first.system_seconds),
                cpu_wait_at_peak: cpu_wait_at_peak(&self.server_sched, peak),
                socket_backlog_at_peak: backlog::at_peak(
                    &self.unread,
                    peak,
                    rate_at_peak(&self.frames_sent, peak).unwrap_or(0.0),
                ),
                ..ServerStats::of(Some(pid), cpu, first.rss_kib, self.samples, peak, elapsed)
            });
        }
        sampled
    }
}

/// One sample of the server process.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct ServerSample {
    /// Seconds since the test started.
    pub t: f64,
    /// Sessions connected at that moment.
    pub sessions: usize,
    /// Resident memory, KiB.
    pub rss_kib: u64,
    /// CPU seconds used since the test started.
    pub cpu_seconds: f64,
}

/// The server process over the run: from `/proc` with `--server-pid`, else from the gateway's
/// own `/metrics` (`process_*`), which leaves out the CPU wait and the socket backlog.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ServerStats {
    /// The process (`None`: read from the gateway's `/metrics`).
    pub pid: Option<u32>,
    /// CPU seconds (user + system) used during the run.
    pub cpu_seconds: f64,
    /// Of those, the seconds in the kernel (system time; from `/proc` only).
    pub cpu_system_seconds: Option<f64>,
    /// Average cores busy during the run.
    pub cpu_cores: f64,
    /// Cores busy while the most sessions were connected: the load a target is set at, where
    /// the run's average above also covers the ramp and the drain with fewer sessions.
    pub cpu_cores_at_peak: Option<f64>,
    /// Largest resident memory seen, KiB.
    pub peak_rss_kib: u64,
    /// Resident memory before the first session connected, KiB.
    pub baseline_rss_kib: u64,
    /// Least-squares slope of RSS over connected sessions, KiB per session.
    pub rss_kib_per_session: f64,
    /// How long the server's threads waited for a CPU while the most sessions were connected
    /// (from `schedstat`, when the kernel has it).
    pub cpu_wait_at_peak: Option<CpuWait>,
    /// Bytes waiting unread in the server's sockets while the most sessions were connected, and
    /// how long a frame waited to be read (from the kernel's socket table, on Linux).
    pub socket_backlog_at_peak: Option<SocketBacklog>,
    /// Samples over time (every 500 ms from `/proc`, every 2 s from `/metrics`).
    pub samples: Vec<ServerSample>,
}

impl ServerStats {
    /// The server's CPU and memory over a run of `elapsed` seconds in which it used
    /// `cpu_seconds`, from `baseline_rss_kib` before the first session and `samples` taken while
    /// at most `peak` sessions were connected.
    pub fn of(
        pid: Option<u32>,
        cpu_seconds: f64,
        baseline_rss_kib: u64,
        samples: Vec<ServerSample>,
        peak: usize,
        elapsed: f64,
    ) -> ServerStats {
        // Memory is returned lazily as sessions end; fit only the ramp up to the peak.
        let ramp = samples
            .iter()
            .position(|s| s.sessions == peak)
            .map_or(samples.len(), |i| i + 1);
        let points: Vec<(f64, f64)> = samples[..ramp]
            .iter()
            .map(|s| (s.sessions as f64, s.rss_kib as f64))
            .collect();
        let cpu: Vec<(usize, (f64, f64))> = samples
            .iter()
            .map(|s| (s.sessions, (s.t, s.cpu_seconds)))
            .collect();
        ServerStats {
            pid,
            cpu_seconds,
            cpu_system_seconds: None,
            cpu_cores: cpu_seconds / elapsed.max(1e-9),
            cpu_cores_at_peak: rate_at_peak(&cpu, peak),
            peak_rss_kib: samples
                .iter()
                .map(|s| s.rss_kib)
                .fold(baseline_rss_kib, u64::max),
            baseline_rss_kib,
            rss_kib_per_session: slope(&points),
            cpu_wait_at_peak: None,
            socket_backlog_at_peak: None,
            samples,
        }
    }
}

/// Least-squares slope of `y` over `x`.
pub fn slope(points: &[(f64, f64)]) -> f64 {
    let n = points.len() as f64;
    if n < 2.0 {
        return 0.0;
    }
    let (sx, sy) = points
        .iter()
        .fold((0.0, 0.0), |(a, b), (x, y)| (a + x, b + y));
    let (mx, my) = (sx / n, sy / n);
    let (num, den) = points.iter().fold((0.0, 0.0), |(num, den), (x, y)| {
        (num + (x - mx) * (y - my), den + (x - mx) * (x - mx))
    });
    if den == 0.0 {
        0.0
    } else {
        num / den
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rate_at_the_peak_leaves_out_the_ramp() {
        // 100 frames a second while ramping, 1,000 with all ten sessions connected.
        let samples = [
            (5, (0.5, 50.0)),
            (10, (1.0, 100.0)),
            (10, (2.0, 1_100.0)),
            (10, (3.0, 2_100.0)),
            (4, (3.5, 2_150.0)),
        ];
        assert_eq!(rate_at_peak(&samples, 10), Some(1_000.0));
        assert_eq!(rate_at_peak(&samples[..2], 10), None);
    }

    #[test]
    fn parses_the_machine_line_of_proc_stat() {
        let stat = "cpu  1000 20 400 3000 100 0 80 400 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n";
        let times = CpuTimes::parse(stat).expect("a cpu line");
        assert_eq!(
            times,
            CpuTimes {
                busy: 1900.0,
                kernel: 480.0,
                steal: 400.0,
                total: 5000.0
            }
        );
        assert_eq!(CpuTimes::parse("intr 1 2 3\n"), None);
        assert!(machine_cpu().is_some_and(|t| t.total > 0.0 && t.busy <= t.total));
    }

    #[test]
    fn the_load_at_the_peak_leaves_out_the_ramp_and_the_drain() {
        let at = |busy: f64, kernel: f64, steal: f64, total: f64| CpuTimes {
            busy,
            kernel,
            steal,
            total,
        };
        let samples = [
            (0, at(0.0, 0.0, 0.0, 0.0)),
            (50, at(100.0, 40.0, 0.0, 200.0)),
            (100, at(300.0, 100.0, 10.0, 400.0)),
            (100, at(500.0, 200.0, 20.0, 600.0)),
            (100, at(700.0, 300.0, 30.0, 800.0)),
            (40, at(720.0, 310.0, 30.0, 1000.0)),
        ];
        // Over the whole run the machine looks 72% busy; with every session connected it had
        // no idle time at all, half of it in the kernel.
        assert_eq!(samples[0].1.until(&samples[5].1).busy, 0.72);
        assert_eq!(
            load_at_peak(&samples, 100),
            Some(MachineLoad {
                busy: 1.0,
                kernel: 0.5,
                steal: 0.05
            })
        );
        assert_eq!(
            load_at_peak(&samples[..3], 100),
            None,
            "one sample at the peak"
        );
        assert_eq!(load_at_peak(&[(0, at(0.0, 0.0, 0.0, 0.0)); 3], 0), None);
        assert_eq!(load_at_peak(&[], 100), None);
    }

    #[test]
    fn parses_a_threads_schedstat() {
        assert_eq!(
            SchedTimes::parse("923543000 113795000 2\n"),
            Some(SchedTimes {
                waiting: 0.113795,
                runs: 2.0
            })
        );
        assert_eq!(SchedTimes::parse("923543 1"), None);
        assert_eq!(SchedTimes::parse("x 1 2"), None);
    }

    #[test]
    fn thread_times_keep_what_an_exited_thread_waited_and_count_a_new_one_whole() {
        let t = |waiting: f64, runs: f64| SchedTimes { waiting, runs };
        let mut times = ThreadTimes::default();
        // The first sample is the starting point: nothing counted yet.
        let start = times.update(vec![(1, t(1.0, 10.0)), (2, t(5.0, 5.0))]);
        assert_eq!(start, SchedTimes::default());
        // Thread 2 waited 3 s more over 10 runs, then exited; thread 3 was born and waited 1 s
        // over 5 runs; thread 1 waited 1 s over 5 runs.
        times.update(vec![(1, t(1.0, 10.0)), (2, t(8.0, 15.0))]);
        let total = times.update(vec![(1, t(2.0, 15.0)), (3, t(1.0, 5.0))]);
        assert_eq!((total.waiting, total.runs), (5.0, 20.0));
        assert_eq!(
            start.wait_until(&total, 10.0),
            Some(CpuWait {
                per_wakeup_us: 250_000.0,
                threads_waiting: 0.5
            })
        );
        assert_eq!(total.wait_until(&total, 10.0), None, "no runs, no mean");
    }

    #[test]
    fn the_wait_at_the_peak_leaves_out_the_ramp() {
        let t = |waiting: f64, runs: f64| SchedTimes { waiting, runs };
        let samples = [
            (10, (0.0, t(0.0, 0.0))),
            (20, (0.5, t(0.001, 10.0))),
            (20, (1.0, t(0.002, 20.0))),
            (20, (1.5, t(0.003, 30.0))),
            (5, (2.0, t(1.0, 31.0))),
        ];
        let wait = cpu_wait_at_peak(&samples, 20).expect("three samples at the peak");
        assert!((wait.per_wakeup_us - 100.0).abs() < 1e-9, "{wait:?}");
        assert!((wait.threads_waiting - 0.002).abs() < 1e-12, "{wait:?}");
        assert_eq!(cpu_wait_at_peak(&samples[..2], 20), None);
    }

    #[test]
    fn samples_the_threads_of_its_own_process() {
        let me = std::process::id();
        let mut times = ThreadTimes::default();
        // A kernel without schedstats has no such file; nothing to check there.
        if std::fs::metadata(format!("/proc/{me}/schedstat")).is_err() {
            return;
        }
        let first = times.sample(me).expect("own threads are readable");
        // A thread born after the first sample counts whole at the next: it has run at least
        // once. It waits on a channel so it is still there to be read.
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        let (up, is_up) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            let _ = up.send(());
            let _ = stopped.recv();
        });
        is_up.recv().expect("the thread started");
        let second = times.sample(me).expect("own threads are readable");
        let _ = stop.send(());
        thread.join().expect("the thread ended");
        assert!(second.runs > first.runs, "{first:?} {second:?}");
        assert!(second.waiting >= first.waiting);
    }

    #[test]
    fn reads_its_own_process() {
        let usage = read_process(std::process::id()).expect("/proc is readable");
        assert!(usage.rss_kib > 0);
        assert!(0.0 <= usage.system_seconds && usage.system_seconds <= usage.cpu_seconds);
    }

    #[test]
    fn the_machine_is_described_from_proc() {
        let cpuinfo = "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 7B13\n\nprocessor\t: 1\nmodel name\t: AMD EPYC 7B13\n";
        let meminfo = "MemTotal:       24683656 kB\nMemFree:         1000000 kB\n";
        let machine = Machine::parse(2, cpuinfo, meminfo, "6.18.44-fc\n");
        assert_eq!(
            machine,
            Machine {
                cpus: 2,
                cpu_model: Some("AMD EPYC 7B13".into()),
                memory_mib: Some(24_105),
                kernel: Some("6.18.44-fc".into()),
            }
        );
        assert_eq!(
            machine.describe(),
            "2 CPUs (AMD EPYC 7B13), 23.5 GiB, Linux 6.18.44-fc"
        );
        // Without /proc only the CPU count is known, and nothing is made up.
        let bare = Machine::parse(4, "", "", "");
        assert_eq!(bare.describe(), "4 CPUs");
    }

    #[test]
    fn slope_fits_a_line() {
        let points: Vec<(f64, f64)> = (0..10)
            .map(|x| (f64::from(x), 3.0 * f64::from(x) + 5.0))
            .collect();
        assert!((slope(&points) - 3.0).abs() < 1e-9);
        assert_eq!(slope(&[(1.0, 1.0)]), 0.0);
    }

    #[test]
    fn server_stats_fit_memory_on_the_ramp_and_cpu_at_the_peak() {
        let sample = |t: f64, sessions: usize, rss_kib: u64, cpu_seconds: f64| ServerSample {
            t,
            sessions,
            rss_kib,
            cpu_seconds,
        };
        // 100 KiB a session on the way up to 10; memory kept (and more) while they leave. The
        // CPU: 0.9 cores with all ten connected, less while they come and go.
        let samples = vec![
            sample(0.0, 0, 1_000, 0.0),
            sample(1.0, 5, 1_500, 0.2),
            sample(2.0, 10, 2_000, 0.6),
            sample(3.0, 10, 2_600, 1.5),
            sample(4.0, 2, 2_400, 1.6),
        ];
        let stats = ServerStats::of(None, 2.0, 900, samples, 10, 4.0);
        assert!(
            (stats.rss_kib_per_session - 100.0).abs() < 1e-9,
            "{stats:?}"
        );
        assert_eq!((stats.peak_rss_kib, stats.baseline_rss_kib), (2_600, 900));
        assert!((stats.cpu_cores - 0.5).abs() < 1e-9);
        let at_peak = stats.cpu_cores_at_peak.expect("two samples at the peak");
        assert!((at_peak - 0.9).abs() < 1e-9, "{at_peak}");
        assert_eq!(stats.samples.len(), 5);
        // No samples: the baseline is the peak.
        assert_eq!(
            ServerStats::of(None, 0.0, 900, vec![], 0, 1.0).peak_rss_kib,
            900
        );
    }
}
