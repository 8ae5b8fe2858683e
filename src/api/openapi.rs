//! `/api/openapi.json`, derived (utoipa) from the wire types of
//! `pvedeck_domain::request`, the answers of `pvedeck_domain::types` and the handlers' own
//! `#[utoipa::path]` descriptions, so it cannot drift from the code. The
//! values that are configuration (`VM_MAX_*`) or tables (the releases,
//! the defaults) are filled in from where the engine keeps them.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde_json::{Value, json};
use utoipa::OpenApi;

use pvedeck_domain::account::AuditEntry;
use pvedeck_domain::os::RELEASES;
use pvedeck_domain::request::{InstallBody, SetCpu, SetDisk, SetMemory, SetNode, TemplateBody};
use pvedeck_domain::rules::{
    DEFAULT_CPU, DEFAULT_DISK_GB, DEFAULT_RAM_MB, Limits, MIN_RAM_MB, VMID_ADDRESSES,
};
use pvedeck_domain::types::{ClusterInfo, Job, JobDetail, StepEvent, TemplateInfo, VmList};

use super::ApiError;
use super::AppState;
use super::responses::{Done, Events, Refused};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "pvedeck",
        description = "go-pve-qemu's routes, answering as it did, and pvedeck's own."
    ),
    paths(
        super::health,
        super::vm::list,
        super::vm::clusters,
        super::vm::install,
        super::vm::status,
        super::console::console,
        super::vm::start,
        super::vm::stop,
        super::vm::shutdown,
        super::vm::reboot,
        super::vm::destroy,
        super::vm::set_cpu,
        super::vm::set_memory,
        super::vm::set_disk,
        super::vm::set_node,
        super::templates::list,
        super::templates::build,
        super::templates::rebuild,
        super::templates::delete,
        super::jobs::list,
        super::jobs::show,
        super::jobs::events,
        super::audit::list,
        openapi,
        super::sh::script,
    ),
    components(
        schemas(
            InstallBody,
            TemplateBody,
            TemplateInfo,
            SetCpu,
            SetMemory,
            SetDisk,
            SetNode,
            StepEvent,
            VmList,
            ClusterInfo,
            Job,
            JobDetail,
            AuditEntry
        ),
        responses(Refused, Events, Done)
    )
)]
struct ApiDoc;

/// `GET /api/openapi.json`
#[utoipa::path(
    get,
    tag = "server",
    path = "/api/openapi.json",
    responses((status = 200, description = "this document", body = Object))
)]
pub async fn openapi(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    document(state.engine.limits())
        .map(Json)
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))
}

fn document(limits: &Limits) -> Result<Value, serde_json::Error> {
    let mut doc = serde_json::to_value(ApiDoc::openapi())?;
    let versions: Vec<&str> = RELEASES.iter().map(|r| r.version).collect();
    let ram_bounds = match limits.max_ram_mb {
        Some(max) => json!({"minimum": MIN_RAM_MB, "maximum": max}),
        None => json!({"minimum": MIN_RAM_MB}),
    };
    let fills = [
        ("Install/properties/version", json!({"enum": versions})),
        (
            "Install/properties/id",
            json!({"minimum": VMID_ADDRESSES.start(), "maximum": VMID_ADDRESSES.end()}),
        ),
        ("Install/properties/cpu", json!({"default": DEFAULT_CPU})),
        ("Install/properties/ram", json!({"default": DEFAULT_RAM_MB})),
        (
            "Install/properties/disk",
            json!({"default": format!("{DEFAULT_DISK_GB}G")}),
        ),
        (
            "SetCpu/properties/cpu",
            json!({"minimum": 1, "maximum": limits.cpu()}),
        ),
        ("SetMemory/properties/memory", ram_bounds),
    ];
    for (at, fill) in fills {
        let pointer = format!("/components/schemas/{at}");
        if let (Some(Value::Object(target)), Value::Object(fill)) =
            (doc.pointer_mut(&pointer), fill)
        {
            target.extend(fill);
        }
    }
    Ok(doc)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/openapi.json: the document a server with no `VM_MAX_*` serves.
    /// `cargo xtask docs` runs this with `UPDATE_DOCS=1` to write it.
    #[test]
    fn generated_docs_are_current() {
        let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/openapi.json");
        let doc = document(&Limits::default()).unwrap();
        let want = format!(
            "{}
",
            serde_json::to_string_pretty(&doc).unwrap()
        );
        pvedeck_testkit::generated_file(&file, &want);
    }

    #[test]
    fn the_document_carries_the_engine_s_table_and_bounds() {
        let doc = document(&Limits {
            max_cpu: Some(8),
            max_ram_mb: None,
            max_disk_gb: None,
        })
        .unwrap();
        let schema = |at: &str| doc.pointer(&format!("/components/schemas/{at}")).cloned();
        assert_eq!(
            schema("Os/enum"),
            Some(json!(["debian", "ubuntu", "rockylinux"]))
        );
        assert_eq!(
            schema("Install/properties/version/enum").and_then(|v| v.as_array().map(Vec::len)),
            Some(RELEASES.len())
        );
        assert_eq!(schema("Install/required"), Some(json!(["os", "version"])));
        assert_eq!(
            schema("Install/properties/disk/default"),
            Some(json!("16G"))
        );
        assert_eq!(schema("Install/properties/id/maximum"), Some(json!(254)));
        assert_eq!(schema("SetCpu/properties/cpu/maximum"), Some(json!(8)));
        assert_eq!(
            schema("SetMemory/properties/memory/minimum"),
            Some(json!(512))
        );
        assert_eq!(schema("SetMemory/properties/memory/maximum"), None);
        // The events of the streaming routes are the engine's own type.
        assert!(schema("StepEvent/properties/status").is_some(), "{doc:#}");
        assert!(
            doc.pointer("/components/responses/Events/content/text~1event-stream/schema")
                .is_some(),
            "{doc:#}"
        );
    }
}
