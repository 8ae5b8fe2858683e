use leptos::prelude::*;
use pvedeck_domain::format::num;
use pvedeck_domain::types::{NodeSpark, NodeSummary};

use crate::components::bar::Bar;
use crate::components::chart::Sparkline;

fn share(part: f64, whole: f64) -> f64 {
    if whole > 0.0 {
        part / whole * 100.0
    } else {
        0.0
    }
}

#[component]
pub fn NodeCard(node: NodeSummary, spark: Option<NodeSpark>) -> impl IntoView {
    let state = if node.running {
        "online"
    } else {
        node.status.as_str()
    }
    .to_string();
    let vm_count = match node.vms {
        1 => "1 VM".to_string(),
        n => format!("{n} VMs"),
    };
    let used_mem = node.max_memory * node.memory_used / 100.0;
    view! {
        <article class="node-card" class:offline=!node.running data-node=node.node.clone()>
            <header>
                <h2>
                    <a href=format!("/node/{}", node.node) aria-label=format!("{}: history", node.node)>
                        {node.node.clone()}
                    </a>
                </h2>
                <span class=format!("badge state-{state}")>{state.clone()}</span>
            </header>
            <p class="node-meta">{vm_count}</p>
            {spark.map(|s| view! {
                <div class="sparks">
                    <Sparkline label="CPU" key="cpu" spark=s.cpu/>
                    <Sparkline label="RAM" key="ram" spark=s.memory/>
                </div>
            })}
            <Bar
                label="CPU"
                allocated=node.cpu
                used=node.cpu_used
                detail=format!("{} / {} vCPU", node.vcpus, node.max_cpu)
            />
            <Bar
                label="RAM"
                allocated=node.memory
                used=node.memory_used
                detail=format!("{} / {} GiB used", num(used_mem), num(node.max_memory))
            />
            <Bar
                label="Disk"
                allocated=share(node.disk, node.max_disk)
                used=share(node.disk_used, node.max_disk)
                detail=format!("{} GiB allocated of {} GiB", num(node.disk), num(node.max_disk))
            />
        </article>
    }
}
