//! A session's exec, written once for every executor: wait for the session's turn, resume its
//! state (brought back from disk when it is parked), lay the request's files over the
//! session's and make its changes to them, check them against the caps, run the job from that state with a [`Runner`], and
//! give the turn the answer, which keeps the state the exec left. Once its turn has come, an
//! exec runs to its end in a task of its own, whether or not its caller still waits, so that a
//! session's state is always that of every exec it accepted.
//!
//! The runner is the seam: the daemon's is the language's pool (a worker loads the state, runs
//! the program, answers, and saves what it left), the tests' a fake that answers as a worker
//! would, so that the whole lifecycle runs in host unit tests.

use std::future::Future;
use std::sync::Arc;

use tracing::Instrument;

use super::{Session, Sessions};
use crate::job::{ExecError, Job, Outcome, Ran, SavedState, files, workspace};

/// What runs a session's job: the language's pool in the daemon, a fake in tests.
pub trait Runner: Send + Sync + 'static {
    /// Runs `job` from `state` (None: the warm state) and answers with the outcome and what
    /// becomes of the state the job left (saved, unchanged, rolled back).
    fn run(
        &self,
        job: Job,
        state: Option<SavedState>,
    ) -> impl Future<Output = Result<Ran, ExecError>> + Send;
}

impl Sessions {
    /// Runs `job` in `session` with `runner` (see the module's header).
    pub async fn exec<R: Runner>(
        self: &Arc<Self>,
        session: Arc<Session>,
        mut job: Job,
        runner: Arc<R>,
    ) -> Result<Outcome, ExecError> {
        job.env = session
            .env
            .overlaid(&job.env)
            .map_err(ExecError::EnvRefused)?;
        let waiting = job.trace.span("session turn", Vec::new);
        let mut turn = self
            .turn(
                session,
                (job.deadline, job.timeout),
                job.request_id,
                &job.trace,
            )
            .await?;
        waiting.end();
        let run = async move {
            // Waiting for the session's earlier state to be saved is not the program's time.
            job.deadline = turn.deadline();
            let waiting = job.trace.span("session save wait", Vec::new);
            let resumed = turn.resume().await;
            waiting.end();
            let resume = match resumed {
                Ok(resume) => resume,
                Err(e) => return turn.finish(Err(e)),
            };
            let state = resume.and_then(|resume| {
                job.files = files::overlay(&resume.files, &job.files);
                (!job.fresh_interpreter).then_some(resume.state)
            });
            let limits = job.file_limits;
            if !job.file_changes.is_empty() {
                job.files = match workspace::changed(&job.files, &job.file_changes, limits) {
                    Ok(files) => files,
                    Err(refused) => return turn.finish(Err(ExecError::FileRefused(refused))),
                };
            }
            if let Err(cap) = files::check_fits(&job.files, limits) {
                let cap = files::cap_in_words(cap, limits);
                return turn.finish(Err(ExecError::FilesOverCap(format!("at most {cap}"))));
            }
            let ran = runner.run(job, state).await;
            turn.finish(ran)
        };
        let task = tokio::spawn(run.instrument(tracing::Span::current()));
        task.await
            .unwrap_or_else(|e| Err(ExecError::Internal(format!("the session exec failed: {e}"))))
    }
}
