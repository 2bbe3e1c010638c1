//! A process's CPU time, memory and threads from `/proc/{pid}` (Linux): the gateway's own
//! `process_*` metrics and the load generator's view of a local server read it the same way.

/// Clock ticks per second for `/proc/*/stat` times (100 on every Linux that matters).
pub const CLOCK_TICKS: f64 = 100.0;

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

    #[cfg(target_os = "linux")]
    #[test]
    fn reads_this_process() {
        let usage = Usage::read("self").expect("a readable /proc/self");
        assert!(usage.rss_kib > 0 && usage.threads >= 1 && usage.virtual_bytes > 0);
    }
}
