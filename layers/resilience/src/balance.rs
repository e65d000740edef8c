//! [`Balance`]: one model served by several deployments (endpoints, regions, keys), each call sent to a healthy
//! one: weighted power-of-two-choices over peak-EWMA latency, circuits per deployment, optional stickiness per
//! conversation.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tower::ServiceExt;
use tower_chat::{
    BoxChatService, ChatError, ChatRequest, ChatStream, ErrorKind, ModelInfo, ModelMetadata,
};
use tower_service::Service;

use crate::breaker::{Breaker, BreakerHandle, CircuitBreakerLayer, CircuitOpen, Permit};
use crate::clock::SharedClock;
use crate::watch::{Verdict, WatchedCall};

/// One deployment of a [`Balance`]: a name, a weight, a chat service.
#[derive(Clone)]
pub struct Deployment {
    name: String,
    weight: u32,
    metadata: ModelMetadata,
    service: BoxChatService,
}

impl Deployment {
    /// A deployment with this weight (a deployment of weight 2 takes about twice the calls of one of weight 1
    /// when both are equally fast; weight 0 is treated as 1).
    pub fn new<S>(name: impl Into<String>, weight: u32, service: S) -> Self
    where
        S: Service<ChatRequest, Response = ChatStream, Error = ChatError>
            + ModelInfo
            + Clone
            + Send
            + Sync
            + 'static,
        S::Future: Send + 'static,
    {
        Deployment {
            name: name.into(),
            weight: weight.max(1),
            metadata: service.model_metadata(),
            service: BoxChatService::new(service),
        }
    }
}

impl fmt::Debug for Deployment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Deployment")
            .field("name", &self.name)
            .field("weight", &self.weight)
            .finish_non_exhaustive()
    }
}

/// Peak-EWMA of the time to the first event: jumps up to a slow sample at once, decays towards fast ones.
struct Ewma {
    cost_ns: f64,
    stamp: Instant,
}

struct Node {
    name: String,
    weight: f64,
    service: BoxChatService,
    breaker: Arc<Breaker>,
    waiting: AtomicUsize,
    ewma: Mutex<Ewma>,
}

impl Node {
    fn load(&self) -> f64 {
        let cost = self.ewma.lock().unwrap_or_else(|e| e.into_inner()).cost_ns;
        cost * (self.waiting.load(Ordering::Relaxed) + 1) as f64 / self.weight
    }
}

/// Builds a [`Balance`].
#[derive(Debug)]
pub struct BalanceBuilder {
    deployments: Vec<Deployment>,
    breaker: CircuitBreakerLayer,
    sticky: bool,
    default_rtt: Duration,
    decay: Duration,
    clock: SharedClock,
}

impl BalanceBuilder {
    /// Add a deployment.
    pub fn deployment(mut self, deployment: Deployment) -> Self {
        self.deployments.push(deployment);
        self
    }

    /// The breaker settings every deployment gets its own breaker with (default: [`CircuitBreakerLayer::new`]).
    pub fn breaker(mut self, breaker: CircuitBreakerLayer) -> Self {
        self.clock = breaker.config().clock.clone();
        self.breaker = breaker;
        self
    }

    /// Send every call of one conversation ([`tower_chat::ConversationId`]) to the same deployment while it is
    /// healthy (weighted rendezvous hashing: when it is not, only its conversations move). Default off.
    pub fn sticky(mut self, sticky: bool) -> Self {
        self.sticky = sticky;
        self
    }

    /// The latency assumed for a deployment not measured yet (default 1 s).
    pub fn default_rtt(mut self, rtt: Duration) -> Self {
        self.default_rtt = rtt;
        self
    }

    /// How fast the latency estimate forgets (default 10 s).
    pub fn decay(mut self, decay: Duration) -> Self {
        self.decay = decay.max(Duration::from_millis(1));
        self
    }

