// rolter patch: this file is rolter's, not Pingora's.
//
// Licensed under the Apache License, Version 2.0 (the "License");
// you may not use this file except in compliance with the License.
// You may obtain a copy of the License at
//
// http://www.apache.org/licenses/LICENSE-2.0
//
// Unless required by applicable law or agreed to in writing, software
// distributed under the License is distributed on an "AS IS" BASIS,
// WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
// See the License for the specific language governing permissions and
// limitations under the License.

//! The bounded pipe between the two halves of an HTTP/1 proxied request
//! (`proxy_h1.rs`): request body tasks one way, response tasks the other.
//!
//! It replaces a `tokio::sync::mpsc` channel of [`TASK_BUFFER_SIZE`] slots
//! there. Tokio's channel allocates a block of 32 slots and a cache-padded
//! shared state whatever its bound: 1.8 KiB each, 3.6 KiB for the two of
//! every open stream. Both halves run in the one task of the request
//! (`try_join!`), with a single sender and a single receiver, so a ring of
//! the bound's size behind an uncontended mutex does the same job in 245
//! bytes each.
//!
//! The semantics the proxy relies on are tokio's: a slot is reserved by a
//! [`Permit`] (given back if the permit is dropped unused), `send` waits for
//! a slot, a receiver sees `None` once the sender is gone and the pipe is
//! empty, and the sender sees the pipe closed once the receiver is gone.
//!
//! Public (and hidden from the docs) only so that rolter's tests can reach
//! it (`src/proxy/task_pipe_tests.rs` there): this vendored crate keeps no
//! dev-dependencies, so its own test target does not build.

use std::fmt;
use std::future::poll_fn;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use crate::TASK_BUFFER_SIZE;

/// The slots of a pipe: the bound Pingora gave its channels.
pub const CAPACITY: usize = TASK_BUFFER_SIZE;

/// A pipe of [`TASK_BUFFER_SIZE`] slots.
pub fn pipe<T>() -> (Sender<T>, Receiver<T>) {
    let shared = Arc::new(Mutex::new(State {
        slots: [const { None }; CAPACITY],
        head: 0,
        len: 0,
        reserved: 0,
        sender_alive: true,
        receiver_alive: true,
        receiver_waker: None,
        sender_waker: None,
    }));
    (
        Sender {
            shared: shared.clone(),
        },
        Receiver { shared },
    )
}

struct State<T> {
    slots: [Option<T>; CAPACITY],
    /// The oldest value's slot.
    head: usize,
    len: usize,
    /// Slots promised to live permits.
    reserved: usize,
    sender_alive: bool,
    receiver_alive: bool,
    receiver_waker: Option<Waker>,
    sender_waker: Option<Waker>,
}

impl<T> State<T> {
    fn push(&mut self, value: T) {
        let at = (self.head + self.len) % CAPACITY;
        self.slots[at] = Some(value);
        self.len += 1;
        wake(&mut self.receiver_waker);
    }

    fn pop(&mut self) -> Option<T> {
        if self.len == 0 {
            return None;
        }
        let value = self.slots[self.head].take();
        self.head = (self.head + 1) % CAPACITY;
        self.len -= 1;
        wake(&mut self.sender_waker);
        value
    }

    fn has_room(&self) -> bool {
        self.len + self.reserved < CAPACITY
    }
}

fn wake(waker: &mut Option<Waker>) {
    if let Some(waker) = waker.take() {
        waker.wake();
    }
}

fn register(slot: &mut Option<Waker>, cx: &Context<'_>) {
    match slot {
        Some(waker) if waker.will_wake(cx.waker()) => {}
        _ => *slot = Some(cx.waker().clone()),
    }
}

fn lock<T>(shared: &Mutex<State<T>>) -> MutexGuard<'_, State<T>> {
    // A panic while the lock was held leaves a consistent ring: every
    // method changes it only after its last fallible step.
    shared
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The receiver has gone: nothing sent now would be read.
#[derive(Debug, PartialEq, Eq)]
pub struct Closed;

impl fmt::Display for Closed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("task pipe closed")
    }
}

