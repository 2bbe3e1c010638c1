//! Sampling the run every 500 ms: connected sessions, and the server's CPU time and resident
//! memory from `/proc/{pid}` (Linux). Prints the progress line once a second.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::report::{slope, ServerSample, ServerStats};
use super::session::Live;

/// How often the run is sampled.
const PERIOD: Duration = Duration::from_millis(500);

/// What the sampler saw.
#[derive(Debug, Default)]
pub struct Sampled {
    /// `(seconds, connected sessions)`.
    pub sessions: Vec<(f64, usize)>,
    /// The server, when a pid was given.
    pub server: Option<ServerStats>,
    /// Cores the load generator itself kept busy (it shares the machine with a local server).
    pub generator_cpu_cores: Option<f64>,
}

/// The sampling task.
pub struct Sampler {
    stop: oneshot::Sender<()>,
    task: JoinHandle<Sampled>,
}

/// CPU seconds (user + system) and resident KiB of a process.
fn read_process(pid: u32) -> Option<(f64, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name, which may itself contain spaces and parentheses.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let rss_kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())?;
    Some(((utime + stime) / CLOCK_TICKS, rss_kib))
}

/// Busy and total time of all the machine's CPUs so far, in clock ticks, from `/proc/stat`.
pub fn machine_cpu() -> Option<(f64, f64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
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
    Some((total - idle, total))
}

/// Clock ticks per second for `/proc/*/stat` times (100 on every Linux that matters).
const CLOCK_TICKS: f64 = 100.0;

impl Sampler {
    /// Starts sampling (the server too when `pid` is given).
    pub fn start(pid: Option<u32>, live: Arc<Live>, start: Instant, print: bool) -> Self {
        let (stop, mut stopped) = oneshot::channel();
        let task = tokio::spawn(async move {
            let mut sampled = Sampled::default();
            let me = std::process::id();
            let my_first = read_process(me);
            let first = pid.and_then(read_process);
            if pid.is_some() && first.is_none() {
                eprintln!("loadtest: cannot read /proc for the server pid; no server stats");
            }
            let mut samples = Vec::new();
            let mut ticks = tokio::time::interval(PERIOD);
            let mut n = 0u64;
            loop {
                tokio::select! {
                    _ = ticks.tick() => {}
                    _ = &mut stopped => break,
                }
                let t = start.elapsed().as_secs_f64();
                let sessions = live.connected.load(std::sync::atomic::Ordering::Relaxed);
                sampled.sessions.push((t, sessions));
                if let (Some(pid), Some((cpu0, _))) = (pid, first) {
                    if let Some((cpu, rss_kib)) = read_process(pid) {
                        samples.push(ServerSample {
                            t,
                            sessions,
                            rss_kib,
                            cpu_seconds: cpu - cpu0,
                        });
                    }
                }
                n += 1;
                if print && n.is_multiple_of(2) {
                    eprintln!("{}", super::progress(&live, t));
                }
            }
            let elapsed = start.elapsed().as_secs_f64().max(1e-9);
            if let (Some((cpu0, _)), Some((cpu1, _))) = (my_first, read_process(me)) {
                sampled.generator_cpu_cores = Some((cpu1 - cpu0) / elapsed);
            }
            if let (Some(pid), Some((cpu0, rss0))) = (pid, first) {
                let end = read_process(pid);
                let cpu = end.map_or(0.0, |(cpu, _)| cpu - cpu0);
                // Memory is returned lazily as sessions end; fit only the ramp up to the peak.
                let peak = samples.iter().map(|s| s.sessions).max().unwrap_or(0);
                let ramp = samples
                    .iter()
                    .position(|s| s.sessions == peak)
                    .map_or(samples.len(), |i| i + 1);
                let points: Vec<(f64, f64)> = samples[..ramp]
                    .iter()
                    .map(|s| (s.sessions as f64, s.rss_kib as f64))
                    .collect();
                sampled.server = Some(ServerStats {
                    pid,
                    cpu_seconds: cpu,
                    cpu_cores: cpu / elapsed,
                    peak_rss_kib: samples
                        .iter()
                        .map(|s| s.rss_kib)
                        .max()
                        .unwrap_or(rss0)
                        .max(rss0),
                    baseline_rss_kib: rss0,
                    rss_kib_per_session: slope(&points),
                    samples,
                });
            }
            sampled
        });
        Sampler { stop, task }
    }

    /// Stops sampling and returns what was seen.
    pub async fn finish(self) -> Sampled {
        let _ = self.stop.send(());
        self.task.await.unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_its_own_process() {
        let (cpu, rss) = read_process(std::process::id()).expect("/proc is readable");
        assert!(cpu >= 0.0 && rss > 0);
    }
}
