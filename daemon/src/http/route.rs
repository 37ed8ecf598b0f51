//! What a request's path names: the API's paths, parsed once, with the methods each accepts.

use hyperlightd_api::paths;

/// Which question a health request asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Probe {
    /// Everything, always 200 while the daemon answers.
    Full,
    /// Liveness: 503 when the daemon needs a restart.
    Live,
    /// Readiness: 503 when it should not get traffic.
    Ready,
}

/// A path the API serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route<'a> {
    /// `/v1/exec`
    Exec,
    /// `/v1/health` and its `live` and `ready` forms.
    Health(Probe),
    /// `/metrics`
    Metrics,
    /// `/v1/sessions`
    Sessions,
    /// `/v1/sessions/{id}`
    Session(&'a str),
    /// `/v1/sessions/{id}/exec`
    SessionExec(&'a str),
    /// `/v1/sessions/{id}/fork`
    SessionFork(&'a str),
    /// `/v1/sessions/{id}/files`
    SessionFiles(&'a str),
    /// `/v1/sessions/{id}/checkpoints`
    SessionCheckpoints(&'a str),
    /// `/v1/sessions/{id}/rollback`
    SessionRollback(&'a str),
    /// `/v1/sessions/{id}/park`
    SessionPark(&'a str),
    /// `/v1/sessions/{id}/restart`
    SessionRestart(&'a str),
    /// `/v1/sessions/{id}/packages`
    SessionPackages(&'a str),
    /// `/v1/sessions/{id}/files/{path}`, the path as sent (percent-encoded).
    SessionFile(&'a str, &'a str),
    ToolResults(&'a str),
}

impl<'a> Route<'a> {
    /// The route `path` names, if any.
    pub fn parse(path: &'a str) -> Option<Route<'a>> {
        Some(match path {
            paths::EXEC => Route::Exec,
            paths::HEALTH => Route::Health(Probe::Full),
            paths::HEALTH_LIVE => Route::Health(Probe::Live),
            paths::HEALTH_READY => Route::Health(Probe::Ready),
            paths::METRICS => Route::Metrics,
            paths::SESSIONS => Route::Sessions,
            _ if path.starts_with(paths::EXECUTIONS) => {
                let rest = path.strip_prefix(paths::EXECUTIONS)?.strip_prefix('/')?;
                let (id, action) = rest.split_once('/')?;
                if id.is_empty() || action != paths::TOOL_RESULTS {
                    return None;
                }
                Route::ToolResults(id)
            }
            _ => {
                let rest = path.strip_prefix(paths::SESSIONS)?.strip_prefix('/')?;
                let (id, action) = match rest.split_once('/') {
                    Some((id, action)) => (id, Some(action)),
                    None => (rest, None),
                };
                if id.is_empty() {
                    return None;
                }
                match action {
                    None => Route::Session(id),
                    Some(paths::SESSION_EXEC) => Route::SessionExec(id),
                    Some(paths::SESSION_FORK) => Route::SessionFork(id),
                    Some(paths::SESSION_FILES) => Route::SessionFiles(id),
                    Some(paths::SESSION_CHECKPOINTS) => Route::SessionCheckpoints(id),
                    Some(paths::SESSION_ROLLBACK) => Route::SessionRollback(id),
                    Some(paths::SESSION_PARK) => Route::SessionPark(id),
                    Some(paths::SESSION_RESTART) => Route::SessionRestart(id),
                    Some(paths::SESSION_PACKAGES) => Route::SessionPackages(id),
                    Some(action) => {
                        let file = action
                            .strip_prefix(paths::SESSION_FILES)?
                            .strip_prefix('/')
                            .filter(|file| !file.is_empty())?;
                        Route::SessionFile(id, file)
                    }
                }
            }
        })
    }

    /// Whether `method` on this path asks for new work (an exec, a new session, a fork), which
    /// a draining daemon refuses.
    pub fn takes_work(&self, method: &hyper::Method) -> bool {
        *method == hyper::Method::POST
            && matches!(
                self,
                Route::Exec
                    | Route::Sessions
                    | Route::SessionExec(_)
                    | Route::SessionFork(_)
                    | Route::SessionFiles(_)
                    | Route::SessionRestart(_)
                    | Route::SessionPackages(_)
            )
    }

    /// The path as the API documents it.
    pub fn pattern(&self) -> &'static str {
        match self {
            Route::Exec => paths::EXEC,
            Route::Health(Probe::Full) => paths::HEALTH,
            Route::Health(Probe::Live) => paths::HEALTH_LIVE,
            Route::Health(Probe::Ready) => paths::HEALTH_READY,
            Route::Metrics => paths::METRICS,
            Route::Sessions => paths::SESSIONS,
            Route::Session(_) => "/v1/sessions/{id}",
            Route::SessionExec(_) => "/v1/sessions/{id}/exec",
            Route::SessionFork(_) => "/v1/sessions/{id}/fork",
            Route::SessionFiles(_) => "/v1/sessions/{id}/files",
            Route::SessionCheckpoints(_) => "/v1/sessions/{id}/checkpoints",
            Route::SessionRollback(_) => "/v1/sessions/{id}/rollback",
            Route::SessionPark(_) => "/v1/sessions/{id}/park",
            Route::SessionRestart(_) => "/v1/sessions/{id}/restart",
            Route::SessionPackages(_) => "/v1/sessions/{id}/packages",
            Route::SessionFile(..) => "/v1/sessions/{id}/files/{path}",
            Route::ToolResults(_) => "/v1/executions/{id}/tool-results",
        }
    }

    /// The methods it accepts, for the message of a 405.
    pub fn allowed(&self) -> &'static str {
        match self {
            Route::Exec
            | Route::SessionExec(_)
            | Route::SessionFork(_)
            | Route::SessionRollback(_)
            | Route::SessionPark(_)
            | Route::SessionRestart(_)
            | Route::ToolResults(_) => "POST",
            Route::Health(_)
            | Route::Metrics
            | Route::SessionFile(..)
            | Route::SessionCheckpoints(_) => "GET",
            Route::Sessions | Route::SessionFiles(_) | Route::SessionPackages(_) => "GET, POST",
            Route::Session(_) => "GET, PATCH, DELETE",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_path_parses_to_its_route_and_back() {
        for (path, route) in [
            ("/v1/exec", Route::Exec),
            ("/v1/health", Route::Health(Probe::Full)),
            ("/v1/health/live", Route::Health(Probe::Live)),
            ("/v1/health/ready", Route::Health(Probe::Ready)),
            ("/metrics", Route::Metrics),
            ("/v1/sessions", Route::Sessions),
            ("/v1/sessions/abc", Route::Session("abc")),
            ("/v1/sessions/abc/exec", Route::SessionExec("abc")),
            ("/v1/sessions/abc/fork", Route::SessionFork("abc")),
            ("/v1/sessions/abc/files", Route::SessionFiles("abc")),
            (
                "/v1/sessions/abc/checkpoints",
                Route::SessionCheckpoints("abc"),
            ),
            ("/v1/sessions/abc/rollback", Route::SessionRollback("abc")),
            ("/v1/sessions/abc/park", Route::SessionPark("abc")),
            ("/v1/sessions/abc/restart", Route::SessionRestart("abc")),
            ("/v1/sessions/abc/packages", Route::SessionPackages("abc")),
            ("/v1/executions/abc/tool-results", Route::ToolResults("abc")),
        ] {
            assert_eq!(Route::parse(path), Some(route), "{path}");
            assert_eq!(
                route.pattern().replace("{id}", "abc"),
                path,
                "{path} round-trips"
            );
        }
    }

    #[test]
    fn paths_near_the_session_paths_are_not_routes() {
        for path in [
            "/v1/sessions/",
            "/v1/sessions//exec",
            "/v1/sessions/abc/",
            "/v1/sessions/abc/run",
            "/v1/sessions/abc/exec/more",
            "/v1/sessions/abc/files/",
            "/v1/sessions/abc/filesx/a",
            "/v1/sessionsabc",
            "/v1/exec/",
        ] {
            assert_eq!(Route::parse(path), None, "{path}");
        }
    }

    #[test]
    fn a_file_path_is_everything_after_files() {
        assert_eq!(
            Route::parse("/v1/sessions/abc/files/out/a%20b.txt"),
            Some(Route::SessionFile("abc", "out/a%20b.txt"))
        );
    }
}
