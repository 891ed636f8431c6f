//! Restore yields to processing on the CPU: background work (bulk loads, and each store's
//! flushes and compactions, which a restore's loads cause by the gigabyte) runs at a lower
//! scheduling priority than the stream threads, which run actives. On a busy machine the
//! actives get the CPU first and background work takes what is left (at nice 10 the scheduler
//! weighs it 110 against a stream thread's 1024); with cores to spare it still runs at full speed. Linux keeps
//! the nice value per thread, and a new thread starts with its creator's.

/// The nice value of background threads.
pub const BACKGROUND_NICE: libc::c_int = 10;

/// Lowers the calling thread's priority to [`BACKGROUND_NICE`].
pub fn lower_this_thread() {
    // SAFETY: setpriority reads no memory of ours; `0` names the calling thread.
    let _ = unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, BACKGROUND_NICE) };
}

/// Runs `f` on a thread of its own at background priority and returns its result: threads
/// that `f` starts (a store's flush and compaction workers) keep that priority, while the
/// caller's own is unchanged.
pub fn in_background<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| {
        let worker = s.spawn(|| {
            lower_this_thread();
            f()
        });
        match worker.join() {
            Ok(out) => out,
            Err(panic) => std::panic::resume_unwind(panic),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nice() -> libc::c_int {
        // SAFETY: getpriority reads no memory of ours; `0` names the calling thread.
        unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) }
    }

    #[test]
    fn threads_started_in_background_keep_its_priority_and_the_caller_keeps_its_own() {
        let before = nice();
        let (inside, started) = in_background(|| {
            let started = std::thread::spawn(nice).join().unwrap();
            (nice(), started)
        });
        assert_eq!(inside, BACKGROUND_NICE.max(before));
        assert_eq!(started, inside, "a thread started inside inherits it");
        assert_eq!(nice(), before, "the caller is unchanged");
    }
}
