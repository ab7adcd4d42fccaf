//! The line: a schedule, the calls waiting for it in arrival order, and whose
//! turn it is.
//!
//! Only the call at the front of the line ever consults the schedule about
//! the future: it computes when its permits are free, sleeps until then, and
//! records them when it goes. Calls behind it wait for a wake-up, not for a
//! time. So nothing is booked before it is granted: a call that leaves the
//! line (its future dropped) has taken nothing, and the next one moves up.
//! A call that finds the line empty and its permits free goes at once.

use std::collections::VecDeque;
use std::task::{Poll, Waker};

use super::jitter::JitterSource;
use super::schedule::Schedule;

/// What became of a call on arrival.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Arrival {
    /// Its permits were free and nobody was waiting: they are recorded.
    Granted,
    /// It waits in line with this ticket.
    Queued(u64),
}

/// What a call in line should do next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Turn {
    /// Its permits are recorded and it has left the line: go.
    Granted,
    /// It is at the front; its permits are free at this instant.
    SleepUntil(u64),
}

/// The outcome of [`Line::poll_turn`], and the call to wake (the new front)
/// once the lock is released.
#[derive(Debug)]
pub(crate) struct Step {
    pub(crate) turn: Poll<Turn>,
    pub(crate) wake: Option<Waker>,
}

#[derive(Debug)]
pub(crate) struct Line<S> {
    schedule: S,
    /// Waiting calls, oldest first; tickets increase along the line.
    queue: VecDeque<Entry>,
    next_ticket: u64,
    jitter: JitterSource,
}

#[derive(Debug)]
struct Entry {
    ticket: u64,
    permits: u64,
    /// Set while the call waits behind another one.
    waker: Option<Waker>,
    /// With jitter: the instant it may go, drawn when it first had to wait
    /// at the front (the permits' instant then, plus the extra wait).
    not_before: Option<u64>,
}

impl<S: Schedule> Line<S> {
    pub(crate) fn new(schedule: S, jitter: JitterSource) -> Self {
        Line {
            schedule,
            queue: VecDeque::new(),
            next_ticket: 0,
            jitter,
        }
    }

    pub(crate) fn set_jitter(&mut self, jitter: JitterSource) {
        self.jitter = jitter;
    }

    /// A call for `permits` arrives at `now`: it goes at once when nobody is
    /// waiting and the permits are free, and joins the back of the line
    /// otherwise.
    #[inline]
    pub(crate) fn arrive(&mut self, now: u64, permits: u64) -> Arrival {
        if self.queue.is_empty() && self.schedule.try_record(now, permits) {
            return Arrival::Granted;
        }
        self.enqueue(permits)
    }

    #[cold]
    fn enqueue(&mut self, permits: u64) -> Arrival {
        let ticket = self.next_ticket;
        self.next_ticket += 1;
        self.queue.push_back(Entry {
            ticket,
            permits,
            waker: None,
            not_before: None,
        });
        Arrival::Queued(ticket)
    }

    /// The call holding `ticket` (for `permits`) asks at `now` whether it may
    /// go. Behind another call it keeps `waker` to be woken when it reaches
    /// the front; at the front it learns when to go, or goes.
    pub(crate) fn poll_turn(&mut self, ticket: u64, permits: u64, now: u64, waker: &Waker) -> Step {
        match self.position(ticket) {
            Some(0) => self.front_turn(now),
            Some(i) => {
                let entry = &mut self.queue[i];
                if !entry.waker.as_ref().is_some_and(|w| w.will_wake(waker)) {
                    entry.waker = Some(waker.clone());
                }
                Step {
                    turn: Poll::Pending,
                    wake: None,
                }
            }
            // Not in line: it cannot happen (a call leaves the line only by
            // going or by being dropped), but if it did, the call waits for
            // its permits like a front call rather than go unrecorded.
            None => {
                let earliest = self.schedule.earliest(now, permits);
                let turn = if earliest <= now {
                    self.schedule.record(now, permits);
                    Turn::Granted
                } else {
                    Turn::SleepUntil(earliest)
                };
                Step {
                    turn: Poll::Ready(turn),
                    wake: None,
                }
            }
        }
    }

    fn front_turn(&mut self, now: u64) -> Step {
        let (permits, not_before) = match self.queue.front() {
            Some(front) => (front.permits, front.not_before),
            None => {
                return Step {
                    turn: Poll::Pending,
                    wake: None,
                }
            }
        };
        let earliest = self.schedule.earliest(now, permits);
        let mut due = earliest.max(not_before.unwrap_or(0));
        if earliest > now && not_before.is_none() && self.jitter.is_active() {
            due = earliest.saturating_add(self.jitter.draw());
            if let Some(front) = self.queue.front_mut() {
                front.not_before = Some(due);
            }
        }
        if due > now {
            return Step {
                turn: Poll::Ready(Turn::SleepUntil(due)),
                wake: None,
            };
        }
        self.schedule.record(now, permits);
        self.queue.pop_front();
        Step {
            turn: Poll::Ready(Turn::Granted),
            wake: self.queue.front_mut().and_then(|next| next.waker.take()),
        }
    }

    /// The call holding `ticket` leaves without its permits (its future was
    /// dropped). Returns the new front's waker when it was at the front.
    pub(crate) fn leave(&mut self, ticket: u64) -> Option<Waker> {
        let i = self.position(ticket)?;
        self.queue.remove(i);
        if i == 0 {
            self.queue.front_mut().and_then(|next| next.waker.take())
        } else {
            None
        }
    }

