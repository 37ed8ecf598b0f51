//! The API's contract as an OpenAPI 3.1 document, generated from the wire types of this crate.
//!
//! The schemas come from the types themselves (`schemars`, whose JSON Schema 2020-12 is
//! OpenAPI 3.1's dialect): a field added to a wire type changes [`document`], and the unit test
//! below fails until `api/openapi.json` is regenerated (`cargo xtask openapi`). What the types
//! cannot say (paths, methods, status codes, which error kinds each status carries) is written
//! here, in one table per path, and checked against the daemon's error-to-status mapping by the
//! daemon's own tests and against its real answers by the end-to-end suite.

use schemars::generate::{SchemaGenerator, SchemaSettings};
use serde_json::{Map, Value, json};

use crate::{
    CreateSessionRequest, ErrorKind, ErrorResponse, ExecRequest, ExecResponse, HealthResponse,
    SessionExecRequest, SessionInfo, SessionList, paths,
};

/// Where the document lives, relative to the workspace root.
pub const DOCUMENT_PATH: &str = "api/openapi.json";

/// The kinds an [`ExecResponse`]'s `error` carries in a 200 answer: what became of a program
/// that ran ([`ErrorKind::is_outcome`]).
pub fn outcome_kinds() -> Vec<ErrorKind> {
    ErrorKind::ALL
        .iter()
        .copied()
        .filter(|kind| kind.is_outcome())
        .collect()
}

/// The refusals of `POST /v1/exec`: each status with the error kinds it carries and when.
pub const EXEC_REJECTIONS: &[Rejection] = &[
    Rejection {
        status: 400,
        kinds: &[ErrorKind::InvalidRequest],
        when: "Malformed JSON, a missing or unknown field, an unknown language, a language this \
               daemon has no pool for, a policy with a rule of the other language or a name \
               no rule can match, or a file whose path is not a plain relative path (or whose \
               base64 does not decode). Nothing ran.",
    },
    Rejection {
        status: 408,
        kinds: &[ErrorKind::RequestTimeout],
        when: "The body did not arrive within the daemon's limit; the connection is closed.",
    },
    Rejection {
        status: 413,
        kinds: &[ErrorKind::PayloadTooLarge],
        when: "The body, or the code in it, is larger than the daemon accepts, or its files \
               are more than a working directory may hold (--max-files, --max-file-bytes).",
    },
    Rejection {
        status: 429,
        kinds: &[ErrorKind::QuotaExceeded],
        when: "The caller (its uid) has as many executions in flight in this language as one \
               caller may (--max-execs-per-caller); nothing ran. Retry after the Retry-After \
               header's seconds.",
    },
    Rejection {
        status: 422,
        kinds: &[ErrorKind::PackageRefused],
        when: "A package the program's `%pip install` lines (or an install) name cannot be \
               installed: installs are off (no --package-index), or the package is denied, on \
               no index, has no wheel for the guest, conflicts with what is installed, is too \
               large, or does not match its hash (the message names it and says which). \
               Nothing ran, nothing changed.",
    },
    Rejection {
        status: 500,
        kinds: &[ErrorKind::Internal],
        when: "A fault in the daemon.",
    },
    Rejection {
        status: 502,
        kinds: &[ErrorKind::PackageIndexUnavailable],
        when: "The package index could not be read (the network, or the index failed); \
               nothing ran. Retry later.",
    },
    Rejection {
        status: 503,
        kinds: &[
            ErrorKind::Overloaded,
            ErrorKind::NoSandboxAvailable,
            ErrorKind::ShuttingDown,
        ],
        when: "Nothing ran: every sandbox busy and the queue full (overloaded), no sandbox became \
               free within the request's time limit (no_sandbox_available), or the daemon is \
               draining (shutting_down). Retry after the Retry-After header's seconds.",
    },
];

