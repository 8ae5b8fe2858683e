//! `GET /api/vm/:id/console?kind=vnc|serial[&another=1]`: a VM's console
//! as a WebSocket (docs/http-api.md#consoles). Every check is the engine's
//! and runs before the upgrade, so a refusal is an HTTP status with its
//! message; the same request without an upgrade asks only the checks
//! (what the console page does to say why a console cannot open).

use std::collections::HashMap;

use axum::Extension;
use axum::extract::Query;
use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade, close_code};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use tokio::sync::mpsc;

use super::ApiError;
use super::cluster::On;
use super::vm::VmId;
use crate::engine::console::{ConsoleKind, End, Opened, relay};
use crate::engine::{Actor, Engine};

/// A close code of the application's own range: the reason says why.
const CLOSED: u16 = 4000;
/// Messages queued each way before the relay waits.
const QUEUE: usize = 32;
/// The largest message the browser may send (noVNC's are small; a paste
/// is typed key by key).
const MAX_MESSAGE: usize = 64 * 1024;

#[utoipa::path(
    get,
    tag = "vm",
    path = "/api/vm/{id}/console",
    params(
        ("id" = u32, Path, description = "VMID"),
        ("kind" = Option<String>, Query, description = "`vnc` (default): the graphical console, RFB with no authentication; `serial`: the serial port's bytes"),
        ("another" = Option<u8>, Query, description = "1: open one beside the caller's open console of this VM and kind"),
    ),
    responses(
        (status = 101, description = "the console, as a WebSocket of binary messages; it closes with code 4000 and the reason"),
        (status = 200, description = "without `Upgrade: websocket`: the console could open now", body = Object),
        (status = "default", response = super::responses::Refused)
    )
)]
pub async fn console(
    On(state): On,
    Extension(actor): Extension<Actor>,
    VmId(id): VmId,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Result<Response, ApiError> {
    let kind = match query.get("kind").map(String::as_str) {
        None => ConsoleKind::Vnc,
        Some(kind) => ConsoleKind::parse(kind).ok_or_else(|| {
            ApiError::bad(format!("invalid console kind '{kind}': 'vnc' or 'serial'"))
        })?,
    };
    let another = match query.get("another").map(String::as_str) {
        None | Some("0") => false,
        Some("1") => true,
        Some(other) => {
            return Err(ApiError::bad(format!(
                "invalid 'another' '{other}': 0 or 1"
            )));
        }
    };
    let engine = state.engine.clone();
    let Ok(upgrade) = upgrade else {
        let target = engine.check_console(&actor, id, kind).await?;
        return Ok(axum::Json(target).into_response());
    };
    let session = super::middleware::cookie(&headers, app::api::SESSION_COOKIE)
        .and_then(|id| engine.session_end(id));
    let (session_ends, session_hash) = session.unzip();
    let opened = engine
        .open_console(&actor, session_hash, id, kind, another)
        .await?;
    let session_ends = session_ends.map(tokio::time::Instant::from_std);
    Ok(upgrade
        .protocols(["binary"])
        .max_message_size(MAX_MESSAGE)
        .on_upgrade(move |socket| serve(socket, engine, actor, opened, session_ends)))
}

/// Pumps the WebSocket to and from the relay, then closes it with the
/// reason and audits the end.
async fn serve(
    socket: WebSocket,
    engine: std::sync::Arc<Engine>,
    actor: Actor,
    opened: Opened,
    session_ends: Option<tokio::time::Instant>,
) {
    let Opened {
        lease,
        stream,
        target,
    } = opened;
    let (mut sink, mut incoming) = socket.split();
    let (to_relay, from_browser) = mpsc::channel::<Bytes>(QUEUE);
    let (to_browser, mut from_relay) = mpsc::channel::<Bytes>(QUEUE);
    let reader = async move {
        while let Some(Ok(message)) = incoming.next().await {
            let bytes = match message {
                Message::Binary(bytes) => bytes,
                Message::Text(text) => Bytes::from(text.as_str().to_owned()),
                Message::Close(_) => break,
                Message::Ping(_) | Message::Pong(_) => continue,
            };
            if to_relay.send(bytes).await.is_err() {
                break;
            }
        }
    };
    let kind = lease.holder.kind;
    let limits = engine.consoles().limits();
    let relayed = relay(
        stream,
        kind,
        limits,
        from_browser,
        to_browser,
        lease.closed.clone(),
        session_ends,
    );
    let writer = async {
        while let Some(bytes) = from_relay.recv().await {
            if sink.send(Message::Binary(bytes)).await.is_err() {
                break;
            }
        }
    };
    // The relay ends the pair: its end drops the sender the writer reads,
    // and the reader stops with the browser.
    let reading = tokio::spawn(reader);
    let (outcome, ()) = tokio::join!(relayed, writer);
    reading.abort();
    let reason = match &outcome.end {
        End::Browser => None,
        End::Vm => Some(engine.console_ended(target.vmid).await),
        other => Some(other.to_string()),
    };
    if let Some(reason) = reason {
        let frame = CloseFrame {
            code: CLOSED,
            reason: short(&reason).into(),
        };
        let _ = sink.send(Message::Close(Some(frame))).await;
    } else {
        let frame = CloseFrame {
            code: close_code::NORMAL,
            reason: "".into(),
        };
        let _ = sink.send(Message::Close(Some(frame))).await;
    }
    engine.console_closed(&actor, &lease.holder, &outcome).await;
    drop(lease);
}

/// A close frame's reason fits 123 bytes.
fn short(reason: &str) -> String {
    let mut end = reason.len().min(123);
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    reason[..end].to_string()
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_close_reason_is_cut_at_a_character() {
        let long = "é".repeat(100);
        let cut = super::short(&long);
        assert!(cut.len() <= 123);
        assert!(cut.chars().all(|c| c == 'é'));
        assert_eq!(super::short("VM 101 is stopped"), "VM 101 is stopped");
    }
}
