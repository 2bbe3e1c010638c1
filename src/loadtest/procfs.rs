//! Sampling the run every 500 ms: connected sessions, and the server's CPU time and resident
//! memory from `/proc/{pid}` (Linux). Prints the progress line once a second.

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
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
    /// The machine's CPU while the most sessions were connected.
    pub machine_at_peak: Option<MachineLoad>,
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

/// The machine's CPU time so far, all CPUs together, in clock ticks (from `/proc/stat`).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CpuTimes {
    /// Not idle: running something, or taken by the hypervisor (steal).
    pub busy: f64,
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
        Some(CpuTimes {
            busy: total - idle,
            steal: times.get(7).copied().unwrap_or(0.0),
            total,
        })
    }

    /// The machine's load from `self` until `later`.
    pub fn until(&self, later: &CpuTimes) -> MachineLoad {
        let total = (later.total - self.total).max(1.0);
        MachineLoad {
            busy: (later.busy - self.busy) / total,
            steal: (later.steal - self.steal) / total,
        }
    }
}

/// The machine's CPU over a span: shares of all its CPUs' time, 0 to 1.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct MachineLoad {
    /// Busy (steal included): near 1, every latency includes waiting for a CPU.
    pub busy: f64,
    /// Taken by the hypervisor (steal): a VM with less CPU than it has cores.
    pub steal: f64,
}

/// The machine's CPU time so far, from `/proc/stat` (Linux).
pub fn machine_cpu() -> Option<CpuTimes> {
    CpuTimes::parse(&std::fs::read_to_string("/proc/stat").ok()?)
}

/// The machine's load while `peak` sessions (the most) were connected: from the first sample at
/// that count to the last (`None` with fewer than two, or no sessions). A run's whole span also
/// covers the ramp and the drain, whose idle time hides a machine saturated in between.
pub fn load_at_peak(samples: &[(usize, CpuTimes)], peak: usize) -> Option<MachineLoad> {
    if peak == 0 {
        return None;
    }
    let mut at_peak = samples.iter().filter(|(sessions, _)| *sessions == peak);
    let first = at_peak.next()?.1;
    let last = at_peak.next_back()?.1;
    Some(first.until(&last))
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
            let mut machine = Vec::new();
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
                if let Some(cpu) = machine_cpu() {
                    machine.push((sessions, cpu));
                }
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
            // The most sessions connected at once: the machine's load and the memory's ramp are
            // both measured against it.
            let peak = sampled.sessions.iter().map(|s| s.1).max().unwrap_or(0);
            sampled.machine_at_peak = load_at_peak(&machine, peak);
            if let (Some((cpu0, _)), Some((cpu1, _))) = (my_first, read_process(me)) {
                sampled.generator_cpu_cores = Some((cpu1 - cpu0) / elapsed);
            }
            if let (Some(pid), Some((cpu0, rss0))) = (pid, first) {
                let end = read_process(pid);
                let cpu = end.map_or(0.0, |(cpu, _)| cpu - cpu0);
                // Memory is returned lazily as sessions end; fit only the ramp up to the peak.
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
    fn parses_the_machine_line_of_proc_stat() {
        let stat = "cpu  1000 20 400 3000 100 0 80 400 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n";
        let times = CpuTimes::parse(stat).expect("a cpu line");
        assert_eq!(
            times,
            CpuTimes {
                busy: 1900.0,
                steal: 400.0,
                total: 5000.0
            }
        );
        assert_eq!(CpuTimes::parse("intr 1 2 3\n"), None);
        assert!(machine_cpu().is_some_and(|t| t.total > 0.0 && t.busy <= t.total));
    }

    #[test]
    fn the_load_at_the_peak_leaves_out_the_ramp_and_the_drain() {
        let at = |busy: f64, steal: f64, total: f64| CpuTimes { busy, steal, total };
        let samples = [
            (0, at(0.0, 0.0, 0.0)),
            (50, at(100.0, 0.0, 200.0)),
            (100, at(300.0, 10.0, 400.0)),
            (100, at(500.0, 20.0, 600.0)),
            (100, at(700.0, 30.0, 800.0)),
            (40, at(720.0, 30.0, 1000.0)),
        ];
        // Over the whole run the machine looks 72% busy; with every session connected it had
        // no idle time at all.
        assert_eq!(samples[0].1.until(&samples[5].1).busy, 0.72);
        assert_eq!(
            load_at_peak(&samples, 100),
            Some(MachineLoad {
                busy: 1.0,
                steal: 0.05
            })
        );
        assert_eq!(
            load_at_peak(&samples[..3], 100),
            None,
            "one sample at the peak"
        );
        assert_eq!(load_at_peak(&[(0, at(0.0, 0.0, 0.0)); 3], 0), None);
        assert_eq!(load_at_peak(&[], 100), None);
    }

    #[test]
    fn reads_its_own_process() {
        let (cpu, rss) = read_process(std::process::id()).expect("/proc is readable");
        assert!(cpu >= 0.0 && rss > 0);
    }
}
