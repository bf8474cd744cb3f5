//! [`Clock`]: the wall clock, in Unix milliseconds, that commit times (`$currentDate`, the
//! commit log, mutation-id and trigger-task ages) are read from, and that the server reads for
//! token expiry and trigger retry times. The system clock in production; a manual clock that a
//! test advances, so tests of ages and expiry neither sleep nor depend on the machine's speed.
//!
//! It does not replace monotonic time: timeouts measured on `Instant` (storage waits, the live
//! feed's wake-ups) stay there. Only instants that are compared with a stored or signed wall
//! time come from here.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A cheap cloneable handle on a wall clock. `Clock::default()` is the system clock.
#[derive(Clone, Default)]
pub struct Clock {
    /// `None`: the system clock. Shared, so every clone of a manual clock sees each advance.
    manual: Option<Arc<Manual>>,
}

struct Manual {
    now_ms: AtomicU64,
    /// Tasks waiting in [`Clock::advanced`]. Woken and cleared on each advance; a task polling
    /// again is not added twice, so the list stays as long as the number of waiting tasks.
    wakers: Mutex<Vec<Waker>>,
}

impl Clock {
    /// The system clock (`SystemTime::now`).
    pub fn system() -> Clock {
        Clock::default()
    }

    /// A clock that reads `start_ms` until [`advance`](Clock::advance)d.
    pub fn manual(start_ms: u64) -> Clock {
        Clock {
            manual: Some(Arc::new(Manual {
                now_ms: AtomicU64::new(start_ms),
                wakers: Mutex::new(Vec::new()),
            })),
        }
    }

    /// A manual clock starting at the system clock's present reading.
    pub fn manual_at_now() -> Clock {
        Clock::manual(Clock::system().now_ms())
    }

    pub fn is_manual(&self) -> bool {
        self.manual.is_some()
    }

    /// Now, in Unix milliseconds (0 for a system clock set before 1970).
    pub fn now_ms(&self) -> u64 {
        match &self.manual {
            Some(m) => m.now_ms.load(Ordering::Acquire),
            None => SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
        }
    }

    /// Moves a manual clock forward by `by` and wakes every [`advanced`](Clock::advanced)
    /// waiter. Panics on the system clock: only a test advances time, and only its own clock.
    pub fn advance(&self, by: Duration) {
        let m = self
            .manual
            .as_ref()
            .expect("only a manual clock can be advanced");
        m.now_ms.fetch_add(by.as_millis() as u64, Ordering::AcqRel);
        let wakers = std::mem::take(&mut *m.wakers.lock().unwrap_or_else(|p| p.into_inner()));
        for w in wakers {
            w.wake();
        }
    }

    /// A future that completes once a manual clock reads later than it does now; on the system
    /// clock it never completes (real time needs no wake-up: wait on a timer for it). Anything
    /// that sleeps until a wall-clock instant selects on both, so a test's advance is seen at
    /// once. Runtime-agnostic: it uses only `std`'s wakers.
    pub fn advanced(&self) -> Advanced {
        Advanced {
            from_ms: self.now_ms(),
            manual: self.manual.clone(),
        }
    }
}

impl fmt::Debug for Clock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.manual {
            Some(m) => write!(f, "Clock::manual({})", m.now_ms.load(Ordering::Acquire)),
            None => f.write_str("Clock::system()"),
        }
    }
}

/// See [`Clock::advanced`].
pub struct Advanced {
    from_ms: u64,
    manual: Option<Arc<Manual>>,
}

impl Future for Advanced {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let Some(m) = &self.manual else {
            return Poll::Pending;
        };
        if m.now_ms.load(Ordering::Acquire) != self.from_ms {
            return Poll::Ready(());
        }
        let mut wakers = m.wakers.lock().unwrap_or_else(|p| p.into_inner());
        // Again under the lock: an advance stores the time before it takes the wakers, so
        // either this sees the new time or the advance sees this waker.
        if m.now_ms.load(Ordering::Acquire) != self.from_ms {
            return Poll::Ready(());
        }
        if !wakers.iter().any(|w| w.will_wake(cx.waker())) {
            wakers.push(cx.waker().clone());
        }
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_clock_is_the_system_clock() {
        let c = Clock::default();
        assert!(!c.is_manual());
        let before = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        let now = c.now_ms();
        let after = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        assert!(
            before <= now && now <= after,
            "{before} <= {now} <= {after}"
        );
    }

    #[test]
    fn a_manual_clock_moves_only_when_advanced_and_every_clone_sees_it() {
        let c = Clock::manual(1_000);
        let c2 = c.clone();
        assert_eq!(c.now_ms(), 1_000);
        std::thread::sleep(Duration::from_millis(2));
        assert_eq!(c2.now_ms(), 1_000);
        c2.advance(Duration::from_millis(250));
        assert_eq!(c.now_ms(), 1_250);
    }

    #[test]
    #[should_panic(expected = "only a manual clock")]
    fn the_system_clock_cannot_be_advanced() {
        Clock::system().advance(Duration::from_millis(1));
    }

    /// `advanced` completes after an advance from another thread, and not before.
    #[test]
    fn advanced_wakes_its_waiter() {
        use std::sync::atomic::AtomicBool;
        use std::task::Wake;
        struct Flag(AtomicBool, std::thread::Thread);
        impl Wake for Flag {
            fn wake(self: Arc<Self>) {
                self.0.store(true, Ordering::Release);
                self.1.unpark();
            }
        }
        let c = Clock::manual(0);
        let flag = Arc::new(Flag(AtomicBool::new(false), std::thread::current()));
        let waker = Waker::from(Arc::clone(&flag));
        let mut cx = Context::from_waker(&waker);
        let mut fut = c.advanced();
        assert!(Pin::new(&mut fut).poll(&mut cx).is_pending());
        assert!(
            Pin::new(&mut fut).poll(&mut cx).is_pending(),
            "no double waker"
        );
        let c2 = c.clone();
        let t = std::thread::spawn(move || c2.advance(Duration::from_millis(5)));
        while !flag.0.load(Ordering::Acquire) {
            std::thread::park_timeout(Duration::from_millis(100));
        }
        t.join().unwrap();
        assert!(Pin::new(&mut fut).poll(&mut cx).is_ready());
        let mut system = Clock::system().advanced();
        assert!(Pin::new(&mut system).poll(&mut cx).is_pending());
    }
}
