//! The process's own CPU time, memory, threads and file descriptors as Prometheus's standard
//! `process_*` metrics, read from `/proc/self` at each scrape (Linux; elsewhere there are none).
//!
//! They let a gateway on another machine be measured under load without access to its `/proc`
//! (`livegate loadtest` reads them when it has no `--server-pid`).

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

/// Clock ticks per second for `/proc/*/stat` times (100 on every Linux that matters).
const CLOCK_TICKS: f64 = 100.0;

/// A process's usage as its `/proc/{pid}/stat` and `status` tell it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Usage {
    /// CPU seconds, user and system.
    pub cpu_seconds: f64,
    /// Of those, the seconds spent in the kernel (system time).
    pub system_seconds: f64,
    /// Resident memory, KiB.
    pub rss_kib: u64,
    /// Virtual memory, bytes.
    pub virtual_bytes: u64,
    /// Threads.
    pub threads: u64,
    /// When the process started, in clock ticks after the machine booted.
    pub start_ticks: u64,
}

impl Usage {
    /// Reads `/proc/{pid}` (`pid` may be `self`).
    pub fn read(pid: &str) -> Option<Usage> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        Usage::parse(&stat, &status)
    }

    /// Parses a `stat` line and a `status` file.
    pub fn parse(stat: &str, status: &str) -> Option<Usage> {
        // The fields after the command name, which may itself hold spaces and parentheses; the
        // first of them (index 0) is field 3 of proc(5), the state.
        let rest = stat.get(stat.rfind(')')? + 2..)?;
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let field = |number: usize| fields.get(number - 3)?.parse::<u64>().ok();
        let rss_kib = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())?;
        let system = field(15)?;
        Some(Usage {
            cpu_seconds: (field(14)? + system) as f64 / CLOCK_TICKS,
            system_seconds: system as f64 / CLOCK_TICKS,
            rss_kib,
            threads: field(20)?,
            start_ticks: field(22)?,
            virtual_bytes: field(23)?,
        })
    }
}

/// The soft limit on open files in a `/proc/*/limits` file (`None` if unlimited).
fn max_open_files(limits: &str) -> Option<u64> {
    limits
        .lines()
        .find_map(|l| l.strip_prefix("Max open files"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The machine's boot time, Unix seconds, from `/proc/stat`.
fn boot_time(stat: &str) -> Option<u64> {
    stat.lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()
}

/// Renders this process's `process_*` metrics at each scrape.
#[derive(Debug, Default)]
pub struct ProcessCollector;

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Some(usage) = Usage::read("self") else {
            return Ok(());
        };
        let cpu = ConstCounter::new(usage.cpu_seconds);
        cpu.encode(encoder.encode_descriptor(
            "process_cpu_seconds",
            "Total user and system CPU time spent in seconds",
            None,
            cpu.metric_type(),
        )?)?;
        let booted = std::fs::read_to_string("/proc/stat")
            .ok()
            .and_then(|s| boot_time(&s));
        let open_fds = std::fs::read_dir("/proc/self/fd").ok().map(Iterator::count);
        let max_fds = std::fs::read_to_string("/proc/self/limits")
            .ok()
            .and_then(|l| max_open_files(&l));
        // As Prometheus's own clients report them: floating-point gauges, left out when unknown.
        let gauges = [
            (
                "process_resident_memory_bytes",
                "Resident memory size in bytes",
                Some(usage.rss_kib as f64 * 1024.0),
            ),
            (
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes",
                Some(usage.virtual_bytes as f64),
            ),
            (
                "process_threads",
                "Number of OS threads in the process",
                Some(usage.threads as f64),
            ),
            (
                "process_start_time_seconds",
                "Start time of the process since unix epoch in seconds",
                booted.map(|b| b as f64 + usage.start_ticks as f64 / CLOCK_TICKS),
            ),
            (
                "process_open_fds",
                "Number of open file descriptors",
                open_fds.map(|n| n as f64),
            ),
            (
                "process_max_fds",
                "Maximum number of open file descriptors",
                max_fds.map(|n| n as f64),
            ),
        ];
        for (name, help, value) in gauges {
            if let Some(value) = value {
                let gauge = ConstGauge::new(value);
                gauge.encode(encoder.encode_descriptor(
                    name,
                    help,
                    None,
                    gauge.metric_type(),
                )?)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stat_with_an_odd_command_name_and_status() {
        let stat = "4242 (a (b) c) S 1 4242 4242 0 -1 4194560 500 0 0 0 250 75 0 0 20 0 7 0 \
                    12345 987654321 2048 18446744073709551615";
        let status = "Name:\tlivegate\nVmPeak:\t  9000 kB\nVmRSS:\t   8192 kB\nThreads:\t7\n";
        assert_eq!(
            Usage::parse(stat, status),
            Some(Usage {
                cpu_seconds: 3.25,
                system_seconds: 0.75,
                rss_kib: 8192,
                virtual_bytes: 987_654_321,
                threads: 7,
                start_ticks: 12345,
            })
        );
        assert_eq!(Usage::parse(stat, "Name:\tx\n"), None);
        assert_eq!(Usage::parse("4242 (x) S 1", status), None);
    }

    #[test]
    fn parses_the_open_file_limit_and_the_boot_time() {
        let limits = "Limit                     Soft Limit           Hard Limit           Units\n\
                      Max processes             94000                94000                processes\n\
                      Max open files            1024                 524288               files\n";
        assert_eq!(max_open_files(limits), Some(1024));
        assert_eq!(
            max_open_files(
                "Max open files            unlimited            unlimited            files\n"
            ),
            None
        );
        assert_eq!(
            boot_time("cpu  1 2 3\nbtime 1764120000\nprocesses 9\n"),
            Some(1_764_120_000)
        );
        assert_eq!(boot_time("cpu  1 2 3\n"), None);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn reads_this_process() {
        let usage = Usage::read("self").expect("a readable /proc/self");
        assert!(usage.rss_kib > 0 && usage.threads >= 1 && usage.virtual_bytes > 0);
    }
}
