//! A VM's console through the REST API (docs/proxmox.md#consoles):
//! `vncproxy` (`websocket=1`) or `termproxy` makes Proxmox start a proxy
//! for one connection and answers its port and a one-time ticket; the
//! `vncwebsocket` upgrade, authenticated with the API token like every call,
//! connects to it. pvedeck relays the WebSocket's binary messages as a byte
//! stream: RFB for the graphical console (the ticket is its VNC password),
//! for the serial one termproxy's framing is spoken here, so the stream is
//! the terminal's bytes.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;

use super::client::ApiClient;
use super::pin::client_config;
use crate::{ConsoleKind, ConsoleStream, PveError};

/// How long connecting and the upgrade may take.
const CONNECT: Duration = Duration::from_secs(10);
/// termproxy closes a terminal that says nothing for long; its own client
/// pings every 30 s (pve-xtermjs).
const PING: Duration = Duration::from_secs(30);
/// What one read of the relay's side carries into one message.
const CHUNK: usize = 16 * 1024;

fn failed(what: &str, message: impl std::fmt::Display) -> PveError {
    PveError::command(what.to_string(), message.to_string(), 1)
}

/// A proxy's answer: where it listens and what opens it.
#[derive(Debug, PartialEq, Eq)]
struct Proxy {
    port: String,
    /// The `vncticket` of the upgrade (and termproxy's login).
    ticket: String,
    /// Whom the ticket was made for (termproxy's login names them).
    user: String,
    /// The VNC password: `password` where Proxmox generates one
    /// (`generate-password=1`, always since qemu-server 9.1.7), else the
    /// ticket itself.
    password: String,
}

/// `port`, `ticket`, `user` and `password` of a proxy's answer.
fn proxy_answer(what: &str, data: &Value) -> Result<Proxy, PveError> {
    let port = match data.get("port") {
        Some(Value::Number(n)) => n.to_string(),
        Some(Value::String(s)) => s.clone(),
        _ => return Err(failed(what, "Proxmox answered no port")),
    };
    let ticket = data
        .get("ticket")
        .and_then(Value::as_str)
        .ok_or_else(|| failed(what, "Proxmox answered no ticket"))?
        .to_string();
    let user = data
        .get("user")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let password = data
        .get("password")
        .and_then(Value::as_str)
        .filter(|p| !p.is_empty())
        .unwrap_or(&ticket)
        .to_string();
    Ok(Proxy {
        port,
        ticket,
        user,
        password,
    })
}

/// termproxy's input frame: `0:<length>:<bytes>`.
pub fn term_frame(data: &[u8]) -> Vec<u8> {
    let mut frame = format!("0:{}:", data.len()).into_bytes();
    frame.extend_from_slice(data);
    frame
}

impl ApiClient {
    /// Opens VM `vmid`'s console on `node`.
    pub async fn console(
        &self,
        node: &str,
        vmid: u32,
        kind: ConsoleKind,
    ) -> Result<ConsoleStream, PveError> {
        let base = format!("/nodes/{node}/qemu/{vmid}");
        let (path, params) = match kind {
            ConsoleKind::Vnc => (
                "vncproxy",
                vec![
                    ("websocket", "1".to_string()),
                    ("generate-password", "1".to_string()),
                ],
            ),
            ConsoleKind::Serial => ("termproxy", vec![("serial", "serial0".to_string())]),
        };
        let what = format!("POST {base}/{path}");
        let data = self.post(&format!("{base}/{path}"), &params).await?;
        let proxy = proxy_answer(&what, &data)?;
        let socket = self
            .upgrade(&format!(
                "{base}/vncwebsocket?port={}&vncticket={}",
                proxy.port,
                utf8_percent_encode(&proxy.ticket, NON_ALPHANUMERIC)
            ))
            .await?;
        let (near, far) = tokio::io::duplex(256 * 1024);
        match kind {
            ConsoleKind::Vnc => {
                tokio::spawn(pump_vnc(socket, far));
                Ok(ConsoleStream {
                    io: Box::new(near),
                    password: Some(proxy.password),
                })
            }
            ConsoleKind::Serial => {
                let mut socket = socket;
                // termproxy's first message: who, and the ticket; it
                // answers "OK" before the terminal's bytes.
                socket
                    .send(Message::binary(
                        format!("{}:{}\n", proxy.user, proxy.ticket).into_bytes(),
                    ))
                    .await
                    .map_err(|e| failed(&what, format!("the terminal's login: {e}")))?;
                tokio::spawn(pump_serial(socket, far));
                Ok(ConsoleStream {
                    io: Box::new(near),
                    password: None,
                })
            }
        }
    }

