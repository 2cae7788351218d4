//! Sleeping to the kernel timer's precision. tokio's timer wheel ticks every millisecond and
//! rounds a deadline up to the next tick, so every sleep ran 0.5–1 ms long: 3–7 % on a 15 ms work
//! time (examples/speculative.yaml), which the lab then reported against the simulator's exact
//! times. On Linux a `timerfd` fires at the nanosecond deadline and wakes the runtime's epoll
//! directly; elsewhere, or if the timerfd cannot be made, tokio's sleep is used.

use std::time::Duration;

/// Completes `duration` from now.
pub async fn sleep(duration: Duration) {
    if duration.is_zero() {
        return;
    }
    #[cfg(target_os = "linux")]
    if let Ok(timer) = linux::Timer::new(duration) {
        timer.expired().await;
        return;
    }
    tokio::time::sleep(duration).await;
}

#[cfg(target_os = "linux")]
mod linux {
    use std::io;
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    use std::time::Duration;
    use tokio::io::unix::AsyncFd;

    /// A one-shot timerfd registered with the runtime; closed on drop (a cancelled sleep).
    pub struct Timer(AsyncFd<OwnedFd>);

    impl Timer {
        pub fn new(duration: Duration) -> io::Result<Timer> {
            // SAFETY: plain syscalls; the fd is owned by the OwnedFd at once.
            let fd = unsafe { libc::timerfd_create(libc::CLOCK_MONOTONIC, libc::TFD_NONBLOCK | libc::TFD_CLOEXEC) };
            if fd < 0 {
                return Err(io::Error::last_os_error());
            }
            let fd = unsafe { OwnedFd::from_raw_fd(fd) };
            let zero = libc::timespec { tv_sec: 0, tv_nsec: 0 };
            let value = libc::timespec {
                tv_sec: duration.as_secs().min(i64::MAX as u64) as libc::time_t,
                tv_nsec: duration.subsec_nanos() as libc::c_long,
            };
            let spec = libc::itimerspec { it_interval: zero, it_value: value };
            // SAFETY: `spec` outlives the call; the old value is not asked for.
            if unsafe { libc::timerfd_settime(fd.as_raw_fd(), 0, &spec, std::ptr::null_mut()) } < 0 {
                return Err(io::Error::last_os_error());
            }
            // SAFETY: the OwnedFd is a valid open fd that lives (and keeps its number) exactly as
            // long as the AsyncFd holding it.
            let registered = unsafe { AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) };
            registered.map(Timer).map_err(io::Error::from)
        }

        /// Completes when the timer has fired (readable), or at once if polling fails.
        pub async fn expired(&self) {
            let _ = self.0.readable().await;
        }
    }
}