/// The refusals only the session paths make (they answer most of [`EXEC_REJECTIONS`] too).
pub const SESSION_REJECTIONS: &[Rejection] = &[
    Rejection {
        status: 404,
        kinds: &[ErrorKind::SessionNotFound, ErrorKind::CheckpointNotFound],
        when: "No session has this id: it never existed, was deleted, or expired \
               (session_not_found); or, for a fork or a rollback, the session keeps no checkpoint \
               of that number (checkpoint_not_found; the message lists those it keeps). Nothing \
               ran, nothing changed.",
    },
    Rejection {
        status: 409,
        kinds: &[ErrorKind::SessionBusy],
        when: "The session's earlier execs kept it busy for the request's whole time limit; \
               nothing ran. Retry after the Retry-After header's seconds.",
    },
    Rejection {
        status: 410,
        kinds: &[ErrorKind::SessionLost],
        when: "The session's state is gone: the daemon restarted and could bring back none of \
               its checkpoints from its state directory (the message says why). Nothing ran; \
               delete the session and create a new one.",
    },
    Rejection {
        status: 429,
        kinds: &[ErrorKind::TooManySessions, ErrorKind::QuotaExceeded],
        when: "Nothing ran and no session was created: the daemon holds as many sessions, or \
               as much session state, as it may (too_many_sessions; the message says which), or \
               the caller holds as many sessions, or has as many execs in flight, as one caller \
               may (quota_exceeded). Retry after the Retry-After header's seconds.",
    },
];

/// The refusals only the tool-results path makes. Nothing changed.
pub const TOOL_RESULT_REJECTIONS: &[Rejection] = &[
    Rejection {
        status: 404,
        kinds: &[ErrorKind::ExecutionNotFound, ErrorKind::ToolCallNotFound],
        when: "No running execution of this caller has this id (another caller's is not \
               shown: only the uid that started it may answer), or the execution made no call \
               of this id.",
    },
    Rejection {
        status: 409,
        kinds: &[ErrorKind::ExecutionEnded, ErrorKind::ToolCallAnswered],
        when: "The execution has ended, or the call was already answered (or ran out of \
               time, and the program was told so).",
    },
];

/// Refusals any path can answer, whatever its operations.
pub const ANY_PATH_REJECTIONS: &[Rejection] = &[
    Rejection {
        status: 403,
        kinds: &[ErrorKind::CallerNotAllowed],
        when: "The caller's uid and groups (the connection's peer credentials) are not on the \
               daemon's allow list (--allow-uid, --allow-gid).",
    },
    Rejection {
        status: 404,
        kinds: &[ErrorKind::NotFound],
        when: "No such path.",
    },
    Rejection {
        status: 405,
        kinds: &[ErrorKind::MethodNotAllowed],
        when: "The path exists, not with this method.",
    },
];

/// A status code the daemon refuses a request with, and the error kinds its body carries.
#[derive(Debug, Clone, Copy)]
pub struct Rejection {
    /// The HTTP status code.
    pub status: u16,
    /// The `error.kind`s an answer with this status carries.
    pub kinds: &'static [ErrorKind],
    /// When the daemon answers so.
    pub when: &'static str,
}

