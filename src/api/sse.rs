//! Server-sent events of a job: one `data:` line of JSON per event (written
//! by serde, never by string formatting) with its sequence number as `id:`,
//! and `event: close` / `data: {}` last, on success and on failure alike.

use std::convert::Infallible;
use std::sync::Arc;

use axum::http::HeaderValue;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};

use super::ApiError;
use crate::engine::{Actor, Engine};
use crate::jobs::Update;

fn to_event(update: Update) -> Event {
    match update {
        Update::Event(e) => Event::default()
            .id(e.seq.to_string())
            .json_data(&e.event)
            .unwrap_or_else(|_| Event::default().id(e.seq.to_string()).data("{}")),
        Update::Closed => Event::default().event("close").data("{}"),
    }
}

/// Replays job `id` after event `after`, then follows it live.
/// A job's events as `actor` may follow them: another user's job is 404.
/// `started`: this is the stream of the request that started the job.
pub async fn job_events(
    engine: &Arc<Engine>,
    actor: &Actor,
    id: u64,
    after: u64,
    started: bool,
) -> Result<Response, ApiError> {
    let rx = engine
        .follow_for(actor, id, after, started)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("job {id} not found")))?;
    // The follower task drops its sender after `Closed`, which ends the stream.
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        let update = rx.recv().await?;
        Some((Ok::<_, Infallible>(to_event(update)), rx))
    });
    let mut response = Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response();
    let headers = response.headers_mut();
    headers.insert("x-job-id", HeaderValue::from(id));
    // Reverse proxies must pass events on as they come.
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    Ok(response)
}
