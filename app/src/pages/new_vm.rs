use leptos::either::Either;
use leptos::prelude::*;
use leptos_router::NavigateOptions;
use leptos_router::components::A;
use leptos_router::hooks::{use_navigate, use_query_map};

use crate::api::{get_catalog, start_install};
use crate::components::field::Field;
use crate::components::options::options;
use crate::components::timeline::JobView;
use crate::rules::{self, Limits};
use crate::types::{Catalog, InstallForm};

/// `/new`: the form, or (`/new?job=<id>`) the job it started, live.
#[component]
pub fn NewVm() -> impl IntoView {
    let query = use_query_map();
    let job = move || query.read().get("job").and_then(|j| j.parse::<u64>().ok());
    view! {
        <h1>"New virtual machine"</h1>
        {move || match job() {
            Some(id) => Either::Left(view! {
                <JobView id/>
                <p><A href="/new">"Create another VM"</A></p>
            }),
            None => Either::Right(view! { <NewVmForm/> }),
        }}
    }
}

#[component]
fn NewVmForm() -> impl IntoView {
    let catalog = Resource::new(|| (), |_| async { get_catalog().await.and_then(|a| a) });
    view! {
        <Suspense fallback=|| view! { <p class="loading">"Reading what the cluster offers…"</p> }>
            {move || Suspend::new(async move {
                match catalog.await {
                    Ok(c) => Either::Left(view! { <Form catalog=c/> }),
                    Err(e) => Either::Right(view! { <p class="error" role="alert">{e.message}</p> }),
                }
            })}
        </Suspense>
    }
}

