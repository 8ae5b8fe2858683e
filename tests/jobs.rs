//! Jobs: stored events, replay after a disconnect, `Last-Event-ID`, and what
//! survives a restart of the server.

mod common;

use common::Sse;

const DEBIAN: &str = r#"{"os":"debian","version":"12","name":"keep"}"#;

async fn job_events(url: &str, job: u64, last_event_id: Option<u64>) -> Vec<Sse> {
    let mut req = reqwest::Client::new().get(format!("{url}/api/jobs/{job}/events"));
    if let Some(id) = last_event_id {
        req = req.header("Last-Event-ID", id.to_string());
    }
    let res = req.send().await.expect("request");
    assert_eq!(res.status(), 200);
    common::read_events(res, None).await
}

/// Starts an install and keeps its stream open: the job id and the stream.
async fn open_install(url: &str) -> (u64, reqwest::Response) {
    let res = reqwest::Client::new()
        .post(format!("{url}/api/vm/install"))
        .header("content-type", "application/json")
        .body(DEBIAN)
        .send()
        .await
        .expect("request");
    let job = res.headers()["x-job-id"]
        .to_str()
        .ok()
        .and_then(|v| v.parse().ok())
        .expect("x-job-id");
    (job, res)
}

#[tokio::test]
async fn a_client_that_disconnects_mid_install_does_not_stop_it_and_can_replay_it() {
    // Slow enough that the client leaves while the job runs.
    let s = common::server(&[("SIM_SPEED", "100")]).await;
    let (job, res) = open_install(&s.url).await;
    let seen = common::read_events(res, Some(5)).await;
    assert_eq!(seen.len(), 5);
    // The response is dropped here: the client is gone.

    let replay = job_events(&s.url, job, None).await;
    assert_eq!(
        &replay[..5],
        &seen[..],
        "the replay starts with what was seen"
    );
    assert!(replay.last().is_some_and(Sse::is_close));
    let ids: Vec<u64> = replay.iter().filter_map(|e| e.id).collect();
    assert_eq!(ids, (1..=ids.len() as u64).collect::<Vec<_>>());
    assert!(replay.iter().any(|e| e.message() == "[*] VMID: 106"));

    let detail = common::json(&format!("{}/api/jobs/{job}", s.url)).await;
    assert_eq!(detail["state"], "succeeded");
    assert_eq!(detail["events"].as_array().map(Vec::len), Some(ids.len()));
    assert_eq!(
        common::vm(&s.url, 106).await.expect("VM 106")["running"],
        true
    );
}

#[tokio::test]
async fn last_event_id_resumes_after_that_event() {
    let s = common::server(&[]).await;
    let (job, all) = common::install(&s.url, DEBIAN).await;
    let rest = job_events(&s.url, job, Some(10)).await;
    assert_eq!(rest.first().and_then(|e| e.id), Some(11));
    assert_eq!(rest.len(), all.len() - 10);
    let by_query = common::read_events(
        reqwest::get(format!("{}/api/jobs/{job}/events?after=20", s.url))
            .await
            .unwrap(),
        None,
    )
    .await;
    assert_eq!(by_query.first().and_then(|e| e.id), Some(21));
}

#[tokio::test]
async fn job_routes_list_show_and_refuse_nonsense() {
    let s = common::server(&[]).await;
    let (first, _) = common::install(&s.url, DEBIAN).await;
    let (_, _, _) = common::post_sse(&format!("{}/api/vm/103/start", s.url), "").await;
    let jobs = common::json(&format!("{}/api/jobs", s.url)).await;
    let kinds: Vec<&str> = jobs
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|j| j["kind"].as_str())
        .collect();
    assert_eq!(kinds, ["start", "install"], "newest first");
    assert_eq!(jobs[1]["id"], first);
    assert_eq!(jobs[0]["vmid"], 103);
    assert_eq!(jobs[1]["title"], "install debian 12 \"keep\"");
    assert_eq!(common::get(&format!("{}/api/jobs/999", s.url)).await.0, 404);
    assert_eq!(common::get(&format!("{}/api/jobs/x", s.url)).await.0, 400);
    assert_eq!(
        common::get(&format!("{}/api/jobs/999/events", s.url))
            .await
            .0,
        404
    );
    assert_eq!(
        common::get(&format!("{}/api/jobs?limit=0", s.url)).await.0,
        400
    );
}