    /// The `vncwebsocket` upgrade at `path` (under the API's base), over
    /// the same TLS trust as every call, with the token.
    async fn upgrade(&self, path: &str) -> Result<Socket, PveError> {
        let what = format!("GET {}", path.split('?').next().unwrap_or(path));
        let url = format!("{}{path}", self.base());
        let Some(rest) = url.strip_prefix("https://") else {
            return Err(failed(&what, "the API's URL is not https://"));
        };
        let authority = rest.split('/').next().unwrap_or_default();
        let (host, port) = split_host(authority);
        let tls = client_config(self.trust(), self.seen().clone())
            .map_err(|e| failed(&what, format!("TLS: {e}")))?;
        let connector = tokio_rustls::TlsConnector::from(Arc::new(tls));
        let name =
            rustls::pki_types::ServerName::try_from(host.trim_matches(['[', ']']).to_string())
                .map_err(|e| failed(&what, format!("the API's host name: {e}")))?;
        let mut request = format!("wss://{rest}")
            .into_client_request()
            .map_err(|e| failed(&what, e))?;
        request
            .headers_mut()
            .insert("authorization", self.authorization().clone());
        request
            .headers_mut()
            .insert("sec-websocket-protocol", HeaderValue::from_static("binary"));
        let connect = async {
            let tcp = tokio::net::TcpStream::connect((host.trim_matches(['[', ']']), port))
                .await
                .map_err(|e| failed(&what, format!("cannot connect: {e}")))?;
            let stream = connector
                .connect(name, tcp)
                .await
                .map_err(|e| failed(&what, format!("TLS: {e}")))?;
            let (socket, _) = tokio_tungstenite::client_async(request, stream)
                .await
                .map_err(|e| failed(&what, format!("the WebSocket upgrade: {e}")))?;
            Ok::<_, PveError>(socket)
        };
        tokio::time::timeout(CONNECT, connect)
            .await
            .map_err(|_| failed(&what, "no answer within 10 s"))?
    }
}

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_rustls::client::TlsStream<tokio::net::TcpStream>>;

fn split_host(authority: &str) -> (&str, u16) {
    match authority.rsplit_once(':') {
        Some((host, port)) if !port.contains(']') => (host, port.parse().unwrap_or(443)),
        _ => (authority, 443),
    }
}

/// Binary messages both ways, as they are.
async fn pump_vnc(socket: Socket, mut far: DuplexStream) {
    let (mut sink, mut stream) = socket.split();
    let mut buf = vec![0u8; CHUNK];
    loop {
        tokio::select! {
            message = stream.next() => match message {
                Some(Ok(Message::Binary(bytes))) => {
                    if far.write_all(&bytes).await.is_err() { break; }
                }
                Some(Ok(Message::Text(text))) => {
                    if far.write_all(text.as_bytes()).await.is_err() { break; }
                }
                Some(Ok(Message::Ping(_) | Message::Pong(_) | Message::Frame(_))) => {}
                Some(Ok(Message::Close(_)) | Err(_)) | None => break,
            },
            read = far.read(&mut buf) => match read {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if sink.send(Message::binary(Bytes::copy_from_slice(&buf[..n]))).await.is_err() {
                        break;
                    }
                }
            },
        }
    }
    let _ = sink.close().await;
}

/// termproxy's side: after its "OK", its output as it is; our input in
/// its frames, and a ping every [`PING`].
async fn pump_serial(socket: Socket, mut far: DuplexStream) {
    let (mut sink, mut stream) = socket.split();
    let mut buf = vec![0u8; CHUNK];
    let mut greeted = false;
    let mut ping = tokio::time::interval(PING);
    ping.tick().await;
    loop {
        tokio::select! {
            message = stream.next() => {
                let bytes = match message {
                    Some(Ok(Message::Binary(bytes))) => bytes,
                    Some(Ok(Message::Text(text))) => Bytes::from(text.as_str().to_owned()),
                    Some(Ok(Message::Ping(_) | Message::Pong(_) | Message::Frame(_))) => continue,
                    Some(Ok(Message::Close(_)) | Err(_)) | None => break,
                };
                let mut bytes: &[u8] = &bytes;
                if !greeted {
                    greeted = true;
                    match bytes.strip_prefix(b"OK") {
                        Some(rest) => bytes = rest,
                        None => {
                            tracing::warn!("termproxy refused the login: {}", String::from_utf8_lossy(bytes));
                            break;
                        }
                    }
                }
                if far.write_all(bytes).await.is_err() { break; }
            }
            read = far.read(&mut buf) => match read {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if sink.send(Message::binary(term_frame(&buf[..n]))).await.is_err() {
                        break;
                    }
                }
            },
            _ = ping.tick() => {
                if sink.send(Message::binary(&b"2"[..])).await.is_err() { break; }
            }
        }
    }
    let _ = sink.close().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn input_is_framed_as_termproxy_reads_it() {
        assert_eq!(term_frame(b"root\r"), b"0:5:root\r");
        assert_eq!(term_frame(b""), b"0:0:");
    }

    #[test]
    fn a_proxy_answer_gives_port_ticket_and_user() {
        let data = serde_json::json!({"port": "5900", "ticket": "PVEVNC:abc", "user": "u@pve!t"});
        assert_eq!(
            proxy_answer("x", &data).unwrap(),
            Proxy {
                port: "5900".into(),
                ticket: "PVEVNC:abc".into(),
                user: "u@pve!t".into(),
                password: "PVEVNC:abc".into(),
            },
            "before qemu-server 9.1.7 the ticket is the VNC password"
        );
        let generated = serde_json::json!({
            "port": 5901, "ticket": "password:PVEVNC:abc", "password": "x7#kQ2!m"
        });
        let proxy = proxy_answer("x", &generated).unwrap();
        assert_eq!(proxy.port, "5901");
        assert_eq!(proxy.password, "x7#kQ2!m");
        assert!(proxy_answer("x", &serde_json::json!({"port": 1})).is_err());
    }

    #[test]
    fn the_host_and_port_of_the_api() {
        assert_eq!(split_host("pve1:8006"), ("pve1", 8006));
        assert_eq!(split_host("[::1]:8006"), ("[::1]", 8006));
        assert_eq!(split_host("pve1"), ("pve1", 443));
    }
}
