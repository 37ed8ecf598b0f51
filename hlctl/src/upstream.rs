//! Code mode: `hlctl mcp` as an MCP *client* of other MCP servers (stdio commands), whose tools
//! become functions the `run_code` tool's programs may call. The servers are started and
//! listed once, at start; each tool is a function named `<server>_<tool>` (made an identifier)
//! with the server's description and input schema, so the agent tool's description gives each
//! a signature. A call goes through the daemon's tool exchange like any other (checked against
//! the schema in the daemon, relayed on the stream) and, here, to the server with `tools/call`.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use hyperlightd_client::{ToolSpec, Tools};
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::{Peer, RunningService};
use rmcp::{RoleClient, ServiceExt};
use serde::Deserialize;
use serde_json::Value;

/// How long one server may take to start and list its tools (`npx` may fetch its package).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(120);

/// One server to start: the shape of the `mcpServers` entries MCP hosts' configuration files use.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerSpec {
    /// The program.
    pub command: String,
    /// Its arguments.
    #[serde(default)]
    pub args: Vec<String>,
    /// Variables added to its environment.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
}

/// A configuration file: `{"mcpServers": {"name": {"command": ..., "args": [...]}}}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigFile {
    #[serde(rename = "mcpServers")]
    servers: BTreeMap<String, ServerSpec>,
}

/// Reads a configuration file of servers.
pub fn read_config(path: &Path) -> Result<BTreeMap<String, ServerSpec>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let config: ConfigFile = serde_json::from_str(&text).map_err(|e| {
        format!(
            "{}: not an MCP servers file ({{\"mcpServers\": {{\"name\": {{\"command\": ..., \
             \"args\": [...]}}}}}}): {e}",
            path.display()
        )
    })?;
    Ok(config.servers)
}

/// `NAME=COMMAND [ARG...]`, the command split at whitespace (a file for arguments with spaces).
pub fn parse_server_flag(flag: &str) -> Result<(String, ServerSpec), String> {
    let (name, command) = flag
        .split_once('=')
        .ok_or_else(|| format!("--server {flag:?}: expected NAME=COMMAND [ARG...]"))?;
    let mut words = command.split_whitespace().map(str::to_owned);
    let command = words
        .next()
        .ok_or_else(|| format!("--server {flag:?}: no command after {name}="))?;
    let spec = ServerSpec {
        command,
        args: words.collect(),
        env: BTreeMap::new(),
    };
    Ok((name.to_owned(), spec))
}

/// The running servers and their tools as functions.
pub struct Upstream {
    servers: Vec<RunningService<RoleClient, ()>>,
    /// Every server's tools, answered by the server.
    pub tools: Tools,
}

impl Upstream {
    /// Starts each server, lists its tools and makes them functions. Fails, stopping the ones
    /// started, when a server cannot start or list its tools, or two functions would share a
    /// name.
    pub async fn connect(specs: &BTreeMap<String, ServerSpec>) -> Result<Upstream, String> {
        let mut upstream = Upstream {
            servers: Vec::new(),
            tools: Tools::new(),
        };
        let mut names = BTreeMap::new();
        for (server, spec) in specs {
            let connected = tokio::time::timeout(CONNECT_TIMEOUT, start(spec)).await;
            let running = match connected {
                Ok(Ok(running)) => running,
                Ok(Err(e)) => return Err(upstream.failed(server, &e).await),
                Err(_) => {
                    let e = format!("no answer within {} s", CONNECT_TIMEOUT.as_secs());
                    return Err(upstream.failed(server, &e).await);
                }
            };
            let peer = running.peer().clone();
            let listed = peer.list_all_tools().await;
            upstream.servers.push(running);
            let listed = match listed {
                Ok(listed) => listed,
                Err(e) => return Err(upstream.failed(server, &e.to_string()).await),
            };
            for tool in listed {
                let function = function_name(server, &tool.name);
                if let Some(other) = names.insert(function.clone(), tool.name.to_string()) {
                    let e = format!(
                        "two tools make the function {function}: {other}, {}",
                        tool.name
                    );
                    return Err(upstream.failed(server, &e).await);
                }
                let description = format!(
                    "[{server}] {}",
                    tool.description.as_deref().unwrap_or_default()
                );
                let parameters = Value::Object((*tool.input_schema).clone());
                let spec = ToolSpec::new(function, description, parameters);
                let peer = peer.clone();
                let name = tool.name.to_string();
                let tools = std::mem::take(&mut upstream.tools);
                upstream.tools = tools.with(spec, move |arguments| {
                    call(peer.clone(), name.clone(), arguments)
                });
            }
        }
        Ok(upstream)
    }

    /// Stops every server.
    pub async fn close(self) {
        for running in self.servers {
            let _ = running.cancel().await;
        }
    }

    async fn failed(self, server: &str, why: &str) -> String {
        self.close().await;
        format!("MCP server {server:?}: {why}")
    }
}

