//! The `exec` provider (SPEC E6): a local agent CLI run as a subprocess in the repository
//! snapshot, the conversation on its stdin, its answer on its stdout. It lets a team plug in any
//! agent that can read a prompt and print an answer, under the same outcome taxonomy as the API
//! providers.
//!
//! # The process
//! `settings.command` (program, then arguments), then one more argument: `no_tools_flag` when the
//! request has no tools, else `tools_flag` with `{tools}` replaced by the comma-separated tool
//! names (each only when configured). Working directory: the snapshot (`workdir`) when given.
//! The child is killed when the call is dropped (`kill_on_drop`), and on timeout, cancellation
//! or oversized output it is killed and reaped before the call returns, so no zombie remains.
//! Only the direct child is killed: an agent that spawns its own subprocesses must stop them
//! when it dies. A call ends when the child has exited *and* its stdout and stderr are closed, so
//! a background process that inherits them holds the call until the timeout. (Killing the whole
//! process group needs a `kill(-pgid)`, which `unsafe_code = "forbid"` leaves to a safe wrapper
//! crate such as `rustix`, not a dependency today.)
//!
//! stdout (at most [`MAX_STDOUT_BYTES`]; more is a failure, not a silent truncation) becomes
//! [`ChatResponse::content`] verbatim (invalid UTF-8 replaced), with finish `stop`, no tool
//! calls and zero usage. stderr is read at the same time, so a chatty child never blocks on a
//! full pipe; its last [`MAX_STDERR_BYTES`] are kept for error messages.
//!
//! # The prompt on stdin
//! Plain text, one section per message, sections separated by a blank line, each opening with a
//! bracketed header line:
//!
//! ```text
//! [system]
//! <every system message, in order, separated by blank lines>
//!
//! [user]
//! <text>
//!
//! [assistant]
//! <text, when there was any>
//! [tool call call_1: read]
//! {"path":"src/lib.rs"}
//!
//! [tool result call_1]
//! <the tool's output>
//! ```
//!
//! The `[system]` section comes first and only when there are system messages; the others follow
//! the conversation's order.
//!
//! # Failures
//! The program cannot be started (missing, not executable) → `process_start`; a non-zero exit or a
//! signal → `process_exit` with the code and the last 20 lines of stderr, redacted; still running
//! after `settings.timeout` → `timeout`; `cancel` fired → `cancelled`; stdout over the cap →
//! `process_exit`.

use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, Command};
use tokio_util::sync::CancellationToken;
use verdict_proto::outcome::FailureKind;

use super::build::ProviderBuildError;
use super::classify::scrub;
use super::{
    ChatRequest, ChatResponse, FinishReason, Provider, ProviderError, ProviderKind,
    ProviderSettings, Role, TokenUsage,
};
use verdict_backends::BoxFuture;

/// The most stdout accepted as an answer.
pub const MAX_STDOUT_BYTES: usize = 8 * 1024 * 1024;

/// How much of the end of stderr is kept for error messages.
pub const MAX_STDERR_BYTES: usize = 64 * 1024;

/// How many stderr lines a `process_exit` message quotes.
const STDERR_TAIL_LINES: usize = 20;

/// How long to wait for a killed child to be reaped before leaving it to tokio's orphan reaper
/// (SIGKILL cannot be ignored; this only bounds a process stuck in the kernel).
const REAP_GRACE: Duration = Duration::from_secs(5);

/// A local agent CLI as a provider.
#[derive(Debug)]
pub struct ExecProvider {
    settings: ProviderSettings,
}

impl ExecProvider {
    /// Checks the settings as [`super::build()`] does for this kind.
    pub fn new(settings: ProviderSettings) -> Result<ExecProvider, ProviderBuildError> {
        let settings = ProviderSettings {
            kind: ProviderKind::Exec,
            ..settings
        };
        settings.validate()?;
        Ok(ExecProvider { settings })
    }