    /// The balancer; fails with [`ErrorKind::InvalidRequest`](tower_chat::ErrorKind::InvalidRequest) without a
    /// deployment.
    pub fn build(self) -> Result<Balance, ChatError> {
        if self.deployments.is_empty() {
            return Err(ChatError::new(
                ErrorKind::InvalidRequest,
                "a balancer needs at least one deployment",
            ));
        }
        let now = self.clock.now();
        let metadata = self.deployments[0].metadata.clone();
        let nodes: Vec<Arc<Node>> = self
            .deployments
            .into_iter()
            .map(|d| {
                Arc::new(Node {
                    breaker: Breaker::new(d.name.clone(), self.breaker.config().clone()),
                    weight: f64::from(d.weight),
                    service: d.service,
                    name: d.name,
                    waiting: AtomicUsize::new(0),
                    ewma: Mutex::new(Ewma {
                        cost_ns: self.default_rtt.as_nanos() as f64,
                        stamp: now,
                    }),
                })
            })
            .collect();
        Ok(Balance {
            shared: Arc::new(Shared {
                nodes,
                sticky: self.sticky,
                decay_ns: self.decay.as_nanos() as f64,
                clock: self.clock,
                metadata,
            }),
        })
    }
}

struct Shared {
    nodes: Vec<Arc<Node>>,
    sticky: bool,
    decay_ns: f64,
    clock: SharedClock,
    metadata: ModelMetadata,
}

/// Balances calls over deployments of one model.
///
/// Each call goes to one deployment whose circuit lets it through: with stickiness and a
/// [`ConversationId`](tower_chat::ConversationId), the conversation's deployment; otherwise the less loaded of
/// two drawn at random by weight, load being the peak-EWMA time to the first event times the calls waiting for
/// one, over the weight. Each deployment has its own circuit breaker (so a dead one is skipped at once); when
/// every circuit is open the call fails at once with an [`ErrorKind::Upstream`] error whose source is
/// [`CircuitOpen`]. The balancer does not retry: put a [`RetryLayer`](crate::RetryLayer) outside it, whose next
/// attempt lands elsewhere once a circuit opens.
#[derive(Clone)]
pub struct Balance {
    shared: Arc<Shared>,
}

impl Balance {
    /// A builder with no deployment yet.
    pub fn builder() -> BalanceBuilder {
        BalanceBuilder {
            deployments: Vec::new(),
            breaker: CircuitBreakerLayer::new(),
            sticky: false,
            default_rtt: Duration::from_secs(1),
            decay: Duration::from_secs(10),
            clock: SharedClock::default(),
        }
    }

    /// The deployments' breakers, in order.
    pub fn breakers(&self) -> Vec<BreakerHandle> {
        self.shared
            .nodes
            .iter()
            .map(|n| BreakerHandle::from_breaker(n.breaker.clone()))
            .collect()
    }

    fn pick(&self, request: &ChatRequest) -> Option<usize> {
        let nodes = &self.shared.nodes;
        let available: Vec<usize> = (0..nodes.len())
            .filter(|&i| nodes[i].breaker.available())
            .collect();
        match available.len() {
            0 => return None,
            1 => return Some(available[0]),
            _ => {}
        }
        if let (true, Some(conversation)) = (self.shared.sticky, request.conversation_id()) {
            return available.iter().copied().max_by(|&a, &b| {
                let score = |i: usize| rendezvous(conversation.as_str(), &nodes[i]);
                score(a).total_cmp(&score(b))
            });
        }
        let first = weighted(&available, nodes, None);
        let second = weighted(&available, nodes, Some(first));
        Some(if nodes[second].load() < nodes[first].load() {
            second
        } else {
            first
        })
    }
}