/// The OpenAPI 3.1 document of the API.
pub fn document() -> Value {
    let mut schemas = Map::new();
    // A request is read by the daemon, a response written: each is described as that side
    // sees it (a field with a default is optional to send, always present when received).
    let mut requests = generator(SchemaSettings::draft2020_12().for_deserialize());
    requests.subschema_for::<ExecRequest>();
    requests.subschema_for::<CreateSessionRequest>();
    requests.subschema_for::<SessionExecRequest>();
    requests.subschema_for::<crate::ToolResult>();
    requests.subschema_for::<crate::ForkRequest>();
    requests.subschema_for::<crate::RollbackRequest>();
    requests.subschema_for::<crate::ParkRequest>();
    requests.subschema_for::<crate::RestartRequest>();
    requests.subschema_for::<crate::InstallRequest>();
    requests.subschema_for::<crate::UpdateSessionRequest>();
    requests.subschema_for::<crate::FileChanges>();
    schemas.extend(requests.take_definitions(true));
    let mut responses = generator(SchemaSettings::draft2020_12().for_serialize());
    responses.subschema_for::<ExecResponse>();
    responses.subschema_for::<crate::ExecEvent>();
    responses.subschema_for::<HealthResponse>();
    responses.subschema_for::<ErrorResponse>();
    responses.subschema_for::<SessionInfo>();
    responses.subschema_for::<SessionList>();
    responses.subschema_for::<crate::FileList>();
    responses.subschema_for::<crate::FilesChanged>();
    responses.subschema_for::<crate::CheckpointList>();
    responses.subschema_for::<crate::InstallResponse>();
    responses.subschema_for::<crate::PackageList>();
    schemas.extend(responses.take_definitions(true));

    json!({
        "openapi": "3.1.0",
        "jsonSchemaDialect": "https://json-schema.org/draft/2020-12/schema",
        "info": info(),
        "servers": [{
            "url": "http://localhost",
            "description": "HTTP/1.1 over the daemon's Unix socket (by default \
                /run/hyperlightd/hyperlightd.sock, or HYPERLIGHTD_SOCKET); the host name is not \
                used."
        }],
        "paths": {
            paths::EXEC: { "post": exec_operation() },
            paths::HEALTH: { "get": health_operation(
                "health", "The daemon's health. Always 200 while the daemon answers.", false) },
            paths::HEALTH_LIVE: { "get": health_operation(
                "healthLive",
                "Liveness: 200 while the daemon works, warming or not; 503 when a guest the \
                 hypervisor does not give back holds a worker (only a restart frees it).",
                true) },
            paths::HEALTH_READY: { "get": health_operation(
                "healthReady",
                "Readiness: 200 when every pool is at its size and the daemon is not stopping; \
                 503 while warming, replacing sandboxes, or draining.",
                true) },
            paths::METRICS: { "get": metrics_operation() },
            paths::SESSIONS: {
                "post": create_session_operation(),
                "get": list_sessions_operation(),
            },
            SESSION_PATH: {
                "parameters": [session_id()],
                "get": get_session_operation(),
                "patch": update_session_operation(),
                "delete": delete_session_operation(),
            },
            SESSION_EXEC_PATH: { "parameters": [session_id()], "post": session_exec_operation() },
            SESSION_FORK_PATH: { "parameters": [session_id()], "post": fork_session_operation() },
            SESSION_FILES_PATH: {
                "parameters": [session_id()],
                "get": session_files_operation(),
                "post": change_session_files_operation(),
            },
            SESSION_CHECKPOINTS_PATH: {
                "parameters": [session_id()],
                "get": session_checkpoints_operation(),
            },
            SESSION_ROLLBACK_PATH: {
                "parameters": [session_id()],
                "post": rollback_session_operation(),
            },
            SESSION_PARK_PATH: {
                "parameters": [session_id()],
                "post": park_session_operation(),
            },
            SESSION_RESTART_PATH: {
                "parameters": [session_id()],
                "post": restart_session_operation(),
            },
            SESSION_PACKAGES_PATH: {
                "parameters": [session_id()],
                "get": session_packages_operation(),
                "post": install_packages_operation(),
            },
            SESSION_FILE_PATH: {
                "parameters": [session_id(), file_path()],
                "get": session_file_operation(),
            },
            TOOL_RESULTS_PATH: {
                "parameters": [execution_id()],
                "post": tool_result_operation(),
            },
        },
        "components": {
            "schemas": schemas,
            "headers": {
                "RequestId": {
                    "description": "The request's id, as in the daemon's logs.",
                    "schema": { "type": "integer", "minimum": 1 }
                },
                "RetryAfter": {
                    "description": "Seconds to wait before sending the same request again.",
                    "schema": { "type": "integer", "minimum": 0 }
                }
            },
            "responses": ANY_PATH_REJECTIONS.iter()
                .map(|r| (response_name(r.status).to_owned(), rejection_response(r)))
                .collect::<Map<_, _>>(),
        }
    })
}

fn generator(settings: SchemaSettings) -> SchemaGenerator {
    settings
        .with(|s| {
            s.definitions_path = "/components/schemas".into();
            s.meta_schema = None;
        })
        .into_generator()
}

fn info() -> Value {
    json!({
        "title": "hyperlightd",
        "version": env!("CARGO_PKG_VERSION"),
        "license": { "name": "Apache-2.0", "identifier": "Apache-2.0" },
        "summary": "Run untrusted JavaScript and Python in warm Hyperlight micro-VMs.",
        "description": "Every answer carries an x-request-id header. A request the daemon \
            refuses is answered 4xx/5xx with an ErrorResponse body whose error.kind says why; \
            any path can answer 404 (components.responses.NotFound) and 405 \
            (components.responses.MethodNotAllowed). A request head over the daemon's header \
            limit is answered 431 with no body, by the HTTP layer. A program that ran is \
            answered 200 whatever became of it: its status and error say."
    })
}

