//! Users, owners, quotas and the audit log, from outside: users made with
//! the server binary's admin commands, requests with their tokens, on the
//! suite's lane.

mod common;

use std::process::Command;

use serde_json::Value;

const ADMIN: &str = "tenancy-admin-token-0123456789";

/// Runs `pvedeck <args>` on `data_dir`: (exit code, stdout, stderr).
fn admin(data_dir: &std::path::Path, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_pvedeck"))
        .args(args)
        .env("DATA_DIR", data_dir)
        .current_dir(data_dir)
        .output()
        .expect("pvedeck runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Adds a user and gives them a token: the token.
fn user_with_token(data_dir: &std::path::Path, name: &str) -> String {
    let (code, out, err) = admin(data_dir, &["user", "add", name]);
    assert_eq!(code, 0, "{out}{err}");
    let (code, token, err) = admin(data_dir, &["token", "create", name]);
    assert_eq!(code, 0, "{err}");
    assert!(err.starts_with("token "), "the id on stderr: {err}");
    token.trim().to_string()
}

/// Asks until `check` holds, for what a running server learns by itself:
/// a change an admin command made to its database (read again every
/// second), owners read back in the background. The server has no event
/// to tell a client of either.
async fn eventually<F, Fut>(what: &str, check: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !check().await {
        assert!(std::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

async fn get_as(url: &str, token: &str) -> (u16, String) {
    let res = reqwest::Client::new()
        .get(url)
        .bearer_auth(token)
        .send()
        .await
        .expect("request");
    (res.status().as_u16(), res.text().await.expect("body"))
}

async fn post_as(url: &str, token: &str, body: Option<&str>) -> (u16, String) {
    let mut req = reqwest::Client::new().post(url).bearer_auth(token);
    if let Some(body) = body {
        req = req
            .header("content-type", "application/json")
            .body(body.to_string());
    }
    let res = req.send().await.expect("request");
    (res.status().as_u16(), res.text().await.expect("body"))
}

/// The status of a console WebSocket's upgrade as `token`'s user (101:
/// it opened, and is closed again).
async fn console_upgrade(url: &str, vmid: u64, token: &str) -> u16 {
    use tokio_tungstenite::tungstenite::{Error, client::IntoClientRequest, http::HeaderValue};
    let ws = format!(
        "{}/api/vm/{vmid}/console?kind=serial",
        url.replacen("http", "ws", 1)
    );
    let mut request = ws.into_client_request().expect("a WebSocket request");
    request.headers_mut().insert(
        "authorization",
        HeaderValue::from_str(&format!("Bearer {token}")).expect("a header"),
    );
    match tokio_tungstenite::connect_async(request).await {
        Ok((mut socket, response)) => {
            let _ = socket.close(None).await;
            response.status().as_u16()
        }
        Err(Error::Http(response)) => response.status().as_u16(),
        Err(e) => panic!("console upgrade: {e}"),
    }
}

/// An install as `token`'s user: the job id, the VM's id, the events.
async fn install_as(
    server: &common::Server,
    token: &str,
    name: &str,
) -> (u64, u64, Vec<common::Sse>) {
    let body = format!(r#"{{"os":"debian","version":"12","name":"{name}"}}"#);
    let res = reqwest::Client::new()
        .post(format!("{}/api/vm/install", server.url))
        .bearer_auth(token)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .expect("request");
    assert_eq!(res.status(), 200);
    let job = res
        .headers()
        .get("x-job-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .expect("x-job-id");
    let events = common::read_events(res, None).await;
    let vmid = events
        .iter()
        .find_map(|e| e.data["vm_id"].as_u64())
        .unwrap_or_else(|| panic!("no VM id: {events:#?}"));
    assert!(
        events
            .iter()
            .any(|e| e.status() == "success" && e.step().contains("finalizing")),
        "{events:#?}"
    );
    (job, vmid, events)
}

async fn qm_runs(server: &common::Server) -> usize {
    let (status, body) = get_as(&format!("{}/api/sim/commands", server.url), ADMIN).await;
    if status == 200 {
        let list: Vec<String> = serde_json::from_str(&body).expect("list");
        return list.len();
    }
    // The process lanes keep the log in the data directory.
    common::commands(server).await.len()
}

fn vmids(list: &str) -> Vec<u64> {
    let list: Value = serde_json::from_str(list).expect("JSON");
    list["list"]
        .as_array()
        .expect("list")
        .iter()
        .filter_map(|vm| vm["vmid"].as_u64())
        .collect()
}

#[tokio::test]
async fn a_user_sees_and_acts_on_their_own_vms_and_jobs_only() {
    let data = common::temp_dir("tenancy");
    let alice = user_with_token(&data, "alice");
    let bob = user_with_token(&data, "bob");
    let server = common::server_in(&data, &[("API_TOKENS", ADMIN)]).await;
    let url = &server.url;

    let (job, vmid, _) = install_as(&server, &alice, "alice-own-vm").await;

    // Alice sees it, as hers; the admin sees it with its owner.
    let (_, mine) = get_as(&format!("{url}/api/vm/list"), &alice).await;
    assert_eq!(vmids(&mine), [vmid], "{mine}");
    let (_, all) = get_as(&format!("{url}/api/vm/list"), ADMIN).await;
    assert!(vmids(&all).len() > 1, "the demo cluster's VMs too");
    let all: Value = serde_json::from_str(&all).unwrap();
    let row = all["list"]
        .as_array()
        .unwrap()
        .iter()
        .find(|vm| vm["vmid"].as_u64() == Some(vmid))
        .expect("the admin sees alice's VM");
    assert_eq!(row["owner"], "alice");

    // Bob sees nothing of it, and nothing runs for what he asks.
    let (_, theirs) = get_as(&format!("{url}/api/vm/list"), &bob).await;
    assert!(vmids(&theirs).is_empty(), "{theirs}");
    let before = qm_runs(&server).await;
    let not_found = format!("VM {vmid} not found");
    let (status, body) = get_as(&format!("{url}/api/vm/{vmid}/status"), &bob).await;
    assert_eq!((status, body.as_str()), (404, not_found.as_str()));
    for (path, body) in [
        ("stop", None),
        ("start", None),
        ("reboot", None),
        ("shutdown", None),
        ("destroy", None),
        ("set/cpu", Some(r#"{"cpu":2}"#)),
        ("set/memory", Some(r#"{"memory":4096}"#)),
        ("set/disk", Some(r#"{"disk":"1G"}"#)),
        ("set/node", Some(r#"{"node":"pve2"}"#)),
    ] {
        let (status, text) = post_as(&format!("{url}/api/vm/{vmid}/{path}"), &bob, body).await;
        assert_eq!((status, text.as_str()), (404, not_found.as_str()), "{path}");
    }
    // Her VM's console: neither its check nor the WebSocket opens for him.
    let (status, body) = get_as(&format!("{url}/api/vm/{vmid}/console"), &bob).await;
    assert_eq!(
        (status, body.as_str()),
        (404, not_found.as_str()),
        "console"
    );
    assert_eq!(console_upgrade(url, vmid, &bob).await, 404);
    let (status, _) = get_as(&format!("{url}/api/jobs/{job}"), &bob).await;
    assert_eq!(status, 404);
    let (status, _) = get_as(&format!("{url}/api/jobs/{job}/events"), &bob).await;
    assert_eq!(status, 404);
    let (_, jobs) = get_as(&format!("{url}/api/jobs"), &bob).await;
    assert_eq!(jobs, "[]");
    let (_, jobs) = get_as(&format!("{url}/api/jobs"), &alice).await;
    let jobs: Value = serde_json::from_str(&jobs).unwrap();
    assert_eq!(jobs[0]["id"].as_u64(), Some(job));
    assert_eq!(jobs[0]["owner"], "alice");
    assert_eq!(
        qm_runs(&server).await,
        before,
        "no Proxmox command ran for bob"
    );

    // The server functions and the pages answer alike.
    let (status, body) = post_as(
        &format!("{url}/fn/action"),
        &bob,
        Some(&format!(r#"{{"vmid":{vmid},"action":"destroy"}}"#)),
    )
    .await;
    assert!(
        status == 200 && body.contains(&not_found),
        "{status} {body}"
    );
    let page = |token: &str| {
        let url = format!("{url}/vm/{vmid}");
        let token = token.to_string();
        async move { get_as(&url, &token).await.1 }
    };
    assert!(page(&alice).await.contains("alice-own-vm"));
    let before = qm_runs(&server).await;
    assert!(!page(&bob).await.contains("alice-own-vm"));
    let (status, _) = get_as(&format!("{url}/vm/{vmid}/console"), &bob).await;
    assert_eq!(status, 404, "bob's console page");
    assert_eq!(qm_runs(&server).await, before, "bob's page ran nothing");
    // Alice's console opens (the 404 above was his, not the console's).
    assert_eq!(console_upgrade(url, vmid, &alice).await, 101);

    // The VM's notes name its owner, for a fresh database to read.
    let detail = reqwest::Client::new()
        .post(format!("{url}/fn/vm"))
        .bearer_auth(&alice)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("vmid={vmid}"))
        .send()
        .await
        .expect("request")
        .text()
        .await
        .expect("body");
    assert!(detail.contains("pvedeck-owner: alice"), "{detail}");

    // An admin gives the VM to bob: he sees it within seconds.
    let (code, out, err) = admin(&data, &["vm", "assign", &vmid.to_string(), "bob"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, format!("VM {vmid} assigned to bob\n"));
    eventually(&format!("bob gets VM {vmid}"), || async {
        vmids(&get_as(&format!("{url}/api/vm/list"), &bob).await.1) == [vmid]
    })
    .await;
    let (status, _) = post_as(&format!("{url}/api/vm/{vmid}/stop"), &alice, None).await;
    assert_eq!(status, 404, "no longer alice's");
}

#[tokio::test]
async fn a_fresh_database_reads_owners_back_from_the_vms_notes() {
    let data = common::temp_dir("adopt");
    let alice = user_with_token(&data, "alice");
    let vmid = {
        let server = common::server_in(&data, &[]).await;
        install_as(&server, &alice, "noted").await.1
    };
    // The owners forgotten, as in a database made anew.
    let store =
        pvedeck::store::open(pvedeck::store::Location::Sqlite(&data.join("pvedeck.db"))).unwrap();
    store
        .remove_owner("default", u32::try_from(vmid).unwrap())
        .unwrap();
    assert!(store.owners("default").unwrap().is_empty());
    drop(store);
    let server = common::server_in(&data, &[]).await;
    eventually(&format!("VM {vmid} comes back to alice"), || async {
        vmids(
            &get_as(&format!("{}/api/vm/list", server.url), &alice)
                .await
                .1,
        ) == [vmid]
    })
    .await;
}

#[tokio::test]
async fn a_quota_holds_under_concurrent_installs_and_resizes() {
    let data = common::temp_dir("quota");
    let alice = user_with_token(&data, "alice");
    let (code, out, err) = admin(&data, &["user", "quota", "alice", "vms=2,cores=5"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "user alice: quota vms=2,cores=5\n");
    let (code, _, err) = admin(&data, &["user", "quota", "alice", "vms=two"]);
    assert_eq!(code, 2);
    assert!(err.contains("vms=two: not a whole number"), "{err}");
    let server = common::server_in(&data, &[]).await;
    let url = server.url.clone();

    let attempts = (0..10).map(|n| {
        let (url, token) = (url.clone(), alice.clone());
        tokio::spawn(async move {
            let body = format!(r#"{{"os":"debian","version":"12","name":"q{n}","cpu":2}}"#);
            let res = reqwest::Client::new()
                .post(format!("{url}/api/vm/install"))
                .bearer_auth(token)
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await
                .expect("request");
            let status = res.status().as_u16();
            let text = if status == 200 {
                let events = common::read_events(res, None).await;
                serde_json::to_string(&events.iter().map(|e| e.data.clone()).collect::<Vec<_>>())
                    .unwrap()
            } else {
                res.text().await.unwrap()
            };
            (status, text)
        })
    });
    let mut answers = Vec::new();
    for attempt in attempts {
        answers.push(attempt.await.expect("task"));
    }
    let made = answers.iter().filter(|(s, _)| *s == 200).count();
    assert_eq!(made, 2, "{answers:#?}");
    for (status, text) in answers.iter().filter(|(s, _)| *s != 200) {
        assert_eq!(*status, 403, "{text}");
        assert!(text.starts_with("quota: "), "{text}");
    }
    let (_, mine) = get_as(&format!("{url}/api/vm/list"), &alice).await;
    let mine = vmids(&mine);
    assert_eq!(mine.len(), 2, "exactly two VMs");

    // 2 + 2 cores of 5: one more fits, two more do not.
    let (status, text) = post_as(&format!("{url}/api/vm/{}/stop", mine[0]), &alice, None).await;
    assert_eq!(status, 200, "{text}");
    let (status, text) = post_as(
        &format!("{url}/api/vm/{}/set/cpu", mine[0]),
        &alice,
        Some(r#"{"cpu":4}"#),
    )
    .await;
    assert_eq!(status, 403, "{text}");
    assert_eq!(text, "quota: cores 4 of 5 used, 2 more asked");
    let (status, text) = post_as(
        &format!("{url}/api/vm/{}/set/cpu", mine[0]),
        &alice,
        Some(r#"{"cpu":3}"#),
    )
    .await;
    assert_eq!((status, text.as_str()), (200, "ok"));
}

#[tokio::test]
async fn reads_need_sign_in_and_tokens_revoked_or_expired_are_refused() {
    let data = common::temp_dir("signin");
    let alice = user_with_token(&data, "alice");
    // A token that expired yesterday.
    let expired = {
        let store =
            pvedeck::store::open(pvedeck::store::Location::Sqlite(&data.join("pvedeck.db")))
                .unwrap();
        let two_days_ago = pvedeck_support::clock::now_ms() - 2 * 86_400_000;
        pvedeck::engine::accounts::create_token(
            store.as_ref(),
            &pvedeck::engine::accounts::By::command(),
            "alice",
            "old",
            Some(1),
            two_days_ago,
        )
        .unwrap()
        .0
    };
    let server = common::server_in(&data, &[]).await;
    let url = &server.url;

    for path in [
        "/api/vm/list",
        "/api/jobs",
        "/api/jobs/1/events",
        "/api/templates",
        "/metrics",
    ] {
        let (status, body) = common::get(&format!("{url}{path}")).await;
        assert_eq!(status, 401, "{path}: {body}");
    }
    let res = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
        .get(format!("{url}/vm/101?x=1"))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 303);
    assert_eq!(
        res.headers().get("location").and_then(|v| v.to_str().ok()),
        Some("/login?next=%2Fvm%2F101%3Fx%3D1")
    );
    for open in ["/login", "/api/health", "/sh/debian_12.sh"] {
        let (status, body) = common::get(&format!("{url}{open}")).await;
        assert_eq!(status, 200, "{open}: {body}");
    }
    let (status, _) = get_as(&format!("{url}/metrics"), &alice).await;
    assert_eq!(status, 403, "metrics are for admins");

    let (status, body) = get_as(&format!("{url}/api/vm/list"), &expired).await;
    assert_eq!(status, 401);
    assert!(body.contains("has expired"), "{body}");
    let (status, _) = get_as(&format!("{url}/api/vm/list"), "pvd_00000000_guess").await;
    assert_eq!(status, 401);

    let (status, _) = get_as(&format!("{url}/api/vm/list"), &alice).await;
    assert_eq!(status, 200);
    let listed = admin(&data, &["user", "list"]).1;
    assert!(listed.contains("alice\tuser\t-\t-\tlocal\t2"), "{listed}");
    let id = &alice[4..12];
    let (code, out, err) = admin(&data, &["token", "revoke", id]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, format!("token {id} of alice revoked\n"));
    eventually("the revoked token stops working", || async {
        get_as(&format!("{url}/api/vm/list"), &alice).await.0 == 401
    })
    .await;
}

#[tokio::test]
async fn the_audit_log_holds_each_change_with_its_user_and_no_secret() {
    let data = common::temp_dir("audit");
    let alice = user_with_token(&data, "alice");
    let bob = user_with_token(&data, "bob");
    let server = common::server_in(
        &data,
        &[("API_TOKENS", ADMIN), ("VM_ROOT_PASSWORD", "random")],
    )
    .await;
    let url = &server.url;

    // The one-time root password reaches the job's owner only.
    let (job, vmid, events) = install_as(&server, &alice, "audited").await;
    let password = events
        .iter()
        .find_map(|e| e.message().strip_prefix("[*] Root password: "))
        .expect("alice watched her install and was shown the password")
        .to_string();
    assert_eq!(password.len(), 20, "{password}");
    let (status, replay) = get_as(&format!("{url}/api/jobs/{job}/events"), ADMIN).await;
    assert_eq!(status, 200);
    assert!(!replay.contains(&password), "{replay}");

    let (status, _) = post_as(&format!("{url}/api/vm/{vmid}/stop"), &bob, None).await;
    assert_eq!(status, 404);
    let (status, _) = post_as(&format!("{url}/api/vm/{vmid}/stop"), &alice, None).await;
    assert_eq!(status, 200);
    let (status, body) = post_as(
        &format!("{url}/api/vm/{vmid}/set/cpu"),
        &alice,
        Some(r#"{"cpu":3}"#),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let (status, _) = post_as(&format!("{url}/api/vm/{vmid}/destroy"), &alice, None).await;
    assert_eq!(status, 200);
    let (status, _) = post_as(
        &format!("{url}/api/templates"),
        &alice,
        Some(r#"{"os":"debian","version":"12"}"#),
    )
    .await;
    assert_eq!(status, 403, "only admins build templates");
    let (_, _) = post_as(
        &format!("{url}/fn/login"),
        "",
        Some(r#"{"token":"not-a-token-of-anyone-here"}"#),
    )
    .await;

    let (status, body) = get_as(&format!("{url}/api/audit"), &alice).await;
    assert_eq!(status, 403, "{body}");
    let (status, body) = get_as(&format!("{url}/api/audit?limit=1000"), ADMIN).await;
    assert_eq!(status, 200, "{body}");
    for secret in [
        alice.as_str(),
        bob.as_str(),
        ADMIN,
        "not-a-token-of-anyone-here",
    ] {
        assert!(!body.contains(secret), "a secret in the audit log: {body}");
    }
    let log: Vec<Value> = serde_json::from_str(&body).unwrap();
    let has = |user: &str, action: &str, outcome: &str| {
        log.iter().any(|e| {
            e["user"] == user
                && e["action"] == action
                && e["outcome"]
                    .as_str()
                    .is_some_and(|o| o.starts_with(outcome))
        })
    };
    assert!(has("pvedeck", "user add", "ok"), "{body}");
    assert!(has("pvedeck", "token create", "ok"), "{body}");
    assert!(has("alice", "install", &format!("job {job}")), "{body}");
    assert!(has("bob", "stop", "refused: VM"), "{body}");
    assert!(has("alice", "set cpu", "ok"), "{body}");
    assert!(has("alice", "destroy", "ok"), "{body}");
    assert!(has("alice", "template build", "refused"), "{body}");
    assert!(has("anonymous", "sign-in", "refused"), "{body}");
    assert!(
        log.iter()
            .all(|e| e["client"] == "127.0.0.1" || e["user"] == "pvedeck")
    );

    let (_, mine) = get_as(&format!("{url}/api/audit?user=alice&vmid={vmid}"), ADMIN).await;
    let mine: Vec<Value> = serde_json::from_str(&mine).unwrap();
    let actions: Vec<&str> = mine.iter().filter_map(|e| e["action"].as_str()).collect();
    assert_eq!(actions, ["destroy", "set cpu", "stop"]);
    let (status, body) = get_as(&format!("{url}/api/audit?since=yesterday"), ADMIN).await;
    assert_eq!(status, 400, "{body}");
}
