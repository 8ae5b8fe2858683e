//! `GET /api/vm/list` and friends over real HTTP, on the demo simulated
//! cluster whose figures `crates/sim/src/seed.rs` chose to be checkable by hand.

mod common;

use serde_json::Value;

async fn list(url: &str, query: &str) -> Value {
    let (status, body) = common::get(&format!("{url}/api/vm/list{query}")).await;
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).expect("JSON")
}

fn node<'a>(list: &'a Value, name: &str) -> &'a Value {
    list["cluster"]
        .as_array()
        .and_then(|nodes| nodes.iter().find(|n| n["node"] == name))
        .unwrap_or_else(|| panic!("node {name} in {list}"))
}

fn vmids(list: &Value) -> Vec<u64> {
    list["list"]
        .as_array()
        .map(|vms| vms.iter().filter_map(|v| v["vmid"].as_u64()).collect())
        .unwrap_or_default()
}

#[tokio::test]
async fn health_answers_ok_in_plain_text() {
    let server = common::server(&[]).await;
    let res = reqwest::get(format!("{}/api/health", server.url))
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(
        res.headers()["content-type"].to_str().unwrap(),
        "text/plain; charset=utf-8"
    );
    assert_eq!(res.text().await.unwrap(), "ok");
}

#[tokio::test]
async fn list_of_the_demo_cluster_has_go_pve_qemu_keys_units_and_order() {
    let server = common::server(&[]).await;
    let all = list(&server.url, "").await;

    assert_eq!(vmids(&all), [101, 102, 103, 104, 105, 110]);
    assert_eq!(all["count"], 6);

    let web = &all["list"][0];
    assert_eq!(web["name"], "web-01-101");
    assert_eq!(web["os"], "ubuntu");
    assert_eq!(web["running"], true);
    assert_eq!(web["node"], "pve1");
    assert_eq!(web["cpu"], 2);
    assert_eq!(web["disk"], 40.0);
    assert_eq!(web["memory"], 4.0);
    assert_eq!(web["memory_used"], 1.5);
    assert_eq!(web["ip"], common::ip(101));

    // 1.5 GiB stays 1.5 (go-pve-qemu truncated it to 1).
    let cache = &all["list"][3];
    assert_eq!(cache["vmid"], 104);
    assert_eq!(cache["memory"], 1.5);
    assert_eq!(cache["memory_used"], 0.75);
    assert_eq!(all["list"][2]["running"], false);

    let names: Vec<&str> = all["cluster"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|n| n["node"].as_str())
        .collect();
    assert_eq!(names, ["pve1", "pve2", "pve3"]);

    // pve1: 6 of 32 vCPUs, 12 of 128 GiB allocated; 16.125 GiB in use
    // (8 host + 1.5 + 6.5 + 0.125 for the container); 40 + 100 GiB of disk.
    let pve1 = node(&all, "pve1");
    assert_eq!(pve1["running"], true);
    assert_eq!(pve1["max_cpu"], 32);
    assert_eq!(pve1["max_memory"], 128.0);
    assert_eq!(pve1["cpu"], 18.75);
    assert_eq!(pve1["memory"], 9.38);
    assert_eq!(pve1["memory_used"], 12.6);
    assert_eq!(pve1["disk"], 140.0);

    // pve2: the template's 2 cores and 2 GiB are not allocated to a VM.
    let pve2 = node(&all, "pve2");
    assert_eq!(pve2["cpu"], 62.5);
    assert_eq!(pve2["memory"], 27.34);
    assert_eq!(pve2["memory_used"], 6.25);
    assert_eq!(pve2["disk"], 80.0);

    let pve3 = node(&all, "pve3");
    assert_eq!(pve3["max_memory"], 32.0);
    assert_eq!(pve3["cpu"], 37.5);
    assert_eq!(pve3["memory"], 9.38);
    assert_eq!(pve3["memory_used"], 12.5);
    assert_eq!(pve3["disk"], 52.0);
}

#[tokio::test]
async fn disable_filters_running_or_stopped_and_allocation_follows() {
    let server = common::server(&[]).await;

    let running = list(&server.url, "?disable=0").await;
    assert_eq!(vmids(&running), [101, 102, 104, 110]);
    assert_eq!(node(&running, "pve2")["cpu"], 12.5);
    assert_eq!(node(&running, "pve2")["memory"], 2.34);
    assert_eq!(node(&running, "pve3")["memory"], 6.25);

    let stopped = list(&server.url, "?disable=1").await;
    assert_eq!(vmids(&stopped), [103, 105]);
    assert_eq!(stopped["count"], 2);
    assert_eq!(node(&stopped, "pve1")["cpu"], 0.0);
    assert_eq!(node(&stopped, "pve2")["memory"], 25.0);
    assert_eq!(node(&stopped, "pve3")["memory"], 3.13);

    // Anything else means all, as in go-pve-qemu.
    for query in ["?disable=2", "?disable=yes", "?disable=", "?other=1"] {
        assert_eq!(vmids(&list(&server.url, query).await).len(), 6, "{query}");
    }
}

