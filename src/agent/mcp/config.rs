//! `[[mcp]]` in the agent file: one MCP server whose tools the agent may call.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

use crate::agent::tool::{resolve_mode, scheduling_key};
use crate::event::Scheduling;
use crate::model::Behavior;

/// Default time a call may take.
pub const DEFAULT_TIMEOUT_MS: u64 = 10_000;
/// Longest name of a server or a tool (what Gemini and OpenAI accept for function names).
pub const MAX_NAME_LEN: usize = 64;

/// One MCP server as declared in the agent file.
#[derive(Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpConfig {
    /// The server's name in logs, metrics and readiness (`[A-Za-z0-9_-]`, at most 64).
    pub name: String,
    /// A streamable HTTP endpoint (`http://` or `https://`).
    #[serde(default)]
    pub url: Option<String>,
    /// A program the gateway runs and talks to over its stdin and stdout (stdio).
    #[serde(default)]
    pub command: Option<String>,
    /// The program's arguments.
    #[serde(default)]
    pub args: Vec<String>,
    /// The program's environment: only these variables (plus `PATH`, `HOME`, `LANG`, `TMPDIR`);
    /// the gateway's own, its keys among them, are not passed on. Values may name variables of
    /// the gateway's environment as `${NAME}`.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Only these tools (all when absent).
    #[serde(default)]
    pub allowed_tools: Option<Vec<String>>,
    /// Never these tools.
    #[serde(default)]
    pub denied_tools: Vec<String>,
    /// How long a call may take, connecting included.
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    /// HTTP headers sent with every request (streamable HTTP only); values may name variables
    /// of the gateway's environment as `${NAME}` (`Authorization = "Bearer ${ORDERS_TOKEN}"`).
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Tells the server who is calling: the user and session ids in each call's `_meta`
    /// (`livegate/user_id`, `livegate/session_id`) and, over HTTP, as the headers
    /// `X-Livegate-User-Id` and `X-Livegate-Session-Id`; when the run was started with a client
    /// token, its verified claims too (`livegate/claims`, an object, and `X-Livegate-Claims`,
    /// their JSON in base64url without padding).
    #[serde(default)]
    pub forward_identity: bool,
    /// Whether the model waits for the results of this server's tools: `blocking` (the
    /// default) or `non_blocking`; `[mcp.tools.NAME]` overrides it for one tool.
    #[serde(default)]
    pub behavior: Option<Behavior>,
    /// For non-blocking tools, when the model takes a result up: `interrupt`, `when_idle` (the
    /// default) or `silent`.
    #[serde(default, deserialize_with = "scheduling_key")]
    pub scheduling: Option<Scheduling>,
    /// Per-tool settings over the server's (`[mcp.tools.lookup_order] behavior = "blocking"`).
    #[serde(default)]
    pub tools: BTreeMap<String, McpToolConfig>,
}

/// One MCP tool's own settings (`[mcp.tools.NAME]`), over its server's.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpToolConfig {
    /// `blocking` or `non_blocking`.
    #[serde(default)]
    pub behavior: Option<Behavior>,
    /// `interrupt`, `when_idle` or `silent`, for a non-blocking tool.
    #[serde(default, deserialize_with = "scheduling_key")]
    pub scheduling: Option<Scheduling>,
}

// By hand: header and environment values may hold secrets.
impl std::fmt::Debug for McpConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpConfig")
            .field("name", &self.name)
            .field("url", &self.url)
            .field("command", &self.command)
            .field("args", &self.args.len())
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .field("headers", &self.headers.keys().collect::<Vec<_>>())
            .field("timeout_ms", &self.timeout_ms)
            .field("forward_identity", &self.forward_identity)
            .field("behavior", &self.behavior)
            .field("scheduling", &self.scheduling)
            .field("tools", &self.tools)
            .finish()
    }
}

fn default_timeout_ms() -> u64 {
    DEFAULT_TIMEOUT_MS
}

/// How the gateway reaches a server, checked and with `${NAME}`s resolved.
#[derive(Clone)]
pub(crate) enum Transport {
    /// Streamable HTTP.
    Http {
        url: String,
        headers: Vec<(String, String)>,
    },
    /// A child process over stdio.
    Stdio {
        command: String,
        args: Vec<String>,
        env: Vec<(String, String)>,
    },
}

/// A server's settings, checked.
#[derive(Clone)]
pub(crate) struct Spec {
    pub name: String,
    pub transport: Transport,
    pub allowed: Option<Vec<String>>,
    pub denied: Vec<String>,
    pub timeout: Duration,
    pub forward_identity: bool,
    /// The scheduling of the server's non-blocking tools (None: blocking).
    pub mode: Option<Scheduling>,
    /// Tools whose mode is not the server's.
    pub tool_modes: BTreeMap<String, Option<Scheduling>>,
}

