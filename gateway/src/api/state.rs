//! What the API's handlers read: the application state ([`AppState`]) and what `/metrics` and `/v1/models` read
//! ([`Observability`]).

use std::sync::Arc;

use crate::edge::auth::ApiKeys;
use crate::edge::browser_guard::AllowedHosts;
use crate::edge::in_flight::InFlight;
use crate::telemetry::metrics::PrometheusMetrics;
use crate::turn::Turns;

#[derive(Clone)]
pub(crate) struct AppState {
    /// What every turn needs ([`crate::turn`]).
    pub(crate) turns: Turns,
    pub(crate) keys: Option<Arc<ApiKeys>>,
    /// Client keys kept in the database ([`crate::keys`]), beside `keys`: with client keys, operators and a store.
    pub(crate) managed: Option<crate::keys::ManagedKeys>,
    pub(crate) in_flight: Arc<InFlight>,
    /// Serve the operator console ([`crate::operator::console`]) when operators are configured.
    pub(crate) console: bool,
    /// `--allowed-hosts`, when given (else the default of [`AllowedHosts::default_for`]).
    pub(crate) allowed_hosts: Option<AllowedHosts>,
    /// The address the gateway listens on: `--listen`, then the listener's own once [`crate::Gateway::serve`] has it.
    pub(crate) listen: std::net::SocketAddr,
}

/// What `/metrics` and `/v1/models` read.
#[derive(Clone, Default)]
pub(crate) struct Observability {
    pub(crate) metrics: PrometheusMetrics,
    /// `--metrics-key-env`: the key `/metrics` requires.
    pub(crate) metrics_key: Option<crate::telemetry::metrics::MetricsKey>,
    /// `--metrics-listen`: `/metrics` is served on another listener, not the main one.
    pub(crate) metrics_elsewhere: bool,
    /// `[upstreams]`' models (read per request: a reload changes them).
    pub(crate) router: Option<crate::stack::upstreams::ModelRouter>,
    /// The single `--upstream` (without `[upstreams]`): `/v1/models` lists its own models.
    pub(crate) upstream: Option<crate::stack::Upstream>,
}
