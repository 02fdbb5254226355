//! systemd's notify protocol (sd_notify(3)): with `Type=notify` the unit is
//! "started" only once eddy says `READY=1` (its mesh, API and pipeline are
//! up), `STOPPING=1` tells systemd a stop is under way (the final
//! checkpoint), `STATUS=` is what `systemctl status` shows, and
//! `WATCHDOG=1` is sent every half `WatchdogSec` while every worker and the
//! checkpoint committer make progress (`exec/heartbeat.rs`): one stuck for
//! longer than that (a deadlock inside sled, an operator that never
//! returns) stops the pings, is logged by name, and systemd restarts the
//! daemon, which resumes from its last checkpoint.
//! Without `$NOTIFY_SOCKET` (not under systemd) all of it is off.

use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::exec::heartbeat;

pub(crate) struct Notifier {
    socket: UnixDatagram,
    to: SocketAddr,
    /// Half of `$WATCHDOG_USEC`, when the watchdog is meant for this process.
    watchdog: Option<Duration>,
}

impl Notifier {
    /// From `$NOTIFY_SOCKET` (a path, or `@name` for an abstract socket),
    /// `$WATCHDOG_USEC` and `$WATCHDOG_PID`. `None` when not under systemd
    /// or when the socket cannot be used (logged).
    pub(crate) fn from_env() -> Option<Notifier> {
        let path = std::env::var_os("NOTIFY_SOCKET")?;
        let path = path.to_string_lossy().into_owned();
        let to = match path.strip_prefix('@') {
            Some(name) => {
                use std::os::linux::net::SocketAddrExt;
                SocketAddr::from_abstract_name(name.as_bytes())
            }
            None => SocketAddr::from_pathname(&path),
        };
        let made = to.and_then(|to| UnixDatagram::unbound().map(|s| (s, to)));
        let (socket, to) = match made {
            Ok(ok) => ok,
            Err(e) => {
                tracing::warn!("NOTIFY_SOCKET={path} cannot be used ({e}); not notifying systemd");
                return None;
            }
        };
        let for_us = std::env::var("WATCHDOG_PID")
            .ok()
            .and_then(|p| p.parse::<u32>().ok())
            .is_none_or(|pid| pid == std::process::id());
        let watchdog = std::env::var("WATCHDOG_USEC")
            .ok()
            .and_then(|u| u.parse::<u64>().ok())
            .filter(|&u| u > 0 && for_us)
            .map(|u| Duration::from_micros(u / 2));
        Some(Notifier {
            socket,
            to,
            watchdog,
        })
    }

    /// Sends one datagram of `KEY=value` lines; failures are logged, never
    /// fatal (systemd may be restarting).
    pub(crate) fn send(&self, message: &str) {
        if let Err(e) = self.socket.send_to_addr(message.as_bytes(), &self.to) {
            tracing::debug!("sd_notify {message:?} failed: {e}");
        }
    }

    /// Starts sending `WATCHDOG=1` if systemd asked for it, while nothing
    /// is stuck; the thread stops when `stop` is set.
    pub(crate) fn start_watchdog(
        self: &Arc<Self>,
        stop: Arc<AtomicBool>,
    ) -> Option<JoinHandle<()>> {
        let every = self.watchdog?;
        let me = self.clone();
        std::thread::Builder::new()
            .name("eddy-watchdog".into())
            .spawn(move || {
                                // The heartbeat clock: a quarter of the ping period, so a
                // beat lands several times per period, but no finer than
                // 10 ms nor coarser than 100 ms (threads write their slot
                // at most once a tick).
                let tick = (every / 4).clamp(Duration::from_millis(10), Duration::from_millis(100));
                // Stale once older than a ping period (half `WatchdogSec`).
                let max_age = every.as_nanos().div_ceil(tick.as_nanos()) as u64;
                let mut waited = Duration::ZERO;
                let mut was_stuck = false;
                me.send("WATCHDOG=1");
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(tick);
                    heartbeat::tick();
                    waited += tick;
                    if waited < every {
                        continue;
                    }
                    waited = Duration::ZERO;
                    let stuck = heartbeat::stuck(max_age);
                    if stuck.is_empty() {
                        if was_stuck {
                            tracing::warn!("watchdog: every worker moves again; pinging systemd again");
                            me.send("STATUS=running");
                        }
                        was_stuck = false;
                        me.send("WATCHDOG=1");
                    } else if !was_stuck {
                        was_stuck = true;
                        let who = stuck.join(", ");
                        tracing::error!(
                            "watchdog: no progress for over {} ms in {who}; not pinging systemd, which restarts eddy after WatchdogSec (it resumes from its last checkpoint)",
                            every.as_millis()
                        );
                        me.send(&format!("STATUS=stuck: {who}"));
                    }
                }
            })
            .ok()
    }
}
