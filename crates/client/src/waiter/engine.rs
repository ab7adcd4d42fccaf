//! The engine both waiters run: a schedule with a lock-free fast path, a
//! line of waiting calls, and a clock.
//!
//! A call arrives on the fast path: one compare-and-swap on a schedule's
//! word (GCRA's only word, or the head of the calling thread's ring lane)
//! takes its permits when nobody is waiting and they are free.
//! Otherwise it takes the line's mutex: permits that turn out to be free
//! (the fast path lost a race) are recorded there and the call goes;
//! a call that must wait joins the line and leaves the schedule's "calls
//! are waiting" flag raised, which fails every later fast path, so no later
//! call can pass it. Only the call at the front of the line consults the
//! schedule about the future: it computes when its permits are free, sleeps
//! until then, and records them when it goes; calls behind it wait for a
//! wake-up, not for a time. So nothing is booked before it is granted: a
//! call that leaves the line (its future dropped) has taken nothing, and the
//! next one moves up. The last call to leave the line opens the fast path
//! again.
//!
//! The fast path takes no lock; everything else happens under the line's
//! mutex, and wakers are called after it is released.

use std::future::poll_fn;
use std::sync::Arc;
use std::task::{Poll, Wake, Waker};
use std::thread::Thread;

use parking_lot::Mutex;

use super::error::TooManyPermits;
use super::jitter::{Jitter, JitterSource};
use super::line::Line;
use super::schedule::{Attempt, Schedule};
use crate::clock::WaitClock;

#[derive(Debug)]
pub(crate) struct Engine<S, C> {
    schedule: S,
    line: Mutex<Line>,
    clock: C,
    capacity: u64,
}

/// What a call in line should do next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Turn {
    /// Its permits are recorded and it has left the line: go.
    Granted,
    /// It is at the front; its permits are free at this instant.
    SleepUntil(u64),
}

impl<S: Schedule, C: WaitClock> Engine<S, C> {
    pub(crate) fn new(schedule: S, clock: C) -> Self {
        Engine {
            capacity: schedule.capacity(),
            schedule,
            line: Mutex::new(Line::new(JitterSource::new(Jitter::NONE))),
            clock,
        }
    }

    pub(crate) fn with_clock<D: WaitClock>(self, clock: D) -> Engine<S, D> {
        Engine {
            schedule: self.schedule,
            line: self.line,
            clock,
            capacity: self.capacity,
        }
    }

    pub(crate) fn set_jitter(&mut self, jitter: Jitter) {
        self.line.get_mut().set_jitter(JitterSource::new(jitter));
    }

    pub(crate) fn schedule(&self) -> &S {
        &self.schedule
    }

    pub(crate) fn clock(&self) -> &C {
        &self.clock
    }

    pub(crate) fn capacity(&self) -> u64 {
        self.capacity
    }

    pub(crate) fn waiting(&self) -> usize {
        self.line.lock().len()
    }

    pub(crate) async fn until_ready(&self) {
        if let Some(place) = self.arrive(1) {
            self.wait_in_line(place).await;
        }
    }

    pub(crate) async fn until_n_ready(&self, n: u64) -> Result<(), TooManyPermits> {
        self.validate(n)?;
        if n > 0 {
            if let Some(place) = self.arrive(n) {
                self.wait_in_line(place).await;
            }
        }
        Ok(())
    }

    pub(crate) fn wait_n(&self, n: u64) -> Result<(), TooManyPermits> {
        self.validate(n)?;
        if n > 0 {
            if let Some(place) = self.arrive(n) {
                self.block_in_line(place);
            }
        }
        Ok(())
    }

    fn validate(&self, n: u64) -> Result<(), TooManyPermits> {
        if n > self.capacity {
            return Err(TooManyPermits {
                requested: n,
                capacity: self.capacity,
            });
        }
        Ok(())
    }

