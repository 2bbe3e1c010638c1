//! The process's own CPU time, memory, threads and file descriptors as Prometheus's standard
//! `process_*` metrics, read from `/proc/self` at each scrape (Linux; elsewhere there are none).
//!
//! They let a gateway on another machine be measured under load without access to its `/proc`
//! (`livegate loadtest` reads them when it has no `--server-pid`). The `/proc/{pid}` reading
//! itself is [`crate::procfs`], which the load generator uses for a local server.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

use crate::procfs::{Usage, CLOCK_TICKS};

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
}
