//! `/vm/:id/console[?kind=serial]`: a VM's console. The page is drawn on
//! the server and needs no WASM: its one script (`/pkg/console/console.js`,
//! with noVNC or xterm.js, loaded only here) opens the console's WebSocket
//! (`/api/vm/:id/console`) and draws it. Whether the VM is the reader's,
//! running, and has a serial port is said on the page itself, so a
//! stopped VM's page explains and opens nothing.

use leptos::either::Either;
use leptos::prelude::*;
use leptos_router::hooks::{use_params_map, use_query_map};
use pvedeck_domain::types::VmDetail;

use crate::api::get_vm;
use crate::error::UiError;

/// Which console the page shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Vnc,
    Serial,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Vnc => "vnc",
            Kind::Serial => "serial",
        }
    }
}

/// What the page says before any script runs: `None` when the console
/// may open.
fn why_closed(vmid: u32, status: &str, has_serial: bool, kind: Kind) -> Option<String> {
    if status != "running" {
        return Some(format!(
            "VM {vmid} is {status}: start it to use its console."
        ));
    }
    if kind == Kind::Serial && !has_serial {
        return Some(format!(
            "VM {vmid} has no serial port (serial0): use its graphical console."
        ));
    }
    None
}

#[component]
pub fn ConsolePage() -> impl IntoView {
    let params = use_params_map();
    let query = use_query_map();
    let vmid = params
        .read_untracked()
        .get("id")
        .and_then(|v| v.parse::<u32>().ok());
    let kind = match query.read_untracked().get("kind").as_deref() {
        Some("serial") => Kind::Serial,
        _ => Kind::Vnc,
    };
    view! {
        <Suspense fallback=|| view! { <p class="loading">"Reading the VM…"</p> }>
            {Suspend::new(async move {
                let detail = match vmid {
                    Some(vmid) => get_vm(vmid).await.and_then(|a| a),
                    None => Err(UiError { status: 404, message: "not a VM id".into() }),
                };
                match detail {
                    Ok(detail) => Either::Left(view! { <Console detail kind/> }),
                    Err(e) => {
                        not_found_status(e.status);
                        Either::Right(view! {
                            <h1>"Console"</h1>
                            <p class="error" role="alert">{e.message}</p>
                        })
                    }
                }
            })}
        </Suspense>
    }
}

/// The page answers with the status its VM's read did (404 for a VM that
/// is not the reader's).
fn not_found_status(status: u16) {
    #[cfg(feature = "ssr")]
    if let (Some(response), Ok(code)) = (
        use_context::<leptos_axum::ResponseOptions>(),
        axum::http::StatusCode::from_u16(status),
    ) {
        response.set_status(code);
    }
    #[cfg(not(feature = "ssr"))]
    let _ = status;
}

#[component]
fn Console(detail: VmDetail, kind: Kind) -> impl IntoView {
    let vmid = detail.vm.vmid;
    let has_serial = detail.config.iter().any(|(k, _)| k == "serial0");
    let closed = why_closed(vmid, &detail.vm.status, has_serial, kind);
    let title = format!("Console of VM {vmid} ({})", detail.vm.name);
    let tab = move |k: Kind, label: &'static str| {
        let href = match k {
            Kind::Vnc => format!("/vm/{vmid}/console"),
            Kind::Serial => format!("/vm/{vmid}/console?kind=serial"),
        };
        view! {
            <a href=href class="tab" aria-current=(k == kind).then_some("page")>{label}</a>
        }
    };
    let status = closed.clone().unwrap_or_else(|| "Connecting…".to_string());
    let serial = kind == Kind::Serial;
    view! {
        <p class="crumbs"><a href=format!("/vm/{vmid}")>{format!("← VM {vmid}")}</a></p>
        <h1>{title}</h1>
        <nav class="tabs" aria-label="console">
            {tab(Kind::Vnc, "Graphical")}
            {tab(Kind::Serial, "Serial")}
        </nav>
        <section
            id="console"
            class="console"
            data-vmid=vmid.to_string()
            data-kind=kind.name()
            data-open=closed.is_none().to_string()
        >
            <div class="console-bar actions" role="toolbar" aria-label="console actions">
                <button type="button" id="console-cad" disabled=true
                    hidden=serial>"Ctrl-Alt-Del"</button>
                <button type="button" id="console-full" disabled=true>"Full screen"</button>
                <button type="button" id="console-reconnect" hidden=true>"Reconnect"</button>
                <button type="button" id="console-another" hidden=true>"Open another here"</button>
                <details class="console-paste">
                    <summary>"Paste"</summary>
                    <label for="console-paste-text">"Text to type into the console"</label>
                    <textarea id="console-paste-text" rows="3"></textarea>
                    <button type="button" id="console-paste-send" disabled=true>"Type it"</button>
                </details>
            </div>
            <p id="console-status" class="console-status" role="status" aria-live="polite">{status}</p>
            <noscript>
                <p class="error">"The console needs JavaScript: it draws the VM's screen from a WebSocket."</p>
            </noscript>
            <div id="console-screen" class="console-screen" tabindex="-1"></div>
        </section>
        <link rel="stylesheet" href="/pkg/console/console.css"/>
        {serial.then(|| view! { <link rel="stylesheet" href="/pkg/xterm/xterm.css"/> })}
        <script type="module" src="/pkg/console/console.js"></script>
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stopped_vm_or_a_missing_serial_port_is_said_before_anything_opens() {
        assert_eq!(
            why_closed(101, "stopped", true, Kind::Vnc).as_deref(),
            Some("VM 101 is stopped: start it to use its console.")
        );
        assert_eq!(why_closed(101, "running", false, Kind::Vnc), None);
        assert!(
            why_closed(101, "running", false, Kind::Serial)
                .is_some_and(|m| m.contains("no serial port"))
        );
        assert_eq!(why_closed(101, "running", true, Kind::Serial), None);
    }
}
