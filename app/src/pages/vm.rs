use leptos::either::Either;
use leptos::prelude::*;
use leptos_router::hooks::use_params_map;
use pvedeck_domain::format::num;
use pvedeck_domain::request::{Body, Field as Sent, SetCpu, SetDisk, SetMemory, SetNode};
use pvedeck_domain::types::{Resize, VmDetail};

use crate::api::{assign_vm, get_me, get_vm, migrate_vm, resize_vm};
use crate::components::field::Field;
use crate::components::options::options;
use crate::components::said::Said;
use crate::components::timeline::JobPanel;
use crate::components::vm_actions::{Outcome, OutcomeNote, VmActions};
use crate::error::UiError;
use crate::refresh::Latest;

/// What an input holds as the `set/*` body it becomes.
fn cpu_change(typed: &str) -> Resize {
    Resize::Cpu(SetCpu {
        cpu: Sent::number(typed),
    })
}

fn memory_change(typed: &str) -> Resize {
    Resize::Memory(SetMemory {
        memory: Sent::number(typed),
    })
}

/// The input holds GB to add; the body says `<n>G`.
fn disk_change(typed: &str) -> Resize {
    Resize::Disk(SetDisk {
        disk: Sent::Given(format!("{}G", typed.trim())),
    })
}

/// `/vm/:id`: one VM, its actions, resizing and migration.
#[component]
pub fn VmPage() -> impl IntoView {
    let params = use_params_map();
    let vmid = params
        .read_untracked()
        .get("id")
        .and_then(|v| v.parse::<u32>().ok());
    view! {
        <Suspense fallback=|| view! { <p class="loading">"Reading the VM…"</p> }>
            {Suspend::new(async move {
                match vmid {
                    Some(vmid) => {
                        let initial = get_vm(vmid).await.and_then(|a| a);
                        let admin = get_me().await.and_then(|a| a).is_ok_and(|me| me.is_admin() && me.sign_in);
                        Either::Left(view! {
                            // A plain link, outside the island: the console
                            // page is the server's, its script its own.
                            <p class="vm-links">
                                <a class="button" href=format!("/vm/{vmid}/console")>"Console"</a>
                            </p>
                            <LiveVm vmid initial admin/>
                        })
                    }
                    None => Either::Right(view! {
                        <h1>"VM"</h1>
                        <p class="error" role="alert">"not a VM id"</p>
                    }),
                }
            })}
        </Suspense>
    }
}

/// The VM as the server last read it, read again after each change.
#[island(lazy)]
fn LiveVm(vmid: u32, initial: Result<VmDetail, UiError>, admin: bool) -> impl IntoView {
    let owner = initial.as_ref().ok().map(|d| d.vm.owner.clone());
    let detail = RwSignal::new(initial);
    let latest = Latest::default();
    let reload = Callback::new(move |()| {
        latest.load(
            async move { get_vm(vmid).await.and_then(|a| a) },
            move |answer| detail.set(answer),
        );
    });
    // Kept here, outside what a reload of the VM re-renders.
    let confirming = RwSignal::new(None::<u32>);
    let busy = RwSignal::new(None::<u32>);
    let outcome = RwSignal::new(None::<Outcome>);
    let job = RwSignal::new(None::<u64>);
    let inputs = Inputs {
        cpu: RwSignal::new(String::new()),
        memory: RwSignal::new(String::new()),
        disk: RwSignal::new(String::new()),
        node: RwSignal::new(String::new()),
    };
    let on_outcome = Callback::new(move |o: Outcome| {
        if let Outcome::Job(id, _) = o {
            job.set(Some(id));
        }
        outcome.set(Some(o));
        reload.run(());
    });

    view! {
        {move || match detail.get() {
            Ok(d) => Either::Left(view! {
                <VmInfo detail=d confirming busy on_outcome inputs/>
            }),
            Err(e) => Either::Right(view! {
                <h1>"VM"</h1>
                <p class="error" role="alert">{e.message}</p>
            }),
        }}
        <OutcomeNote outcome/>
        {move || job.get().map(|id| Suspend::new(job_panel(id, reload)))}
        {owner.map(|owner| view! { <Ownership vmid owner admin/> })}
    }
}

/// The timeline of a job an action started. Most visits start none, so its
/// code is a module of its own, fetched when a job starts (the job page's
/// island shares it).
#[lazy]
fn job_panel(id: u64, on_done: Callback<()>) -> AnyView {
    view! { <JobPanel id initial=None on_done/> }.into_any()
}

