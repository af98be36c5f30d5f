//! What the process's allocator keeps.
//!
//! The `rolter` binary allocates with jemalloc (`src/main.rs`), told never to
//! give freed pages back to the OS by itself (`dirty_decay_ms:-1`). Its decay
//! returned them after every request that churned large buffers, since
//! reusing the same pages looks like no new demand: each 4 MiB request body
//! then faulted some 8 MiB of fresh pages in and `madvise`d them out again,
//! a third of that request's CPU. [`PurgeService`] gives the pages nobody
//! uses back every [`PURGE_EVERY`] instead: memory a burst left behind goes
//! within seconds, and steady traffic refaults its working set once per
//! interval rather than once per request.

use std::time::Duration;

use async_trait::async_trait;
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;

/// How long freed pages stay with the process before they are returned.
pub const PURGE_EVERY: Duration = Duration::from_secs(10);

/// jemalloc's name for every arena at once (`MALLCTL_ARENAS_ALL`).
const PURGE_ALL_ARENAS: &std::ffi::CStr = c"arena.4096.purge";

/// Returns the allocator's unused pages to the OS every [`PURGE_EVERY`].
pub struct PurgeService;

#[async_trait]
impl BackgroundService for PurgeService {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        loop {
            tokio::select! {
                _ = shutdown.changed() => return,
                () = tokio::time::sleep(PURGE_EVERY) => {
                    purge();
                }
            }
        }
    }
}

/// Gives jemalloc's unused dirty pages, in every arena, back to the OS;
/// false if jemalloc refused. A process that allocates with something else
/// only purges jemalloc's own (empty) arenas.
pub fn purge() -> bool {
    // SAFETY: a write-only control without arguments: no old value is read
    // and no new value is passed, and the name is NUL-terminated.
    let status = unsafe {
        tikv_jemalloc_sys::mallctl(
            PURGE_ALL_ARENAS.as_ptr(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            0,
        )
    };
    if status != 0 {
        log::debug!("allocator purge failed: error {status}");
    }
    status == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jemalloc_accepts_the_purge_of_every_arena() {
        // A wrong control name is refused (ENOENT), which would leave the
        // pages with the process for good.
        assert!(purge());
    }
}