impl std::error::Error for Closed {}

/// Why [`Sender::try_reserve`] gave no permit.
#[derive(Debug, PartialEq, Eq)]
pub enum TryReserveError {
    Full,
    Closed,
}

impl fmt::Display for TryReserveError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TryReserveError::Full => f.write_str("task pipe full"),
            TryReserveError::Closed => f.write_str("task pipe closed"),
        }
    }
}

impl std::error::Error for TryReserveError {}

pub struct Sender<T> {
    shared: Arc<Mutex<State<T>>>,
}

impl<T> Sender<T> {
    /// Waits for a slot.
    pub async fn reserve(&self) -> Result<Permit<'_, T>, Closed> {
        poll_fn(|cx| self.poll_reserve(cx)).await
    }

    fn poll_reserve(&self, cx: &Context<'_>) -> Poll<Result<Permit<'_, T>, Closed>> {
        let mut state = lock(&self.shared);
        if !state.receiver_alive {
            return Poll::Ready(Err(Closed));
        }
        if state.has_room() {
            state.reserved += 1;
            return Poll::Ready(Ok(Permit { sender: self }));
        }
        register(&mut state.sender_waker, cx);
        Poll::Pending
    }

    /// A slot now, or why not.
    pub fn try_reserve(&self) -> Result<Permit<'_, T>, TryReserveError> {
        let mut state = lock(&self.shared);
        if !state.receiver_alive {
            return Err(TryReserveError::Closed);
        }
        if !state.has_room() {
            return Err(TryReserveError::Full);
        }
        state.reserved += 1;
        Ok(Permit { sender: self })
    }

    /// Waits for a slot and fills it.
    pub async fn send(&self, value: T) -> Result<(), Closed> {
        self.reserve().await?.send(value);
        Ok(())
    }

    /// Whether the receiver has gone.
    pub fn is_closed(&self) -> bool {
        !lock(&self.shared).receiver_alive
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        let mut state = lock(&self.shared);
        state.sender_alive = false;
        wake(&mut state.receiver_waker);
    }
}

impl<T> fmt::Debug for Sender<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("task_pipe::Sender")
    }
}

/// A reserved slot.
pub struct Permit<'a, T> {
    sender: &'a Sender<T>,
}

impl<T> Permit<'_, T> {
    /// Fills the slot. If the receiver has gone, the value is dropped, as
    /// tokio's permit does.
    pub fn send(self, value: T) {
        let mut state = lock(&self.sender.shared);
        state.reserved -= 1;
        if state.receiver_alive {
            state.push(value);
        }
        drop(state);
        // The slot is used: the permit's drop must not give it back.
        std::mem::forget(self);
    }
}

impl<T> Drop for Permit<'_, T> {
    fn drop(&mut self) {
        let mut state = lock(&self.sender.shared);
        state.reserved -= 1;
        wake(&mut state.sender_waker);
    }
}

impl<T> fmt::Debug for Permit<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("task_pipe::Permit")
    }
}

pub struct Receiver<T> {
    shared: Arc<Mutex<State<T>>>,
}

impl<T> Receiver<T> {
    /// The next value; `None` once the sender has gone and the pipe is empty.
    pub async fn recv(&mut self) -> Option<T> {
        poll_fn(|cx| self.poll_recv(cx)).await
    }

    fn poll_recv(&mut self, cx: &Context<'_>) -> Poll<Option<T>> {
        let mut state = lock(&self.shared);
        if let Some(value) = state.pop() {
            return Poll::Ready(Some(value));
        }
        if !state.sender_alive {
            return Poll::Ready(None);
        }
        register(&mut state.receiver_waker, cx);
        Poll::Pending
    }
}

impl<T> Drop for Receiver<T> {
    fn drop(&mut self) {
        let mut state = lock(&self.shared);
        state.receiver_alive = false;
        // What was sent and never read goes now, as with tokio's channel.
        let unread: Vec<T> = std::iter::from_fn(|| state.pop()).collect();
        wake(&mut state.sender_waker);
        drop(state);
        drop(unread);
    }
}
