//! What every service of one [`LimitsLayer`](crate::LimitsLayer) shares (the policy, the store, the price table,
//! the clock, the decision counters and the plans), and a call's [`Lease`] on its reservation.

use std::fmt;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwap;
use futures_util::future::BoxFuture;
use serde::Serialize;
use tokio::sync::Notify;
use tower_chat::{ChatError, ChatRequest, Cost, ErrorKind, EstimatedUsage, PriceTable, Usage};

use crate::clock::Clock;
use crate::limits::{LimitPolicy, ANONYMOUS};
use crate::plan::{self, CallPlan, PlanCache};
use crate::store::{Admission, Demand, LimitStore, LimitStoreError, Rejection, StoreReply, Ticket};

/// What a store failure (Redis unreachable, a timeout) does to calls.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum StoreFailure {
    /// Refuse the call with an [`ErrorKind::Store`] error (the default: a budget that cannot be checked is not
    /// spent).
    #[default]
    FailClosed,
    /// Admit the call without a reservation; the failure is logged and counted in
    /// [`LimitStats::admitted_unchecked`]. When the call ends its real usage is still charged (a settlement
    /// against an empty reservation), so spend made while the store failed counts once it answers again.
    FailOpen,
}

/// Counters of what the layer decided.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct LimitStats {
    /// Calls admitted with a reservation.
    pub admitted: u64,
    /// Calls refused as over a limit.
    pub rejected: u64,
    /// Store failures at admission.
    pub store_errors: u64,
    /// Calls admitted without a check because the store failed and the policy is [`StoreFailure::FailOpen`].
    pub admitted_unchecked: u64,
    /// Settlements the store failed to apply (logged).
    pub settle_errors: u64,
}

#[derive(Debug, Default)]
pub(crate) struct Counters {
    admitted: AtomicU64,
    rejected: AtomicU64,
    store_errors: AtomicU64,
    admitted_unchecked: AtomicU64,
    settle_errors: AtomicU64,
}

/// Settlements handed to the runtime and not finished yet.
#[derive(Debug, Default)]
pub(crate) struct InFlight {
    count: AtomicUsize,
    idle: Notify,
}

/// What every service of one [`LimitsLayer`](crate::LimitsLayer) shares: its configuration, counts and plans.
pub(crate) struct Shared {
    pub(crate) store: Arc<dyn LimitStore>,
    /// The policy in force and its plans, replaced whole by [`crate::LimitsLayer::set_policy`]: a call loads it
    /// once (no lock), and a call admitted before a swap keeps the plan it was admitted with.
    pub(crate) live: ArcSwap<Live>,
    pub(crate) prices: PriceTable,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) default_max_output_tokens: u32,
    pub(crate) chars_per_token: u32,
    pub(crate) on_store_error: StoreFailure,
    pub(crate) counters: Counters,
    pub(crate) settling: InFlight,
    pub(crate) next_ticket: AtomicU64,
}

/// A policy and the plans built from it.
#[derive(Debug, Default)]
pub(crate) struct Live {
    pub(crate) policy: Arc<LimitPolicy>,
    /// Per caller and model: what every call of theirs is counted in under this policy, resolved once.
    pub(crate) plans: PlanCache,
}

impl Live {
    /// `policy` with no plan built yet.
    pub(crate) fn new(policy: LimitPolicy) -> ArcSwap<Live> {
        ArcSwap::from_pointee(Live {
            policy: Arc::new(policy),
            plans: PlanCache::default(),
        })
    }
}

impl fmt::Debug for Shared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LimitsLayer")
            .field("store", &self.store)
            .field("policy", &self.live.load().policy)
            .field("prices", &self.prices)
            .field("clock", &self.clock)
            .field("default_max_output_tokens", &self.default_max_output_tokens)
            .field("chars_per_token", &self.chars_per_token)
            .field("on_store_error", &self.on_store_error)
            .finish_non_exhaustive()
    }
}