impl std::fmt::Debug for Spec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let transport = match &self.transport {
            Transport::Http { url, .. } => format!("http {url}"),
            Transport::Stdio { command, .. } => format!("stdio {command}"),
        };
        f.debug_struct("Spec")
            .field("name", &self.name)
            .field("transport", &transport)
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl Spec {
    /// Some(scheduling) when the tool `name` is non-blocking.
    pub fn mode_of(&self, name: &str) -> Option<Scheduling> {
        self.tool_modes.get(name).copied().unwrap_or(self.mode)
    }

    /// True when the filters let the tool `name` through.
    pub fn allows(&self, name: &str) -> bool {
        self.allowed
            .as_ref()
            .is_none_or(|a| a.iter().any(|t| t == name))
            && !self.denied.iter().any(|t| t == name)
    }
}

/// True for names Gemini and OpenAI both accept for functions (and metrics take as labels).
pub(crate) fn is_valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME_LEN
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

impl McpConfig {
    /// Checks the settings and resolves `${NAME}`s from `env`.
    pub(crate) fn spec(&self, env: &dyn Fn(&str) -> Option<String>) -> Result<Spec, String> {
        let name = &self.name;
        if !is_valid_name(name) {
            return Err(format!(
                "MCP server name {name:?}: use letters, digits, `_` and `-` (at most {MAX_NAME_LEN})"
            ));
        }
        let transport = match (&self.url, &self.command) {
            (Some(url), None) => {
                if !url.starts_with("http://") && !url.starts_with("https://") {
                    return Err(format!(
                        "MCP server {name:?}: url must start with http:// or https://"
                    ));
                }
                if !self.args.is_empty() || !self.env.is_empty() {
                    return Err(format!(
                        "MCP server {name:?}: args and env are for a command, not a url"
                    ));
                }
                let headers = self
                    .headers
                    .iter()
                    .map(|(k, v)| {
                        let value = expand(v, env).map_err(|e| format!("header {k}: {e}"))?;
                        check_header(k, &value)?;
                        Ok((k.clone(), value))
                    })
                    .collect::<Result<Vec<_>, String>>()
                    .map_err(|e| format!("MCP server {name:?}: {e}"))?;
                Transport::Http {
                    url: url.clone(),
                    headers,
                }
            }
            (None, Some(command)) => {
                if command.trim().is_empty() {
                    return Err(format!("MCP server {name:?}: command is empty"));
                }
                if !self.headers.is_empty() {
                    return Err(format!(
                        "MCP server {name:?}: headers are for a url, not a command"
                    ));
                }
                let vars = self
                    .env
                    .iter()
                    .map(|(k, v)| {
                        Ok((
                            k.clone(),
                            expand(v, env).map_err(|e| format!("env {k}: {e}"))?,
                        ))
                    })
                    .collect::<Result<Vec<_>, String>>()
                    .map_err(|e| format!("MCP server {name:?}: {e}"))?;
                Transport::Stdio {
                    command: command.clone(),
                    args: self.args.clone(),
                    env: vars,
                }
            }
            _ => {
                return Err(format!(
                    "MCP server {name:?}: give either url (streamable HTTP) or command (stdio)"
                ))
            }
        };
        let mode = resolve_mode(self.behavior, self.scheduling, None)
            .map_err(|e| format!("MCP server {name:?}: {e}"))?;
        let tool_modes = self
            .tools
            .iter()
            .map(|(tool, c)| {
                let inherited = if c.behavior.is_none() && c.scheduling.is_none() {
                    mode
                } else {
                    // A tool made non-blocking alone takes its server's scheduling, if any.
                    self.scheduling.filter(|_| c.scheduling.is_none())
                };
                resolve_mode(c.behavior, c.scheduling, inherited)
                    .map(|m| (tool.clone(), m))
                    .map_err(|e| format!("MCP server {name:?}, tool {tool:?}: {e}"))
            })
            .collect::<Result<BTreeMap<_, _>, String>>()?;
        Ok(Spec {
            mode,
            tool_modes,
            name: name.clone(),
            transport,
            allowed: self.allowed_tools.clone(),
            denied: self.denied_tools.clone(),
            timeout: Duration::from_millis(self.timeout_ms.clamp(1, 600_000)),
            forward_identity: self.forward_identity,
        })
    }
}