/// The session paths, as the document names them.
pub const SESSION_PATH: &str = "/v1/sessions/{id}";
/// See [`SESSION_PATH`].
pub const SESSION_EXEC_PATH: &str = "/v1/sessions/{id}/exec";
/// See [`SESSION_PATH`].
pub const SESSION_FORK_PATH: &str = "/v1/sessions/{id}/fork";
/// See [`SESSION_PATH`].
pub const SESSION_FILES_PATH: &str = "/v1/sessions/{id}/files";
/// See [`SESSION_PATH`].
pub const SESSION_CHECKPOINTS_PATH: &str = "/v1/sessions/{id}/checkpoints";
/// See [`SESSION_PATH`].
pub const SESSION_ROLLBACK_PATH: &str = "/v1/sessions/{id}/rollback";
pub const SESSION_PARK_PATH: &str = "/v1/sessions/{id}/park";
pub const SESSION_RESTART_PATH: &str = "/v1/sessions/{id}/restart";
pub const SESSION_PACKAGES_PATH: &str = "/v1/sessions/{id}/packages";
/// See [`SESSION_PATH`].
pub const SESSION_FILE_PATH: &str = "/v1/sessions/{id}/files/{path}";

/// The tool-results path, as the document names it.
pub const TOOL_RESULTS_PATH: &str = "/v1/executions/{id}/tool-results";

fn execution_id() -> Value {
    json!({
        "name": "id",
        "in": "path",
        "required": true,
        "description": "The execution's id, as its stream's `started` event gave it.",
        "schema": { "type": "string" }
    })
}

fn tool_result_operation() -> Value {
    let mut responses = Map::new();
    responses.insert(
        "204".into(),
        json!({
            "description": "The answer was taken: the program gets it.",
            "headers": { "x-request-id": { "$ref": "#/components/headers/RequestId" } }
        }),
    );
    let exec = EXEC_REJECTIONS
        .iter()
        .filter(|r| [400, 408, 413, 500].contains(&r.status));
    for rejection in exec.chain(TOOL_RESULT_REJECTIONS) {
        responses.insert(rejection.status.to_string(), rejection_response(rejection));
    }
    json!({
        "operationId": "answerToolCall",
        "summary": "Answer a tool call of a running execution",
        "description": "The program waits for each call's answer (its time limit stands still \
            meanwhile): the tool's `result` (any JSON, which the program gets decoded) or its \
            `error` (the program's ToolError). An answer over the daemon's size limit is \
            refused 413, and the program's call fails saying so.",
        "requestBody": json_body("ToolResult"),
        "responses": responses,
    })
}

fn file_path() -> Value {
    json!({
        "name": "path",
        "in": "path",
        "required": true,
        "description": "The file's path in the working directory (`out/report.csv`), each \
            segment percent-encoded.",
        "schema": { "type": "string" }
    })
}

fn session_files_operation() -> Value {
    json!({
        "operationId": "listSessionFiles",
        "summary": "List a session's files",
        "description": "The files in the session's working directory as its last exec left \
            them (after the execs that arrived before), by path.",
        "responses": responses(("200", success("The files.", "FileList")), &[404, 409]),
    })
}

fn change_session_files_operation() -> Value {
    json!({
        "operationId": "changeSessionFiles",
        "summary": "Change a session's files",
        "description": "Writes, removes (a directory with all it holds) and renames files in \
            the session's working directory, in order, after the execs that arrived before, by \
            the rules a program's own writes follow: all the changes or none. The change is an \
            exec that runs no program: its checkpoint is the session's state with its files \
            changed (roll back to the one before to undo it). A path with nothing at it is \
            answered 404 with error kind `not_found`; a path the working directory does not \
            allow, or a change POSIX refuses (a file where a directory is needed, a directory \
            into itself), 400 `invalid_request`; past the caps, 413.",
        "requestBody": json_body("FileChanges"),
        "responses": responses(
            ("200", success("The changes were made.", "FilesChanged")),
            &[400, 404, 408, 409, 413, 500, 503],
        ),
    })
}