#[tokio::test]
async fn reserved_ids_are_listed_with_node_and_os_dash() {
    let server = common::server(&[("RESERVED", "100:router,120:nas")]).await;
    let all = list(&server.url, "").await;
    assert_eq!(vmids(&all), [100, 101, 102, 103, 104, 105, 110, 120]);
    let router = &all["list"][0];
    assert_eq!(router["name"], "router");
    assert_eq!(router["node"], "-");
    assert_eq!(router["os"], "-");
    assert_eq!(router["reserved"], true);
    assert_eq!(router["ip"], common::ip(100));
    // Reserved hosts are neither running nor stopped VMs.
    assert_eq!(vmids(&list(&server.url, "?disable=1").await), [103, 105]);
}

#[tokio::test]
async fn an_offline_node_shows_offline_and_its_vms_unknown() {
    let server = common::server(&[]).await;
    common::node_state(&server, "pve3", "offline").await;
    let all = list(&server.url, "").await;
    let pve3 = node(&all, "pve3");
    assert_eq!(pve3["running"], false);
    assert_eq!(pve3["status"], "offline");
    assert_eq!(pve3["memory_used"], 0.0);
    let monitor = all["list"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["vmid"] == 110)
        .unwrap();
    assert_eq!(monitor["status"], "unknown");
    assert_eq!(monitor["running"], false);
}

#[tokio::test]
async fn unknown_paths_are_404_text_under_api_and_a_404_page_elsewhere() {
    let server = common::server(&[]).await;
    let (status, body) = common::get(&format!("{}/api/nope", server.url)).await;
    assert_eq!((status, body.as_str()), (404, "404 page not found"));
    let (status, body) = common::get(&format!("{}/api/vm/101/nope", server.url)).await;
    assert_eq!((status, body.as_str()), (404, "404 page not found"));

    let (status, body) = common::get(&format!("{}/no/such/page", server.url)).await;
    assert_eq!(status, 404);
    assert!(body.contains("404 — page not found"), "{body}");
}

#[tokio::test]
async fn overview_page_is_server_rendered_with_nodes_and_vms() {
    let server = common::server(&[]).await;
    let (status, body) = common::get(&format!("{}/", server.url)).await;
    assert_eq!(status, 200);
    for needle in [
        r#"data-node="pve1""#,
        r#"data-node="pve3""#,
        r#"data-vmid="110""#,
        "db-01-102",
        "/pkg/pvedeck.js",
    ] {
        assert!(body.contains(needle), "{needle} missing from the page");
    }
}

#[tokio::test]
async fn clients_outside_allow_ips_cannot_change_anything() {
    let server = common::server(&[("ALLOW_IPS", "10.0.0.0/8")]).await;
    let (status, body) = common::post(&format!("{}/api/sim/node/pve3/offline", server.url)).await;
    assert_eq!(status, 403, "{body}");
    // Nothing changed, and reading is still open to everyone.
    let all = list(&server.url, "").await;
    assert_eq!(node(&all, "pve3")["running"], true);
}

#[tokio::test]
async fn api_tokens_guard_changes_and_reads() {
    let token = "0123456789abcdef-test";
    let server = common::server(&[("API_TOKENS", token)]).await;
    let url = format!("{}/api/vm/101/stop", server.url);
    let (status, _) = common::post(&url).await;
    assert_eq!(status, 401);
    let status_url = format!("{}/api/vm/101/status", server.url);
    let (status, body) = common::get(&status_url).await;
    assert_eq!(status, 401, "a read needs the token too: {body}");
    assert!(body.contains("sign in first"), "{body}");
    let client = reqwest::Client::new();
    let read = || async {
        let res = client
            .get(&status_url)
            .bearer_auth(token)
            .send()
            .await
            .unwrap();
        (res.status().as_u16(), res.text().await.unwrap())
    };
    assert_eq!(read().await, (200, "running".to_string()));
    let res = client.post(&url).bearer_auth(token).send().await.unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(read().await, (200, "stopped".to_string()));
    let (status, _) = common::get(&format!("{}/api/health", server.url)).await;
    assert_eq!(status, 200, "the health check stays open");
}

#[tokio::test]
async fn openapi_describes_every_route() {
    let server = common::server(&[("VM_MAX_CPU", "8")]).await;
    let res = reqwest::get(format!("{}/api/openapi.json", server.url))
        .await
        .unwrap();
    assert_eq!(res.headers()["content-type"], "application/json");
    let doc: Value = res.json().await.unwrap();
    let paths = doc["paths"].as_object().expect("paths");
    for path in [
        "/api/health",
        "/api/vm/list",
        "/api/vm/install",
        "/api/vm/{id}/status",
        "/api/vm/{id}/start",
        "/api/vm/{id}/stop",
        "/api/vm/{id}/shutdown",
        "/api/vm/{id}/reboot",
        "/api/vm/{id}/destroy",
        "/api/vm/{id}/set/cpu",
        "/api/vm/{id}/set/memory",
        "/api/vm/{id}/set/disk",
        "/api/vm/{id}/set/node",
        "/api/templates",
        "/api/templates/{id}",
        "/api/jobs",
        "/api/jobs/{id}",
        "/api/jobs/{id}/events",
        "/sh/{script}",
    ] {
        assert!(paths.contains_key(path), "{path} described");
    }
    // Nothing described that the router does not serve.
    for path in paths.keys() {
        let concrete = path
            .replace("{id}", "101")
            .replace("{script}", "debian_12.sh");
        let (_, body) = common::get(&format!("{}{concrete}", server.url)).await;
        assert_ne!(body, "404 page not found", "{path} is a route");
    }
    // The bounds come from the configuration, not from the document's text.
    assert_eq!(
        doc["components"]["schemas"]["SetCpu"]["properties"]["cpu"]["maximum"],
        8
    );
}

