//! `POST /v1/executions/{id}/tool-results`: a caller answers one of its execution's tool
//! calls. The answer goes through the service; errors through the one mapping in
//! [`ApiError::status`].

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response, StatusCode};
use hyperlightd_api::ToolResult;

use super::{Api, ApiError, BoxError};
use crate::executor::Executor;
use crate::service::{Call, Limits, wire};

/// The largest answer body read: room for a result at the tool limit however it is spaced, so
/// that the exchange, which measures the result as compact JSON, is what refuses one too large
/// and tells the program why (a body refused here leaves its call to time out).
fn answer_body_limit(limits: &Limits) -> usize {
    let result = limits.tools.max.max_bytes;
    limits
        .max_body_bytes
        .max(result.saturating_mul(2).saturating_add(64 * 1024))
}

impl<E: Executor> Api<E> {
    /// 204 once the answer is taken.
    pub(super) async fn tool_result<B>(
        &self,
        request: Request<B>,
        call: &Call,
        execution: &str,
    ) -> Result<Response<Full<Bytes>>, ApiError>
    where
        B: hyper::body::Body<Data = Bytes>,
        B::Error: Into<BoxError>,
    {
        let limit = answer_body_limit(self.service.limits());
        let answer: ToolResult = self.read_json_up_to(request, limit).await?;
        let result = wire::tool_result(&answer).map_err(ApiError::InvalidRequest)?;
        self.service
            .answer_tool(call, execution, &answer.id, result)?;
        let mut response = Response::new(Full::new(Bytes::new()));
        *response.status_mut() = StatusCode::NO_CONTENT;
        Ok(response)
    }
}
