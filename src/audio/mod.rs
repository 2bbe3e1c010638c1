//! Audio formats beside the layers, used by the model backends and the gateway alike: the
//! streaming PCM16 resampler and the G.711 μ-law codec of phone calls.

pub mod g711;
pub mod resample;
