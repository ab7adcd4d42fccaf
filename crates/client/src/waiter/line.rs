//! The line: calls waiting for permits, in arrival order, with the wakers
//! that tell the next one its turn has come and the jitter each drew.

use std::collections::VecDeque;
use std::task::Waker;

use super::jitter::JitterSource;

#[derive(Debug)]
pub(crate) struct Line {
    /// Waiting calls, oldest first; tickets increase along the line.
    queue: VecDeque<Entry>,
    next_ticket: u64,
    jitter: JitterSource,
}

#[derive(Debug)]
struct Entry {
    ticket: u64,
    /// Set while the call waits behind another one.
    waker: Option<Waker>,
    /// With jitter: the instant the call may go, drawn when it first had to
    /// wait at the front.
    not_before: Option<u64>,
}

impl Line {
    pub(crate) fn new(jitter: JitterSource) -> Self {
        Line {
            queue: VecDeque::new(),
            next_ticket: 0,
            jitter,
        }
    }

    pub(crate) fn set_jitter(&mut self, jitter: JitterSource) {
        self.jitter = jitter;
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// How many calls are waiting.
    pub(crate) fn len(&self) -> usize {
        self.queue.len()
    }

    /// A call joins the back of the line; its ticket.
    pub(crate) fn join(&mut self) -> u64 {
        let ticket = self.next_ticket;
        self.next_ticket += 1;
        self.queue.push_back(Entry {
            ticket,
            waker: None,
            not_before: None,
        });
        ticket
    }

    /// Where the call holding `ticket` stands (0 is the front).
    pub(crate) fn position(&self, ticket: u64) -> Option<usize> {
        self.queue
            .binary_search_by_key(&ticket, |entry| entry.ticket)
            .ok()
    }

    /// Keeps `waker` to wake the call at `position` when it reaches the
    /// front.
    pub(crate) fn set_waker(&mut self, position: usize, waker: &Waker) {
        if let Some(entry) = self.queue.get_mut(position) {
            if !entry.waker.as_ref().is_some_and(|w| w.will_wake(waker)) {
                entry.waker = Some(waker.clone());
            }
        }
    }

    /// When the front call may go, given that its permits are free at
    /// `earliest`: then, or with jitter, up to the bound later. The extra
    /// wait is drawn once, the first time the call has to wait for time.
    pub(crate) fn front_due(&mut self, earliest: u64, now: u64) -> u64 {
        let Some(front) = self.queue.front_mut() else {
            return earliest;
        };
        match front.not_before {
            Some(not_before) => earliest.max(not_before),
            None if earliest > now && self.jitter.is_active() => {
                let due = earliest.saturating_add(self.jitter.draw());
                front.not_before = Some(due);
                due
            }
            None => earliest,
        }
    }

    /// The call at `position` leaves the line; when it was at the front,
    /// the new front's waker, to wake once the lock is released.
    pub(crate) fn leave(&mut self, position: usize) -> Option<Waker> {
        self.queue.remove(position);
        if position == 0 {
            self.queue.front_mut().and_then(|next| next.waker.take())
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::waiter::jitter::Jitter;

    fn line() -> Line {
        Line::new(JitterSource::new(Jitter::NONE))
    }

    #[test]
    fn calls_stand_in_arrival_order_and_leave_from_anywhere() {
        let mut line = line();
        let tickets: Vec<u64> = (0..4).map(|_| line.join()).collect();
        assert_eq!(line.position(tickets[2]), Some(2));
        assert!(line.leave(1).is_none());
        assert_eq!(line.position(tickets[1]), None);
        assert_eq!(line.position(tickets[2]), Some(1));
        assert_eq!(line.len(), 3);
    }

    #[test]
    fn leaving_the_front_hands_over_the_next_waker() {
        let mut line = line();
        line.join();
        line.join();
        line.set_waker(1, Waker::noop());
        assert!(line.leave(0).is_some());
        assert!(line.leave(0).is_none());
        assert!(line.is_empty());
    }

    #[test]
    fn jitter_is_drawn_once_and_only_when_the_front_must_wait() {
        let jitter = Jitter::up_to(Duration::from_nanos(50)).with_seed(3);
        let mut line = Line::new(JitterSource::new(jitter));
        let mut draws = JitterSource::new(jitter);
        line.join();
        // Free already: no jitter.
        assert_eq!(line.front_due(100, 100), 100);
        let due = 200 + draws.draw();
        assert_eq!(line.front_due(200, 100), due);
        // The clock moved on: the draw stays.
        assert_eq!(line.front_due(150, 150), due);
        assert_eq!(line.front_due(due + 5, due + 5), due + 5);
    }
}