/// A copy of the configuration with fresh counters, plans and ticket numbers: what configuring a layer that was
/// already cloned gives (the clone keeps its own state), through `Arc::make_mut`.
impl Clone for Shared {
    fn clone(&self) -> Self {
        Shared {
            store: self.store.clone(),
            live: ArcSwap::from_pointee(Live {
                policy: self.live.load().policy.clone(),
                plans: PlanCache::default(),
            }),
            prices: self.prices.clone(),
            clock: self.clock.clone(),
            default_max_output_tokens: self.default_max_output_tokens,
            chars_per_token: self.chars_per_token,
            on_store_error: self.on_store_error,
            counters: Counters::default(),
            settling: InFlight::default(),
            next_ticket: AtomicU64::new(0),
        }
    }
}

impl Shared {
    /// The decision counters.
    pub(crate) fn stats(&self) -> LimitStats {
        let c = &self.counters;
        LimitStats {
            admitted: c.admitted.load(Ordering::Relaxed),
            rejected: c.rejected.load(Ordering::Relaxed),
            store_errors: c.store_errors.load(Ordering::Relaxed),
            admitted_unchecked: c.admitted_unchecked.load(Ordering::Relaxed),
            settle_errors: c.settle_errors.load(Ordering::Relaxed),
        }
    }

    /// Wait until every settlement handed to the runtime so far has been applied (or has failed).
    pub(crate) async fn settled(&self) {
        let settling = &self.settling;
        loop {
            let idle = settling.idle.notified();
            if settling.count.load(Ordering::SeqCst) == 0 {
                return;
            }
            idle.await;
        }
    }

    /// Build the lease of `request` (its ticket, unarmed): its caller's plan (scopes, counters, price; resolved on the caller's first
    /// call to the model and kept), its estimate, its start. Fails (without touching the store) when the
    /// estimate alone exceeds a limit, or a cost budget applies and the model has no price.
    pub(crate) fn prepare(
        self: &Arc<Self>,
        request: &ChatRequest,
        default_model: Option<&str>,
    ) -> Result<Lease, ChatError> {
        let caller = request.caller().map_or(ANONYMOUS, |c| c.as_str());
        let model = request.options.model.as_deref().or(default_model);
        let live = self.live.load();
        let plan = live.plans.get(caller, model, || {
            CallPlan::new(
                live.policy.scopes(caller, model),
                model,
                model.and_then(|m| self.prices.price(m)).copied(),
                |scope| self.store.resolve(&scope.key),
            )
        });
        if plan.unpriced {
            return Err(ChatError::new(
                ErrorKind::InvalidRequest,
                format!(
                    "caller {caller} has a cost budget and model {} has no price",
                    model.unwrap_or("(none named)")
                ),
            )
            .refused_before_sending());
        }
        let input_tokens = crate::estimate::estimate_input_tokens(request, self.chars_per_token);
        let output_tokens = u64::from(
            request
                .options
                .max_output_tokens
                .unwrap_or(self.default_max_output_tokens),
        );
        let estimate = Usage {
            input_tokens,
            output_tokens,
            ..Usage::default()
        };
        let reserved = Demand {
            input_tokens,
            output_tokens,
            cost: plan.price.map_or(Cost::ZERO, |p| plan::cost(&p, &estimate)),
        };
        if let Some((scope, kind, limit, amount)) = plan.exceeded_by(&reserved) {
            return Err(ChatError::new(
                ErrorKind::InvalidRequest,
                format!(
                    "the call's estimate ({}) exceeds the {kind} limit of {} ({}) on its own; lower \
                     max_output_tokens or shorten the prompt",
                    kind.amount(amount),
                    scope.key,
                    kind.amount(limit),
                ),
            )
            .refused_before_sending());
        }
        let ticket = Ticket::planned(
            self.next_ticket.fetch_add(1, Ordering::Relaxed),
            plan,
            self.clock.now_millis(),
            reserved,
        );
        Ok(Lease {
            shared: self.clone(),
            ticket,
            armed: false,
            prompt_tokens: input_tokens,
            usage: None,
            output_chars: 0,
            estimate: request.extensions.get::<EstimatedUsage>().cloned(),
        })
    }

