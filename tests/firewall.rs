//! Addresses cannot be taken (docs/security.md#addresses-cannot-be-taken):
//! the VMs pvedeck makes get the Proxmox firewall's IP filter where the
//! datacenter firewall is on, and a guest that claims the next VM's address
//! reaches pvedeck only where it is not. Every lane: the simulator's
//! firewall follows pve-firewall's rules whichever face sets it.

mod common;

use common::{Sse, install};
use serde_json::{Value, json};

const DEBIAN: &str = r#"{"os":"debian","version":"12","name":"web"}"#;
const ROOT_PASSWORD: &str = "Shared-Root-1";

fn ok(events: &[Sse]) {
    assert!(events.iter().all(|e| e.status() != "error"), "{events:#?}");
}

fn vm(state: &Value, vmid: u32) -> &Value {
    &state["vms"][vmid.to_string()]
}

/// The claims VM `vmid`'s guest made, and what reached it on each.
fn received(state: &Value, vmid: u32) -> Vec<String> {
    vm(state, vmid)["inside"]["claims"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|c| c["received"].as_array().cloned().unwrap_or_default())
        .filter_map(|r| r.as_str().map(str::to_string))
        .collect()
}

#[tokio::test]
async fn a_vm_sends_only_from_its_own_address_and_a_claim_on_the_next_is_dropped() {
    let server = common::server(&[("VM_ROOT_PASSWORD", ROOT_PASSWORD)]).await;
    common::datacenter_firewall(&server, true).await;

    // The tenant's VM: filtered before its first boot.
    let (_, events) = install(&server.url, DEBIAN).await;
    ok(&events);
    let order: Vec<&str> = events.iter().map(Sse::step).collect();
    let at = |step: &str| order.iter().position(|s| *s == step);
    let filter = at("VM initialization > setting IP filter").expect("the filter step");
    assert!(at("VM initialization > initializing configuration") < Some(filter));
    assert!(Some(filter) < at("VM initialization > waiting for ready"));
    let done = events
        .iter()
        .find(|e| e.step() == "VM initialization > setting IP filter" && e.status() == "success")
        .expect("the filter step's success");
    assert!(
        done.message().starts_with(&format!(
            "[+] IP filter set: net0 sends only from {}",
            common::ip(106)
        )),
        "{}",
        done.message()
    );
    let state = common::sim_state(&server);
    let tenant = vm(&state, 106);
    assert!(
        tenant["config"]["net0"]
            .as_str()
            .is_some_and(|n| n.ends_with(",bridge=vmbr0,firewall=1")),
        "{tenant}"
    );
    assert_eq!(
        tenant["firewall"]["options"],
        json!({"enable": "1", "ipfilter": "1", "policy_in": "ACCEPT", "policy_out": "ACCEPT"})
    );
    assert_eq!(
        tenant["firewall"]["ipsets"]["ipfilter-net0"]["entries"],
        json!([{"cidr": common::ip(106), "nomatch": false}])
    );

    // The attack: the tenant's guest answers for the next VM's address.
    common::claim(&server, 106, &common::ip(107)).await;
    let (_, events) = install(&server.url, DEBIAN).await;
    ok(&events);
    let state = common::sim_state(&server);
    assert_eq!(
        received(&state, 106),
        Vec::<String>::new(),
        "the claim never reached the wire"
    );
    let victim = vm(&state, 107);
    assert_eq!(
        victim["initialized"], true,
        "the script reached VM 107 itself"
    );
    assert!(
        victim["inside"]["root_hash"]
            .as_str()
            .is_some_and(|h| h.starts_with("$6$")),
        "{victim}"
    );
}

#[tokio::test]
async fn without_the_firewall_a_guest_at_the_next_address_is_pinned_and_gets_the_root_hash() {
    // The datacenter firewall is off, as on a new cluster: auto sets no filter.
    let server = common::server(&[("VM_ROOT_PASSWORD", ROOT_PASSWORD)]).await;
    let (_, events) = install(&server.url, DEBIAN).await;
    ok(&events);
    assert!(
        events
            .iter()
            .any(|e| e.step() == "VM creation > creating VM"
                && e.message()
                    == "[*] no IP filter: the datacenter firewall is disabled (VM_IP_FILTER=auto)"),
        "{events:#?}"
    );
    assert!(
        !events
            .iter()
            .any(|e| e.step().ends_with("setting IP filter"))
    );
    let state = common::sim_state(&server);
    assert_eq!(vm(&state, 106)["firewall"]["options"], json!({}));

    common::claim(&server, 106, &common::ip(107)).await;
    let (_, events) = install(&server.url, DEBIAN).await;
    // pvedeck cannot tell: the install "succeeds" against the wrong guest.
    ok(&events);
    let state = common::sim_state(&server);
    let got = received(&state, 106);
    assert!(got.iter().any(|r| r == "ready"), "{got:?}");
    assert!(
        got.iter().any(|r| r.starts_with("script $6$")),
        "the init script with the root hash went to VM 106: {got:?}"
    );
    assert_eq!(
        vm(&state, 107)["initialized"],
        false,
        "VM 107 itself never heard from pvedeck"
    );
}

