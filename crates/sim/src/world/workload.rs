//! The workload: which user requests start when. Open-loop requests arrive at the times of the
//! shared [`ArrivalSchedule`](tailguard_model::ArrivalSchedule) (the load generator's too);
//! closed-loop clients send their next request when their last one ended and their think time
//! passed. Sending stops at the run's horizon or measured-request count.

use super::{Event, Owner, World};
use std::time::Duration;
use tailguard_model::replica::child_key;
use tailguard_policy::Outcome;

/// A closed-loop client whose request ended at the instant it started waits this long before its
/// next one, so a balancer that drops everything cannot spin virtual time to a halt.
const MIN_CYCLE: Duration = Duration::from_millis(1);

impl World {
    /// The next open-loop request is due: sends it and schedules the one after.
    pub(super) fn arrival(&mut self) {
        if self.may_send() {
            self.start_user(None);
            let arrivals = self.arrivals.as_mut().expect("arrivals only in open loop");
            arrivals.advance();
            self.events.push(arrivals.peek(), Event::Arrival);
        }
    }

    /// Closed-loop client `client` is ready to send its next request.
    pub(super) fn client_ready(&mut self, client: u32) {
        if self.may_send() {
            self.start_user(Some(client));
        }
    }

    /// Whether the workload may send another request now (and records when it stops).
    pub(super) fn may_send(&mut self) -> bool {
        let within_time = self.send_until.is_none_or(|end| self.now < end);
        let within_count = self.measured_limit.is_none_or(|n| self.measured_sent < n);
        let ok = within_time && within_count && self.stopped_sending.is_none();
        if !ok && self.stopped_sending.is_none() {
            self.stopped_sending = Some(self.now);
        }
        ok
    }

    /// Starts a user request to the workload's target (from closed-loop client `client`, if any).
    pub(super) fn start_user(&mut self, client: Option<u32>) {
        let measured = self.now >= self.warmup;
        if measured {
            self.measured_sent += 1;
        }
        let (policy, callee, idempotent) = (self.user_policy, self.target, self.idempotent);
        self.started += 1;
        let draws = child_key(0, self.started);
        let route = self.services[callee as usize].route_of(0, draws);
        self.start_call(Owner::User { client }, policy, callee, idempotent, measured, draws, route);
    }

    /// A user request (of the target's route `route`, if any) ended: records it if measured,
    /// and lets its closed-loop client think.
    pub(super) fn user_done(
        &mut self,
        client: Option<u32>,
        measured: bool,
        route: Option<usize>,
        outcome: Outcome,
        latency: Duration,
    ) {
        if measured {
            self.metrics.request(outcome, latency, route);
        }
        if let Some(client) = client {
            let pause = if latency.is_zero() { self.think.max(MIN_CYCLE) } else { self.think };
            self.events.push(self.now + pause, Event::ClientReady { client });
        }
    }
}
