//! How a background poller waits between rounds: until its next round is
//! due, the running configuration changes, or the server shuts down.
//!
//! A poller used to wake on a fixed tick (every 50 to 250 ms) to see
//! whether anything was due, so an idle gateway woke about a hundred times
//! a second with nothing configured to poll, each time on the proxy's
//! core. Each poller now works out when its next round falls due and
//! sleeps until then; with nothing to poll it sleeps until a reload.
//! [`Changes`] is how a reload reaches it: `GatewayState` counts every
//! snapshot it installs, and a poller that sees the count move reads the
//! new configuration at once, rather than within one tick as before.

use std::time::Duration;

use pingora::server::ShutdownWatch;
use tokio::sync::watch;

use crate::clock;

/// The number of snapshots installed since the start, as a poller sees it
/// change (`GatewayState::changes`).
pub type Changes = watch::Receiver<u64>;

/// Why [`until`] returned.
#[derive(Debug, PartialEq, Eq)]
pub enum Wake {
    /// The deadline passed.
    Due,
    /// A new snapshot was installed.
    Changed,
    /// The server is shutting down.
    Shutdown,
}

/// Waits until `due_ms` (on [`clock::now_ms`]'s scale; `None`: nothing is
/// due until the configuration changes), the next snapshot, or shutdown,
/// whichever comes first. A deadline already past returns at once.
pub async fn until(
    due_ms: Option<u64>,
    changes: &mut Changes,
    shutdown: &mut ShutdownWatch,
) -> Wake {
    let due = async {
        match due_ms {
            Some(due) => {
                let wait = due.saturating_sub(clock::now_ms());
                if wait > 0 {
                    tokio::time::sleep(Duration::from_millis(wait)).await;
                }
            }
            None => std::future::pending().await,
        }
    };
    let changed = async {
        if changes.changed().await.is_err() {
            // The state that counts snapshots is gone: none will come.
            std::future::pending::<()>().await;
        }
    };
    tokio::select! {
        biased;
        _ = shutdown.changed() => Wake::Shutdown,
        () = changed => Wake::Changed,
        () = due => Wake::Due,
    }
}

/// When a round that runs `every` ms falls due: its last run plus the
/// interval, now for one that never ran (`last` is `None`).
pub fn due_at(last: Option<u64>, every: u64, now_ms: u64) -> u64 {
    last.map_or(now_ms, |at| at.saturating_add(every))
}

/// When the next of several rounds falls due ([`due_at`] of each, the
/// earliest); `None` when there are none.
pub fn earliest(rounds: impl IntoIterator<Item = (Option<u64>, u64)>, now_ms: u64) -> Option<u64> {
    rounds
        .into_iter()
        .map(|(last, every)| due_at(last, every, now_ms))
        .min()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_next_round_is_the_earliest_due_and_a_new_one_is_due_now() {
        assert_eq!(earliest([], 1_000), None);
        assert_eq!(
            earliest([(Some(900), 500), (Some(800), 1_000)], 1_000),
            Some(1_400)
        );
        assert_eq!(
            earliest([(Some(900), 500), (None, 1_000)], 1_000),
            Some(1_000)
        );
        assert_eq!(earliest([(Some(u64::MAX), 5)], 0), Some(u64::MAX));
    }

    #[tokio::test]
    async fn a_change_wakes_a_poller_with_nothing_due_and_a_deadline_wakes_it_once_past() {
        let (count, mut changes) = watch::channel(0u64);
        let (_stop, mut shutdown) = watch::channel(false);

        // Nothing due and nothing changed: it sleeps.
        let slept = tokio::time::timeout(
            Duration::from_millis(100),
            until(None, &mut changes, &mut shutdown),
        )
        .await;
        assert!(slept.is_err(), "woke with nothing due: {slept:?}");

        count.send_modify(|n| *n += 1);
        assert_eq!(
            until(None, &mut changes, &mut shutdown).await,
            Wake::Changed
        );

        let due = clock::now_ms() + 30;
        assert_eq!(
            until(Some(due), &mut changes, &mut shutdown).await,
            Wake::Due
        );
        assert!(clock::now_ms() >= due, "woke before its deadline");
        assert_eq!(until(Some(0), &mut changes, &mut shutdown).await, Wake::Due);
    }

    #[tokio::test]
    async fn shutdown_wins_over_a_change_and_a_dropped_counter_never_wakes() {
        let (count, mut changes) = watch::channel(0u64);
        let (stop, mut shutdown) = watch::channel(false);
        count.send_modify(|n| *n += 1);
        stop.send(true).unwrap();
        assert_eq!(
            until(Some(0), &mut changes, &mut shutdown).await,
            Wake::Shutdown
        );

        let (_stop, mut shutdown) = watch::channel(false);
        changes.borrow_and_update();
        drop(count);
        let slept = tokio::time::timeout(
            Duration::from_millis(100),
            until(None, &mut changes, &mut shutdown),
        )
        .await;
        assert!(
            slept.is_err(),
            "a dropped counter woke the poller: {slept:?}"
        );
    }
}
