//! `/api/openapi.json`. The shapes are written by hand in `openapi.json`; the
//! OS table, the defaults and the bounds are filled in from where the engine
//! keeps them, so the document cannot drift from what the server accepts.

use app::os::{Os, RELEASES};
use app::rules::{DEFAULT_CPU, DEFAULT_DISK_GB, DEFAULT_RAM_MB, Limits, MIN_RAM_MB};
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde_json::{Value, json};

use super::ApiError;
use crate::server::AppState;

const SHAPES: &str = include_str!("openapi.json");

pub async fn openapi(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    document(*state.engine.limits())
        .map(Json)
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))
}

fn document(limits: Limits) -> Result<Value, serde_json::Error> {
    let mut doc: Value = serde_json::from_str(SHAPES)?;
    let oses: Vec<&str> = Os::ALL.map(Os::name).to_vec();
    let versions: Vec<&str> = RELEASES.iter().map(|r| r.version).collect();
    let ram_bounds = match limits.max_ram_mb {
        Some(max) => json!({"minimum": MIN_RAM_MB, "maximum": max}),
        None => json!({"minimum": MIN_RAM_MB}),
    };
    let fills = [
        ("Install/properties/os", json!({"enum": oses})),
        ("Install/properties/version", json!({"enum": versions})),
        ("Install/properties/cpu", json!({"default": DEFAULT_CPU})),
        ("Install/properties/ram", json!({"default": DEFAULT_RAM_MB})),
        (
            "Install/properties/disk",
            json!({"default": format!("{DEFAULT_DISK_GB}G")}),
        ),
        ("SetCpu/properties/cpu", json!({"maximum": limits.cpu()})),
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

    #[test]
    fn the_document_carries_the_engine_s_table_and_bounds() {
        let doc = document(Limits {
            max_cpu: Some(8),
            max_ram_mb: None,
            max_disk_gb: None,
        })
        .unwrap();
        let schema = |at: &str| doc.pointer(&format!("/components/schemas/{at}")).cloned();
        assert_eq!(
            schema("Install/properties/os/enum"),
            Some(json!(["debian", "ubuntu", "rockylinux"]))
        );
        assert_eq!(
            schema("Install/properties/version/enum").and_then(|v| v.as_array().map(Vec::len)),
            Some(RELEASES.len())
        );
        assert_eq!(
            schema("Install/properties/disk/default"),
            Some(json!("16G"))
        );
        assert_eq!(schema("SetCpu/properties/cpu/maximum"), Some(json!(8)));
        assert_eq!(
            schema("SetMemory/properties/memory/minimum"),
            Some(json!(512))
        );
        assert_eq!(schema("SetMemory/properties/memory/maximum"), None);
    }
}
