use leptos::either::Either;
use leptos::prelude::*;
use leptos_router::components::A;
use leptos_router::hooks::use_query_map;
use pvedeck_domain::account::{Allowance, Usage};
use pvedeck_domain::os::Os;
use pvedeck_domain::request::{self, Field as Sent, InstallBody, NodeChoice, Refusal, Version};
use pvedeck_domain::rules::{self, Clamp, messages};
use pvedeck_domain::types::Catalog;

use crate::api::{get_catalog, get_me, start_install};
use crate::components::field::Field;
use crate::components::options::options;
use crate::components::timeline::JobView;

/// The page of job `id`, in place of the form (the server renders it with
/// the events so far; the back button does not return to a sent form).
fn show_job(id: u64) {
    #[cfg(feature = "hydrate")]
    {
        let _ = window().location().replace(&format!("/new?job={id}"));
    }
    #[cfg(not(feature = "hydrate"))]
    let _ = id;
}

/// What the form says of a size as you type, by the install's own rules:
/// the server's refusal, or the value its validation step will set instead
/// of the one typed.
#[derive(Debug, Clone, PartialEq)]
struct Said {
    error: Option<String>,
    note: Option<String>,
}

fn said<T: Copy + std::fmt::Display>(typed: &str, result: Result<Clamp<T>, Refusal>) -> Said {
    match result {
        Err(refused) => Said {
            error: Some(refused.0),
            note: None,
        },
        Ok(Clamp::Raised(v) | Clamp::Lowered(v)) if v.to_string() != typed.trim() => Said {
            error: None,
            note: Some(messages::clamped(v)),
        },
        Ok(_) => Said {
            error: None,
            note: None,
        },
    }
}

/// The disk field holds GB; the request says `<n>G`.
fn disk_sent(typed: &str) -> Sent<String> {
    match typed.trim() {
        "" => Sent::Absent,
        gb => Sent::Given(format!("{gb}G")),
    }
}

/// `/new`: the form, or (`/new?job=<id>`) the job it started, live.
#[component]
pub fn NewVm() -> impl IntoView {
    let query = use_query_map();
    let job = query
        .read_untracked()
        .get("job")
        .and_then(|j| j.parse::<u64>().ok());
    view! {
        <h1>"New virtual machine"</h1>
        {match job {
            Some(id) => Either::Left(view! {
                <JobView id/>
                <p><A href="/new">"Create another VM"</A></p>
            }),
            None => Either::Right(view! {
                <Suspense fallback=|| view! { <p class="loading">"Reading what the cluster offers…"</p> }>
                    {Suspend::new(async move {
                        let allowance = get_me().await.and_then(|a| a).ok().and_then(|me| me.allowance);
                        match get_catalog().await.and_then(|a| a) {
                            Ok(catalog) => Either::Left(view! { <Form catalog allowance/> }),
                            Err(e) => Either::Right(view! { <p class="error" role="alert">{e.message}</p> }),
                        }
                    })}
                </Suspense>
            }),
        }}
    }
}

/// What an install of these sizes takes from a quota (what the server
/// will count; a size it would refuse counts as nothing here).
fn ask(cpu: &str, ram: &str, disk: &str) -> Usage {
    let number = |typed: &str, default: u64| match typed.trim() {
        "" | "0" => default,
        n => n.parse().unwrap_or(0),
    };
    Usage {
        vms: 1,
        cores: number(cpu, rules::DEFAULT_CPU.unsigned_abs()),
        memory_mib: number(ram, rules::DEFAULT_RAM_MB.unsigned_abs()),
        disk_gib: number(disk, rules::DEFAULT_DISK_GB),
    }
}