    /// A call for `n` permits arrives: `None` when they were free and are
    /// recorded, its place in line otherwise.
    #[inline]
    fn arrive(&self, n: u64) -> Option<Place<'_, S, C>> {
        let now = self.clock.now();
        match self.schedule.try_take(now, n) {
            Attempt::Taken => None,
            Attempt::Busy | Attempt::Closed => self.join_line(now, n),
        }
    }

    #[cold]
    fn join_line(&self, now: u64, n: u64) -> Option<Place<'_, S, C>> {
        let mut line = self.line.lock();
        if line.is_empty() {
            // The line may have emptied since the fast path looked, or the
            // schedule may need work only the line can do.
            self.schedule.maintain(&line, now);
            if self.schedule.try_take(now, n) == Attempt::Taken {
                return None;
            }
            self.schedule.set_waiting(&line, true);
            // Permits free now (the fast path only lost a race, or read the
            // clock before another thread's newer reading) go at once,
            // without the lock ever being let go with the flag raised: a
            // call arriving meanwhile waits for the lock, not in line, so
            // no convoy of calls handing the line to one another forms
            // while nobody needs to wait.
            let now = now.max(self.clock.now());
            if self.schedule.earliest(&line, now, n) <= now {
                self.schedule.record(&line, now, n);
                self.schedule.set_waiting(&line, false);
                return None;
            }
        }
        Some(Place {
            engine: self,
            ticket: line.join(),
            permits: n,
            granted: false,
        })
    }

    async fn wait_in_line(&self, mut place: Place<'_, S, C>) {
        loop {
            let turn = poll_fn(|cx| place.poll_turn(cx.waker())).await;
            match turn {
                Turn::Granted => {
                    place.granted = true;
                    return;
                }
                Turn::SleepUntil(deadline) => self.clock.sleep_until(deadline).await,
            }
        }
    }

    fn block_in_line(&self, mut place: Place<'_, S, C>) {
        let waker = Waker::from(Arc::new(ThreadWaker(std::thread::current())));
        loop {
            match place.poll_turn(&waker) {
                Poll::Ready(Turn::Granted) => {
                    place.granted = true;
                    return;
                }
                Poll::Ready(Turn::SleepUntil(deadline)) => {
                    self.clock.sleep_blocking_until(deadline)
                }
                // Unparked when the call reaches the front; a spurious
                // wake-up just asks again.
                Poll::Pending => std::thread::park(),
            }
        }
    }
}

/// A call's place in line; dropping it before the call is granted leaves
/// the line, waking the next call when this one was at the front.
struct Place<'a, S: Schedule, C: WaitClock> {
    engine: &'a Engine<S, C>,
    ticket: u64,
    permits: u64,
    granted: bool,
}

impl<S: Schedule, C: WaitClock> Place<'_, S, C> {
    /// Asks whether the call may go: behind another call it keeps `waker`
    /// for its turn; at the front it learns when to go, or goes.
    fn poll_turn(&mut self, waker: &Waker) -> Poll<Turn> {
        let engine = self.engine;
        let now = engine.clock.now();
        let mut line = engine.line.lock();
        let Some(position) = line.position(self.ticket) else {
            // Not in line: cannot happen (a call leaves only by going or by
            // being dropped), but if it did, it would join again rather
            // than go unrecorded.
            if line.is_empty() {
                engine.schedule.set_waiting(&line, true);
            }
            self.ticket = line.join();
            return self.poll_turn_again(line, waker);
        };
        if position > 0 {
            line.set_waker(position, waker);
            return Poll::Pending;
        }
        let earliest = engine.schedule.earliest(&line, now, self.permits);
        let due = line.front_due(earliest, now);
        if due > now {
            return Poll::Ready(Turn::SleepUntil(due));
        }
        engine.schedule.record(&line, now, self.permits);
        let next = line.leave(0);
        if line.is_empty() {
            engine.schedule.set_waiting(&line, false);
        }
        drop(line);
        wake(next);
        Poll::Ready(Turn::Granted)
    }

    #[cold]
    fn poll_turn_again(
        &mut self,
        line: parking_lot::MutexGuard<'_, Line>,
        waker: &Waker,
    ) -> Poll<Turn> {
        drop(line);
        self.poll_turn(waker)
    }
}

impl<S: Schedule, C: WaitClock> Drop for Place<'_, S, C> {
    fn drop(&mut self) {
        if self.granted {
            return;
        }
        let mut line = self.engine.line.lock();
        let Some(position) = line.position(self.ticket) else {
            return;
        };
        let next = line.leave(position);
        if line.is_empty() {
            self.engine.schedule.set_waiting(&line, false);
        }
        drop(line);
        wake(next);
    }
}

fn wake(waker: Option<Waker>) {
    if let Some(waker) = waker {
        waker.wake();
    }
}

/// Wakes a thread blocked in line.
struct ThreadWaker(Thread);

impl Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

    use super::*;
    use crate::clock::ManualClock;

    /// A schedule whose fast path always loses (as one racing another
    /// thread does) though its permits are always free; it counts what the
    /// line records.
    #[derive(Debug, Default)]
    struct AlwaysRacing {
        recorded: AtomicU64,
    }

    impl Schedule for AlwaysRacing {
        fn capacity(&self) -> u64 {
            10
        }
        fn try_take(&self, _now: u64, _n: u64) -> Attempt {
            Attempt::Busy
        }
        fn maintain(&self, _held: &Line, _now: u64) {}
        fn set_waiting(&self, _held: &Line, _waiting: bool) {}
        fn earliest(&self, _held: &Line, now: u64, _n: u64) -> u64 {
            now
        }
        fn record(&self, _held: &Line, _at: u64, n: u64) {
            self.recorded.fetch_add(n, Relaxed);
        }
    }

    #[test]
    fn free_permits_go_from_the_lock_without_a_place_in_line() {
        let engine = Engine::new(AlwaysRacing::default(), ManualClock::new(0));
        assert!(engine.arrive(3).is_none(), "no place in line was taken");
        assert_eq!(engine.schedule().recorded.load(Relaxed), 3);
        assert_eq!(engine.waiting(), 0);
    }
}