#[derive(Clone, Copy)]
struct Inputs {
    cpu: RwSignal<String>,
    memory: RwSignal<String>,
    disk: RwSignal<String>,
    node: RwSignal<String>,
}

#[component]
fn VmInfo(
    detail: VmDetail,
    confirming: RwSignal<Option<u32>>,
    busy: RwSignal<Option<u32>>,
    on_outcome: Callback<Outcome>,
    inputs: Inputs,
) -> impl IntoView {
    let vm = detail.vm.clone();
    let vmid = vm.vmid;
    let limits = detail.limits;
    let stopped = !vm.running && vm.status == "stopped" && vm.lock.is_none();
    let current_disk = vm.disk;
    let title = if vm.name.is_empty() {
        format!("VM {vmid}")
    } else {
        format!("VM {vmid} — {}", vm.name)
    };
    let targets = detail.targets.clone();
    if inputs.node.get_untracked().is_empty()
        && let Some(first) = targets.first()
    {
        inputs.node.set(first.clone());
    }

    // The server's own checks of the same bodies, as you type.
    let refusal = move |value: RwSignal<String>, change: fn(&str) -> Resize| {
        Signal::derive(move || {
            let typed = value.get();
            if typed.trim().is_empty() {
                return None;
            }
            match change(&typed) {
                Resize::Cpu(body) => body.check(&limits).err().map(|r| r.0),
                Resize::Memory(body) => body.check(&limits).err().map(|r| r.0),
                Resize::Disk(body) => match body.check(&limits) {
                    Err(r) => Some(r.0),
                    Ok(growth) => limits
                        .check_growth(current_disk.floor() as u64, growth.gib())
                        .err()
                        .map(|r| r.0),
                },
            }
        })
    };
    let cpu_error = refusal(inputs.cpu, cpu_change);
    let memory_error = refusal(inputs.memory, memory_change);
    let disk_error = refusal(inputs.disk, disk_change);

    let apply = move |what: &'static str,
                      change: fn(&str) -> Resize,
                      value: RwSignal<String>,
                      error: Signal<Option<String>>| {
        move |ev: leptos::ev::SubmitEvent| {
            ev.prevent_default();
            if error.get().is_some() || value.get().trim().is_empty() {
                return;
            }
            let body = change(&value.get());
            busy.set(Some(vmid));
            leptos::task::spawn_local(async move {
                let result = resize_vm(vmid, body).await.and_then(|a| a);
                busy.set(None);
                on_outcome.run(match result {
                    Ok(()) => {
                        value.set(String::new());
                        Outcome::Done(format!("VM {vmid}: {what} changed"))
                    }
                    Err(e) => Outcome::Refused(format!(
                        "The server refused ({}): {}",
                        e.status, e.message
                    )),
                });
            });
        }
    };
    let migrate = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        let target = inputs.node.get();
        busy.set(Some(vmid));
        leptos::task::spawn_local(async move {
            let body = SetNode {
                node: Sent::Given(target.clone()),
            };
            let result = migrate_vm(vmid, body).await.and_then(|a| a);
            busy.set(None);
            on_outcome.run(match result {
                Ok(job) => Outcome::Job(job, format!("Migrating VM {vmid} to {target}")),
                Err(e) => {
                    Outcome::Refused(format!("The server refused ({}): {}", e.status, e.message))
                }
            });
        });
    };

    view! {
        <h1>{title}</h1>
        <section class="vm-detail">
            <dl class="facts">
                <dt>"State"</dt>
                <dd><span class=format!("badge state-{}", vm.status) data-state=vm.status.clone()>{vm.status.clone()}</span></dd>
                <dt>"Node"</dt><dd data-node=vm.node.clone()>{vm.node.clone()}</dd>
                <dt>"OS"</dt><dd>{vm.os.clone()}</dd>
                <dt>"vCPUs"</dt><dd class="cpu">{vm.cpu}</dd>
                <dt>"RAM"</dt><dd class="memory">{format!("{} GiB", num(vm.memory))}</dd>
                <dt>"Disk"</dt><dd class="disk">{format!("{} GiB", num(vm.disk))}</dd>
                <dt>"IP"</dt><dd><code>{vm.ip.clone()}</code></dd>
                {detail.host_key.clone().map(|k| view! { <dt>"Host key"</dt><dd class="host-key"><code>{k}</code></dd> })}
                {vm.lock.clone().map(|l| view! { <dt>"Lock"</dt><dd>{l}</dd> })}
            </dl>
            {(!vm.managed).then(|| view! {
                <p class="hint unmanaged">"pvedeck does not manage this VM (MANAGE): it is shown, not acted on."</p>
            })}
            <VmActions vm=vm.clone() confirming busy on_outcome/>
        </section>
        <section class="vm-changes">
            <h2>"Resources"</h2>
            {(!stopped).then(|| view! { <p class="hint">"Stop the VM to change its resources or move it (as go-pve-qemu requires)."</p> })}
            <form class="inline-form" on:submit=apply("cpu", cpu_change, inputs.cpu, cpu_error)>
                <Field id="new-cpu" label="vCPUs" kind="number" value=inputs.cpu error=cpu_error
                    placeholder=vm.cpu.to_string() disabled=!stopped/>
                <button type="submit" disabled=move || !stopped || busy.get().is_some()>"Set vCPUs"</button>
            </form>
            <form class="inline-form" on:submit=apply("memory", memory_change, inputs.memory, memory_error)>
                <Field id="new-memory" label="RAM (MB)" kind="number" value=inputs.memory error=memory_error
                    placeholder=((vm.memory * 1024.0).round() as i64).to_string() disabled=!stopped/>
                <button type="submit" disabled=move || !stopped || busy.get().is_some()>"Set RAM"</button>
            </form>
            <form class="inline-form" on:submit=apply("disk", disk_change, inputs.disk, disk_error)>
                <Field id="grow-disk" label="Add disk (GB)" kind="number" value=inputs.disk error=disk_error
                    placeholder="10".to_string() disabled=!stopped/>
                <button type="submit" disabled=move || !stopped || busy.get().is_some()>"Grow disk"</button>
            </form>
            <h2>"Node"</h2>
            <form class="inline-form" on:submit=migrate>
                <div class="field">
                    <label for="target">"Move to"</label>
                    <select id="target" disabled=!stopped on:change=move |ev| inputs.node.set(event_target_value(&ev))>
                        {options(targets.clone(), inputs.node.into())}
                    </select>
                </div>
                <button type="submit" disabled=move || !stopped || busy.get().is_some() || targets.is_empty()>"Migrate"</button>
            </form>
        </section>
        <details class="config">
            <summary>"Proxmox configuration (qm config)"</summary>
            <table>
                <tbody>
                    {detail.config.iter().map(|(k, v)| view! { <tr><th scope="row">{k.clone()}</th><td><code>{v.clone()}</code></td></tr> }).collect_view()}
                </tbody>
            </table>
        </details>
    }
}

