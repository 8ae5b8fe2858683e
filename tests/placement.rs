//! `"node":"auto"` (docs/provisioning.md#placement) on the demo cluster,
//! whose nodes differ in size and use: pve1 has 107.5 GiB free of 128,
//! pve2 59.3 of 64, pve3 27 of 32. `MAIN_NODE` is pve3 here, so that a
//! VM made anywhere else was made there directly or migrated, and the
//! command log tells which.

mod common;

use common::{Lane, Sse, install, steps};

/// Whether the backend makes a placed VM on the main node and migrates it:
/// with `cli`, `qm disk import` reads pvedeck's image file on the main
/// node only.
fn migrates() -> bool {
    common::lane() == Lane::Cli
}

/// No migration ran, or (cli) exactly the one to the placed node.
fn check_migrations(commands: &[String], order: &[&str]) {
    let migrations = commands.iter().filter(|c| c.contains("migrate")).count();
    let step = order.contains(&"VM initialization > migrating VM");
    if migrates() {
        assert_eq!((migrations, step), (1, true), "{commands:#?}");
    } else {
        assert_eq!((migrations, step), (0, false), "{commands:#?}");
    }
}

const AUTO: &str = r#"{"os":"debian","version":"12","name":"placed","node":"auto"}"#;

fn messages<'a>(events: &'a [Sse], step: &str) -> Vec<&'a str> {
    events
        .iter()
        .filter(|e| e.step() == step)
        .map(Sse::message)
        .collect()
}

/// The VM's node as the list shows it.
async fn node_of(url: &str, events: &[Sse]) -> String {
    let vmid = events
        .iter()
        .find_map(|e| e.data["vm_id"].as_u64())
        .expect("the summary names the VM");
    let vm = common::vm(url, vmid).await.expect("the VM is listed");
    vm["node"].as_str().unwrap_or_default().to_string()
}

#[tokio::test]
async fn auto_makes_the_vm_on_the_node_with_the_most_free_memory() {
    let server = common::server(&[("MAIN_NODE", "pve3")]).await;
    let (_, events) = install(&server.url, AUTO).await;
    assert!(events.iter().all(|e| e.status() != "error"), "{events:#?}");
    let order = steps(&events);
    let at = |step: &str| order.iter().position(|s| *s == step);
    let placing = at("preparation > placing VM").expect("a placing step");
    assert_eq!(
        at("preparation > setting default config values"),
        Some(placing - 1)
    );
    assert_eq!(at("preparation > checking storage pool"), Some(placing + 1));

    let said = messages(&events, "preparation > placing VM");
    assert_eq!(
        said[0],
        "[*] place VM on the node with the most free memory (node auto)"
    );
    assert!(
        said.last().is_some_and(
            |m| m.starts_with("[+] placed on pve1: 107.5 GiB free of 128, most of 3 nodes (")
        ),
        "{said:?}"
    );
    assert!(
        messages(&events, "preparation > checking storage pool")
            .iter()
            .any(|m| m.starts_with("[+] storage pool local-zfs is available on pve1")),
    );

    // Made on pve1, not on the main node and moved: no migration ran.
    assert_eq!(node_of(&server.url, &events).await, "pve1");
    let commands = common::commands(&server).await;
    assert!(commands.iter().any(|c| c.starts_with("qm create ")));
    check_migrations(&commands, &order);
}

#[tokio::test]
async fn an_offline_node_is_ruled_out_and_the_next_most_free_taken() {
    let server = common::server(&[("MAIN_NODE", "pve3")]).await;
    common::node_state(&server, "pve1", "offline").await;
    let (_, events) = install(&server.url, AUTO).await;
    assert!(events.iter().all(|e| e.status() != "error"), "{events:#?}");
    let said = messages(&events, "preparation > placing VM");
    assert_eq!(said[1], "[*] pve1 ruled out: offline");
    assert!(
        said.last().is_some_and(|m| m.starts_with(
            "[+] placed on pve2: 59.3 GiB free of 64, most of the 2 of 3 nodes that fit ("
        )),
        "{said:?}"
    );
    assert_eq!(node_of(&server.url, &events).await, "pve2");
    check_migrations(&common::commands(&server).await, &steps(&events));
}

#[tokio::test]
async fn no_node_that_fits_is_409_naming_the_limit_and_runs_no_qm() {
    let server = common::server(&[("MAIN_NODE", "pve3")]).await;
    let before = common::commands(&server).await;
    let url = format!("{}/api/vm/install", server.url);
    // 300000 MB is more than any node may be given at MAX_OVERCOMMIT=1.
    let body = r#"{"os":"debian","version":"12","node":"auto","ram":300000}"#;
    let (status, text) = common::post_json(&url, body).await;
    assert_eq!(status, 409, "{text}");
    assert!(
        text.starts_with(
            "no node can take the VM (2 vCPU, 300000 MB): pve1: memory: its VMs would be \
             given 305.5 GiB, above the 128 GiB MAX_OVERCOMMIT allows; pve2: memory:"
        ),
        "{text}"
    );
    // Too many vCPUs rule nodes out as well.
    let body = r#"{"os":"debian","version":"12","node":"auto","cpu":32}"#;
    let (status, text) = common::post_json(&url, body).await;
    assert_eq!(status, 409, "{text}");
    assert!(
        text.contains(
            "pve1: cores: its VMs would have 39 vCPUs, above the 32 MAX_OVERCOMMIT allows"
        ),
        "{text}"
    );
    // Validation first: nothing ran on the cluster but reads.
    let ran: Vec<String> = common::commands(&server)
        .await
        .into_iter()
        .skip(before.len())
        .collect();
    assert!(ran.iter().all(|c| !c.starts_with("qm ")), "{ran:#?}");
    let jobs = common::json(&format!("{}/api/jobs", server.url)).await;
    assert_eq!(
        jobs.as_array().map(Vec::len).unwrap_or_default(),
        0,
        "{jobs}"
    );
}