fn session_file_operation() -> Value {
    json!({
        "operationId": "getSessionFile",
        "summary": "Fetch a file of a session",
        "description": "The file's bytes as the session's last exec left them. A session \
            without the file is answered 404 with error kind `not_found`; an unknown session, \
            404 `session_not_found`.",
        "responses": responses(
            ("200", json!({
                "description": "The file's bytes.",
                "headers": { "x-request-id": { "$ref": "#/components/headers/RequestId" } },
                "content": { "application/octet-stream": {
                    "schema": { "type": "string", "format": "binary" }
                } }
            })),
            &[404, 409],
        ),
    })
}

fn session_id() -> Value {
    json!({
        "name": "id",
        "in": "path",
        "required": true,
        "description": "The session's id, as its creation answered.",
        "schema": { "type": "string" }
    })
}

/// The 200 answer of an exec: the program ran.
fn outcome_response() -> Value {
    json!({
        "description": "The program ran; `status` says how it ended, and `error.kind` \
            (when not ok) is one of the outcome kinds. Streamed (`stream`, or `Accept: \
            application/x-ndjson`): the answer begins when the program starts in its \
            sandbox; one `ExecEvent` per line, the output as it was written, then the \
            response as the last line.",
        "headers": { "x-request-id": { "$ref": "#/components/headers/RequestId" } },
        "content": {
            "application/json": { "schema": {
                "allOf": [
                    { "$ref": "#/components/schemas/ExecResponse" },
                    { "properties": { "error": { "anyOf": [
                        { "type": "null" },
                        { "properties": { "kind": { "enum": names(&outcome_kinds()) } } }
                    ] } } }
                ]
            } },
            crate::NDJSON: { "schema": { "$ref": "#/components/schemas/ExecEvent" } }
        }
    })
}

/// A success answer with a JSON body of `schema`.
fn success(description: &str, schema: &str) -> Value {
    json!({
        "description": description,
        "headers": { "x-request-id": { "$ref": "#/components/headers/RequestId" } },
        "content": { "application/json": {
            "schema": { "$ref": format!("#/components/schemas/{schema}") }
        } }
    })
}

/// The responses of an operation: `ok` under its status, then the refusals with `statuses`
/// from [`EXEC_REJECTIONS`] and [`SESSION_REJECTIONS`].
fn responses(ok: (&str, Value), statuses: &[u16]) -> Map<String, Value> {
    let mut responses = Map::new();
    responses.insert(ok.0.into(), ok.1);
    for rejection in EXEC_REJECTIONS.iter().chain(SESSION_REJECTIONS) {
        if statuses.contains(&rejection.status) {
            responses.insert(rejection.status.to_string(), rejection_response(rejection));
        }
    }
    responses
}

fn json_body(schema: &str) -> Value {
    json!({
        "required": true,
        "content": { "application/json": {
            "schema": { "$ref": format!("#/components/schemas/{schema}") }
        } }
    })
}

fn create_session_operation() -> Value {
    let mut created = success(
        "The session; its state starts as a fresh interpreter's.",
        "SessionInfo",
    );
    created["headers"]["Location"] = json!({
        "description": "The session's path.",
        "schema": { "type": "string" }
    });
    json!({
        "operationId": "createSession",
        "summary": "Create a session",
        "description": "A session is an interpreter whose state (variables, functions, imports) \
            carries over from one exec to the next. It holds no sandbox while idle, and is \
            deleted after its idle timeout or its maximum lifetime.",
        "requestBody": json_body("CreateSessionRequest"),
        "responses": responses(("201", created), &[400, 408, 413, 429, 500, 503]),
    })
}

fn list_sessions_operation() -> Value {
    json!({
        "operationId": "listSessions",
        "summary": "List the live sessions",
        "responses": responses(("200", success("Every live session, oldest first.", "SessionList")), &[]),
    })
}

fn get_session_operation() -> Value {
    json!({
        "operationId": "getSession",
        "summary": "Read a session",
        "responses": responses(("200", success("The session.", "SessionInfo")), &[404]),
    })
}

fn update_session_operation() -> Value {
    json!({
        "operationId": "updateSession",
        "summary": "Set a session's idle timeout",
        "description": "The session's idle timeout becomes `idle_timeout_s` (capped by the \
            daemon's maximum), counted from now: it expires once idle that long, or at the end \
            of its lifetime. A durable session keeps it across a restart.",
        "requestBody": json_body("UpdateSessionRequest"),
        "responses": responses(("200", success("The session.", "SessionInfo")), &[400, 404]),
    })
}