    /// The program and every argument for this request.
    fn command_line(&self, request: &ChatRequest) -> Result<(String, Vec<String>), ProviderError> {
        let Some((program, args)) = self.settings.command.split_first() else {
            return Err(self.error(FailureKind::Internal, "no command configured".to_owned()));
        };
        let mut args = args.to_vec();
        if request.tools.is_empty() {
            args.extend(self.settings.no_tools_flag.clone());
        } else if let Some(template) = &self.settings.tools_flag {
            let names: Vec<&str> = request.tools.iter().map(|t| t.name.as_str()).collect();
            args.push(template.replace("{tools}", &names.join(",")));
        }
        Ok((program.clone(), args))
    }

    fn error(&self, kind: FailureKind, what: String) -> ProviderError {
        ProviderError::new(
            kind,
            scrub(
                &format!("provider `{}`: {what}", self.settings.name),
                self.settings.api_key.as_ref(),
            ),
        )
    }

    async fn call(
        &self,
        request: &ChatRequest,
        workdir: Option<&std::path::Path>,
        cancel: &CancellationToken,
    ) -> Result<ChatResponse, ProviderError> {
        if cancel.is_cancelled() {
            return Err(self.error(FailureKind::Cancelled, "the call was cancelled".to_owned()));
        }
        let (program, args) = self.command_line(request)?;
        let mut command = Command::new(&program);
        command
            .args(&args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        if let Some(dir) = workdir {
            command.current_dir(dir);
        }
        let mut child = command.spawn().map_err(|e| {
            let place = workdir.map_or(String::new(), |d| format!(" in {}", d.display()));
            self.error(
                FailureKind::ProcessStart,
                format!("cannot start `{program}`{place}: {e}"),
            )
        })?;
        let prompt = render_prompt(request);
        let ended = {
            let stdin = child.stdin.take();
            let stdout = child.stdout.take();
            let stderr = child.stderr.take();
            let run = run_to_exit(&mut child, stdin, stdout, stderr, prompt);
            tokio::select! {
                biased;
                () = cancel.cancelled() => Ended::Cancelled,
                () = tokio::time::sleep(self.settings.timeout) => Ended::TimedOut,
                result = run => Ended::Finished(result),
            }
        };
        match ended {
            Ended::Finished(Ok(Finished { status, stdout, .. })) if status.success() => {
                let content = String::from_utf8_lossy(&stdout).into_owned();
                Ok(ChatResponse {
                    raw: content.clone(),
                    content,
                    tool_calls: Vec::new(),
                    finish: FinishReason::Stop,
                    usage: TokenUsage::default(),
                })
            }
            Ended::Finished(Ok(Finished { status, stderr, .. })) => Err(self.error(
                FailureKind::ProcessExit,
                format!(
                    "`{program}` {}{}",
                    describe_exit(status),
                    stderr_tail(&stderr)
                ),
            )),
            Ended::Finished(Err(RunError::Wait(e))) => {
                reap(&mut child).await;
                Err(self.error(
                    FailureKind::Internal,
                    format!("cannot wait for `{program}`: {e}"),
                ))
            }
            Ended::Finished(Err(RunError::StdoutTooLarge)) => {
                reap(&mut child).await;
                Err(self.error(
                    FailureKind::ProcessExit,
                    format!(
                        "`{program}` wrote more than {MAX_STDOUT_BYTES} bytes to stdout; it was killed"
                    ),
                ))
            }
            Ended::Finished(Err(RunError::Read(e))) => {
                reap(&mut child).await;
                Err(self.error(
                    FailureKind::ProcessExit,
                    format!("cannot read the output of `{program}`: {e}"),
                ))
            }
            Ended::TimedOut => {
                reap(&mut child).await;
                Err(self.error(
                    FailureKind::Timeout,
                    format!(
                        "`{program}` did not finish within {:?}; it was killed",
                        self.settings.timeout
                    ),
                ))
            }
            Ended::Cancelled => {
                reap(&mut child).await;
                Err(self.error(
                    FailureKind::Cancelled,
                    format!("the call was cancelled; `{program}` was killed"),
                ))
            }
        }
    }
}

impl Provider for ExecProvider {
    fn name(&self) -> &str {
        &self.settings.name
    }

