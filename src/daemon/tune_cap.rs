//! The resource cap of a profiling run, beyond `nice`: it runs on the
//! node's idlest cores only (as many as the candidate has workers, at
//! most all the daemon may use), with a ceiling on its data memory
//! (`RLIMIT_DATA`, `[tune] profile_memory`) and on its CPU time
//! (`RLIMIT_CPU`: the run's length on every core it has, twice over), so
//! a candidate that needs more memory than the device can spare fails on
//! its own instead of pushing the pipeline it profiles into the OOM
//! killer.

use std::time::Duration;

/// What one run may use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Cap {
    /// The cores it is pinned to.
    pub(crate) cores: Vec<usize>,
    pub(crate) memory_bytes: u64,
    pub(crate) cpu_seconds: u64,
}

impl Cap {
    /// The cap of a run of `workers` workers lasting `duration`: the
    /// idlest of the cores this process may use, measured over 100 ms.
    pub(crate) fn for_run(workers: usize, memory_bytes: u64, duration: Duration) -> Cap {
        let allowed = allowed_cores();
        let before = core_idle();
        std::thread::sleep(Duration::from_millis(100));
        let after = core_idle();
        let idle = |c: usize| {
            let get = |m: &[(usize, u64)]| m.iter().find(|(n, _)| *n == c).map_or(0, |&(_, v)| v);
            get(&after).saturating_sub(get(&before))
        };
        let mut cores = allowed;
        crate::cold_sort::sort_by_key(&mut cores, |&c| (std::cmp::Reverse(idle(c)), c));
        cores.truncate(workers.max(1));
        cores.sort_unstable();
        Cap {
            cpu_seconds: 2 * (duration.as_secs() + 1) * cores.len() as u64 + 10,
            cores,
            memory_bytes,
        }
    }

    pub(crate) fn describe(&self) -> String {
        format!(
            "cores {:?}, {} MiB of data memory, {} CPU s",
            self.cores,
            self.memory_bytes >> 20,
            self.cpu_seconds
        )
    }

    /// Applies the cap to the calling process. Runs between fork and
    /// exec: only system calls, nothing allocated (`set` is built before).
    pub(crate) fn apply(
        set: &libc::cpu_set_t,
        memory_bytes: u64,
        cpu_seconds: u64,
    ) -> std::io::Result<()> {
        let limit = |resource, v: u64| {
            // `rlim_t` is 32 bits on 32-bit ARM (the casts are not no-ops
            // there): a larger cap is no cap.
            #[allow(clippy::unnecessary_cast)]
            let v = v.min(libc::rlim_t::MAX as u64) as libc::rlim_t;
            let l = libc::rlimit {
                rlim_cur: v,
                rlim_max: v,
            };
            // SAFETY: a plain system call on a valid struct.
            if unsafe { libc::setrlimit(resource, &l) } != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        };
        // SAFETY: `set` is a valid, initialised cpu set of its own size.
        if unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), set) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        limit(libc::RLIMIT_DATA, memory_bytes)?;
        limit(libc::RLIMIT_CPU, cpu_seconds)
    }

    pub(crate) fn cpu_set(&self) -> libc::cpu_set_t {
        // SAFETY: an all-zero cpu_set_t is the empty set.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        for &c in &self.cores {
            // SAFETY: `c` is below the set's capacity (checked by the
            // kernel's numbering of `/proc/stat`, at most CPU_SETSIZE).
            unsafe { libc::CPU_SET(c, &mut set) };
        }
        set
    }
}

/// Idle ticks so far (`USER_HZ`, 100 a second) of the cores this process
/// may use: their difference over an interval is its spare capacity.
pub(crate) fn idle_ticks() -> u64 {
    let allowed = allowed_cores();
    core_idle()
        .iter()
        .filter(|(c, _)| allowed.contains(c))
        .map(|&(_, t)| t)
        .sum()
}

/// The cores this process may run on.
fn allowed_cores() -> Vec<usize> {
    // SAFETY: a zeroed set is valid, and the kernel fills it.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    let ok =
        unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) }
            == 0;
    let n = std::thread::available_parallelism().map_or(1, |n| n.get());
    if !ok {
        return (0..n).collect();
    }
    (0..libc::CPU_SETSIZE as usize)
        // SAFETY: `c` is below CPU_SETSIZE.
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect()
}

/// Idle and iowait ticks of every core so far (`/proc/stat`).
fn core_idle() -> Vec<(usize, u64)> {
    std::fs::read_to_string("/proc/stat")
        .map(|s| parse_idle(&s))
        .unwrap_or_default()
}

fn parse_idle(stat: &str) -> Vec<(usize, u64)> {
    stat.lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let core: usize = f.next()?.strip_prefix("cpu")?.parse().ok()?;
            let ticks: Vec<u64> = f.filter_map(|v| v.parse().ok()).collect();
            // user nice system idle iowait ...
            Some((core, ticks.get(3)? + ticks.get(4).copied().unwrap_or(0)))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_ticks_per_core_come_from_proc_stat() {
        let stat = "cpu  10 0 10 500 5 0 0 0 0 0\ncpu0 5 0 5 300 2 0 0 0 0 0\ncpu1 5 0 5 200 3 0 0 0 0 0\nintr 1 2\n";
        assert_eq!(parse_idle(stat), vec![(0, 302), (1, 203)]);
    }

    #[test]
    fn a_cap_takes_as_many_allowed_cores_as_workers() {
        let all = allowed_cores();
        assert!(!all.is_empty());
        let cap = Cap::for_run(1, 1 << 30, Duration::from_secs(5));
        assert_eq!(cap.cores.len(), 1);
        assert!(all.contains(&cap.cores[0]));
        assert_eq!(cap.cpu_seconds, 2 * 6 + 10);
        let wide = Cap::for_run(64, 1 << 30, Duration::from_secs(5));
        assert_eq!(wide.cores, all);
    }
}