#[tokio::test]
async fn clones_get_their_own_address_in_the_filter_and_the_template_keeps_none() {
    let server = common::server(&[]).await;
    common::datacenter_firewall(&server, true).await;
    let body = r#"{"os":"debian","version":"12","name":"web","method":"clone"}"#;
    let (_, events) = install(&server.url, body).await;
    ok(&events);
    let clone = events
        .iter()
        .find_map(|e| e.data["vm_id"].as_u64())
        .expect("the clone's id") as u32;
    assert!(
        events.iter().any(
            |e| e.message().contains("template build > setting IP filter")
                || e.message().contains("setting IP filter: ")
        ),
        "the template's build filtered its borrowed address too: {events:#?}"
    );
    let state = common::sim_state(&server);
    let ours = vm(&state, clone);
    assert!(
        ours["config"]["net0"]
            .as_str()
            .is_some_and(|n| n.ends_with("firewall=1")),
        "{ours}"
    );
    assert_eq!(
        ours["firewall"]["ipsets"]["ipfilter-net0"]["entries"],
        json!([{"cidr": common::ip(clone), "nomatch": false}]),
        "its own address, not the one the template borrowed"
    );
    assert_eq!(ours["firewall"]["options"]["enable"], "1");
    let template = state["vms"]
        .as_object()
        .and_then(|vms| {
            vms.values().find(|v| {
                v["config"]["template"] == "1"
                    && v["config"]["tags"]
                        .as_str()
                        .is_some_and(|t| t.contains("pvedeck-template"))
            })
        })
        .expect("the template pvedeck built");
    assert_eq!(template["firewall"]["options"]["enable"], "0", "{template}");
    assert_eq!(template["firewall"]["ipsets"], json!({}));
}

#[tokio::test]
async fn vm_ip_filter_off_sets_nothing_and_on_sets_it_whatever_the_datacenter_says() {
    let server = common::server(&[("VM_IP_FILTER", "off")]).await;
    common::datacenter_firewall(&server, true).await;
    let (_, events) = install(&server.url, DEBIAN).await;
    ok(&events);
    let state = common::sim_state(&server);
    assert_eq!(
        vm(&state, 106)["config"]["net0"]
            .as_str()
            .map(|n| n.ends_with("bridge=vmbr0")),
        Some(true)
    );
    assert_eq!(vm(&state, 106)["firewall"]["options"], json!({}));
    let reads = common::commands(&server)
        .await
        .iter()
        .filter(|c| c.contains("/firewall"))
        .count();
    assert_eq!(
        reads, 1,
        "only the test's own change of the datacenter firewall"
    );

    // `on`, the datacenter firewall off: set, ready for when it is enabled.
    let server = common::server(&[("VM_IP_FILTER", "on")]).await;
    let (_, events) = install(&server.url, DEBIAN).await;
    ok(&events);
    let state = common::sim_state(&server);
    assert_eq!(vm(&state, 106)["firewall"]["options"]["ipfilter"], "1");
}

#[tokio::test]
async fn a_filter_that_cannot_be_set_destroys_the_half_made_vm() {
    let server = common::server(&[("VM_IP_FILTER", "on")]).await;
    common::fault(
        &server,
        r#"{"op":"firewall","action":"fail","message":"Permission check failed (/vms/106, VM.Config.Network)"}"#,
    )
    .await;
    let (job, events) = install(&server.url, DEBIAN).await;
    let failed = events
        .iter()
        .find(|e| e.status() == "error")
        .expect("an error event");
    assert_eq!(failed.step(), "VM initialization > setting IP filter");
    assert_eq!(
        failed.message().split(" (").next(),
        Some("[-] failed to set the IP filter: Permission check failed")
    );
    assert!(
        events
            .iter()
            .any(|e| e.step() == "cleanup > destroying VM" && e.status() == "success"),
        "{events:#?}"
    );
    let detail = common::json(&format!("{}/api/jobs/{job}", server.url)).await;
    assert_eq!(detail["outcome"], "destroyed", "{detail}");
    assert!(common::vm(&server.url, 106).await.is_none(), "no VM left");
}

#[tokio::test]
async fn start_up_says_when_vms_are_not_kept_from_taking_addresses() {
    let log = |server: &common::Server| {
        std::fs::read_to_string(server.data_dir.join("server.log")).unwrap_or_default()
    };
    let dir = common::temp_dir("fw-auto");
    let server = common::process_server(&dir, &[]).await;
    let said = log(&server);
    assert!(
        said.contains("VM_IP_FILTER=auto: the datacenter firewall is disabled"),
        "{said}"
    );
    drop(server);
    let dir = common::temp_dir("fw-on");
    let server = common::process_server(&dir, &[("VM_IP_FILTER", "on")]).await;
    let said = log(&server);
    assert!(
        said.contains("VM_IP_FILTER=on, but the datacenter firewall is disabled"),
        "{said}"
    );
}