fn delete_session_operation() -> Value {
    json!({
        "operationId": "deleteSession",
        "summary": "Delete a session and its state",
        "description": "An exec already running in it finishes and is answered; what it leaves \
            is dropped.",
        "responses": responses(
            ("204", json!({
                "description": "Deleted.",
                "headers": { "x-request-id": { "$ref": "#/components/headers/RequestId" } }
            })),
            &[404],
        ),
    })
}

fn session_exec_operation() -> Value {
    json!({
        "operationId": "sessionExec",
        "summary": "Run a program in a session",
        "description": "Runs the program in the session's interpreter, which holds everything \
            its earlier execs defined; execs of one session run one at a time, in arrival \
            order, and waiting counts against the time limit. An exception keeps what the \
            program did before it; a timeout, running out of memory or a crash rolls the \
            session back to its state before this exec (`session.rolled_back`).",
        "requestBody": json_body("SessionExecRequest"),
        "responses": responses(("200", outcome_response()), &[400, 404, 408, 409, 413, 422, 429, 500, 502, 503]),
    })
}

fn fork_session_operation() -> Value {
    let mut body = json_body("ForkRequest");
    body["required"] = json!(false);
    json!({
        "operationId": "forkSession",
        "summary": "Fork a session",
        "description": "A new session whose state is an exact copy of this one's after the \
            execs that arrived before the fork, or of one of its checkpoints (`checkpoint`; \
            the body may be empty); from then on the two change independently. The new \
            session's checkpoint 0 is that state.",
        "requestBody": body,
        "responses": responses(
            ("201", success("The new session.", "SessionInfo")),
            &[400, 404, 408, 409, 413, 429, 500, 503],
        ),
    })
}

fn session_checkpoints_operation() -> Value {
    json!({
        "operationId": "listSessionCheckpoints",
        "summary": "List a session's checkpoints",
        "description": "The checkpoints the session keeps (after the execs that arrived \
            before), oldest first: checkpoint 0 is where it started, then one for each exec \
            whose state was kept; the last is the one it is at. The daemon keeps the newest \
            few (--session-checkpoints, --session-checkpoint-mib).",
        "responses": responses(("200", success("The checkpoints.", "CheckpointList")), &[404, 409]),
    })
}

fn rollback_session_operation() -> Value {
    json!({
        "operationId": "rollbackSession",
        "summary": "Return a session to a checkpoint",
        "description": "The session is back at the checkpoint (after the execs that arrived \
            before); the checkpoints after it are dropped, and its next exec starts from it \
            and makes a new number. To keep the later ones, fork from the checkpoint instead.",
        "requestBody": json_body("RollbackRequest"),
        "responses": responses(
            ("200", success("The session, at the checkpoint.", "SessionInfo")),
            &[400, 404, 408, 409, 413, 500],
        ),
    })
}

fn park_session_operation() -> Value {
    let mut body = json_body("ParkRequest");
    body["required"] = json!(false);
    json!({
        "operationId": "parkSession",
        "summary": "Park a session now",
        "description": "After the execs that arrived before, the session's newest checkpoint \
            is written to the state directory and waited for, then every state of the session \
            leaves memory (`parked`); its next exec, fork or read of its files brings the \
            newest back from disk, checked. A daemon without `--state-dir` answers 400; a \
            checkpoint that could not be written, 500 (the session stays in memory, as it \
            was). A session that has run nothing holds nothing and stays as it is.",
        "requestBody": body,
        "responses": responses(
            ("200", success("The session, parked.", "SessionInfo")),
            &[400, 404, 408, 409, 413, 500],
        ),
    })
}

fn restart_session_operation() -> Value {
    let mut body = json_body("RestartRequest");
    body["required"] = json!(false);
    json!({
        "operationId": "restartSession",
        "summary": "Start a session's interpreter afresh",
        "description": "After the execs that arrived before, the session's interpreter starts \
            as a new session's would (nothing of its programs' variables, imports or module \
            state), with its files and environment kept. It is an exec that runs no program: \
            it makes the session's next checkpoint, so a rollback to the one before undoes it.",
        "requestBody": body,
        "responses": responses(
            ("200", success("The session, at its new checkpoint.", "SessionInfo")),
            &[400, 404, 408, 409, 413, 500, 503],
        ),
    })
}

