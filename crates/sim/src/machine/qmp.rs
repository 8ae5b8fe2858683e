//! QEMU's monitor protocol, just enough for power control: greeting,
//! `qmp_capabilities`, one command, its answer (events in between are
//! skipped; nothing here waits for one).

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;

use super::{MachineError, RuntimeFiles};

/// How long one QMP exchange may take; Proxmox's default for a QMP
/// command without a timeout of its own (`PVE::QMPClient`) is 5 s, but
/// TCG can be slow to answer while the guest is busy.
const QMP_TIMEOUT: Duration = Duration::from_secs(10);

/// Runs one QMP command on the VM of `dir` and returns its `return` value.
pub async fn qmp_command(
    dir: &Path,
    command: &str,
    arguments: Option<Value>,
) -> Result<Value, MachineError> {
    let socket = RuntimeFiles::of(dir).qmp;
    let failed = |detail: String| MachineError::Qmp {
        dir: dir.display().to_string(),
        command: command.to_string(),
        detail,
    };
    let exchange = async {
        let stream = UnixStream::connect(&socket)
            .await
            .map_err(|e| failed(format!("unable to connect to {}: {e}", socket.display())))?;
        let (read, mut write) = stream.into_split();
        let mut lines = BufReader::new(read).lines();
        let greeting = next_reply(&mut lines).await.map_err(failed)?;
        if greeting.get("QMP").is_none() {
            return Err(failed(format!("no QMP greeting: {greeting}")));
        }
        let mut answers = Vec::new();
        for (execute, args) in [("qmp_capabilities", None), (command, arguments)] {
            let mut request = json!({ "execute": execute });
            if let Some(args) = args {
                request["arguments"] = args;
            }
            let mut line = request.to_string();
            line.push('\n');
            write
                .write_all(line.as_bytes())
                .await
                .map_err(|e| failed(e.to_string()))?;
            let reply = next_reply(&mut lines).await.map_err(failed)?;
            if let Some(error) = reply.get("error") {
                let desc = error["desc"].as_str().unwrap_or("unknown error");
                return Err(failed(desc.to_string()));
            }
            answers.push(reply.get("return").cloned().unwrap_or(Value::Null));
        }
        Ok(answers.pop().unwrap_or(Value::Null))
    };
    tokio::time::timeout(QMP_TIMEOUT, exchange)
        .await
        .map_err(|_| failed("got timeout".into()))?
}

/// The next line that is not an event.
async fn next_reply(
    lines: &mut tokio::io::Lines<BufReader<tokio::net::unix::OwnedReadHalf>>,
) -> Result<Value, String> {
    loop {
        let line = lines
            .next_line()
            .await
            .map_err(|e| e.to_string())?
            .ok_or("QMP socket closed")?;
        let value: Value =
            serde_json::from_str(&line).map_err(|e| format!("bad QMP answer {line:?}: {e}"))?;
        if value.get("event").is_none() {
            return Ok(value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::UnixListener;

    #[tokio::test]
    async fn events_are_skipped_and_errors_keep_qemus_words() {
        let dir = tempfile::tempdir().unwrap();
        let listener = UnixListener::bind(dir.path().join("qmp.sock")).unwrap();
        let peer = tokio::spawn(async move {
            for answer in [
                r#"{"return": {}}"#,
                r#"{"error": {"class": "GenericError", "desc": "nope"}}"#,
            ] {
                let (stream, _) = listener.accept().await.unwrap();
                let (read, mut write) = stream.into_split();
                let mut lines = BufReader::new(read).lines();
                write
                    .write_all(b"{\"QMP\": {\"version\": {}, \"capabilities\": []}}\n")
                    .await
                    .unwrap();
                let caps = lines.next_line().await.unwrap().unwrap();
                assert!(caps.contains("qmp_capabilities"));
                write.write_all(b"{\"return\": {}}\n").await.unwrap();
                let cmd = lines.next_line().await.unwrap().unwrap();
                assert!(cmd.contains("system_powerdown"));
                write
                    .write_all(b"{\"event\": \"POWERDOWN\", \"timestamp\": {}}\n")
                    .await
                    .unwrap();
                write
                    .write_all(format!("{answer}\n").as_bytes())
                    .await
                    .unwrap();
            }
        });
        qmp_command(dir.path(), "system_powerdown", None)
            .await
            .unwrap();
        let err = qmp_command(dir.path(), "system_powerdown", None)
            .await
            .unwrap_err();
        assert!(
            err.to_string()
                .ends_with("qmp command 'system_powerdown' failed - nope"),
            "{err}"
        );
        peer.await.unwrap();
    }
}
