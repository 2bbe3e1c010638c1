//! Beside the layers, used by any of them: the `tracing` targets of the spans exported as
//! OpenTelemetry traces, and W3C trace context (`traceparent`) in and out. The exporter and the
//! layer themselves are the gateway's (`gateway::telemetry::otel`); what lives here is what the
//! lower layers need to name a span or pass a trace on (an HTTP tool's request).

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::TraceContextExt;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The target of spans that are both log spans and trace spans (the connection's).
pub const TRACE_TARGET: &str = "livegate::trace";

/// The target of spans that only traces see (invocations, turns, model connections, tools): the
/// log output never shows them, and with tracing off they are disabled where they are made.
/// Use it as `tracing::info_span!(target: SPAN_TARGET, …)`.
pub const SPAN_TARGET: &str = "livegate::trace::span";

/// The W3C `traceparent` header (and query parameter) name.
pub const TRACEPARENT: &str = "traceparent";

/// The longest `traceparent` taken (version 00 is 55 bytes; later versions may append).
const MAX_TRACEPARENT: usize = 256;

/// A checked W3C `traceparent` value from a client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceParent(String);

impl TraceParent {
    /// The value, if it is a well-formed `traceparent` with a valid (non-zero) trace and span id.
    pub fn parse(value: &str) -> Option<Self> {
        let value = value.trim();
        if value.len() > MAX_TRACEPARENT {
            return None;
        }
        let context = extract(value);
        context
            .span()
            .span_context()
            .is_valid()
            .then(|| TraceParent(value.to_owned()))
    }

    /// The trace id it names (32 hex digits).
    pub fn trace_id(&self) -> String {
        extract(&self.0)
            .span()
            .span_context()
            .trace_id()
            .to_string()
    }
}

/// The checked `traceparent` header of a request, if any.
pub fn traceparent_header(headers: &axum::http::HeaderMap) -> Option<TraceParent> {
    headers
        .get(TRACEPARENT)
        .and_then(|v| v.to_str().ok())
        .and_then(TraceParent::parse)
}

fn extract(value: &str) -> opentelemetry::Context {
    let carrier = std::collections::HashMap::from([(TRACEPARENT.to_owned(), value.to_owned())]);
    TraceContextPropagator::new().extract(&carrier)
}

/// Makes `span` continue the client's trace (when traces are exported) and returns the trace id
/// the span's logs carry: the exported trace's, else the client's, else none.
pub fn continue_trace(span: &tracing::Span, parent: Option<&TraceParent>) -> Option<String> {
    if let Some(parent) = parent {
        // Without an OpenTelemetry layer there is nothing to continue: an error that says so.
        let _ = span.set_parent(extract(&parent.0));
    }
    let context = span.context();
    let own = context.span().span_context().clone();
    if own.is_valid() {
        return Some(own.trace_id().to_string());
    }
    parent.map(TraceParent::trace_id)
}

/// The `traceparent` of `span`, for a request that carries the trace onward; none when traces
/// are not exported.
pub fn traceparent_of(span: &tracing::Span) -> Option<String> {
    let context = span.context();
    if !context.span().span_context().is_valid() {
        return None;
    }
    let mut carrier = std::collections::HashMap::new();
    TraceContextPropagator::new().inject_context(&context, &mut carrier);
    carrier.remove(TRACEPARENT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_traceparent_is_checked() {
        let good = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let parsed = TraceParent::parse(good).unwrap();
        assert_eq!(parsed.trace_id(), "4bf92f3577b34da6a3ce929d0e0e4736");
        for bad in [
            "",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "garbage",
            "00-4bf92f3577b34da6a3ce929d0e0e4736",
        ] {
            assert_eq!(TraceParent::parse(bad), None, "{bad}");
        }
        assert_eq!(TraceParent::parse(&"0".repeat(300)), None);
    }

    #[test]
    fn without_a_tracer_the_clients_trace_id_is_the_logs() {
        let parent = TraceParent::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
        let span = tracing::Span::none();
        assert_eq!(
            continue_trace(&span, parent.as_ref()).as_deref(),
            Some("4bf92f3577b34da6a3ce929d0e0e4736")
        );
        assert_eq!(continue_trace(&span, None), None);
        assert_eq!(traceparent_of(&span), None);
    }
}