    /// Apply the store's answer to a prepared call: `Ok(())` admitted (its lease now settles when the call
    /// ends; admitted unchecked after a store failure, it then charges what the call used), or the error to
    /// answer.
    #[inline]
    pub(crate) fn admitted(
        &self,
        lease: &mut Lease,
        answer: Result<Admission, LimitStoreError>,
    ) -> Result<(), ChatError> {
        // The usual answer inline; the others (logging, errors) out of line.
        match answer {
            Ok(Admission::Admitted) => {
                self.counters.admitted.fetch_add(1, Ordering::Relaxed);
                lease.arm();
                Ok(())
            }
            Ok(Admission::Rejected(rejection)) => self.not_admitted(lease, Ok(rejection)),
            Err(error) => self.not_admitted(lease, Err(error)),
        }
    }

    /// A refusal (`Ok`) or a store failure: the error to answer, or `Ok(())` to admit the call unchecked.
    #[cold]
    fn not_admitted(
        &self,
        lease: &mut Lease,
        answer: Result<Rejection, LimitStoreError>,
    ) -> Result<(), ChatError> {
        match answer {
            Ok(rejection) => {
                self.counters.rejected.fetch_add(1, Ordering::Relaxed);
                Err(ChatError::from(rejection).refused_before_sending())
            }
            Err(error) => {
                self.counters.store_errors.fetch_add(1, Ordering::Relaxed);
                match self.on_store_error {
                    StoreFailure::FailClosed => {
                        tracing::warn!(%error, "limits store failed; refusing the call (fail-closed)");
                        Err(ChatError::from(error).refused_before_sending())
                    }
                    StoreFailure::FailOpen => {
                        self.counters
                            .admitted_unchecked
                            .fetch_add(1, Ordering::Relaxed);
                        tracing::error!(%error, "limits store failed; admitting the call unchecked (fail-open)");
                        lease.arm_unchecked();
                        Ok(())
                    }
                }
            }
        }
    }

    /// A call dropped while the store was deciding: await the answer on the runtime and, if the store
    /// reserved, run `admitted` (which settles the call as one that sent nothing: its request stays counted;
    /// tokens, cost and the slot are given back).
    pub(crate) fn abandoned(
        self: &Arc<Self>,
        answer: BoxFuture<'static, Result<Admission, LimitStoreError>>,
        admitted: impl FnOnce() + Send + 'static,
    ) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            self.settle_failed(&LimitStoreError::new(
                "no Tokio runtime to settle a cancelled admission on",
            ));
            return;
        };
        let shared = self.clone();
        self.settling.count.fetch_add(1, Ordering::SeqCst);
        runtime.spawn(async move {
            if let Ok(Admission::Admitted) = answer.await {
                admitted();
            }
            // After the lease's settlement was handed out (a pending one counts itself).
            if shared.settling.count.fetch_sub(1, Ordering::SeqCst) == 1 {
                shared.settling.idle.notify_waiters();
            }
        });
    }

    fn apply_settlement(self: &Arc<Self>, ticket: &Ticket, actual: Demand) {
        match self.store.settle(ticket, &actual) {
            StoreReply::Ready(Ok(())) => {}
            StoreReply::Ready(Err(error)) => self.settle_failed(&error),
            StoreReply::Pending(future) => {
                let Ok(runtime) = tokio::runtime::Handle::try_current() else {
                    self.settle_failed(&LimitStoreError::new(
                        "no Tokio runtime to apply the settlement on",
                    ));
                    return;
                };
                self.settling.count.fetch_add(1, Ordering::SeqCst);
                let shared = self.clone();
                runtime.spawn(async move {
                    if let Err(error) = future.await {
                        shared.settle_failed(&error);
                    }
                    if shared.settling.count.fetch_sub(1, Ordering::SeqCst) == 1 {
                        shared.settling.idle.notify_waiters();
                    }
                });
            }
        }
    }

    fn settle_failed(&self, error: &LimitStoreError) {
        self.counters.settle_errors.fetch_add(1, Ordering::Relaxed);
        tracing::error!(%error, "limits store failed to settle a call; its reservation stays counted");
    }
}

