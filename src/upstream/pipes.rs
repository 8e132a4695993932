//! Room in a stdio backend's pipes for the messages that cross them.
//!
//! A Linux pipe holds 64 KiB by default: a larger message crosses it in pieces, each
//! a write that blocks until the reader drains it and a wake-up on both sides (a
//! 100 KB call costs Gantry a third more CPU than it needs to; BENCHMARKS.md). A
//! pipe that has to carry a message larger than it is grown (`F_SETPIPE_SZ`) to fit
//! the next one: the next power of two, at most `/proc/sys/fs/pipe-max-size`.
//!
//! Pipe pages count against a per-user limit (`/proc/sys/fs/pipe-user-pages-soft`,
//! 64 MiB by default) over which the kernel refuses to grow pipes and makes every
//! new pipe of that user 8 KiB, its backends' and every other program's. So the
//! growth is spent from a budget shared by the whole process ([`BUDGET`]), given
//! back when a pipe closes; a pipe the kernel or the budget refuses stays as it is.
//! Pipes that only carry small messages never change.

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicUsize, Ordering};

/// What a pipe holds when nobody has grown it.
const DEFAULT: usize = 64 * 1024;

/// Bytes of pipe capacity beyond [`DEFAULT`] all of Gantry's backend pipes may hold
/// together: a quarter of the kernel's default per-user limit, enough for eight
/// backends with both pipes at 1 MiB.
pub(crate) const BUDGET: usize = 16 * 1024 * 1024;

/// Growth granted and not given back, over all pipes.
static GRANTED: AtomicUsize = AtomicUsize::new(0);

/// The most one pipe may hold (`pipe-max-size`, 1 MiB by default), read once.
fn max_size() -> usize {
    static MAX: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *MAX.get_or_init(|| {
        std::fs::read_to_string("/proc/sys/fs/pipe-max-size")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(1024 * 1024)
    })
}

/// One end of a backend's pipe, as Gantry holds it, and the room it has.
pub(crate) struct PipeRoom {
    /// The descriptor of Gantry's end. Valid while the owner of that end lives; the
    /// owner holds this next to it and drops both together.
    fd: RawFd,
    /// The capacity the pipe has now, as far as Gantry knows.
    size: usize,
    /// The growth this pipe holds from the budget.
    granted: usize,
    /// Set once the kernel refused: not asked again.
    refused: bool,
}

impl PipeRoom {
    /// Gantry's end `fd` of a pipe it created (so at the default size).
    pub(crate) fn new(fd: RawFd) -> Self {
        Self {
            fd,
            size: DEFAULT,
            granted: 0,
            refused: false,
        }
    }

    /// Makes room for a message of `len` bytes if the pipe is smaller, as far as the
    /// budget and the kernel allow. Costs a comparison when the message fits.
    pub(crate) fn fit(&mut self, len: usize) {
        if len <= self.size || self.refused {
            return;
        }
        let Some(want) = grown_size(len, self.size, max_size()) else {
            return;
        };
        let more = want.saturating_sub(DEFAULT + self.granted);
        if !claim(more) {
            return;
        }
        let asked = i32::try_from(want).unwrap_or(i32::MAX);
        match nix::fcntl::fcntl(self.fd, nix::fcntl::FcntlArg::F_SETPIPE_SZ(asked)) {
            // A power of two of at least a page is what the kernel makes it.
            Ok(_) => {
                self.granted += more;
                self.size = want;
            }
            Err(e) => {
                GRANTED.fetch_sub(more, Ordering::AcqRel);
                self.refused = true;
                tracing::debug!(error = %e, bytes = want, "backend pipe not grown");
            }
        }
    }

    /// The pipe's capacity as far as Gantry knows.
    #[cfg(test)]
    pub(crate) fn size(&self) -> usize {
        self.size
    }
}

impl Drop for PipeRoom {
    fn drop(&mut self) {
        GRANTED.fetch_sub(self.granted, Ordering::AcqRel);
    }
}

/// The size a pipe of `size` grows to for a message of `len` bytes: the next power
/// of two, at most `max`; `None` if that is no larger than it is.
fn grown_size(len: usize, size: usize, max: usize) -> Option<usize> {
    let want = len.checked_next_power_of_two().unwrap_or(max).min(max);
    (want > size).then_some(want)
}

/// Takes `bytes` from the budget, or nothing if it has not that much left.
fn claim(bytes: usize) -> bool {
    GRANTED
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |g| {
            g.checked_add(bytes).filter(|&total| total <= BUDGET)
        })
        .is_ok()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use std::os::fd::AsRawFd;

    /// The capacity the kernel reports for `fd`.
    fn capacity(fd: RawFd) -> usize {
        let n = nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_GETPIPE_SZ).unwrap();
        usize::try_from(n).unwrap()
    }

    #[test]
    fn sizes_are_powers_of_two_up_to_the_cap() {
        let max = 1 << 20;
        assert_eq!(grown_size(70_000, DEFAULT, max), Some(128 * 1024));
        assert_eq!(grown_size(128 * 1024, DEFAULT, max), Some(128 * 1024));
        assert_eq!(grown_size(5_000_000, DEFAULT, max), Some(max));
        assert_eq!(grown_size(usize::MAX, DEFAULT, max), Some(max));
        assert_eq!(grown_size(300_000, 512 * 1024, max), None);
        assert_eq!(grown_size(5_000_000, max, max), None);
    }

    /// One test for everything that touches the process-wide budget, so that no
    /// other test moves it meanwhile.
    #[test]
    fn a_pipe_grows_to_fit_within_the_budget_and_gives_it_back() {
        let (r, w) = nix::unistd::pipe().unwrap();
        assert_eq!(capacity(w.as_raw_fd()), DEFAULT);
        let mut room = PipeRoom::new(w.as_raw_fd());
        room.fit(60_000);
        assert_eq!(
            capacity(w.as_raw_fd()),
            DEFAULT,
            "a message that fits changes nothing"
        );
        room.fit(100_000);
        assert_eq!(capacity(r.as_raw_fd()), 128 * 1024);
        assert_eq!(room.size(), 128 * 1024);
        assert_eq!(GRANTED.load(Ordering::Acquire), 64 * 1024);
        room.fit(10_000_000);
        assert_eq!(capacity(w.as_raw_fd()), max_size());
        assert_eq!(GRANTED.load(Ordering::Acquire), max_size() - DEFAULT);

        // Pipes past the budget stay as they are; a closed pipe gives its growth back.
        let pipes: Vec<_> = (0..20).map(|_| nix::unistd::pipe().unwrap()).collect();
        let mut rooms: Vec<_> = pipes
            .iter()
            .map(|(_, w)| PipeRoom::new(w.as_raw_fd()))
            .collect();
        for room in &mut rooms {
            room.fit(10_000_000);
        }
        assert!(GRANTED.load(Ordering::Acquire) <= BUDGET);
        let grown = pipes
            .iter()
            .filter(|(_, w)| capacity(w.as_raw_fd()) > DEFAULT)
            .count();
        assert_eq!(grown, BUDGET / (max_size() - DEFAULT) - 1);
        drop(rooms);
        drop(room);
        assert_eq!(GRANTED.load(Ordering::Acquire), 0);
    }
}
