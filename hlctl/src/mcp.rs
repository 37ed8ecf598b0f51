//! `hlctl mcp`: the agent tool served over the Model Context Protocol on stdio, with the
//! official Rust SDK (`rmcp`) speaking the protocol.
//!
//! This is a transport and nothing more: the tool's definition, the checking of arguments, the
//! call and its rendering are the client crate's [`CodeTool`], the same one an agent embedding
//! the client uses. The daemon is asked what it serves at every `tools/list` and `tools/call`,
//! so a daemon started (or restarted with other pools) after the server is seen; a daemon that
//! cannot be reached makes a tool result saying so, never a crashed server.
//!
//! One server process serves one MCP client, one conversation: unless `--fresh`, its calls keep
//! state (one session per language, made on first use), and the sessions are deleted when the
//! host closes the connection.
//!
//! Code mode (`--servers FILE`, `--server NAME=COMMAND`): the tools of other MCP servers become
//! functions the programs may call (see [`crate::upstream`]); the servers stop with this one.

use std::collections::BTreeMap;
use std::sync::Arc;

use hyperlightd_client::Client;
use hyperlightd_client::tool::{CodeTool, DaemonFacts, TOOL_NAME, ToolResult};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
    ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};

use crate::upstream::{ServerSpec, Upstream};

/// Told to an MCP host when it connects.
const INSTRUCTIONS: &str = "hyperlightd runs JavaScript and Python in isolated micro-VMs. Use \
    the run_code tool to compute, parse, transform data or check an answer by running code; the \
    value of the program's last expression comes back as its result.";

/// The MCP server: one tool, backed by one daemon.
#[derive(Debug, Clone)]
struct McpServer {
    /// The tool, with this connection's sessions unless `--fresh`.
    tool: CodeTool,
}

impl McpServer {
    /// The tool as the daemon describes itself now.
    async fn tool(&self) -> CodeTool {
        self.tool.rediscover().await
    }
}

/// Serves MCP on stdin/stdout until the host closes it, then deletes the connection's sessions.
/// Returns an error only when the protocol cannot start (stdin closed before the handshake, say).
pub async fn serve(
    client: Client,
    budget: usize,
    fresh: bool,
    servers: &BTreeMap<String, ServerSpec>,
) -> Result<(), String> {
    let upstream = Upstream::connect(servers).await?;
    let mut tool = CodeTool::new(client, DaemonFacts::unknown())
        .with_output_budget(budget)
        .with_tools(upstream.tools.clone());
    if !fresh {
        tool = tool.with_sessions();
    }
    let server = McpServer { tool: tool.clone() };
    let served = match server.serve(rmcp::transport::stdio()).await {
        Ok(running) => running
            .waiting()
            .await
            .map(|_| ())
            .map_err(|e| format!("serving MCP: {e}")),
        Err(e) => Err(format!("starting the MCP session: {e}")),
    };
    tool.close().await;
    upstream.close().await;
    served
}

/// The MCP form of the tool's definition.
fn definition(tool: &CodeTool) -> Tool {
    let schema = match tool.input_schema() {
        serde_json::Value::Object(object) => object,
        _ => serde_json::Map::new(),
    };
    let mut definition = Tool::new(TOOL_NAME, tool.description(), Arc::new(schema));
    definition.annotations = Some(
        ToolAnnotations::with_title("Run code in a micro-VM")
            .read_only(true)
            .destructive(false)
            .idempotent(false)
            .open_world(!tool.tools().is_empty()),
    );
    definition
}

/// The MCP form of a call's result: the rendering as text, then each image the program
/// showed, the structured output, `isError` for a failed program or a call that did not run.
fn call_result(result: ToolResult) -> CallToolResult {
    let mut content = vec![ContentBlock::text(result.text)];
    // The figures the program showed, as images the client can show the user.
    let shown = result.response.iter().flat_map(|r| &r.display);
    content.extend(shown.filter_map(|item| {
        let (kind, data) = item
            .data
            .iter()
            .find(|(kind, _)| kind.starts_with("image/"))?;
        Some(ContentBlock::image(data.clone(), kind.clone()))
    }));
    let mut call = if result.is_error {
        CallToolResult::error(content)
    } else {
        CallToolResult::success(content)
    };
    call.structured_content = serde_json::to_value(&result.output).ok();
    call
}

impl ServerHandler for McpServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new(
                "hyperlightd",
                env!("CARGO_PKG_VERSION"),
            ))
            .with_instructions(INSTRUCTIONS)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let tool = self.tool().await;
        Ok(ListToolsResult::with_all_items(vec![definition(&tool)]))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        // Asked without a daemon at hand: the definition with what is known offline.
        (name == TOOL_NAME).then(|| definition(&self.tool))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        if request.name != TOOL_NAME {
            let message = format!(
                "no tool named {:?}; this server has {TOOL_NAME}",
                request.name
            );
            return Err(ErrorData::invalid_params(message, None));
        }
        let arguments = serde_json::Value::Object(request.arguments.unwrap_or_default());
        let result = self.tool().await.call_json(&arguments).await;
        Ok(call_result(result).into())
    }
}