    /// How many calls are waiting.
    pub(crate) fn waiting(&self) -> usize {
        self.queue.len()
    }

    fn position(&self, ticket: u64) -> Option<usize> {
        self.queue
            .binary_search_by_key(&ticket, |entry| entry.ticket)
            .ok()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::task::Wake;

    use tollgate_core::Rate;

    use super::*;
    use crate::waiter::jitter::Jitter;
    use crate::waiter::GcraSchedule;

    const MS: u64 = 1_000_000;

    /// Counts its wake-ups.
    #[derive(Default)]
    struct Counter(AtomicUsize);

    impl Wake for Counter {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// 10 per second, bursts of 1: one permit every 100 ms.
    fn line() -> Line<GcraSchedule> {
        let schedule = GcraSchedule::with_burst(Rate::per_second(10).unwrap(), 1).unwrap();
        Line::new(schedule, JitterSource::new(Jitter::NONE))
    }

    fn queued(arrival: Arrival) -> u64 {
        match arrival {
            Arrival::Queued(ticket) => ticket,
            Arrival::Granted => panic!("expected to wait"),
        }
    }

    #[test]
    fn an_empty_line_grants_free_permits_at_once() {
        let mut line = line();
        assert_eq!(line.arrive(0, 1), Arrival::Granted);
        assert_eq!(line.waiting(), 0);
    }

    #[test]
    fn the_front_sleeps_until_its_permits_are_free_and_wakes_the_next() {
        let mut line = line();
        line.arrive(0, 1);
        let first = queued(line.arrive(0, 1));
        let second = queued(line.arrive(0, 1));
        let counter = Arc::new(Counter::default());
        let waker = Waker::from(Arc::clone(&counter));
        let step = line.poll_turn(second, 1, 0, &waker);
        assert_eq!(step.turn, Poll::Pending);
        let step = line.poll_turn(first, 1, 0, &waker);
        assert_eq!(step.turn, Poll::Ready(Turn::SleepUntil(100 * MS)));
        let step = line.poll_turn(first, 1, 100 * MS, &waker);
        assert_eq!(step.turn, Poll::Ready(Turn::Granted));
        step.wake.expect("the next call is woken").wake();
        assert_eq!(counter.0.load(Ordering::SeqCst), 1);
        let step = line.poll_turn(second, 1, 100 * MS, &waker);
        assert_eq!(step.turn, Poll::Ready(Turn::SleepUntil(200 * MS)));
    }

    #[test]
    fn a_call_arriving_behind_others_waits_even_when_permits_are_free() {
        let mut line = line();
        line.arrive(0, 1);
        let first = queued(line.arrive(0, 1));
        // At 100 ms a permit is free, but the first call has not gone yet.
        queued(line.arrive(100 * MS, 1));
        let step = line.poll_turn(first, 1, 100 * MS, Waker::noop());
        assert_eq!(step.turn, Poll::Ready(Turn::Granted));
    }

    #[test]
    fn leaving_the_front_wakes_the_next_and_takes_nothing() {
        let mut line = line();
        line.arrive(0, 1);
        let first = queued(line.arrive(0, 1));
        let second = queued(line.arrive(0, 1));
        let counter = Arc::new(Counter::default());
        line.poll_turn(second, 1, 0, &Waker::from(Arc::clone(&counter)));
        line.leave(first).expect("the next call is woken").wake();
        assert_eq!(counter.0.load(Ordering::SeqCst), 1);
        let step = line.poll_turn(second, 1, 100 * MS, Waker::noop());
        assert_eq!(step.turn, Poll::Ready(Turn::Granted));
        assert_eq!(line.waiting(), 0);
    }

    #[test]
    fn leaving_from_behind_wakes_nobody() {
        let mut line = line();
        line.arrive(0, 1);
        let first = queued(line.arrive(0, 1));
        let second = queued(line.arrive(0, 1));
        assert!(line.leave(second).is_none());
        assert!(line.leave(second).is_none());
        assert_eq!(line.waiting(), 1);
        assert_eq!(
            line.poll_turn(first, 1, 100 * MS, Waker::noop()).turn,
            Poll::Ready(Turn::Granted)
        );
    }

    #[test]
    fn jitter_is_drawn_once_and_only_when_the_front_must_wait() {
        let schedule = GcraSchedule::with_burst(Rate::per_second(10).unwrap(), 1).unwrap();
        let jitter = Jitter::up_to(std::time::Duration::from_millis(50)).with_seed(3);
        let mut line = Line::new(schedule, JitterSource::new(jitter));
        let mut draws = JitterSource::new(jitter);
        assert_eq!(line.arrive(0, 1), Arrival::Granted);
        let first = queued(line.arrive(0, 1));
        let due = 100 * MS + draws.draw();
        for _ in 0..3 {
            let step = line.poll_turn(first, 1, 10 * MS, Waker::noop());
            assert_eq!(step.turn, Poll::Ready(Turn::SleepUntil(due)));
        }
        let step = line.poll_turn(first, 1, due, Waker::noop());
        assert_eq!(step.turn, Poll::Ready(Turn::Granted));
        // Free on reaching the front: no jitter.
        let second = queued(line.arrive(due, 1));
        let step = line.poll_turn(second, 1, due + 100 * MS, Waker::noop());
        assert_eq!(step.turn, Poll::Ready(Turn::Granted));
    }
}