/// Starts `spec`'s program with its stdin and stdout as the MCP transport (its stderr stays
/// hlctl's, which the MCP host logs), and does the handshake. The program is killed when its
/// service is dropped.
async fn start(spec: &ServerSpec) -> Result<RunningService<RoleClient, ()>, String> {
    let mut child = tokio::process::Command::new(&spec.command)
        .args(&spec.args)
        .envs(&spec.env)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot start {:?}: {e}", spec.command))?;
    let (Some(stdout), Some(stdin)) = (child.stdout.take(), child.stdin.take()) else {
        return Err("no pipes to the server".to_owned());
    };
    // The child lives as long as hlctl: its pipes are the transport, and it is killed on exit.
    tokio::spawn(async move {
        let _ = child.wait().await;
    });
    ().serve((stdout, stdin))
        .await
        .map_err(|e| format!("the MCP handshake failed: {e}"))
}

/// Calls tool `name` with `arguments`: its structured result, or its text (decoded when it is
/// JSON); a tool's error is the program's error.
async fn call(peer: Peer<RoleClient>, name: String, arguments: Value) -> Result<Value, String> {
    let mut params = CallToolRequestParams::new(name);
    if let Value::Object(arguments) = arguments {
        params.arguments = Some(arguments);
    }
    let result = peer
        .call_tool(params)
        .await
        .map_err(|e| format!("the MCP server failed: {e}"))?;
    outcome(result)
}

fn outcome(result: CallToolResult) -> Result<Value, String> {
    let mut parts: Vec<Value> = result
        .content
        .iter()
        .map(|block| match block.as_text() {
            Some(text) => serde_json::from_str(&text.text)
                .unwrap_or_else(|_| Value::String(text.text.clone())),
            // An image, a resource: as the protocol gives it.
            None => serde_json::to_value(block).unwrap_or(Value::Null),
        })
        .collect();
    if result.is_error == Some(true) {
        let message: Vec<String> = parts
            .iter()
            .map(|p| p.as_str().map_or_else(|| p.to_string(), str::to_owned))
            .collect();
        return Err(message.join("\n"));
    }
    if let Some(structured) = result.structured_content {
        return Ok(structured);
    }
    Ok(match parts.len() {
        0 => Value::Null,
        1 => parts.remove(0),
        _ => Value::Array(parts),
    })
}

/// `<server>_<tool>`, every character not allowed in an identifier made `_`, never starting
/// with a digit.
fn function_name(server: &str, tool: &str) -> String {
    let name: String = format!("{server}_{tool}")
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    if name.starts_with(|c: char| c.is_ascii_digit()) {
        format!("_{name}")
    } else {
        name
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn functions_are_identifiers_named_after_server_and_tool() {
        assert_eq!(
            function_name("time", "get_current_time"),
            "time_get_current_time"
        );
        assert_eq!(function_name("fs", "read-file.v2"), "fs_read_file_v2");
        assert_eq!(function_name("1x", "t"), "_1x_t");
    }

    #[test]
    fn a_server_flag_is_a_name_and_a_command_line() {
        let (name, spec) = parse_server_flag("fs=npx -y server-filesystem /tmp").unwrap();
        assert_eq!(name, "fs");
        assert_eq!(spec.command, "npx");
        assert_eq!(spec.args, ["-y", "server-filesystem", "/tmp"]);
        assert!(parse_server_flag("no-equals").is_err());
        assert!(parse_server_flag("fs=").is_err());
    }

    #[test]
    fn a_config_file_is_the_mcp_servers_shape() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("servers.json");
        let text = r#"{"mcpServers": {"time": {"command": "python3", "args": ["-m", "t"],
            "env": {"TZ": "UTC"}}}}"#;
        std::fs::write(&path, text).unwrap();
        let servers = read_config(&path).unwrap();
        assert_eq!(servers["time"].args, ["-m", "t"]);
        assert_eq!(servers["time"].env["TZ"], "UTC");
        std::fs::write(&path, r#"{"servers": {}}"#).unwrap();
        let err = read_config(&path).unwrap_err();
        assert!(err.contains("not an MCP servers file"), "{err}");
    }

    #[test]
    fn a_result_is_structured_or_its_text_decoded_and_an_error_is_the_message() {
        let text = |t: &str| rmcp::model::ContentBlock::text(t.to_owned());
        let ok = CallToolResult::success(vec![text(r#"{"a": 1}"#)]);
        assert_eq!(outcome(ok).unwrap(), serde_json::json!({"a": 1}));
        let plain = CallToolResult::success(vec![text("hello")]);
        assert_eq!(outcome(plain).unwrap(), serde_json::json!("hello"));
        let failed = CallToolResult::error(vec![text("no such file")]);
        assert_eq!(outcome(failed).unwrap_err(), "no such file");
    }
}