/// A deployment drawn at random by weight among `available`, other than `except`.
fn weighted(available: &[usize], nodes: &[Arc<Node>], except: Option<usize>) -> usize {
    let candidates = available.iter().copied().filter(|&i| Some(i) != except);
    let total: f64 = candidates.clone().map(|i| nodes[i].weight).sum();
    let mut point = fastrand::f64() * total;
    let mut chosen = None;
    for i in candidates {
        chosen = Some(i);
        point -= nodes[i].weight;
        if point < 0.0 {
            break;
        }
    }
    chosen.expect("at least one candidate")
}

/// Weighted rendezvous score of a conversation on a node: the highest score wins.
fn rendezvous(conversation: &str, node: &Node) -> f64 {
    let mut hasher = std::hash::DefaultHasher::new();
    conversation.hash(&mut hasher);
    node.name.hash(&mut hasher);
    let unit = ((hasher.finish() >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
    -node.weight / unit.ln()
}

impl fmt::Debug for Balance {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.shared.nodes.iter().map(|n| n.name.as_str()).collect();
        f.debug_struct("Balance")
            .field("deployments", &names)
            .field("sticky", &self.shared.sticky)
            .finish_non_exhaustive()
    }
}

impl ModelInfo for Balance {
    /// The first deployment's metadata.
    fn model_metadata(&self) -> ModelMetadata {
        self.shared.metadata.clone()
    }
}

/// A call in flight on one node: counted as waiting until its verdict, which feeds the latency estimate and the
/// breaker.
struct InFlight {
    shared: Arc<Shared>,
    node: Arc<Node>,
    start: Instant,
    permit: Option<Permit>,
}

impl Verdict for InFlight {
    fn settle(mut self, outcome: Result<(), &ChatError>) {
        let now = self.shared.clock.now();
        let rtt = now.saturating_duration_since(self.start).as_nanos() as f64;
        {
            let mut ewma = self.node.ewma.lock().unwrap_or_else(|e| e.into_inner());
            // A failure before any output is as bad as the slowest answer seen, and then some.
            let sample = if outcome.is_ok() {
                rtt
            } else {
                ewma.cost_ns.max(rtt) * 2.0
            };
            let elapsed = now.saturating_duration_since(ewma.stamp).as_nanos() as f64;
            ewma.stamp = now;
            if sample > ewma.cost_ns {
                ewma.cost_ns = sample;
            } else {
                let keep = (-elapsed / self.shared.decay_ns).exp();
                ewma.cost_ns = ewma.cost_ns * keep + sample * (1.0 - keep);
            }
        }
        if let Some(permit) = self.permit.take() {
            permit.settle(outcome);
        }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.node.waiting.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The response future of [`Balance`].
pub type BalanceFuture = crate::boxed::BoxedChatFuture;

impl Service<ChatRequest> for Balance {
    type Response = ChatStream;
    type Error = ChatError;
    type Future = BalanceFuture;

    /// Always ready: the chosen deployment is polled ready in the call.
    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: ChatRequest) -> Self::Future {
        let picked = self.pick(&request).and_then(|index| {
            let node = self.shared.nodes[index].clone();
            node.breaker.acquire().ok().map(|permit| (node, permit))
        });
        let Some((node, permit)) = picked else {
            let error = ChatError::new(
                ErrorKind::Upstream,
                "no deployment available: every circuit is open",
            )
            .with_source(CircuitOpen::new(self.shared.metadata.provider.to_string()));
            return BalanceFuture::new(std::future::ready(Err(error)));
        };
        node.waiting.fetch_add(1, Ordering::Relaxed);
        let in_flight = InFlight {
            start: self.shared.clock.now(),
            shared: self.shared.clone(),
            node: node.clone(),
            permit: Some(permit),
        };
        let service = node.service.clone();
        BalanceFuture::new(async move {
            match service.ready_oneshot().await {
                Ok(service) => WatchedCall::new(service.oneshot(request), in_flight).await,
                Err(error) => {
                    in_flight.settle(Err(&error));
                    Err(error)
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::breaker::CircuitBreakerLayer;

    fn balance(weights: &[u32], costs_ms: &[u64]) -> Balance {
        let now = Instant::now();
        let nodes = weights
            .iter()
            .zip(costs_ms)
            .enumerate()
            .map(|(i, (&weight, &cost))| {
                let service = tower::service_fn(|_: ChatRequest| async {
                    Err::<ChatStream, _>(ChatError::new(ErrorKind::Other, "unused"))
                });
                Arc::new(Node {
                    name: format!("d{i}"),
                    weight: f64::from(weight),
                    service: BoxChatService::with_metadata(service, ModelMetadata::new("test")),
                    breaker: Breaker::new(
                        format!("d{i}"),
                        CircuitBreakerLayer::new().config().clone(),
                    ),
                    waiting: AtomicUsize::new(0),
                    ewma: Mutex::new(Ewma {
                        cost_ns: Duration::from_millis(cost).as_nanos() as f64,
                        stamp: now,
                    }),
                })
            })
            .collect();
        Balance {
            shared: Arc::new(Shared {
                nodes,
                sticky: true,
                decay_ns: 1e10,
                clock: SharedClock::default(),
                metadata: ModelMetadata {
                    provider: "test".into(),
                    model_id: None,
                    endpoint: None,
                    supports_tools: true,
                    supports_parallel_tool_calls: true,
                    supports_streaming_usage: true,
                    context_window: None,
                },
            }),
        }
    }

    /// Calls that never finish pile up as waiting: the balancer spreads them by weight.
    #[test]
    fn concurrent_calls_spread_in_proportion_to_weight() {
        fastrand::seed(7);
        let balance = balance(&[3, 1], &[100, 100]);
        let request = ChatRequest::default();
        for _ in 0..400 {
            let i = balance.pick(&request).unwrap();
            balance.shared.nodes[i]
                .waiting
                .fetch_add(1, Ordering::Relaxed);
        }
        let waiting: Vec<usize> = balance
            .shared
            .nodes
            .iter()
            .map(|n| n.waiting.load(Ordering::Relaxed))
            .collect();
        // (w + 1) / weight stays level: 3 : 1, give or take one call.
        assert!((299..=301).contains(&waiting[0]), "{waiting:?}");
    }

    #[test]
    fn the_faster_deployment_wins_among_equals() {
        fastrand::seed(7);
        let balance = balance(&[1, 1, 1], &[100, 10, 100]);
        let request = ChatRequest::default();
        let picks: Vec<usize> = (0..300).map(|_| balance.pick(&request).unwrap()).collect();
        // Node 1 wins whenever it is one of the two drawn: two draws in three.
        let fast = picks.iter().filter(|&&i| i == 1).count();
        assert!((170..=230).contains(&fast), "{fast}");
    }

    #[test]
    fn a_conversation_sticks_to_one_deployment_and_only_its_own_move() {
        let balance = balance(&[1, 1, 1, 1], &[1, 1, 1, 1]);
        let homes: Vec<usize> = (0..40)
            .map(|c| {
                let request = ChatRequest::default()
                    .with_extension(tower_chat::ConversationId::new(format!("conv-{c}")));
                let home = balance.pick(&request).unwrap();
                for _ in 0..5 {
                    assert_eq!(balance.pick(&request).unwrap(), home);
                }
                home
            })
            .collect();
        assert!((0..4).all(|node| homes.contains(&node)), "{homes:?}");
        // Deployment 0 goes down: its conversations move, no other does.
        for _ in 0..5 {
            let permit = balance.shared.nodes[0].breaker.acquire().unwrap();
            permit.settle(Err(&ChatError::new(ErrorKind::Upstream, "down")));
        }
        for (c, &home) in homes.iter().enumerate() {
            let request = ChatRequest::default()
                .with_extension(tower_chat::ConversationId::new(format!("conv-{c}")));
            let now = balance.pick(&request).unwrap();
            if home == 0 {
                assert_ne!(now, 0);
            } else {
                assert_eq!(now, home);
            }
        }
    }
}
