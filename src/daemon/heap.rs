//! The daemon's heap under glibc's allocator: fewer arenas, big blocks
//! mapped on their own, and freed memory handed back to the kernel while
//! the daemon runs.

/// Blocks at least this big are mapped on their own, and unmapped when
/// freed.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const MMAP_AT_LEAST: libc::c_int = 1 << 20;

/// Sets glibc's allocator up for a long-running daemon whose state grows
/// and shrinks. Must run before any thread starts; `MALLOC_ARENA_MAX` and
/// `MALLOC_MMAP_THRESHOLD_` in the environment still win.
pub(crate) fn configure_malloc() {
    // glibc gives every thread that allocates an arena of its own, up to
    // 8 per core, and each keeps freed memory for its thread. One per
    // core (at least 2, at most 8) took 80–124 KiB off the ~1.5 MiB of
    // anonymous memory of `bash .ci/cross`'s idle pipeline with 1 and 2
    // workers. eddy's threads allocate per batch, not per record, and
    // wcount's throughput with 2 workers was the same within noise.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        // SAFETY: mallopt only sets an allocator parameter; no thread
        // allocates concurrently this early.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, cores.clamp(2, 8) as libc::c_int);
        }
    }
    // glibc maps a block of 128 KiB or more on its own, but once such a
    // block is freed it raises that bar to the block's size (up to
    // 32 MiB): a window's hash table, which doubles as its keys come,
    // then grows inside the arena, and the halves it leaves behind stay
    // in the process until the next trim. At 96 k records/s over 1M keys
    // with a 46 MiB cache the daemon's RSS stood at 161-173 MiB for the
    // last seconds of every 10 s window and at 113-115 MiB with a fixed
    // bar of 1 MiB (`MALLOC_MMAP_THRESHOLD_=1048576`, same build); peak
    // RSS 169 against 133-146 MiB over three runs each, CPU within the
    // noise. Setting the bar also turns the raising off.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if std::env::var_os("MALLOC_MMAP_THRESHOLD_").is_none() {
        // SAFETY: as above.
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_AT_LEAST);
        }
    }
}

/// How often freed memory goes back to the kernel.
#[cfg_attr(
    not(all(target_os = "linux", target_env = "gnu")),
    expect(dead_code, reason = "only glibc keeps freed memory this way")
)]
const TRIM_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

/// glibc gives freed memory back to the kernel only from the top of an
/// arena; pages freed below live blocks stay in the process. A day's
/// state grows and shrinks with the rate, and the panes, snapshots and
/// moved bins of the busy hours are freed in the middle of the arenas: in
/// `eddy bench tune`'s day, the daemon held 347 MiB at the trough, and
/// `malloc_trim` took it to 80 MiB. So a thread trims every
/// [`TRIM_EVERY`]. Under a steady load the pages come back at the next
/// checkpoint (a page fault each), which is why it is not done more often.
pub(crate) fn return_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let trimmer = std::thread::Builder::new()
            .name("eddy-heap-trim".into())
            .spawn(|| {
                loop {
                    std::thread::sleep(TRIM_EVERY);
                    // SAFETY: malloc_trim takes the allocator's own locks;
                    // it frees nothing that is in use.
                    unsafe {
                        libc::malloc_trim(0);
                    }
                }
            });
        if let Err(e) = trimmer {
            tracing::warn!("freed memory stays with the process: no thread to trim it ({e})");
        }
    }
}