/// Whose the VM is; an admin may give it to a user, or back to the admins.
/// Part of the VM page's island (an island of its own would add a split
/// point, and small modules, to every page's bundle).
#[component]
fn Ownership(vmid: u32, owner: Option<String>, admin: bool) -> impl IntoView {
    let owner = RwSignal::new(owner);
    let typed = RwSignal::new(String::new());
    let message = RwSignal::new(None::<(bool, String)>);
    let assign = move |user: Option<String>| {
        leptos::task::spawn_local(async move {
            match assign_vm(vmid, user.clone()).await.and_then(|a| a) {
                Ok(()) => {
                    let to = user.clone().unwrap_or_else(|| "the admins".to_string());
                    owner.set(user);
                    message.set(Some((true, format!("VM {vmid} is now {to}'s."))));
                }
                Err(e) => message.set(Some((false, e.message))),
            }
        });
    };
    let submit = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        let user = typed.get().trim().to_string();
        assign((!user.is_empty()).then_some(user));
    };
    view! {
        <section class="ownership" aria-labelledby="owner-heading">
            <h2 id="owner-heading">"Owner"</h2>
            <p class="owner">{move || owner.get().unwrap_or_else(|| "the admins (no owner)".to_string())}</p>
            {admin.then(|| view! {
                <form class="inline-form" on:submit=submit>
                    <div class="field">
                        <label for="assign-user">"Give to user"</label>
                        <input id="assign-user" type="text" prop:value=move || typed.get()
                            on:input=move |ev| typed.set(event_target_value(&ev))/>
                    </div>
                    <button type="submit">"Assign"</button>
                    <button type="button" on:click=move |_| assign(None)>"Give back to the admins"</button>
                </form>
            })}
            <Said message/>
        </section>
    }
}
