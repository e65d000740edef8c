//! What the gateway says about itself: logs and OpenTelemetry export ([`install`]), the Prometheus metrics of
//! `GET /metrics` ([`metrics`]), and the throttle on warnings a client can trigger at will.

pub mod metrics;
mod metrics_key;
mod otlp;
pub(crate) mod warning_throttle;

pub use otlp::*;
