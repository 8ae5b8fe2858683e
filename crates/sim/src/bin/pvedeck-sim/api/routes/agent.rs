//! `…/agent/ping`, `…/agent/exec` + `…/agent/exec-status`,
//! `…/agent/network-get-interfaces` (PVE 9 privileges `VM.GuestAgent.*`).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::extract::State;
use pvedeck_support::sync::lock;
use serde_json::json;

use super::super::error::ApiError;
use super::super::{Api, ApiResult, data};
use super::{Vm, VmParams};

pub async fn ping(State(api): State<Arc<Api>>, vm: Vm) -> ApiResult {
    vm.open(&api, &["VM.GuestAgent.Audit", "VM.GuestAgent.Unrestricted"])?;
    let Vm { node, id } = vm;
    api.sim.qm_agent_ping(&node, id).await?;
    Ok(data(json!({"result": {}})))
}

/// `POST …/agent/exec`: the simulated guest runs the command at once (its
/// commands are instant); the result waits for `exec-status`.
pub async fn exec(State(api): State<Arc<Api>>, VmParams(vm, params): VmParams) -> ApiResult {
    vm.open(&api, &["VM.GuestAgent.Unrestricted"])?;
    let Vm { node, id } = vm;
    let command = params.list("command");
    if command.is_empty() {
        return Err(ApiError::param(
            "command",
            "property is missing and it is not optional",
        ));
    }
    // The REST face waits for the end itself; exec-status then reports it.
    let result = api.sim.qm_guest_exec(&node, id, &command, 300).await?;
    let pid = api.next_pid.fetch_add(1, Ordering::Relaxed);
    lock(&api.execs).insert((id, pid), result);
    Ok(data(json!({ "pid": pid })))
}

/// `GET …/agent/exec-status?pid=`: out-data and err-data already decoded,
/// booleans 0/1. Like qga, a pid reported exited is forgotten.
pub async fn exec_status(State(api): State<Arc<Api>>, VmParams(vm, params): VmParams) -> ApiResult {
    vm.open(&api, &["VM.GuestAgent.Unrestricted"])?;
    let id = vm.id;
    let pid = params
        .int("pid")?
        .ok_or_else(|| ApiError::param("pid", "property is missing and it is not optional"))?;
    let found = u32::try_from(pid)
        .ok()
        .and_then(|pid| lock(&api.execs).remove(&(id, pid)));
    let Some(result) = found else {
        return Err(ApiError::new(500, "Agent error: Invalid parameter 'pid'"));
    };
    let mut out = serde_json::Map::new();
    match (result.exitcode, result.signal) {
        (Some(code), _) => {
            out.insert("exited".into(), json!(1));
            out.insert("exitcode".into(), json!(code));
        }
        (None, Some(signal)) => {
            out.insert("exited".into(), json!(1));
            out.insert("signal".into(), json!(signal));
        }
        (None, None) => {
            out.insert("exited".into(), json!(0));
        }
    }
    if !result.out.is_empty() {
        out.insert("out-data".into(), json!(result.out));
    }
    if !result.err.is_empty() {
        out.insert("err-data".into(), json!(result.err));
    }
    Ok(data(out))
}

pub async fn interfaces(State(api): State<Arc<Api>>, vm: Vm) -> ApiResult {
    vm.open(&api, &["VM.GuestAgent.Audit", "VM.GuestAgent.Unrestricted"])?;
    let Vm { node, id } = vm;
    let result = api.sim.qm_agent_interfaces(&node, id).await?;
    Ok(data(json!({ "result": result })))
}
