use leptos::prelude::*;
use pvedeck_domain::types::{VmAction, VmSummary};

use crate::api::act_on_vm;

/// What an action left to say: a job to follow, or a refusal.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Done(String),
    Job(u64, String),
    Refused(String),
}

/// Whether an action's precondition holds (go-pve-qemu's: start and
/// destroy need the VM stopped, the others running; nothing while locked;
/// nothing on a VM pvedeck does not manage).
pub fn allowed(vm: &VmSummary, action: VmAction) -> bool {
    let known = matches!(vm.status.as_str(), "running" | "stopped");
    known && vm.managed && !vm.reserved && vm.lock.is_none() && action.needs_running() == vm.running
}

/// Power and destroy buttons for a VM; destroy asks first, naming the VM.
/// `confirming` and `busy` live with the caller so that a refresh of the
/// list does not lose them.
#[component]
pub fn VmActions(
    vm: VmSummary,
    confirming: RwSignal<Option<u32>>,
    busy: RwSignal<Option<u32>>,
    #[prop(into)] on_outcome: Callback<Outcome>,
) -> impl IntoView {
    let vmid = vm.vmid;
    let label = if vm.name.is_empty() {
        format!("VM {vmid}")
    } else {
        format!("VM {vmid} \"{}\"", vm.name)
    };
    let run = move |action: VmAction| {
        busy.set(Some(vmid));
        confirming.set(None);
        leptos::task::spawn_local(async move {
            let outcome = match act_on_vm(vmid, action).await.and_then(|a| a) {
                Ok(Some(job)) => Outcome::Job(job, format!("{} VM {vmid}", action.label())),
                Ok(None) => Outcome::Done(format!("{}: VM {vmid} done", action.label())),
                Err(e) => Outcome::Refused(format!("{} VM {vmid}: {}", action.label(), e.message)),
            };
            busy.set(None);
            on_outcome.run(outcome);
        });
    };
    let button = {
        let vm = vm.clone();
        move |action: VmAction| {
            let enabled = allowed(&vm, action);
            let class = format!(
                "act act-{}",
                action.label().to_ascii_lowercase().replace(' ', "-")
            );
            view! {
                <button
                    type="button"
                    class=class
                    disabled=move || !enabled || busy.get() == Some(vmid)
                    aria-label=format!("{} VM {vmid}", action.label())
                    on:click=move |_| {
                        if action == VmAction::Destroy {
                            confirming.set(Some(vmid));
                        } else {
                            run(action);
                        }
                    }
                >
                    {action.label()}
                </button>
            }
        }
    };
    view! {
        <div class="actions" role="group" aria-label=format!("actions for VM {vmid}")>
            {button(VmAction::Start)}
            {button(VmAction::Shutdown)}
            {button(VmAction::Stop)}
            {button(VmAction::Reboot)}
            {button(VmAction::Destroy)}
        </div>
        <Show when=move || confirming.get() == Some(vmid)>
            <div class="confirm" role="alertdialog" aria-label=format!("destroy VM {vmid}")>
                <span>{format!("Destroy {label} and purge its disks?")}</span>
                <button type="button" class="danger" on:click=move |_| run(VmAction::Destroy)>
                    {format!("Destroy VM {vmid}")}
                </button>
                <button type="button" on:click=move |_| confirming.set(None)>"Cancel"</button>
            </div>
        </Show>
    }
}

/// The line under a list or page that says what the last action did.
#[component]
pub fn OutcomeNote(outcome: RwSignal<Option<Outcome>>) -> impl IntoView {
    move || {
        outcome.get().map(|o| match o {
            Outcome::Done(text) => {
                view! { <p class="note note-ok" role="status">{text}</p> }.into_any()
            }
            Outcome::Job(id, text) => view! {
                <p class="note note-ok" role="status">
                    {text} " — " <a href=format!("/jobs/{id}")>{format!("follow job #{id}")}</a>
                </p>
            }
            .into_any(),
            Outcome::Refused(text) => {
                view! { <p class="note error" role="alert">{text}</p> }.into_any()
            }
        })
    }
}
