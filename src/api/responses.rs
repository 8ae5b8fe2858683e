//! The answers the routes document besides their JSON bodies: a refusal's
//! text, a job's event stream, a plain `ok`. The routes name them in their
//! `#[utoipa::path]`; the OpenAPI document (`openapi`) lists them.

use pvedeck_domain::types::StepEvent;

/// 400 a bad body, path or precondition (`VM is running`); 401 no valid
/// token (`API_TOKENS`); 403 a client outside `ALLOW_IPS`; 404 an unknown VM
/// or job; 409 a locked VM or a taken id; 500 Proxmox refused (its message);
/// 504 a command timed out. The body is the message, as text.
#[derive(utoipa::ToResponse)]
#[response(content_type = "text/plain")]
pub struct Refused(#[allow(dead_code)] String);

/// The job's events as they happen: each an `id:` (its place in the job)
/// and one `data:` line holding a `StepEvent` as JSON; the last is
/// `event: close` with `data: {}`. The `X-Job-Id` header names the job,
/// which `/api/jobs/{id}/events` replays.
#[derive(utoipa::ToResponse)]
#[response(content_type = "text/event-stream")]
pub struct Events(#[allow(dead_code)] StepEvent);

/// `ok`
#[derive(utoipa::ToResponse)]
#[response(content_type = "text/plain", example = json!("ok"))]
pub struct Done(#[allow(dead_code)] String);
