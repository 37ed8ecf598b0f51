//! A restarted daemon's sessions: read back from the state directory (see
//! [`durable::recover`](super::durable::recover)) into the table, with their owners, limits,
//! expiry and checkpoints, their states left on disk until they are used.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use tracing::{info, warn};

use super::Sessions;
use super::clock;
use super::durable::journal::at_millis;
use super::durable::recover::Recovered;
use super::entry::{Meta, Session};
use super::history::{Checkpoint, History};
use super::saving::SaveClock;

impl Sessions {
    /// Reads the sessions of the state directory back into the table (none without one);
    /// returns how many. Those already past their idle timeout or lifetime are reaped as
    /// expired at the next round, like any other.
    pub fn recover(&self) -> usize {
        let Some(durable) = &self.durable else {
            return 0;
        };
        let started = Instant::now();
        let recovered = durable.recover();
        let count = recovered.len();
        for one in recovered {
            let session = self.session_of(one);
            if let Some(why) = session.gone.get() {
                warn!(session = %session.id, "a saved session lost its state, and says so to its caller: {why}");
            }
            if let Some(lost) = session.meta().lost {
                warn!(session = %session.id, restored_from_checkpoint = lost.restored_from_checkpoint, lost_execs = lost.lost_execs, "a saved session is back at an older checkpoint than its answers said, and says so");
            }
            self.table().insert(session.id.clone(), session);
        }
        info!(
            sessions = count,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "sessions read back from the state directory"
        );
        self.park_idle();
        count
    }

    /// The session `one` describes.
    fn session_of(&self, one: Recovered) -> Arc<Session> {
        let Recovered {
            file,
            progress,
            disk,
            checkpoints,
            gone,
        } = one;
        let checkpoints: Vec<Checkpoint> = checkpoints
            .into_iter()
            .map(|(mark, disk, bytes)| Checkpoint::new(&mark, bytes, None, disk))
            .collect();
        // A journal whose next number is not past its checkpoints' (damaged) would have the
        // next exec reuse a number that a caller may hold: the next is past every one it names.
        let past = progress
            .checkpoints
            .iter()
            .map(|m| m.number.saturating_add(1));
        let next = past.fold(progress.next, u64::max);
        if next != progress.next {
            warn!(session = %file.id, journal = progress.next, next, "a saved session's journal gives a next checkpoint number it has used: numbering goes on past its checkpoints");
        }
        let history = if checkpoints.is_empty() {
            // Nothing to start from: every exec is refused (`gone`).
            History::new(None, 0, self.retention())
        } else {
            History::of(checkpoints, next, self.retention())
        };
        let now = SystemTime::now();
        let created_at = at_millis(file.created_at_ms);
        let lived = now.duration_since(created_at).unwrap_or(Duration::ZERO);
        let last_used_at = at_millis(progress.last_used_ms);
        let idle = now.duration_since(last_used_at).unwrap_or(Duration::ZERO);
        let idle_timeout =
            Duration::from_millis(progress.idle_timeout_ms.unwrap_or(file.idle_timeout_ms));
        let left = self.settings.max_lifetime.saturating_sub(lived);
        let mut meta = Meta::new(idle_timeout, idle, last_used_at);
        meta.execs = progress.execs;
        meta.lost = progress.lost.map(Into::into);
        meta.record(&history);
        let gone_cell = OnceLock::new();
        if let Some(why) = gone {
            let _ = gone_cell.set(why);
        }
        Arc::new(Session {
            id: file.id,
            owner: file.owner,
            language: file.language,
            created_at,
            lifetime_end: clock::now() + left,
            lifetime_end_at: now + left,
            labels: file.labels,
            env: file.env,
            history: Arc::new(tokio::sync::Mutex::new(history)),
            saving: SaveClock::default(),
            meta: Mutex::new(meta),
            disk: Some(disk),
            gone: gone_cell,
        })
    }
}
