//! State prefixes (stub, being written).