// --- the cluster snapshot ------------------------------------------------

/// How many times the cluster's VMs were read with `pvesh`.
async fn vm_reads(server: &common::Server) -> usize {
    common::commands(server)
        .await
        .iter()
        .filter(|c| c.starts_with("pvesh get /cluster/resources --type vm"))
        .count()
}

#[tokio::test]
async fn concurrent_readers_share_one_pvesh() {
    // No timed refresh within the test: only readers make it read.
    let server = common::server(&[("SNAPSHOT_INTERVAL_MS", "600000")]).await;
    assert_eq!(vm_reads(&server).await, 0, "an idle pvedeck reads nothing");
    let reads = (0..24).map(|_| list(&server.url, ""));
    let lists = futures_util::future::join_all(reads).await;
    assert!(lists.iter().all(|l| vmids(l) == vmids(&lists[0])));
    assert_eq!(
        vm_reads(&server).await,
        1,
        "24 concurrent readers, one pvesh"
    );
    for _ in 0..10 {
        list(&server.url, "").await;
        common::get(&format!("{}/", server.url)).await;
    }
    assert_eq!(
        vm_reads(&server).await,
        1,
        "the overview page reads memory too"
    );
}

#[tokio::test]
async fn a_client_reads_its_own_writes_and_the_age_is_told() {
    let server = common::server(&[("SNAPSHOT_INTERVAL_MS", "600000")]).await;
    let url = &server.url;
    let res = reqwest::get(format!("{url}/api/vm/list")).await.unwrap();
    let age: u64 = res.headers()["x-data-age-ms"]
        .to_str()
        .unwrap()
        .parse()
        .expect("a number of milliseconds");
    assert!(age < 600_000);
    assert_eq!(res.headers()["x-data-stale"], "false");

    let running = |l: &Value, id: u64| {
        l["list"]
            .as_array()
            .and_then(|vms| vms.iter().find(|v| v["vmid"] == id))
            .map(|v| v["running"] == true)
    };
    assert_eq!(running(&list(url, "").await, 101), Some(true));
    assert_eq!(common::post(&format!("{url}/api/vm/101/stop")).await.0, 200);
    assert_eq!(
        running(&list(url, "").await, 101),
        Some(false),
        "stopped at once"
    );
    assert_eq!(
        common::post(&format!("{url}/api/vm/101/destroy")).await.0,
        200
    );
    assert_eq!(running(&list(url, "").await, 101), None, "gone at once");
    // Two changes, two refreshes: the next reader paid each, nobody else.
    assert_eq!(vm_reads(&server).await, 3);
}

#[tokio::test]
async fn a_failing_refresh_keeps_the_last_snapshot_and_says_it_is_stale() {
    let server = common::server(&[("SNAPSHOT_INTERVAL_MS", "20")]).await;
    let url = format!("{}/api/vm/list", server.url);
    let first = list(&server.url, "").await;
    common::fault(
        &server,
        r#"{"op":"cluster","action":"fail","message":"500 proxy loop"}"#,
    )
    .await;
    // Three intervals later the snapshot is stale; the list still answers.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let res = reqwest::get(&url).await.unwrap();
        assert_eq!(res.status(), 200);
        let stale = res.headers()["x-data-stale"] == "true";
        let body: Value = res.json().await.unwrap();
        assert_eq!(vmids(&body), vmids(&first), "the last good snapshot");
        if stale {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "never stale");
        tokio::task::yield_now().await;
    }
    // The overview says why.
    let (_, page) = common::get(&format!("{}/", server.url)).await;
    assert!(page.contains("(stale)"), "{page}");
    assert!(page.contains("cannot refresh"), "{page}");
}

#[tokio::test]
async fn a_large_cluster_lists_whole_and_the_overview_shows_a_page() {
    let server = common::server(&[("SIM_NODES", "8"), ("SIM_VMS", "450")]).await;
    let all = list(&server.url, "").await;
    assert_eq!(all["count"], 450);
    assert_eq!(all["cluster"].as_array().map(Vec::len), Some(8));
    let (status, page) = common::get(&format!("{}/", server.url)).await;
    assert_eq!(status, 200);
    assert_eq!(page.matches("<tr data-vmid=").count(), 200, "one page");
    assert!(page.contains("page 1 of 3"), "a pager");
    assert!(page.contains("(450)"), "the count of all");
}
