//! What `/proc` says of a process: its CPU seconds and its memory
//! (`VmRSS`, `VmHWM`), for the cluster summary, the profiling runs and
//! `eddy bench tune`.

/// Clock ticks per second of `/proc/PID/stat` (`USER_HZ`): 100 on every
/// Linux architecture eddy is built for.
const USER_HZ: f64 = 100.0;

/// User and system CPU seconds of a process so far.
pub(crate) fn cpu_seconds(pid: u32) -> Result<f64, String> {
    cpu_ticks(pid, 11).map(|t| t / USER_HZ)
}

/// The CPU seconds of the children `pid` has waited for: utime and stime
/// of processes it started and reaped (profiling runs, say).
pub(crate) fn children_cpu_seconds(pid: u32) -> Result<f64, String> {
    cpu_ticks(pid, 13).map(|t| t / USER_HZ)
}

/// The sum of `/proc/PID/stat`'s two tick fields from `first` (counted
/// from 0 after the command name).
fn cpu_ticks(pid: u32, first: usize) -> Result<f64, String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map_err(|e| format!("cannot read /proc/{pid}/stat: {e}"))?;
    // The command name (field 2) may hold spaces: count after its `)`.
    let after = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest)
        .ok_or("no `)` in /proc/PID/stat")?;
    let fields: Vec<&str> = after.split_whitespace().collect();
    // utime and stime are fields 14 and 15, here 11 and 12 (from 0);
    // cutime and cstime follow.
    let ticks = |i: usize| fields.get(i).and_then(|v| v.parse::<f64>().ok());
    match (ticks(first), ticks(first + 1)) {
        (Some(u), Some(s)) => Ok(u + s),
        _ => Err(format!("/proc/{pid}/stat has no CPU times")),
    }
}

/// A `kB` field of `/proc/PROC/status` (`PROC`: a pid or `self`), such as
/// `VmRSS` or `VmHWM`, in bytes.
pub(crate) fn status_bytes(process: &str, field: &str) -> Result<u64, String> {
    let status = std::fs::read_to_string(format!("/proc/{process}/status"))
        .map_err(|e| format!("cannot read /proc/{process}/status: {e}"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kb| kb * 1024)
        .ok_or_else(|| format!("/proc/{process}/status has no {field}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_has_cpu_time_and_memory() {
        let me = std::process::id();
        assert!(cpu_seconds(me).unwrap() >= 0.0);
        let rss = status_bytes("self", "VmRSS").unwrap();
        assert!(rss > 1 << 20, "{rss}");
        assert!(status_bytes(&me.to_string(), "VmHWM").unwrap() >= rss / 2);
        assert!(status_bytes("self", "VmNothing").is_err());
    }
}
