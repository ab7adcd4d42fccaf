//! Time that moves only when told to: [`ManualClock`], for tests.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use parking_lot::{Condvar, Mutex, MutexGuard};
use tollgate_core::time::{duration_to_nanos, Clock};

use super::WaitClock;

/// A clock for tests: it moves only when the test moves it, and wakes every
/// sleeper (async or blocking) whose deadline it reaches, exactly then.
///
/// Cloning gives another handle on the same clock, so a test keeps one and
/// hands the other to a waiter.
///
/// In the default mode a sleep waits until the test calls
/// [`advance`](Self::advance) or [`advance_to`](Self::advance_to); the test
/// sees what is waiting through [`next_deadline`](Self::next_deadline) and
/// [`wait_for_sleeper`](Self::wait_for_sleeper). An
/// [`auto_advancing`](Self::auto_advancing) clock instead jumps to a
/// sleeper's deadline as soon as it sleeps, which suits a test that drives one
/// waiter from one task or thread: it runs straight through, at the exact
/// instants the waiter chose.
///
/// ```
/// use tollgate_client::clock::{Clock, ManualClock, WaitClock};
///
/// let clock = ManualClock::auto_advancing(1_000);
/// clock.sleep_blocking_until(5_000);
/// assert_eq!(clock.now(), 5_000);
/// ```
#[derive(Debug, Clone)]
pub struct ManualClock {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    state: Mutex<State>,
    /// Signalled when time moves or a sleeper arrives.
    changed: Condvar,
    auto_advance: bool,
}

#[derive(Debug)]
struct State {
    now: u64,
    sleepers: Vec<Sleeper>,
    next_id: u64,
}

#[derive(Debug)]
struct Sleeper {
    id: u64,
    deadline: u64,
    /// `None` for a thread in [`ManualClock::sleep_blocking_until`], which
    /// the condition variable wakes instead.
    waker: Option<Waker>,
}

impl ManualClock {
    /// A clock reading `now` that moves only when the test moves it.
    pub fn new(now: u64) -> Self {
        Self::with_mode(now, false)
    }

    /// A clock reading `now` that jumps to a sleeper's deadline as soon as it
    /// sleeps.
    pub fn auto_advancing(now: u64) -> Self {
        Self::with_mode(now, true)
    }

    fn with_mode(now: u64, auto_advance: bool) -> Self {
        ManualClock {
            shared: Arc::new(Shared {
                state: Mutex::new(State {
                    now,
                    sleepers: Vec::new(),
                    next_id: 0,
                }),
                changed: Condvar::new(),
                auto_advance,
            }),
        }
    }

    /// Moves the clock forward by `by`, waking every sleeper it reaches.
    pub fn advance(&self, by: Duration) {
        let state = self.shared.state.lock();
        let to = state.now.saturating_add(duration_to_nanos(by));
        self.shared.move_to(state, to);
    }

    /// Moves the clock to `instant` (never backwards), waking every sleeper
    /// it reaches.
    pub fn advance_to(&self, instant: u64) {
        let state = self.shared.state.lock();
        self.shared.move_to(state, instant);
    }

    /// The earliest deadline anything is sleeping until, if anything sleeps.
    pub fn next_deadline(&self) -> Option<u64> {
        self.shared.state.lock().next_deadline()
    }

    /// How many sleeps are pending.
    pub fn sleepers(&self) -> usize {
        self.shared.state.lock().sleepers.len()
    }

    /// Blocks until something sleeps on this clock, and returns the earliest
    /// deadline. For tests that drive blocking waiters from another thread.
    pub fn wait_for_sleeper(&self) -> u64 {
        let mut state = self.shared.state.lock();
        loop {
            if let Some(deadline) = state.next_deadline() {
                return deadline;
            }
            self.shared.changed.wait(&mut state);
        }
    }
}

impl Shared {
    /// Sets the time to `to` (when later), wakes the sleepers that are due,
    /// and releases the lock before waking anything.
    fn move_to(&self, mut state: MutexGuard<'_, State>, to: u64) {
        state.now = state.now.max(to);
        let now = state.now;
        let due: Vec<Waker> = state
            .sleepers
            .iter_mut()
            .filter(|s| s.deadline <= now)
            .filter_map(|s| s.waker.take())
            .collect();
        drop(state);
        self.changed.notify_all();
        due.into_iter().for_each(Waker::wake);
    }
}

impl State {
    fn next_deadline(&self) -> Option<u64> {
        self.sleepers.iter().map(|s| s.deadline).min()
    }

