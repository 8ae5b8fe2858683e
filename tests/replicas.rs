//! Replicas: several pvedeck processes on one PostgreSQL (a real one,
//! started by `pvedeck_testkit::postgres`) and one Proxmox (the
//! simulator's REST face, which any number of processes share). Installs
//! through either get distinct VMIDs, a job is followed live from any
//! replica, a killed replica's jobs are taken over, a login and a change
//! made through one are seen through the other. The replicas run the
//! `api` backend whatever the lane, so this suite runs once, on the
//! default lane.

mod common;

use std::collections::BTreeSet;

use common::*;
use pvedeck_testkit::postgres::Postgres;

const INSTALL: &str = r#"{"os":"debian","version":"12"}"#;
/// An hour of simulated time (1.8 s at the suite's SIM_SPEED): installs
/// are still importing when their replica is killed.
const SLOW_IMPORTS: &str = r#"{"op":"importdisk","action":"delay","delay_ms":3600000,"times":3}"#;
const TOKEN: &str = "a-token-of-at-least-16-chars";

/// `n` replicas sharing a fresh database and one simulated cluster, with
/// `vars` over the api lane's environment; `None` (skipped) where this
/// machine has no PostgreSQL or the lane is not the default one.
async fn replicas(name: &str, n: usize, vars: &[(&str, &str)]) -> Option<Vec<Server>> {
    if lane() != Lane::Sim {
        return None;
    }
    let db = Postgres::shared()?.database();
    let cluster = temp_dir(name);
    // Two replicas and their Proxmox on two cores: a guest may take longer
    // to answer than the suite's 60 polls of 5 ms.
    let mut all = vec![("DATABASE_URL", db.as_str()), ("SSH_POLL_ATTEMPTS", "2000")];
    all.extend_from_slice(vars);
    let (env, _api) = api_env_with(&cluster, &all).await;
    Some(
        (0..n)
            .map(|i| {
                let own = temp_dir(&format!("{name}-r{i}"));
                let replica = format!("r{i}");
                let dir = |sub: &str| own.join(sub).to_string_lossy().into_owned();
                // Each its own key: two replicas making one key at once
                // would race. DATA_DIR stays the cluster's: the guests'
                // `ssh` stand-in finds the simulated cluster there.
                let env = with(
                    env.clone(),
                    &[
                        ("HOME", dir("home").as_str()),
                        ("SSH_KEY_DIR", dir("ssh").as_str()),
                        ("REPLICA_NAME", replica.as_str()),
                    ],
                );
                process_server_logged(&cluster, &own, &env)
            })
            .collect(),
    )
}

async fn job(server: &Server, id: u64) -> serde_json::Value {
    json(&format!("{}/api/jobs/{id}", server.url)).await
}

fn words(events: &[Sse]) -> Vec<&str> {
    events.iter().map(Sse::message).collect()
}

#[tokio::test]
async fn installs_through_two_replicas_get_distinct_vmids_and_are_followed_from_either() {
    let Some(servers) = replicas("two", 2, &[]).await else {
        return;
    };
    // Ten installs at once, half through each.
    let mut running = tokio::task::JoinSet::new();
    for i in 0..10 {
        let url = servers[i % 2].url.clone();
        running.spawn(async move { install(&url, INSTALL).await });
    }
    let mut vmids = BTreeSet::new();
    while let Some(done) = running.join_next().await {
        let (id, events) = done.expect("install task");
        assert!(events.last().is_some_and(Sse::is_close), "{events:#?}");
        // Either replica tells of any job.
        let record = job(&servers[1], id).await;
        assert_eq!(record["state"], "succeeded", "{record}");
        vmids.insert(record["vmid"].as_u64().expect("vmid"));
    }
    assert_eq!(
        vmids.len(),
        10,
        "ten distinct VMIDs (and so addresses): {vmids:?}"
    );

    // A follower on r1 of a job r0 runs sees what r0's own stream sees, in
    // order, once each.
    let res = open_post(&format!("{}/api/vm/install", servers[0].url), INSTALL).await;
    let id = job_id(&res);
    let elsewhere = follow(&servers[1].url, id).await;
    let (here, there) = tokio::join!(read_events(res, None), read_events(elsewhere, None));
    let ids = |events: &[Sse]| events.iter().filter_map(|e| e.id).collect::<Vec<_>>();
    assert!(there.last().is_some_and(Sse::is_close), "{there:#?}");
    assert_eq!(ids(&there), ids(&here), "every event once, in order");
    assert_eq!(words(&there), words(&here));
    let n = ids(&there).len() as u64;
    assert_eq!(ids(&there), (1..=n).collect::<Vec<_>>());
}