#[component]
fn Form(catalog: Catalog) -> impl IntoView {
    let limits = Limits {
        max_cpu: catalog.max_cpu,
        max_ram_mb: catalog.max_ram_mb,
        max_disk_gb: catalog.max_disk_gb,
    };
    let oses = StoredValue::new(catalog.oses.clone());
    let first = catalog.oses.first().cloned();
    let os = RwSignal::new(first.as_ref().map(|o| o.os.clone()).unwrap_or_default());
    let version = RwSignal::new(
        first
            .as_ref()
            .and_then(|o| o.versions.last().cloned())
            .unwrap_or_default(),
    );
    let name = RwSignal::new(String::new());
    let cpu = RwSignal::new("2".to_string());
    let ram = RwSignal::new("2048".to_string());
    let disk = RwSignal::new("16".to_string());
    let user = RwSignal::new(String::new());
    let passwd = RwSignal::new(String::new());
    let pubkey = RwSignal::new(String::new());
    let node = RwSignal::new(catalog.main_node.clone());
    let server_error = RwSignal::new(None::<String>);
    let sending = RwSignal::new(false);

    let versions = move || {
        oses.with_value(|list| {
            list.iter()
                .find(|o| o.os == os.get())
                .map(|o| o.versions.clone())
                .unwrap_or_default()
        })
    };
    let default_user = Signal::derive(move || {
        oses.with_value(|list| {
            list.iter()
                .find(|o| o.os == os.get())
                .map(|o| format!("default: {}", o.default_user))
                .unwrap_or_default()
        })
    });

    let name_error = Signal::derive(move || rules::name_error(&name.get()));
    let cpu_error = Signal::derive(move || rules::cpu_error(&cpu.get(), &limits));
    let ram_error = Signal::derive(move || rules::ram_error(&ram.get(), &limits));
    let disk_error = Signal::derive(move || rules::disk_error(&disk.get(), &limits));
    let user_error = Signal::derive(move || rules::user_error(&user.get()));
    let passwd_error = Signal::derive(move || rules::passwd_error(&passwd.get()));
    let pubkey_error = Signal::derive(move || rules::pubkey_error(&pubkey.get()));
    let invalid = move || {
        [
            name_error,
            cpu_error,
            ram_error,
            disk_error,
            user_error,
            passwd_error,
            pubkey_error,
        ]
        .iter()
        .any(|e| e.get().is_some())
    };

    let navigate = use_navigate();
    let submit = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        if invalid() || sending.get() {
            server_error.set(Some("Fix the fields marked above first.".to_string()));
            return;
        }
        let form = InstallForm {
            os: os.get(),
            version: version.get(),
            name: name.get().trim().to_string(),
            node: Some(node.get()).filter(|n| !n.is_empty()),
            cpu: cpu.get().trim().parse().unwrap_or(0),
            ram: ram.get().trim().parse().unwrap_or(0),
            disk: format!("{}G", disk.get().trim()),
            user: user.get().trim().to_string(),
            passwd: passwd.get(),
            pubkey: pubkey.get().trim().to_string(),
        };
        sending.set(true);
        server_error.set(None);
        let navigate = navigate.clone();
        leptos::task::spawn_local(async move {
            match start_install(form).await.and_then(|a| a) {
                Ok(id) => navigate(
                    &format!("/new?job={id}"),
                    NavigateOptions {
                        replace: true,
                        ..Default::default()
                    },
                ),
                Err(e) => server_error.set(Some(format!(
                    "The server refused ({}): {}",
                    e.status, e.message
                ))),
            }
            sending.set(false);
        });
    };

    let ram_hint = match limits.max_ram_mb {
        Some(_) => "MB, at least 512 (up to the server's limit)",
        None => "MB, at least 512",
    };
    view! {
        <form class="vm-form" on:submit=submit novalidate>
            <fieldset>
                <legend>"System"</legend>
                <div class="field">
                    <label for="os">"Operating system"</label>
                    <select
                        id="os"
                        name="os"
                        on:change=move |ev| {
                            let chosen = event_target_value(&ev);
                            let latest = oses.with_value(|list| {
                                list.iter().find(|o| o.os == chosen).and_then(|o| o.versions.last().cloned())
                            });
                            os.set(chosen);
                            version.set(latest.unwrap_or_default());
                        }
                    >
                        {options(oses.with_value(|list| list.iter().map(|o| o.os.clone()).collect()), os.into())}
                    </select>
                </div>
                <div class="field">
                    <label for="version">"Version"</label>
                    <select id="version" name="version" on:change=move |ev| version.set(event_target_value(&ev))>
                        {move || options(versions(), version.into())}
                    </select>
                </div>
                <Field id="name" label="Name" value=name error=name_error hint="becomes <name>-<VMID>; empty: the VMID alone"/>
                <div class="field">
                    <label for="node">"Node"</label>
                    <select id="node" name="node" on:change=move |ev| node.set(event_target_value(&ev))>
                        {options(catalog.nodes.clone(), node.into())}
                    </select>
                </div>
            </fieldset>
            <fieldset>
                <legend>"Resources"</legend>
                <Field id="cpu" label="vCPUs" kind="number" value=cpu error=cpu_error/>
                <Field id="ram" label="RAM (MB)" kind="number" value=ram error=ram_error hint=ram_hint/>
                <Field id="disk" label="Disk (GB)" kind="number" value=disk error=disk_error hint="at least 16"/>
            </fieldset>
            <fieldset>
                <legend>"Access"</legend>
                <Field id="user" label="User" value=user error=user_error placeholder=default_user/>
                <Field id="passwd" label="Password" kind="password" value=passwd error=passwd_error hint="empty: 'passwd', as go-pve-qemu"/>
                <Field id="pubkey" label="SSH public key" value=pubkey error=pubkey_error hint="optional: ssh-ed25519 AAAA… you@host"/>
            </fieldset>
            <div class="form-actions">
                <button type="submit" class="primary" disabled=move || sending.get()>
                    {move || if sending.get() { "Starting…" } else { "Create VM" }}
                </button>
                <p class="form-error" role="alert">{move || server_error.get()}</p>
            </div>
        </form>
    }
}