/// A call's reservation: armed when the store admits the call, then settled exactly once (the `armed` flag is
/// cleared by the first settlement) with what the call was seen to use: when its stream ends or fails, when its
/// service call fails (nothing sent), or, from `Drop`, when it is dropped unsettled (a call that reached the
/// provider, charged what was seen of it).
pub(crate) struct Lease {
    shared: Arc<Shared>,
    ticket: Ticket,
    armed: bool,
    /// The prompt's estimated tokens (what a call cancelled before the usage report is charged).
    prompt_tokens: u64,
    /// The sum of the stream's usage events so far, if any arrived.
    pub(crate) usage: Option<Usage>,
    /// Characters of output seen so far (text, reasoning, tool-call arguments).
    pub(crate) output_chars: u64,
    /// Where an outer recording layer reads an estimated charge (the request's [`EstimatedUsage`], if any).
    estimate: Option<EstimatedUsage>,
}

impl fmt::Debug for Lease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lease")
            .field("ticket", &self.ticket)
            .field("armed", &self.armed)
            .field("usage", &self.usage)
            .field("output_chars", &self.output_chars)
            .finish_non_exhaustive()
    }
}

impl Lease {
    pub(crate) fn ticket(&self) -> &Ticket {
        &self.ticket
    }

    /// The store admitted the call: from now on it is settled.
    #[inline]
    pub(crate) fn arm(&mut self) {
        self.armed = true;
    }

    /// The store failed and the call goes ahead unchecked (fail-open): it reserved nothing, and when it ends
    /// its real usage is charged (a settlement against an empty reservation), so spend made while the store
    /// was failing still counts once it answers again.
    fn arm_unchecked(&mut self) {
        self.ticket = self.ticket.with_reserved(Demand::default());
        self.armed = true;
    }

    /// Replace the reservation by what was seen (once; later calls do nothing). `sent`: whether the provider may
    /// have processed the request (false only when the service call failed).
    #[inline]
    pub(crate) fn settle(&mut self, sent: bool) {
        if std::mem::take(&mut self.armed) {
            self.settle_now(sent);
        }
    }

    fn settle_now(&mut self, sent: bool) {
        let actual = self.actual(sent);
        self.shared.apply_settlement(&self.ticket, actual);
    }

    /// The usage to charge: the reported usage when there is one; otherwise, for a call that reached the
    /// provider, the estimated prompt and the output seen (left in the request's [`EstimatedUsage`], so the
    /// call's record carries what was charged); otherwise nothing.
    fn actual(&self, sent: bool) -> Demand {
        let usage = match self.usage {
            Some(usage) => usage,
            None if sent => {
                let estimate = Usage {
                    input_tokens: self.prompt_tokens,
                    output_tokens: self
                        .output_chars
                        .div_ceil(u64::from(self.shared.chars_per_token)),
                    ..Usage::default()
                };
                if let Some(slot) = &self.estimate {
                    slot.set(estimate);
                }
                estimate
            }
            None => Usage::default(),
        };
        Demand {
            input_tokens: usage.input_tokens,
            output_tokens: usage.output_tokens,
            cost: self
                .ticket
                .plan()
                .price
                .map_or(Cost::ZERO, |p| plan::cost(&p, &usage)),
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.settle(true);
    }
}