    fn kind(&self) -> ProviderKind {
        ProviderKind::Exec
    }

    fn default_model(&self) -> &str {
        &self.settings.model
    }

    fn complete<'a>(
        &'a self,
        request: &'a ChatRequest,
        workdir: Option<&'a std::path::Path>,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<ChatResponse, ProviderError>> {
        Box::pin(self.call(request, workdir, cancel))
    }
}

enum Ended {
    Finished(Result<Finished, RunError>),
    TimedOut,
    Cancelled,
}

struct Finished {
    status: ExitStatus,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
}

enum RunError {
    StdoutTooLarge,
    Read(std::io::Error),
    Wait(std::io::Error),
}

/// Feeds stdin, drains stdout and stderr, and waits for the exit, all at once: a child that
/// fills one pipe while we wait on another would otherwise deadlock. Stops early when stdout
/// goes over the cap.
async fn run_to_exit(
    child: &mut Child,
    stdin: Option<tokio::process::ChildStdin>,
    stdout: Option<tokio::process::ChildStdout>,
    stderr: Option<tokio::process::ChildStderr>,
    prompt: String,
) -> Result<Finished, RunError> {
    let feed = async move {
        if let Some(mut stdin) = stdin {
            // A child that exits without reading its input (EPIPE) is judged by its exit status,
            // not by our write; dropping stdin closes it so the child sees end of input.
            let _ = stdin.write_all(prompt.as_bytes()).await;
            let _ = stdin.shutdown().await;
        }
        Ok::<(), RunError>(())
    };
    let out = async move {
        match stdout {
            Some(s) => read_capped(s).await,
            None => Ok(Vec::new()),
        }
    };
    let err = async move {
        match stderr {
            Some(s) => read_tail(s).await.map_err(RunError::Read),
            None => Ok(Vec::new()),
        }
    };
    let wait = async { child.wait().await.map_err(RunError::Wait) };
    let ((), stdout, stderr, status) = tokio::try_join!(feed, out, err, wait)?;
    Ok(Finished {
        status,
        stdout,
        stderr,
    })
}

async fn read_capped(mut reader: impl AsyncRead + Unpin) -> Result<Vec<u8>, RunError> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = reader.read(&mut buf).await.map_err(RunError::Read)?;
        if n == 0 {
            return Ok(out);
        }
        if out.len() + n > MAX_STDOUT_BYTES {
            return Err(RunError::StdoutTooLarge);
        }
        out.extend_from_slice(&buf[..n]);
    }
}

/// Reads to the end, keeping only the last [`MAX_STDERR_BYTES`] (the end of a log explains the
/// failure).
async fn read_tail(mut reader: impl AsyncRead + Unpin) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = reader.read(&mut buf).await?;
        if n == 0 {
            return Ok(out);
        }
        out.extend_from_slice(&buf[..n]);
        if out.len() > 2 * MAX_STDERR_BYTES {
            out.drain(..out.len() - MAX_STDERR_BYTES);
        }
    }
}

/// Kills the child and waits for it, so it leaves no zombie; bounded by [`REAP_GRACE`], after
/// which `kill_on_drop` and tokio's orphan reaping take over.
async fn reap(child: &mut Child) {
    let _ = child.start_kill();
    let _ = tokio::time::timeout(REAP_GRACE, child.wait()).await;
}

fn describe_exit(status: ExitStatus) -> String {
    if let Some(code) = status.code() {
        return format!("exited with code {code}");
    }
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(signal) = status.signal() {
            return format!("was killed by signal {signal}");
        }
    }
    format!("ended unsuccessfully ({status})")
}

/// `; stderr (last N lines):\n…`, redacted by the caller, or nothing when stderr was empty.
fn stderr_tail(stderr: &[u8]) -> String {
    let text = String::from_utf8_lossy(stderr);
    let lines: Vec<&str> = text.trim_end().lines().collect();
    if lines.is_empty() {
        return String::new();
    }
    let tail = &lines[lines.len().saturating_sub(STDERR_TAIL_LINES)..];
    format!("; stderr (last {} lines):\n{}", tail.len(), tail.join("\n"))
}

