//! The QEMU guest agent's protocol over the VM's `qga.sock`: JSON lines
//! through a virtio-serial port that outlives any one client, so answers
//! to an earlier client's commands may still be in the pipe. Every
//! connection therefore starts as Proxmox's does (`PVE::QMPClient`):
//! `guest-sync-delimited` with a fresh id, everything up to the agent's
//! 0xFF delimiter and any answer with another id is dropped.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};

use super::MachineError;

/// One request's answer time once the agent runs (Proxmox: 10 s for most
/// agent commands in `PVE::QMPClient`; `guest-ping` gets 3 s there, but
/// TCG guests under load answer slower).
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// What `guest-exec-status` reported last, decoded.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExecResult {
    pub pid: i64,
    /// False when the wait timed out first: the command still runs in the
    /// guest, as `qm guest exec --timeout` leaves it.
    pub exited: bool,
    pub exitcode: Option<i32>,
    pub signal: Option<i32>,
    pub out: String,
    pub err: String,
    pub out_truncated: bool,
    pub err_truncated: bool,
}

/// A synchronised connection to one VM's agent.
pub struct QgaClient {
    socket: PathBuf,
    read: BufReader<OwnedReadHalf>,
    write: OwnedWriteHalf,
}

impl QgaClient {
    /// Connects and synchronises. An agent that does not answer within
    /// `timeout` (not started yet, or no agent in the guest at all) is
    /// Proxmox's "QEMU guest agent is not running".
    pub async fn connect(socket: &Path, timeout: Duration) -> Result<Self, MachineError> {
        let not_running = |detail: String| MachineError::AgentNotRunning(detail);
        let stream = UnixStream::connect(socket).await.map_err(|e| {
            not_running(format!(
                "unable to connect to qga socket {} - {e}",
                socket.display()
            ))
        })?;
        let (read, write) = stream.into_split();
        let mut client = QgaClient {
            socket: socket.to_path_buf(),
            read: BufReader::new(read),
            write,
        };
        tokio::time::timeout(timeout, client.sync())
            .await
            .map_err(|_| not_running(format!("got timeout after {timeout:.0?}")))??;
        Ok(client)
    }

    async fn sync(&mut self) -> Result<(), MachineError> {
        let id = i64::from(getrandom::u32().unwrap_or(0x5eed) & 0x7fff_ffff);
        // A leading 0xFF resets the agent's JSON parser should an earlier
        // client have left half a request in it.
        let mut request = vec![0xFF];
        request.extend(
            json!({ "execute": "guest-sync-delimited", "arguments": { "id": id } })
                .to_string()
                .bytes(),
        );
        request.push(b'\n');
        self.send(&request).await?;
        loop {
            let mut skipped = Vec::new();
            let n = self
                .read
                .read_until(0xFF, &mut skipped)
                .await
                .map_err(|e| self.io(e))?;
            if n == 0 {
                return Err(MachineError::AgentNotRunning("qga socket closed".into()));
            }
            if skipped.last() != Some(&0xFF) {
                continue;
            }
            let answer = self.next_line().await?;
            // Not ours: an old client's sync answer; wait for the next 0xFF.
            if answer.get("return").and_then(Value::as_i64) == Some(id) {
                return Ok(());
            }
        }
    }

    /// One agent command; its `return` value, or the agent's error
    /// ("Agent error: …").
    pub async fn call(
        &mut self,
        command: &str,
        arguments: Option<Value>,
    ) -> Result<Value, MachineError> {
        let mut request = json!({ "execute": command });
        if let Some(arguments) = arguments {
            request["arguments"] = arguments;
        }
        let mut line = request.to_string().into_bytes();
        line.push(b'\n');
        let exchange = async {
            self.send(&line).await?;
            loop {
                let answer = self.next_line().await?;
                if let Some(error) = answer.get("error") {
                    let desc = error["desc"].as_str().unwrap_or("unknown error");
                    return Err(MachineError::Agent(desc.to_string()));
                }
                if let Some(value) = answer.get("return") {
                    return Ok(value.clone());
                }
                // Anything else (an event-like line) is not an answer.
            }
        };
        tokio::time::timeout(CALL_TIMEOUT, exchange)
            .await
            .map_err(|_| {
                MachineError::AgentNotRunning(format!(
                    "command '{command}' got timeout after {CALL_TIMEOUT:.0?}"
                ))
            })?
    }

