//! Tests of the task pipe rolter's patched `pingora-proxy` carries
//! between the two halves of an HTTP/1 proxied request
//! (`patches/pingora-proxy/src/task_pipe.rs`). They live here because the
//! vendored crate keeps no dev-dependencies, so its own test target does
//! not build; end to end, every streaming and large-body test runs through
//! the pipe too.

use std::sync::Arc;

use futures_util::FutureExt;
use pingora::proxy::task_pipe::{pipe, Closed, TryReserveError, CAPACITY};

#[tokio::test]
async fn values_arrive_in_order_and_the_bound_holds() {
    let (tx, mut rx) = pipe::<u32>();
    for i in 0..CAPACITY as u32 {
        tx.send(i).await.unwrap();
    }
    assert_eq!(tx.try_reserve().unwrap_err(), TryReserveError::Full);
    assert!(
        tx.send(99).now_or_never().is_none(),
        "a full pipe makes send wait"
    );
    for i in 0..CAPACITY as u32 {
        assert_eq!(rx.recv().await, Some(i));
    }
    assert!(
        rx.recv().now_or_never().is_none(),
        "an empty pipe makes recv wait"
    );
}

#[tokio::test]
async fn a_permit_holds_its_slot_until_used_or_dropped() {
    let (tx, mut rx) = pipe::<u32>();
    let permits: Vec<_> = (0..CAPACITY).map(|_| tx.try_reserve().unwrap()).collect();
    assert_eq!(tx.try_reserve().unwrap_err(), TryReserveError::Full);
    let mut permits = permits.into_iter();
    permits.next().unwrap().send(7);
    drop(permits);
    // One slot holds 7; the others came back with their dropped permits.
    assert!(tx.try_reserve().is_ok());
    assert_eq!(rx.recv().await, Some(7));
}

#[tokio::test]
async fn a_waiting_sender_wakes_when_a_slot_frees() {
    let (tx, mut rx) = pipe::<u32>();
    for i in 0..CAPACITY as u32 {
        tx.send(i).await.unwrap();
    }
    let (sent, received) = tokio::join!(tx.send(100), async {
        let mut got = Vec::new();
        while got.len() <= CAPACITY {
            got.push(rx.recv().await.unwrap());
        }
        got
    });
    sent.unwrap();
    assert_eq!(received.last(), Some(&100));
}

#[tokio::test]
async fn the_receiver_drains_then_sees_the_end_when_the_sender_goes() {
    let (tx, mut rx) = pipe::<u32>();
    tx.send(1).await.unwrap();
    drop(tx);
    assert_eq!(rx.recv().await, Some(1));
    assert_eq!(rx.recv().await, None);
}

#[tokio::test]
async fn the_sender_sees_the_pipe_closed_when_the_receiver_goes() {
    let (tx, rx) = pipe::<Arc<()>>();
    let unread = Arc::new(());
    tx.send(unread.clone()).await.unwrap();
    let permit = tx.try_reserve().unwrap();
    drop(rx);
    assert!(tx.is_closed());
    assert_eq!(
        Arc::strong_count(&unread),
        1,
        "unread values are dropped with the receiver"
    );
    permit.send(Arc::new(()));
    assert_eq!(tx.send(Arc::new(())).await, Err(Closed));
    assert_eq!(tx.try_reserve().unwrap_err(), TryReserveError::Closed);
}