/// The conversation as the plain text the CLI reads (format in the module documentation).
pub fn render_prompt(request: &ChatRequest) -> String {
    let mut sections: Vec<String> = Vec::new();
    let system: Vec<&str> = request
        .messages
        .iter()
        .filter(|m| m.role == Role::System)
        .map(|m| m.content.as_str())
        .collect();
    if !system.is_empty() {
        sections.push(format!("[system]\n{}", system.join("\n\n")));
    }
    for m in &request.messages {
        match m.role {
            Role::System => {}
            Role::User => sections.push(format!("[user]\n{}", m.content)),
            Role::Assistant => {
                let mut s = String::from("[assistant]");
                if !m.content.is_empty() {
                    s.push('\n');
                    s.push_str(&m.content);
                }
                for call in &m.tool_calls {
                    s.push_str(&format!(
                        "\n[tool call {}: {}]\n{}",
                        call.id, call.name, call.arguments
                    ));
                }
                sections.push(s);
            }
            Role::Tool => sections.push(format!(
                "[tool result {}]\n{}",
                m.tool_call_id.as_deref().unwrap_or("?"),
                m.content
            )),
        }
    }
    let mut out = sections.join("\n\n");
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::build::test_settings;
    use crate::provider::{Message, ToolCall, ToolChoice, ToolDefinition};

    fn request(tools: &[&str]) -> ChatRequest {
        ChatRequest {
            model: "agent".into(),
            messages: vec![
                Message::system("policy"),
                Message::user("review"),
                Message::assistant(
                    "Reading.",
                    vec![ToolCall {
                        id: "c1".into(),
                        name: "read".into(),
                        arguments: "{\"path\":\"a\"}".into(),
                    }],
                ),
                Message::tool_result("c1", "A"),
                Message::system("contract"),
            ],
            tools: tools
                .iter()
                .map(|n| ToolDefinition {
                    name: (*n).into(),
                    description: String::new(),
                    parameters: serde_json::json!({}),
                })
                .collect(),
            tool_choice: ToolChoice::Auto,
            temperature: None,
            max_tokens: None,
            constraint: None,
        }
    }

    #[test]
    fn renders_the_conversation_with_system_first() {
        assert_eq!(
            render_prompt(&request(&[])),
            "[system]\npolicy\n\ncontract\n\n[user]\nreview\n\n[assistant]\nReading.\n[tool call c1: read]\n{\"path\":\"a\"}\n\n[tool result c1]\nA\n"
        );
    }

    #[test]
    fn passes_the_flag_for_the_tool_list() {
        let mut s = test_settings(ProviderKind::Exec);
        s.command = vec!["agent".into(), "--print".into()];
        s.no_tools_flag = Some("--no-tools".into());
        s.tools_flag = Some("--allowed-tools={tools}".into());
        let p = ExecProvider::new(s).unwrap();
        assert_eq!(
            p.command_line(&request(&[])).unwrap(),
            ("agent".into(), vec!["--print".into(), "--no-tools".into()])
        );
        assert_eq!(
            p.command_line(&request(&["read", "grep"])).unwrap().1,
            vec!["--print".to_owned(), "--allowed-tools=read,grep".to_owned()]
        );
        let bare = ExecProvider::new(test_settings(ProviderKind::Exec)).unwrap();
        assert!(bare.command_line(&request(&["read"])).unwrap().1.is_empty());
    }

    #[test]
    fn stderr_tails_keep_the_last_lines() {
        let many: String = (1..=30).map(|i| format!("line {i}\n")).collect();
        let tail = stderr_tail(many.as_bytes());
        assert!(
            tail.starts_with("; stderr (last 20 lines):\nline 11\n"),
            "{tail}"
        );
        assert!(tail.ends_with("line 30"), "{tail}");
        assert_eq!(stderr_tail(b"\n"), "");
    }
}