fn session_packages_operation() -> Value {
    json!({
        "operationId": "sessionPackages",
        "summary": "List a session's packages",
        "description": "After the execs that arrived before, the packages the session installed \
            (dependencies included), in the order it did, as its newest checkpoint has them: \
            a rollback past an install drops it from the list. Read from the session's \
            `.hyperlightd/packages.json`, which its runner keeps.",
        "responses": responses(
            ("200", success("The packages.", "PackageList")),
            &[404, 409, 410, 500],
        ),
    })
}

fn install_packages_operation() -> Value {
    json!({
        "operationId": "installPackages",
        "summary": "Install packages in a session",
        "description": "After the execs that arrived before, the requirements and what they \
            need are resolved and fetched by the daemon from its package index (wheels only, \
            each checked against the index's SHA-256) and installed in the session: importable \
            from its next exec, kept in its checkpoints (a rollback past the install removes \
            them), forked and parked with it. What the runtime or the session already has at a \
            version that satisfies a requirement is kept, never replaced. A Python session of \
            the native runtime only.",
        "requestBody": json_body("InstallRequest"),
        "responses": responses(
            ("200", success("What was installed, and what was there.", "InstallResponse")),
            &[400, 404, 408, 409, 413, 422, 500, 502, 503],
        ),
    })
}

fn exec_operation() -> Value {
    let mut responses = Map::new();
    responses.insert("200".into(), outcome_response());
    for rejection in EXEC_REJECTIONS {
        responses.insert(rejection.status.to_string(), rejection_response(rejection));
    }
    json!({
        "operationId": "exec",
        "summary": "Run a program",
        "description": "Runs the program in a warm sandbox of its language, which is restored \
            to a clean snapshot before its next use. The result convention: the value of the \
            program's last expression statement is `result`, as JSON.",
        "requestBody": {
            "required": true,
            "content": { "application/json": {
                "schema": { "$ref": "#/components/schemas/ExecRequest" }
            } }
        },
        "responses": responses,
    })
}

fn health_operation(id: &str, description: &str, unavailable: bool) -> Value {
    let body = json!({
        "headers": { "x-request-id": { "$ref": "#/components/headers/RequestId" } },
        "content": { "application/json": {
            "schema": { "$ref": "#/components/schemas/HealthResponse" }
        } }
    });
    let with = |description: &str| {
        let mut response = body.clone();
        response["description"] = description.into();
        response
    };
    let mut responses = Map::new();
    responses.insert("200".into(), with("Up."));
    if unavailable {
        responses.insert("503".into(), with("Down; the body says why."));
    }
    json!({
        "operationId": id,
        "summary": description.split(':').next().unwrap_or(description),
        "description": description,
        "responses": responses,
    })
}

fn metrics_operation() -> Value {
    json!({
        "operationId": "metrics",
        "summary": "Prometheus metrics",
        "description": "The daemon's metrics in the Prometheus text exposition format 0.0.4.",
        "responses": { "200": {
            "description": "The metrics.",
            "headers": { "x-request-id": { "$ref": "#/components/headers/RequestId" } },
            "content": { "text/plain": { "schema": { "type": "string" } } }
        } }
    })
}

fn rejection_response(rejection: &Rejection) -> Value {
    let mut headers = json!({ "x-request-id": { "$ref": "#/components/headers/RequestId" } });
    if matches!(rejection.status, 409 | 429 | 503) {
        headers["Retry-After"] = json!({ "$ref": "#/components/headers/RetryAfter" });
    }
    json!({
        "description": rejection.when,
        "headers": headers,
        "content": { "application/json": { "schema": {
            "allOf": [
                { "$ref": "#/components/schemas/ErrorResponse" },
                { "properties": { "error": { "properties": {
                    "kind": { "enum": names(rejection.kinds) }
                } } } }
            ]
        } } }
    })
}

fn response_name(status: u16) -> &'static str {
    match status {
        403 => "CallerNotAllowed",
        404 => "NotFound",
        405 => "MethodNotAllowed",
        _ => "Rejected",
    }
}

fn names(kinds: &[ErrorKind]) -> Vec<&'static str> {
    kinds.iter().map(|k| k.as_str()).collect()
}

