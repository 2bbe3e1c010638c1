//! What `/metrics` reports: the gateway's counters and histograms, and the process's own CPU
//! time and memory; traces over OTLP (`otel`).

pub mod metrics;
pub mod otel;
pub mod process;