    fn register(&mut self, deadline: u64, waker: Option<Waker>) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.sleepers.push(Sleeper {
            id,
            deadline,
            waker,
        });
        id
    }

    fn deregister(&mut self, id: u64) {
        self.sleepers.retain(|s| s.id != id);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> u64 {
        self.shared.state.lock().now
    }
}

impl WaitClock for ManualClock {
    type Sleep = ManualSleep;

    fn sleep_until(&self, deadline: u64) -> ManualSleep {
        ManualSleep {
            shared: Arc::clone(&self.shared),
            deadline,
            id: None,
        }
    }

    fn sleep_blocking_until(&self, deadline: u64) {
        let mut state = self.shared.state.lock();
        if state.now >= deadline {
            return;
        }
        if self.shared.auto_advance {
            self.shared.move_to(state, deadline);
            return;
        }
        let id = state.register(deadline, None);
        self.shared.changed.notify_all();
        while state.now < deadline {
            self.shared.changed.wait(&mut state);
        }
        state.deregister(id);
    }
}

/// The future of [`ManualClock::sleep_until`].
#[derive(Debug)]
pub struct ManualSleep {
    shared: Arc<Shared>,
    deadline: u64,
    /// Set while registered as a sleeper.
    id: Option<u64>,
}

impl Future for ManualSleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let shared = Arc::clone(&self.shared);
        let mut state = shared.state.lock();
        if state.now >= self.deadline || shared.auto_advance {
            if let Some(id) = self.id.take() {
                state.deregister(id);
            }
            shared.move_to(state, self.deadline);
            return Poll::Ready(());
        }
        match self.id {
            Some(id) => {
                if let Some(sleeper) = state.sleepers.iter_mut().find(|s| s.id == id) {
                    sleeper.waker = Some(cx.waker().clone());
                }
            }
            None => {
                self.id = Some(state.register(self.deadline, Some(cx.waker().clone())));
                drop(state);
                shared.changed.notify_all();
            }
        }
        Poll::Pending
    }
}

impl Drop for ManualSleep {
    fn drop(&mut self) {
        if let Some(id) = self.id.take() {
            self.shared.state.lock().deregister(id);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::task::Waker;

    use super::*;

    fn poll(sleep: &mut ManualSleep) -> Poll<()> {
        Pin::new(sleep).poll(&mut Context::from_waker(Waker::noop()))
    }

    #[test]
    fn a_sleep_ends_exactly_at_its_deadline() {
        let clock = ManualClock::new(100);
        let mut sleep = clock.sleep_until(250);
        assert!(poll(&mut sleep).is_pending());
        assert_eq!(clock.next_deadline(), Some(250));
        clock.advance(Duration::from_nanos(149));
        assert!(poll(&mut sleep).is_pending());
        clock.advance(Duration::from_nanos(1));
        assert!(poll(&mut sleep).is_ready());
        assert_eq!(clock.sleepers(), 0);
        assert_eq!(clock.now(), 250);
    }

    #[test]
    fn a_dropped_sleep_is_no_longer_waited_for() {
        let clock = ManualClock::new(0);
        let mut sleep = clock.sleep_until(10);
        assert!(poll(&mut sleep).is_pending());
        drop(sleep);
        assert_eq!(clock.next_deadline(), None);
    }

    #[test]
    fn time_never_moves_backwards() {
        let clock = ManualClock::new(50);
        clock.advance_to(40);
        assert_eq!(clock.now(), 50);
    }

    #[test]
    fn auto_advancing_jumps_to_the_deadline() {
        let clock = ManualClock::auto_advancing(0);
        let mut sleep = clock.sleep_until(70);
        assert!(poll(&mut sleep).is_ready());
        assert_eq!(clock.now(), 70);
        clock.sleep_blocking_until(30);
        assert_eq!(clock.now(), 70);
    }

    #[test]
    fn a_blocked_thread_wakes_when_the_test_advances() {
        let clock = ManualClock::new(0);
        let sleeper = clock.clone();
        let thread = std::thread::spawn(move || {
            sleeper.sleep_blocking_until(1_000);
            sleeper.now()
        });
        assert_eq!(clock.wait_for_sleeper(), 1_000);
        clock.advance_to(999);
        assert_eq!(clock.sleepers(), 1);
        clock.advance_to(1_000);
        assert_eq!(thread.join().unwrap(), 1_000);
        assert_eq!(clock.sleepers(), 0);
    }
}
