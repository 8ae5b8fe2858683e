use leptos::prelude::*;
use pvedeck_domain::format::num;
use pvedeck_domain::types::{ListFilter, VmSummary};

use crate::components::vm_actions::{Outcome, VmActions};
use crate::keys;

fn state_label(vm: &VmSummary) -> String {
    match &vm.lock {
        Some(lock) => format!("{} (locked: {lock})", vm.status),
        None => vm.status.clone(),
    }
}

#[component]
pub fn VmTable(
    /// The VMs shown (one page).
    vms: Signal<Vec<VmSummary>>,
    /// How many VMs the filter keeps in all.
    total: Signal<usize>,
    filter: RwSignal<ListFilter>,
    confirming: RwSignal<Option<u32>>,
    busy: RwSignal<Option<u32>>,
    on_outcome: Callback<Outcome>,
    /// With several clusters, the default one's name: the table names each
    /// VM's cluster, and the pages and actions here reach the default
    /// cluster's VMs (the others' through `/api/clusters/:cluster/…`).
    #[prop(into)]
    default_cluster: Signal<Option<String>>,
) -> impl IntoView {
    let several = move || default_cluster.with(Option::is_some);
    let elsewhere = move |vm: &VmSummary| {
        default_cluster.with(|d| d.as_deref().is_some_and(|d| d != vm.cluster))
    };
    let shown = move || {
        vms.with(|vms| {
            vms.iter()
                .filter(|vm| match filter.get() {
                    ListFilter::All => true,
                    ListFilter::Running => vm.running,
                    ListFilter::Stopped => !vm.running && !vm.reserved,
                })
                .cloned()
                .collect::<Vec<_>>()
        })
    };
    let choice = move |value: ListFilter, text: &'static str| {
        view! {
            <button
                type="button"
                class="filter"
                aria-pressed=move || (filter.get() == value).to_string()
                on:click=move |_| filter.set(value)
            >
                {text}
            </button>
        }
    };

    view! {
        <section class="vms" aria-label="virtual machines">
            <div class="vms-head">
                <h2>"Virtual machines " <span class="count">{move || format!("({})", total.get())}</span></h2>
                <div class="filters" role="group" aria-label="show">
                    {choice(ListFilter::All, "All")}
                    {choice(ListFilter::Running, "Running")}
                    {choice(ListFilter::Stopped, "Stopped")}
                </div>
            </div>
            <div class="table-wrap" tabindex="0" role="region" aria-label="Virtual machines">
                <table class="vm-table">
                    <thead>
                        <tr>
                            {move || several().then(|| view! { <th scope="col">"Cluster"</th> })}
                            <th scope="col">"ID"</th>
                            <th scope="col">"Name"</th>
                            <th scope="col">"OS"</th>
                            <th scope="col">"Node"</th>
                            <th scope="col">"State"</th>
                            <th scope="col" class="num">"CPU"</th>
                            <th scope="col" class="num">"RAM (GiB)"</th>
                            <th scope="col" class="num">"Disk (GiB)"</th>
                            <th scope="col">"IP"</th>
                            <th scope="col">"Actions"</th>
                        </tr>
                    </thead>
                    <tbody>
                        <For each=shown key=keys::vm let:vm>
                            <tr data-vmid=vm.vmid data-cluster=vm.cluster.clone() class=format!("state-{}", vm.status)>
                                {
                                    let cluster = vm.cluster.clone();
                                    move || several().then(|| view! { <td class="vm-fact" data-label="Cluster">{cluster.clone()}</td> })
                                }
                                <td class="vm-id">
                                    {if vm.reserved || elsewhere(&vm) {
                                        vm.vmid.to_string().into_any()
                                    } else {
                                        view! { <a href=format!("/vm/{}", vm.vmid)>{vm.vmid}</a> }.into_any()
                                    }}
                                </td>
                                <td class="vm-name">
                                    {vm.name.clone()}
                                    {vm.owner.clone().map(|o| view! { <span class="owner-tag" title="owner">{o}</span> })}
                                </td>
                                <td class="vm-fact" data-label="OS">{vm.os.clone()}</td>
                                <td class="vm-fact" data-label="Node">{vm.node.clone()}</td>
                                <td class="vm-state"><span class=format!("badge state-{}", vm.status)>{state_label(&vm)}</span></td>
                                <td class="num vm-fact" data-label="CPU">{vm.cpu}</td>
                                <td class="num vm-fact" data-label="RAM (GiB)">
                                    {if vm.running {
                                        format!("{} / {}", num(vm.memory_used), num(vm.memory))
                                    } else {
                                        num(vm.memory)
                                    }}
                                </td>
                                <td class="num vm-fact" data-label="Disk (GiB)">{num(vm.disk)}</td>
                                <td class="vm-fact" data-label="IP"><code>{vm.ip.clone()}</code></td>
                                <td class="actions-cell">
                                    {match (vm.reserved, vm.managed) {
                                        (true, _) => ().into_any(),
                                        _ if elsewhere(&vm) => view! {
                                            <span class="unmanaged" title="this page acts on the default cluster's VMs">
                                                {format!("/api/clusters/{}/vm/{}", vm.cluster, vm.vmid)}
                                            </span>
                                        }.into_any(),
                                        (false, true) => view! {
                                            <VmActions vm=vm.clone() confirming busy on_outcome/>
                                        }.into_any(),
                                        (false, false) => view! {
                                            <span class="unmanaged" title="MANAGE: pvedeck acts only on the VMs it manages">"not managed by pvedeck"</span>
                                        }.into_any(),
                                    }}
                                </td>
                            </tr>
                        </For>
                    </tbody>
                </table>
            </div>
        </section>
    }
}