/// Replaces each `${NAME}` in `value` with that environment variable.
fn expand(value: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<String, String> {
    let mut out = String::with_capacity(value.len());
    let mut rest = value;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after.find('}').ok_or_else(|| "an unclosed ${".to_owned())?;
        let var = &after[..end];
        let found = env(var).ok_or_else(|| format!("the environment variable {var} is not set"))?;
        out.push_str(&found);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

fn check_header(name: &str, value: &str) -> Result<(), String> {
    reqwest::header::HeaderName::from_bytes(name.as_bytes())
        .map_err(|_| format!("{name:?} is not a header name"))?;
    // The value is not echoed: it may be a secret.
    reqwest::header::HeaderValue::from_str(value)
        .map_err(|_| format!("header {name}: not a valid value"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        (name == "TOKEN").then(|| "s3cret".to_owned())
    }

    fn spec(text: &str) -> Result<Spec, String> {
        let config: McpConfig = toml::from_str(text).map_err(|e| e.to_string())?;
        config.spec(&env)
    }

    #[test]
    fn headers_and_env_values_name_environment_variables() {
        let s = spec(
            "name = \"a\"\nurl = \"http://127.0.0.1:1/mcp\"\n[headers]\nAuthorization = \"Bearer ${TOKEN}\"",
        )
        .unwrap();
        let Transport::Http { headers, .. } = &s.transport else {
            panic!("http")
        };
        assert_eq!(headers, &[("Authorization".into(), "Bearer s3cret".into())]);
        assert!(!format!("{s:?}").contains("s3cret"));
        let s = spec("name = \"b\"\ncommand = \"srv\"\nenv = { KEY = \"${TOKEN}\" }").unwrap();
        let Transport::Stdio { env, .. } = &s.transport else {
            panic!("stdio")
        };
        assert_eq!(env, &[("KEY".into(), "s3cret".into())]);
    }

    #[test]
    fn rejects_what_cannot_run() {
        let cases = [
            ("name = \"a\"", "either url"),
            (
                "name = \"a\"\nurl = \"http://x\"\ncommand = \"y\"",
                "either url",
            ),
            ("name = \"a b\"\nurl = \"http://x\"", "letters"),
            ("name = \"a\"\nurl = \"file:///x\"", "http://"),
            (
                "name = \"a\"\nurl = \"http://x\"\nheaders = { X = \"${NOPE}\" }",
                "NOPE is not set",
            ),
            (
                "name = \"a\"\nurl = \"http://x\"\nheaders = { X = \"${TOKEN\" }",
                "unclosed",
            ),
            (
                "name = \"a\"\nurl = \"http://x\"\nheaders = { \"a b\" = \"v\" }",
                "not a header name",
            ),
            (
                "name = \"a\"\ncommand = \"x\"\nheaders = { X = \"v\" }",
                "headers are for a url",
            ),
            (
                "name = \"a\"\nurl = \"http://x\"\nargs = [\"v\"]",
                "args and env",
            ),
            (
                "name = \"a\"\nurl = \"http://x\"\ncolour = 1",
                "unknown field",
            ),
        ];
        for (text, expected) in cases {
            let error = spec(text).expect_err(text);
            assert!(error.contains(expected), "{text}: {error}");
        }
    }

    #[test]
    fn a_servers_tools_take_its_behavior_unless_their_own_table_says_otherwise() {
        let s = spec(
            "name = \"a\"\nurl = \"http://x\"\nbehavior = \"non_blocking\"\nscheduling = \"silent\"\n\
             [tools.lookup]\nbehavior = \"blocking\"\n\
             [tools.alert]\nscheduling = \"interrupt\"\n\
             [tools.book]\nbehavior = \"non_blocking\"",
        )
        .unwrap();
        assert_eq!(s.mode_of("other"), Some(Scheduling::Silent));
        assert_eq!(s.mode_of("lookup"), None);
        assert_eq!(s.mode_of("alert"), Some(Scheduling::Interrupt));
        assert_eq!(s.mode_of("book"), Some(Scheduling::Silent));
        let s = spec("name = \"a\"\nurl = \"http://x\"\n[tools.book]\nbehavior = \"non_blocking\"")
            .unwrap();
        assert_eq!(s.mode_of("other"), None);
        assert_eq!(s.mode_of("book"), Some(Scheduling::WhenIdle));
    }

    #[test]
    fn bad_behaviors_are_named_with_their_key_and_line() {
        let cases = [
            (
                "name = \"a\"\nurl = \"http://x\"\nbehavior = \"later\"",
                "line 3",
            ),
            (
                "name = \"a\"\nurl = \"http://x\"\n[tools.t]\nscheduling = \"soon\"",
                "unknown scheduling \"soon\"",
            ),
            (
                "name = \"a\"\nurl = \"http://x\"\n[tools.t]\nbehaviour = \"blocking\"",
                "unknown field `behaviour`",
            ),
            (
                "name = \"a\"\nurl = \"http://x\"\n[tools.t]\nbehavior = \"blocking\"\nscheduling = \"silent\"",
                "tool \"t\": scheduling = \"silent\" is for non-blocking tools",
            ),
        ];
        for (text, expected) in cases {
            let error = spec(text).expect_err(text);
            assert!(error.contains(expected), "{text}: {error}");
        }
    }

    #[test]
    fn filters_allow_and_deny() {
        let s = spec(
            "name = \"a\"\nurl = \"http://x\"\nallowed_tools = [\"x\", \"y\"]\ndenied_tools = [\"y\"]",
        )
        .unwrap();
        assert!(s.allows("x"));
        assert!(!s.allows("y"));
        assert!(!s.allows("z"));
    }
}
