//! The open connections: how many there may be, what each is doing, and which one gives way
//! when a new one arrives at the cap.
//!
//! A connection is in one of three phases:
//! - **waiting**: for a request's head (or the client to read a response) — it costs the daemon
//!   a socket and a read buffer, and is closed after the idle timeout;
//! - **reading** a request's body — bounded by the API's body timeout;
//! - **running** a request whose body has arrived — bounded by the request's time limit.
//!
//! At the cap, a new connection takes the place of the one that has waited or read longest
//! (that one is closed), so that clients that hold connections open without sending requests
//! cannot lock others out. Only when every connection is running a request is the new one
//! refused, by closing it at once. Connections that run requests are already bounded by the
//! pools and their queues.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use tokio::sync::watch;

/// What a connection is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Waiting for a request (or for the client to take a response).
    Waiting,
    /// Reading a request's body.
    Reading,
    /// Running a request that has all its body.
    Running,
}

/// A connection's state, as its serving task watches it.
#[derive(Debug, Clone, Copy)]
pub struct State {
    /// What it is doing.
    pub phase: Phase,
    /// Since when.
    pub since: Instant,
    /// Set when a newer connection took its place: the task closes it.
    pub evicted: bool,
}

/// The tracker's side of one connection.
#[derive(Debug)]
struct Entry {
    state: watch::Sender<State>,
}

/// One admitted connection. Dropping it (when the serving task ends) frees its place.
#[derive(Debug)]
pub struct Admitted {
    id: u64,
    connections: Arc<Connections>,
    state: Arc<Entry>,
}

impl Admitted {
    /// Moves the connection to `phase`, from now on. Its watchers are told only of a change:
    /// an answer's body sets its phase each time it is polled, and its connection's task,
    /// which polls it, watches the phase; told of every set, that task would wake itself and
    /// poll again, on and on, for as long as a streamed answer waits for the program.
    pub fn set(&self, phase: Phase) {
        self.state.state.send_if_modified(|state| {
            if state.phase == phase {
                return false;
            }
            state.phase = phase;
            state.since = Instant::now();
            true
        });
    }

    /// A receiver that sees every change of the connection's state.
    pub fn watch(&self) -> watch::Receiver<State> {
        self.state.state.subscribe()
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let mut open = self.connections.lock();
        open.remove(&self.id);
        self.connections.count.send_replace(open.len());
    }
}

/// How a new connection was admitted, or why not.
#[derive(Debug)]
pub enum Admission {
    /// Under the cap.
    Admitted(Admitted),
    /// At the cap: the connection that had waited or read longest was told to close.
    Replaced(Admitted),
    /// At the cap with every connection running a request.
    Refused,
}

/// The open connections, at most `max` of them.
#[derive(Debug)]
pub struct Connections {
    max: usize,
    next_id: AtomicU64,
    open: Mutex<HashMap<u64, Arc<Entry>>>,
    /// How many are open, changed under the lock of `open`.
    count: watch::Sender<usize>,
}