    /// `guest-exec` with captured output; the guest pid.
    pub async fn exec_start(
        &mut self,
        argv: &[&str],
        input: Option<&[u8]>,
    ) -> Result<i64, MachineError> {
        let (path, args) = argv
            .split_first()
            .ok_or_else(|| MachineError::Spec("guest-exec needs a command".into()))?;
        let mut arguments = json!({ "path": path, "arg": args, "capture-output": true });
        if let Some(input) = input {
            arguments["input-data"] = STANDARD.encode(input).into();
        }
        let answer = self.call("guest-exec", Some(arguments)).await?;
        answer["pid"].as_i64().ok_or_else(|| {
            MachineError::Agent(format!(
                "can't execute command ({}): no pid in {answer}",
                argv.join(" ")
            ))
        })
    }

    /// `guest-exec-status`, its output decoded.
    pub async fn exec_status(&mut self, pid: i64) -> Result<ExecResult, MachineError> {
        let status = self
            .call("guest-exec-status", Some(json!({ "pid": pid })))
            .await?;
        let decoded = |key: &str| {
            status[key]
                .as_str()
                .and_then(|b64| STANDARD.decode(b64).ok())
                .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
                .unwrap_or_default()
        };
        let int = |key: &str| status[key].as_i64().and_then(|v| i32::try_from(v).ok());
        Ok(ExecResult {
            pid,
            exited: status["exited"].as_bool().unwrap_or(false),
            exitcode: int("exitcode"),
            signal: int("signal"),
            out: decoded("out-data"),
            err: decoded("err-data"),
            out_truncated: status["out-truncated"].as_bool().unwrap_or(false),
            err_truncated: status["err-truncated"].as_bool().unwrap_or(false),
        })
    }

    async fn send(&mut self, bytes: &[u8]) -> Result<(), MachineError> {
        let written = self.write.write_all(bytes).await;
        written.map_err(|e| self.io(e))
    }

    /// The next line that is JSON (the agent writes nothing else, but a
    /// line cut by an earlier client's disconnect may come first).
    async fn next_line(&mut self) -> Result<Value, MachineError> {
        loop {
            let mut line = Vec::new();
            let n = self
                .read
                .read_until(b'\n', &mut line)
                .await
                .map_err(|e| self.io(e))?;
            if n == 0 {
                return Err(MachineError::AgentNotRunning("qga socket closed".into()));
            }
            if let Ok(value) = serde_json::from_slice::<Value>(&line) {
                return Ok(value);
            }
        }
    }

    fn io(&self, source: std::io::Error) -> MachineError {
        MachineError::io(&self.socket, source)
    }
}

/// `qm agent <vmid> ping`: is the agent answering within `timeout`?
pub async fn qga_ping(socket: &Path, timeout: Duration) -> Result<(), MachineError> {
    let mut client = QgaClient::connect(socket, timeout).await?;
    client.call("guest-ping", None).await.map(drop)
}

