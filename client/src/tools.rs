//! Answering the tool calls of an execution that declared tools (see `hyperlightd_api`'s
//! `ToolSpec` and `ToolResult`).

use hyper::Method;
use hyperlightd_api::{ToolResult, paths};

use crate::{Client, DEFAULT_RESPONSE_TIMEOUT, Error, encode};

impl Client {
    /// Answers one tool call of execution `execution_id` (its stream's `started` event), as
    /// its `tool_call` event named it. Only the caller that started the execution may;
    /// refused with `execution_not_found`, `execution_ended`, `tool_call_not_found` or
    /// `tool_call_answered` otherwise, and nothing changes.
    pub async fn answer_tool(&self, execution_id: &str, answer: &ToolResult) -> Result<(), Error> {
        let body = encode(answer)?;
        let path = paths::tool_results(execution_id);
        self.call(Method::POST, &path, body, DEFAULT_RESPONSE_TIMEOUT)
            .await
            .map(drop)
    }
}