impl Connections {
    /// No connections yet; at most `max` at once.
    pub fn new(max: usize) -> Arc<Self> {
        Arc::new(Connections {
            max,
            next_id: AtomicU64::new(0),
            open: Mutex::new(HashMap::new()),
            count: watch::Sender::new(0),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<Entry>>> {
        self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Connections open now.
    pub fn count(&self) -> usize {
        self.lock().len()
    }

    /// Returns once no connection is open (at once if none is).
    pub async fn all_closed(&self) {
        let mut count = self.count.subscribe();
        // The sender lives in `self`, so the channel cannot close while this waits.
        let _ = count.wait_for(|&open| open == 0).await;
    }

    /// Admits a new connection, waiting for its first request.
    pub fn admit(self: &Arc<Self>) -> Admission {
        let mut open = self.lock();
        let mut replaced = false;
        if open.len() >= self.max {
            let Some((victim, entry)) = open
                .iter()
                .filter_map(|(id, entry)| {
                    let state = *entry.state.borrow();
                    (state.phase != Phase::Running && !state.evicted).then_some((
                        state.since,
                        *id,
                        entry,
                    ))
                })
                .min_by_key(|(since, id, _)| (*since, *id))
                .map(|(_, id, entry)| (id, entry.clone()))
            else {
                return Admission::Refused;
            };
            entry.state.send_modify(|state| state.evicted = true);
            open.remove(&victim);
            replaced = true;
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (state, _) = watch::channel(State {
            phase: Phase::Waiting,
            since: Instant::now(),
            evicted: false,
        });
        let entry = Arc::new(Entry { state });
        open.insert(id, entry.clone());
        self.count.send_replace(open.len());
        let admitted = Admitted {
            id,
            connections: self.clone(),
            state: entry,
        };
        if replaced {
            Admission::Replaced(admitted)
        } else {
            Admission::Admitted(admitted)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn admitted(admission: Admission) -> Admitted {
        match admission {
            Admission::Admitted(a) | Admission::Replaced(a) => a,
            Admission::Refused => panic!("refused"),
        }
    }

    #[test]
    fn under_the_cap_every_connection_is_admitted_and_a_closed_one_frees_its_place() {
        let connections = Connections::new(2);
        let a = admitted(connections.admit());
        let _b = admitted(connections.admit());
        assert_eq!(connections.count(), 2);
        drop(a);
        assert_eq!(connections.count(), 1);
        assert!(matches!(connections.admit(), Admission::Admitted(_)));
    }

    #[test]
    fn at_the_cap_the_longest_waiting_connection_gives_way() {
        let connections = Connections::new(3);
        let oldest = admitted(connections.admit());
        let running = admitted(connections.admit());
        let newer = admitted(connections.admit());
        running.set(Phase::Running);
        // `running` is older than `newer` by its phase change, but is running a request.
        let mut seen_by_oldest = oldest.watch();
        let newest = match connections.admit() {
            Admission::Replaced(a) => a,
            other => panic!("expected a replacement, got {other:?}"),
        };
        assert!(seen_by_oldest.borrow_and_update().evicted);
        assert!(!newer.watch().borrow().evicted);
        assert!(!running.watch().borrow().evicted);
        assert_eq!(connections.count(), 3);
        // The evicted connection's task ends later; its drop must not remove anyone else.
        drop(oldest);
        assert_eq!(connections.count(), 3);
        drop(newest);
    }

    #[tokio::test]
    async fn all_closed_waits_for_the_last_connection() {
        let connections = Connections::new(2);
        connections.all_closed().await;
        let a = admitted(connections.admit());
        let b = admitted(connections.admit());
        let waiting = tokio::spawn({
            let connections = connections.clone();
            async move { connections.all_closed().await }
        });
        drop(a);
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "one connection is still open");
        drop(b);
        tokio::time::timeout(std::time::Duration::from_secs(5), waiting)
            .await
            .expect("all_closed returns once none is open")
            .unwrap();
    }

    #[test]
    fn only_a_change_of_phase_is_news_to_the_connections_task() {
        let connections = Connections::new(1);
        let connection = admitted(connections.admit());
        let mut watched = connection.watch();
        connection.set(Phase::Running);
        assert!(watched.has_changed().unwrap());
        let since = watched.borrow_and_update().since;
        // A streamed answer's body, polled again while the program has written nothing.
        connection.set(Phase::Running);
        assert!(
            !watched.has_changed().unwrap(),
            "the same phase again is no change"
        );
        assert_eq!(
            watched.borrow().since,
            since,
            "nor does it restart the phase's clock"
        );
        connection.set(Phase::Waiting);
        assert!(watched.has_changed().unwrap());
    }

    #[test]
    fn a_connection_reading_a_body_can_give_way_but_not_one_running_a_request() {
        let connections = Connections::new(2);
        let reading = admitted(connections.admit());
        reading.set(Phase::Reading);
        let running = admitted(connections.admit());
        running.set(Phase::Running);
        let newcomer = admitted(connections.admit());
        assert!(reading.watch().borrow().evicted);
        newcomer.set(Phase::Running);
        assert!(matches!(connections.admit(), Admission::Refused));
        assert!(!running.watch().borrow().evicted);
    }
}
