//! What `/metrics` reports: the gateway's counters and histograms, and the process's own CPU
//! time and memory.

pub mod metrics;
pub mod process;