/// The schema an answer to `method path` with `status` must match, and whether it is JSON, as
/// the document says; `None` when the document does not list that answer.
pub fn response_schema(document: &Value, method: &str, path: &str, status: u16) -> Option<Value> {
    let any_path = ANY_PATH_REJECTIONS.iter().find(|r| r.status == status);
    let response = match any_path {
        Some(r) => &document["components"]["responses"][response_name(r.status)],
        None => {
            &document["paths"][path][method.to_ascii_lowercase()]["responses"][status.to_string()]
        }
    };
    let content = response.get("content")?.as_object()?;
    content.values().next().map(|media| media["schema"].clone())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn the_checked_in_document_is_the_one_the_wire_types_generate() {
        let checked_in: Value = serde_json::from_str(include_str!("../openapi.json"))
            .expect("api/openapi.json is JSON");
        assert!(
            checked_in == document(),
            "{DOCUMENT_PATH} does not describe the wire types as they are (a field added, \
             removed or changed?): regenerate it with `cargo xtask openapi` and commit it"
        );
    }

    #[test]
    fn every_error_kind_is_in_the_document_and_each_has_a_status() {
        let doc = document();
        let schema = &doc["components"]["schemas"]["ErrorKind"];
        let documented: Vec<&str> = schema["oneOf"]
            .as_array()
            .expect("ErrorKind is a oneOf of documented constants")
            .iter()
            .map(|variant| variant["const"].as_str().expect("a constant"))
            .collect();
        let mut placed: Vec<&str> = names(&outcome_kinds());
        for r in EXEC_REJECTIONS
            .iter()
            .chain(ANY_PATH_REJECTIONS)
            .chain(SESSION_REJECTIONS)
            .chain(TOOL_RESULT_REJECTIONS)
        {
            placed.extend(names(r.kinds));
        }
        // A kind may be listed under both the exec paths and the session paths
        // (quota_exceeded), with the same status.
        placed.sort_unstable();
        placed.dedup();
        let mut sorted = documented.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, placed, "every kind has a place");
        assert_eq!(ErrorKind::ALL.len(), documented.len());
    }

    #[test]
    fn each_refusal_is_listed_under_its_kind_s_status() {
        for r in EXEC_REJECTIONS
            .iter()
            .chain(ANY_PATH_REJECTIONS)
            .chain(SESSION_REJECTIONS)
            .chain(TOOL_RESULT_REJECTIONS)
        {
            for kind in r.kinds {
                assert_eq!(kind.status(), Some(r.status), "{kind}");
            }
        }
        for kind in outcome_kinds() {
            assert_eq!(kind.status(), None, "{kind} is answered 200");
        }
    }

    #[test]
    fn wire_types_gaining_a_field_changes_the_document() {
        // The schema of a response lists its fields as required: a client generated from the
        // document relies on them.
        let doc = document();
        let exec = &doc["components"]["schemas"]["ExecResponse"];
        let required: Vec<&str> = exec["required"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        for field in ["status", "stdout", "stderr", "truncated", "result", "error"] {
            assert!(required.contains(&field), "{field} in {required:?}");
        }
        let request = &doc["components"]["schemas"]["ExecRequest"];
        assert_eq!(request["additionalProperties"], json!(false));
        assert_eq!(request["required"], json!(["language", "code"]));
    }

    #[test]
    fn response_schema_finds_operations_and_any_path_refusals() {
        let doc = document();
        assert!(response_schema(&doc, "POST", paths::EXEC, 200).is_some());
        assert!(response_schema(&doc, "POST", paths::EXEC, 503).is_some());
        assert!(response_schema(&doc, "GET", "/nowhere", 404).is_some());
        assert!(response_schema(&doc, "GET", paths::HEALTH, 503).is_none());
        assert!(response_schema(&doc, "POST", paths::EXEC, 418).is_none());
        assert!(response_schema(&doc, "POST", SESSION_EXEC_PATH, 409).is_some());
        assert!(response_schema(&doc, "POST", paths::SESSIONS, 201).is_some());
        assert!(response_schema(&doc, "DELETE", SESSION_PATH, 404).is_some());
        assert!(response_schema(&doc, "GET", paths::SESSIONS, 429).is_none());
    }
}