/// `qm guest exec`: runs `argv` in the guest and waits up to `timeout` for
/// it to end (polling `guest-exec-status`, as Proxmox does).
pub async fn qga_exec(
    socket: &Path,
    argv: &[&str],
    timeout: Duration,
) -> Result<ExecResult, MachineError> {
    let started = Instant::now();
    let mut client = QgaClient::connect(socket, timeout.min(CALL_TIMEOUT)).await?;
    let pid = client.exec_start(argv, None).await?;
    let mut pause = Duration::from_millis(50);
    loop {
        let status = client.exec_status(pid).await?;
        if status.exited || started.elapsed() >= timeout {
            return Ok(status);
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(500));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::UnixListener;

    /// A fake agent: answers a sync after a stale answer and some noise,
    /// then as the script says.
    async fn fake_agent(listener: UnixListener, answers: Vec<&'static str>) {
        let (stream, _) = listener.accept().await.unwrap();
        let (read, mut write) = stream.into_split();
        let mut read = BufReader::new(read);
        let mut first = Vec::new();
        read.read_until(b'\n', &mut first).await.unwrap();
        assert_eq!(first[0], 0xFF, "the parser is reset first");
        let sync: Value = serde_json::from_slice(&first[1..]).unwrap();
        assert_eq!(sync["execute"], "guest-sync-delimited");
        let id = sync["arguments"]["id"].as_i64().unwrap();
        // An old client's answers, then a stale sync, then ours.
        write
            .write_all(b"{\"return\": {\"pid\": 1}}\n{\"ret")
            .await
            .unwrap();
        write.write_all(b"\xff{\"return\": 7}\n").await.unwrap();
        write.write_all(b"\0\0").await.unwrap();
        write.write_all(b"\xff").await.unwrap();
        write
            .write_all(format!("{{\"return\": {id}}}\n").as_bytes())
            .await
            .unwrap();
        for answer in answers {
            let mut request = String::new();
            read.read_line(&mut request).await.unwrap();
            let request: Value = serde_json::from_str(&request).unwrap();
            assert!(request["execute"].as_str().unwrap().starts_with("guest-"));
            write.write_all(answer.as_bytes()).await.unwrap();
            write.write_all(b"\n").await.unwrap();
        }
    }

    /// A socket in a fresh directory with [`fake_agent`] behind it.
    fn with_agent(
        answers: Vec<&'static str>,
    ) -> (
        tempfile::TempDir,
        std::path::PathBuf,
        tokio::task::JoinHandle<()>,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("qga.sock");
        let listener = UnixListener::bind(&socket).unwrap();
        (
            dir,
            socket.clone(),
            tokio::spawn(fake_agent(listener, answers)),
        )
    }

    #[tokio::test]
    async fn ping_after_a_sync_through_stale_answers() {
        let (_dir, socket, agent) = with_agent(vec!["{\"return\": {}}"]);
        qga_ping(&socket, Duration::from_secs(5)).await.unwrap();
        agent.await.unwrap();
    }

    #[tokio::test]
    async fn exec_polls_until_exited_and_decodes_the_output() {
        let (_dir, socket, agent) = with_agent(vec![
            "{\"return\": {\"pid\": 4242}}",
            "{\"return\": {\"exited\": false}}",
            // "hello\n" and "oops"
            "{\"return\": {\"exited\": true, \"exitcode\": 3, \"out-data\": \"aGVsbG8K\", \"err-data\": \"b29wcw==\"}}",
        ]);
        let result = qga_exec(
            &socket,
            &["/bin/sh", "-c", "echo hello; exit 3"],
            Duration::from_secs(5),
        )
        .await
        .unwrap();
        assert_eq!(
            result,
            ExecResult {
                pid: 4242,
                exited: true,
                exitcode: Some(3),
                signal: None,
                out: "hello\n".into(),
                err: "oops".into(),
                out_truncated: false,
                err_truncated: false,
            }
        );
        agent.await.unwrap();
    }

    #[tokio::test]
    async fn the_agents_own_errors_keep_its_words() {
        let (_dir, socket, agent) = with_agent(vec![
            "{\"error\": {\"class\": \"GenericError\", \"desc\": \"Failed to execute child process\"}}",
        ]);
        let err = qga_exec(&socket, &["/nope"], Duration::from_secs(5))
            .await
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "Agent error: Failed to execute child process"
        );
        agent.await.unwrap();
    }

    #[tokio::test]
    async fn a_silent_agent_is_not_running() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("qga.sock");
        // QEMU's side listens whether or not the guest's agent runs.
        let listener = UnixListener::bind(&socket).unwrap();
        let silent = tokio::spawn(async move {
            let (_stream, _) = listener.accept().await.unwrap();
            tokio::time::sleep(Duration::from_secs(2)).await;
        });
        let err = qga_ping(&socket, Duration::from_millis(300))
            .await
            .unwrap_err();
        assert!(
            err.to_string()
                .starts_with("QEMU guest agent is not running - got timeout"),
            "{err}"
        );
        silent.abort();
        let gone = qga_ping(&dir.path().join("none.sock"), Duration::from_millis(300))
            .await
            .unwrap_err();
        assert!(
            gone.to_string()
                .starts_with("QEMU guest agent is not running - unable to connect")
        );
    }
}