#[island(lazy)]
fn Form(catalog: Catalog, allowance: Option<Allowance>) -> impl IntoView {
    let limits = catalog.limits;
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
    let cpu = RwSignal::new(rules::DEFAULT_CPU.to_string());
    let ram = RwSignal::new(rules::DEFAULT_RAM_MB.to_string());
    let disk = RwSignal::new(rules::DEFAULT_DISK_GB.to_string());
    let user = RwSignal::new(String::new());
    let passwd = RwSignal::new(String::new());
    let pubkey = RwSignal::new(String::new());
    // Placement is the form's default (docs/provisioning.md#placement);
    // a node chosen by name still moves the VM there once configured.
    let node = RwSignal::new(NodeChoice::AUTO.to_string());
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

    // Where the release has a ready golden template, the install clones it.
    let templates = StoredValue::new(catalog.templates.clone());
    let template = Signal::derive(move || {
        let name = Os::parse(&os.get())
            .and_then(|o| pvedeck_domain::os::find(o, &version.get()))
            .map(|r| r.template_name())?;
        templates.with_value(|t| t.contains(&name)).then_some(name)
    });
    let method_note = move || match template.get() {
        Some(name) => format!("A linked clone of template {name}: ready in seconds."),
        None => "No template for this release: the image is imported.".to_string(),
    };

    let name_error = Signal::derive(move || rules::name_error(&name.get()));
    let cpu_said = Memo::new(move |_| {
        let typed = cpu.get();
        said(&typed, request::install_cpu(Sent::number(&typed), &limits))
    });
    let ram_said = Memo::new(move |_| {
        let typed = ram.get();
        said(&typed, request::install_ram(Sent::number(&typed), &limits))
    });
    let disk_said = Memo::new(move |_| {
        let typed = disk.get();
        said(&typed, request::install_disk(disk_sent(&typed), &limits))
    });
    let cpu_error = Signal::derive(move || cpu_said.get().error);
    let ram_error = Signal::derive(move || ram_said.get().error);
    let disk_error = Signal::derive(move || disk_said.get().error);
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

    let usage = allowance.map(|a| a.used.against(a.quota));
    let past_quota = move || {
        let a = allowance?;
        a.used
            .exceeds(ask(&cpu.get(), &ram.get(), &disk.get()), a.quota)
    };
    let submit = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        if invalid() || sending.get() {
            server_error.set(Some("Fix the fields marked above first.".to_string()));
            return;
        }
        if let Some(refusal) = past_quota() {
            server_error.set(Some(format!("Past your quota: {refusal}")));
            return;
        }
        let password = passwd.get();
        let body = InstallBody {
            os: Sent::Given(os.get()),
            version: Sent::Given(Version(version.get())),
            name: Sent::text(&name.get()),
            node: Sent::text(&node.get()),
            cpu: Sent::number(&cpu.get()),
            ram: Sent::number(&ram.get()),
            disk: disk_sent(&disk.get()),
            user: Sent::text(&user.get()),
            // A password is sent as typed, spaces and all.
            passwd: if password.is_empty() {
                Sent::Absent
            } else {
                Sent::Given(password)
            },
            pubkey: Sent::text(&pubkey.get()),
            id: Sent::Absent,
            method: match template.get_untracked() {
                Some(_) => Sent::Given("clone".to_string()),
                None => Sent::Absent,
            },
            // With "auto" the server picks the cluster too.
            cluster: Sent::Absent,
        };
        sending.set(true);
        server_error.set(None);
        leptos::task::spawn_local(async move {
            match start_install(body).await.and_then(|a| a) {
                Ok(id) => show_job(id),
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
        {usage.map(|u| view! { <p class="note usage" data-usage="quota">{format!("Your quota: {u}.")}</p> })}
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
                    <p class="hint method-note" data-clone=move || template.get().is_some().to_string()>{method_note}</p>
                </div>
                <Field id="name" label="Name" value=name error=name_error hint="becomes <name>-<VMID>; empty: the VMID alone"/>
                <div class="field">
                    <label for="node">"Node"</label>
                    <select id="node" name="node" on:change=move |ev| node.set(event_target_value(&ev))>
                        <option value=NodeChoice::AUTO selected=move || node.get() == NodeChoice::AUTO>
                            "auto: the most free memory"
                        </option>
                        {options(catalog.nodes.clone(), node.into())}
                    </select>
                </div>
            </fieldset>
            <fieldset>
                <legend>"Resources"</legend>
                <Field id="cpu" label="vCPUs" kind="number" value=cpu error=cpu_error
                    note=Signal::derive(move || cpu_said.get().note)/>
                <Field id="ram" label="RAM (MB)" kind="number" value=ram error=ram_error hint=ram_hint
                    note=Signal::derive(move || ram_said.get().note)/>
                <Field id="disk" label="Disk (GB)" kind="number" value=disk error=disk_error hint="at least 16"
                    note=Signal::derive(move || disk_said.get().note)/>
            </fieldset>
            <fieldset>
                <legend>"Access"</legend>
                <Field id="user" label="User" value=user error=user_error placeholder=default_user/>
                <Field id="passwd" label="Password" kind="password" value=passwd error=passwd_error hint="empty: none, log in with a key (go-pve-qemu's was 'passwd')"/>
                <Field id="pubkey" label="SSH public key" value=pubkey error=pubkey_error hint="optional: ssh-ed25519 AAAA… you@host"/>
            </fieldset>
            <div class="form-actions">
                <button type="submit" class="primary" disabled=move || sending.get()>
                    {move || if sending.get() { "Starting…" } else { "Create VM" }}
                </button>
                <p class="form-error" role="alert">{move || server_error.get().or_else(|| past_quota().map(|r| format!("Past your quota: {r}")))}</p>
            </div>
        </form>
    }
}
