//! Several clusters from one pvedeck (docs/operations.md#several-clusters):
//! each with its own VMs, VMIDs and routes; one that cannot be read shows
//! as down while the others keep working. The default lane only: the
//! clusters here are two simulated ones in the server's own process.

mod common;

use common::{Lane, get, install, json, lane, post_json, server};

const DEBIAN: &str = r#"{"os":"debian","version":"12","name":"web","cluster":"west"}"#;

fn skipped() -> bool {
    lane() != Lane::Sim
}

/// The `cluster` of every entry of the VM list.
async fn clusters_listed(url: &str) -> Vec<String> {
    let list = json(&format!("{url}/api/vm/list")).await;
    let mut names: Vec<String> = list["list"]
        .as_array()
        .expect("a list")
        .iter()
        .map(|vm| vm["cluster"].as_str().unwrap_or("none").to_string())
        .collect();
    names.dedup();
    names
}

async fn commands_of(url: &str, cluster: &str) -> Vec<String> {
    let all = json(&format!("{url}/api/clusters/{cluster}/sim/commands")).await;
    all.as_array()
        .expect("commands")
        .iter()
        .filter_map(|c| c.as_str().map(str::to_string))
        .collect()
}

#[tokio::test]
async fn each_cluster_has_its_own_vms_and_routes() {
    if skipped() {
        return;
    }
    let server = server(&[("CLUSTERS", "east,west")]).await;
    let url = &server.url;
    let clusters = json(&format!("{url}/api/clusters")).await;
    let names: Vec<&str> = clusters
        .as_array()
        .expect("clusters")
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert_eq!(names, ["east", "west"]);
    assert_eq!(clusters_listed(url).await, ["east", "west"]);

    let (_, events) = install(url, DEBIAN).await;
    assert!(events.iter().all(|e| e.status() != "error"), "{events:#?}");
    let vmid = events
        .iter()
        .find_map(|e| e.data["vm_id"].as_u64())
        .expect("the VM's id");
    let list = json(&format!("{url}/api/vm/list")).await;
    let made: Vec<&serde_json::Value> = list["list"]
        .as_array()
        .expect("a list")
        .iter()
        .filter(|vm| vm["vmid"] == vmid && vm["name"] == format!("web-{vmid}"))
        .collect();
    assert_eq!(made.len(), 1, "{list}");
    assert_eq!(made[0]["cluster"], "west");
    let west = commands_of(url, "west").await;
    assert!(
        west.iter().any(|c| c.contains(&format!("create {vmid}"))),
        "{west:#?}"
    );
    let east = commands_of(url, "east").await;
    assert!(!east.iter().any(|c| c.contains("create")), "{east:#?}");

    let (status, body) = get(&format!("{url}/api/clusters/west/vm/{vmid}/status")).await;
    assert_eq!((status, body.as_str()), (200, "running"));
    // The default cluster's route is east's, where that VMID is not this VM.
    let default = get(&format!("{url}/api/vm/{vmid}/status")).await;
    let named = get(&format!("{url}/api/clusters/east/vm/{vmid}/status")).await;
    assert_eq!(default, named);

    let (status, body) = get(&format!("{url}/api/clusters/north/vm/{vmid}/status")).await;
    assert_eq!(status, 404, "{body}");
    assert!(body.contains("cluster 'north' not found"), "{body}");
    let (status, _) = post_json(&format!("{url}/api/clusters/north/vm/{vmid}/stop"), "").await;
    assert_eq!(status, 404);
    let (status, body) = post_json(
        &format!("{url}/api/vm/install"),
        r#"{"os":"debian","version":"12","cluster":"north"}"#,
    )
    .await;
    assert_eq!(status, 404, "{body}");
    let (status, body) = post_json(
        &format!("{url}/api/vm/install"),
        r#"{"os":"debian","version":"12","cluster":"no-such"}"#,
    )
    .await;
    assert_eq!(status, 400, "{body}");
    // The refused installs made nothing, in either cluster.
    let creates = |all: Vec<String>| all.iter().filter(|c| c.contains("create")).count();
    assert_eq!(creates(commands_of(url, "west").await), 1);
    assert_eq!(creates(commands_of(url, "east").await), 0);
}

#[tokio::test]
async fn a_cluster_that_cannot_be_read_shows_as_down_and_the_other_keeps_working() {
    if skipped() {
        return;
    }
    let server = server(&[("SIM_CLUSTERS", "2")]).await;
    let url = &server.url;
    assert_eq!(clusters_listed(url).await, ["default", "sim2"]);
    let (status, body) = post_json(
        &format!("{url}/api/clusters/sim2/sim/faults"),
        r#"{"op":"cluster","action":"fail","message":"connection refused"}"#,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    // A node's state changed through the control route makes the next
    // read of sim2 a fresh one, which fails.
    let (status, _) = post_json(&format!("{url}/api/clusters/sim2/sim/node/pve3/online"), "").await;
    assert_eq!(status, 200);

    let (status, _) = get(&format!("{url}/api/vm/list")).await;
    assert_eq!(status, 200, "the list is served with one cluster down");
    let clusters = json(&format!("{url}/api/clusters")).await;
    assert_eq!(clusters[0]["stale"], false, "{clusters}");
    assert_eq!(clusters[1]["stale"], true, "{clusters}");
    let failure = clusters[1]["failure"].as_str().unwrap_or_default();
    assert!(failure.contains("connection refused"), "{clusters}");

    let page = get(&format!("{url}/")).await.1;
    assert!(
        page.contains("Cluster sim2"),
        "the overview names the cluster"
    );
    assert!(page.contains("down: last read"), "and says it is down");

    let (_, events) = install(url, r#"{"os":"debian","version":"12"}"#).await;
    assert!(
        events.iter().all(|e| e.status() != "error"),
        "the default cluster installs: {events:#?}"
    );
}