#[tokio::test]
async fn a_killed_replicas_installs_are_taken_over_and_leave_no_half_made_vm() {
    let Some(servers) = replicas("takeover", 2, &[("JOB_LEASE_SECS", "3")]).await else {
        return;
    };
    let (a, b) = (&servers[0], &servers[1]);
    // The cluster's own face: the replicas have no simulator routes.
    sim_command(a, &["fault", SLOW_IMPORTS]);
    let mut ids = Vec::new();
    for _ in 0..3 {
        let id = start_install(&a.url, INSTALL).await;
        read_until(follow(&a.url, id).await, |e| {
            e.message().contains("[*] import disk image")
        })
        .await;
        ids.push(id);
    }
    a.signal("KILL");
    let killed = std::time::Instant::now();
    for id in ids {
        let events = read_events(follow(&b.url, id).await, None).await;
        let said = words(&events);
        assert!(events.last().is_some_and(Sse::is_close), "{said:#?}");
        assert!(
            said.iter().any(|w| w.starts_with(
                "[*] replica r1 takes this job over: replica r0 stopped renewing its lease"
            )),
            "{said:#?}"
        );
        assert!(
            said.contains(&"[-] interrupted: replica r0 stopped while this job ran"),
            "{said:#?}"
        );
        let record = job(b, id).await;
        assert_eq!(record["state"], "interrupted", "{record}");
        assert_eq!(record["outcome"], "destroyed", "{record}");
        let vmid = record["vmid"].as_u64().expect("vmid");
        assert!(vm(&b.url, vmid).await.is_none(), "VM {vmid} is gone");
    }
    // The lease (3 s), a sweep (a third of it), the import task followed to
    // its end (1.8 s) and the destroy.
    assert!(
        killed.elapsed() < std::time::Duration::from_secs(3 + 10),
        "taken over and reconciled in {:?}",
        killed.elapsed()
    );
}

#[tokio::test]
async fn a_login_on_one_replica_works_on_the_other_until_logout_and_changes_are_seen_there() {
    let Some(servers) = replicas("shared", 2, &[("API_TOKENS", TOKEN)]).await else {
        return;
    };
    let (a, b) = (&servers[0], &servers[1]);
    let (_, cookie, body) =
        call_fn(&a.url, "login", &format!(r#"{{"token":"{TOKEN}"}}"#), None).await;
    let cookie = cookie.unwrap_or_else(|| panic!("no cookie: {body}"));
    let session = session_of(&cookie);
    let stop = r#"{"vmid":101,"action":"stop"}"#;
    let (_, _, body) = call_fn(&b.url, "action", stop, Some(&session)).await;
    assert!(
        body.contains("Ok"),
        "the login made on r0 acts on r1: {body}"
    );
    let (_, cookie, _) = call_fn(&a.url, "logout", "{}", Some(&session)).await;
    assert!(cookie.is_some_and(|c| c.contains("Max-Age=0")));
    let start = r#"{"vmid":101,"action":"start"}"#;
    let (status, _, body) = call_fn(&b.url, "action", start, Some(&session)).await;
    assert_eq!(status, 401, "logged out on r0, out on r1 too: {body}");

    // A VM destroyed through r0 is gone from r1's list.
    let res = reqwest::Client::new()
        .post(format!("{}/api/vm/install", a.url))
        .bearer_auth(TOKEN)
        .header("content-type", "application/json")
        .body(INSTALL)
        .send()
        .await
        .expect("install");
    let events = read_events(res, None).await;
    let vmid = events
        .iter()
        .find_map(|e| e.data["vm_id"].as_u64())
        .expect("the install names its VM");
    assert!(
        events
            .iter()
            .any(|e| e.message().contains("installation completed")),
        "{:#?}",
        words(&events)
    );
    let listed = |url: String| async move {
        let (status, body) = reqwest::Client::new()
            .get(format!("{url}/api/vm/list"))
            .bearer_auth(TOKEN)
            .send()
            .await
            .map(|r| (r.status().as_u16(), r))
            .expect("list");
        assert_eq!(status, 200);
        let list: serde_json::Value = body.json().await.expect("JSON");
        list["list"]
            .as_array()
            .map(|l| {
                l.iter()
                    .filter_map(|v| v["vmid"].as_u64())
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default()
    };
    let on_b = listed(b.url.clone()).await;
    assert!(
        on_b.contains(&vmid),
        "VM {vmid}: r1 lists {on_b:?}, r0 lists {:?}",
        listed(a.url.clone()).await
    );
    for action in ["stop", "destroy"] {
        let res = reqwest::Client::new()
            .post(format!("{}/api/vm/{vmid}/{action}", a.url))
            .bearer_auth(TOKEN)
            .send()
            .await
            .expect(action);
        assert_eq!(res.status().as_u16(), 200, "{action}");
        let _ = res.text().await;
    }
    assert!(
        !listed(b.url.clone()).await.contains(&vmid),
        "r1's next read after r0's destroy"
    );
}