#[tokio::test]
async fn a_restart_keeps_jobs_and_vms() {
    let dir = common::temp_dir("restart");
    let (job, before) = {
        let s = common::server_in(&dir, &[]).await;
        let (job, events) = common::install(&s.url, DEBIAN).await;
        assert_eq!(post_stop(&s.url, 101).await, 200);
        (job, events)
    };
    let s = common::server_in(&dir, &[]).await;
    let detail = common::json(&format!("{}/api/jobs/{job}", s.url)).await;
    assert_eq!(detail["state"], "succeeded");
    assert_eq!(
        detail["events"].as_array().map(Vec::len),
        Some(before.len() - 1)
    );
    let replay = job_events(&s.url, job, None).await;
    assert_eq!(replay.len(), before.len());
    let vm = common::vm(&s.url, 106)
        .await
        .expect("the installed VM survived");
    assert_eq!(vm["name"], "keep-106");
    assert_eq!(
        common::vm(&s.url, 101).await.expect("101")["running"],
        false
    );
    // The next install knows 106 is taken.
    let (_, events) = common::install(&s.url, DEBIAN).await;
    assert!(events.iter().any(|e| e.message() == "[*] VMID: 107"));
}

async fn post_stop(url: &str, vmid: u32) -> u16 {
    common::post(&format!("{url}/api/vm/{vmid}/stop")).await.0
}

#[tokio::test]
async fn command_output_kept_per_job_is_bounded() {
    let s = common::server(&[("JOB_MAX_EVENTS", "10")]).await;
    let (job, events) = common::install(&s.url, DEBIAN).await;
    assert!(events.iter().all(|e| e.status() != "error"), "{events:#?}");
    let relayed: Vec<&str> = events
        .iter()
        .map(Sse::message)
        .filter(|m| m.starts_with("  "))
        .collect();
    assert_eq!(relayed.len(), 11, "{relayed:#?}");
    assert_eq!(
        relayed.last().copied(),
        Some("  … more output not kept: 10 lines per job (JOB_MAX_EVENTS)")
    );
    // The job ran to its end all the same, and the database holds the same.
    let stored = common::json(&format!("{}/api/jobs/{job}", s.url)).await;
    assert_eq!(stored["state"], "succeeded");
}

#[tokio::test]
async fn followers_of_a_job_are_limited() {
    let s = common::server(&[("MAX_FOLLOWERS_PER_JOB", "1")]).await;
    // A `qm importdisk` that never ends keeps the job, and its stream, open.
    common::fault(&s, r#"{"op":"importdisk","action":"hang"}"#).await;
    let (job, res) = open_install(&s.url).await;
    // The installer's own stream is not one of them: one follower more fits.
    let first = reqwest::get(format!("{}/api/jobs/{job}/events", s.url))
        .await
        .expect("a follower");
    assert_eq!(first.status(), 200);
    let (status, body) = common::get(&format!("{}/api/jobs/{job}/events", s.url)).await;
    assert_eq!(
        (status, body.as_str()),
        (
            503,
            format!("job {job} has 1 followers already (MAX_FOLLOWERS_PER_JOB): try again later")
                .as_str()
        )
    );
    drop((res, first));
}

#[tokio::test]
async fn ten_thousand_idle_followers_from_one_address_leave_the_installer_streaming() {
    let s = common::server(&[]).await;
    // Job 1 hangs in its import: a stream to hold open for ever.
    common::fault(&s, r#"{"op":"importdisk","action":"hang","vmid":106}"#).await;
    let (job, first) = open_install(&s.url).await;
    let url = format!("{}/api/jobs/{job}/events", s.url);
    let client = reqwest::Client::new();
    let mut held = Vec::new();
    let mut refused = 0;
    for _ in 0..20 {
        let batch = (0..500).map(|_| client.get(&url).send());
        for answer in futures_util::future::join_all(batch).await {
            let answer = answer.expect("an answer");
            match answer.status().as_u16() {
                200 => held.push(answer),
                503 => {
                    let said = answer.text().await.expect("body");
                    assert!(said.contains("(MAX_FOLLOWERS_PER_CLIENT)"), "{said}");
                    refused += 1;
                }
                other => panic!("status {other}"),
            }
        }
    }
    assert_eq!(held.len(), 100, "MAX_FOLLOWERS_PER_CLIENT's default");
    assert_eq!(refused, 9_900);
    // The same address installs again: its own stream runs to the end.
    let (second, events) = common::install(&s.url, DEBIAN).await;
    assert_ne!(second, job);
    assert!(
        events.last().is_some_and(common::Sse::is_close),
        "{events:#?}"
    );
    let stored = common::json(&format!("{}/api/jobs/{second}", s.url)).await;
    assert_eq!(stored["state"], "succeeded", "{events:#?}");
    drop((first, held));
}
