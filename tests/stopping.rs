//! A stopped or killed pvedeck leaves no half-made VM (docs/provisioning.md#stopping-and-restarts):
//! SIGKILL mid-install, then a restart that reconciles the job; SIGTERM
//! with a grace that runs out (the job's cleanup runs) and one that does
//! not (new jobs get 503, the running one ends). Each runs the server as
//! its own process, on every lane.

mod common;

use common::*;

const INSTALL: &str = r#"{"os":"debian","version":"12"}"#;
/// One operation taking an hour of simulated time: 1.8 s at the suite's
/// SIM_SPEED, long enough to be cut short at a known step.
const SLOW_IMPORT: &str = r#"{"op":"importdisk","action":"delay","delay_ms":3600000,"times":1}"#;
const SLOW_READY: &str = r#"{"op":"ssh-ready","action":"delay","delay_ms":3600000,"times":1}"#;

/// Follows a job until an event shows `text`.
async fn wait_for(server: &Server, job: u64, text: &str) -> Vec<Sse> {
    let events = read_until(follow(&server.url, job).await, |e| {
        e.message().contains(text)
    })
    .await;
    assert!(
        events.last().is_some_and(|e| e.message().contains(text)),
        "no event with {text:?}: {events:#?}"
    );
    events
}

/// The job's whole timeline, once it has ended.
async fn to_the_end(server: &Server, job: u64) -> Vec<Sse> {
    let events = read_events(follow(&server.url, job).await, None).await;
    assert!(events.last().is_some_and(Sse::is_close), "{events:#?}");
    events
}

fn messages(events: &[Sse]) -> Vec<&str> {
    events.iter().map(Sse::message).collect()
}

/// Whether a message starts so (a step's success ends with its time).
fn said(said: &[&str], start: &str) -> bool {
    said.iter().any(|m| m.starts_with(start))
}

async fn job(server: &Server, id: u64) -> serde_json::Value {
    json(&format!("{}/api/jobs/{id}", server.url)).await
}

/// Waits until the job's record names the Proxmox task it waits on. The
/// api backend writes the UPID once Proxmox has answered, a moment after
/// the step's first line, and no event says so: a kill in between leaves
/// no task to follow (seen on the api lane). Elsewhere there is no task.
async fn task_recorded(data: &std::path::Path, job: u64) {
    if lane() != Lane::Api {
        return;
    }
    let db = data.join("pvedeck.db");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let task: Option<String> =
            rusqlite::Connection::open_with_flags(&db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
                .and_then(|c| {
                    c.query_row("SELECT task FROM jobs WHERE id = ?1", [job], |r| r.get(0))
                })
                .ok()
                .flatten();
        if task.is_some() {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "job {job} never recorded its Proxmox task"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// Kills the server while the job is at `step_text`, restarts it on the
/// same data (the simulated cluster included), and returns the restarted
/// server with the job's timeline and record.
async fn killed_at(
    fault_json: &str,
    step_text: &str,
    task: bool,
) -> (Server, Vec<Sse>, serde_json::Value) {
    let data = temp_dir("killed");
    let server = process_server(&data, &[]).await;
    fault(&server, fault_json).await;
    let id = start_install(&server.url, INSTALL).await;
    wait_for(&server, id, step_text).await;
    if task {
        task_recorded(&data, id).await;
    }
    server.signal("KILL");
    assert_eq!(server.exit_code().await, None, "killed by a signal");

    let server = process_server(&data, &[]).await;
    let events = to_the_end(&server, id).await;
    let record = job(&server, id).await;
    (server, events, record)
}

#[tokio::test]
async fn an_install_killed_while_importing_is_destroyed_at_the_restart() {
    let (server, events, record) = killed_at(SLOW_IMPORT, "[*] import disk image", true).await;
    let words = messages(&events);
    let vmid = record["vmid"].as_u64().expect("the job recorded its VMID");
    assert!(
        words.contains(&"[-] interrupted: pvedeck stopped while this job ran"),
        "{words:#?}"
    );
    assert!(
        said(&words, &format!("[+] VM {vmid} destroyed")),
        "{words:#?}"
    );
    if lane() == Lane::Api {
        // The import is a Proxmox task, whose UPID the job recorded: the
        // restart follows it to its end (Proxmox then lets go of the VM's
        // lock) before the cleanup.
        assert!(
            words.iter().any(|w| w
                .starts_with("[*] pvedeck restarted while Proxmox task UPID:pve1:")
                && w.ends_with("ran: it was followed to its end")),
            "{words:#?}"
        );
    }
    assert_eq!(record["state"], "interrupted");
    assert_eq!(record["outcome"], "destroyed");
    assert_eq!(record["failed_step"], "VM creation > importing disk image");
    assert!(vm(&server.url, vmid).await.is_none(), "VM {vmid} is gone");
    // The job's page says it too, without JavaScript.
    let id = record["id"].as_u64().expect("id");
    let (status, page) = get(&format!("{}/jobs/{id}", server.url)).await;
    assert_eq!(status, 200);
    assert!(page.contains("install interrupted"), "{page}");
    assert!(page.contains(&format!("VM {vmid} was destroyed")), "{page}");
}

#[tokio::test]
async fn an_install_killed_while_waiting_for_ready_keeps_its_vm() {
    let (server, events, record) = killed_at(SLOW_READY, "[*] VM started", false).await;
    let words = messages(&events);
    let vmid = record["vmid"].as_u64().expect("VMID");
    let kept = format!(
        "[*] VM {vmid} is kept as it is: the job stopped at 'VM initialization > waiting for ready'"
    );
    assert!(words.contains(&kept.as_str()), "{words:#?}");
    // The keeping step has its end: no follower shows it running.
    assert!(
        events.iter().any(|e| e.step() == "cleanup > keeping VM"
            && e.status() == "success"
            && e.message().starts_with(&format!("[+] VM {vmid} kept ("))),
        "{words:#?}"
    );
    assert_eq!(record["state"], "interrupted");
    assert_eq!(record["outcome"], "kept");
    assert!(vm(&server.url, vmid).await.is_some(), "VM {vmid} stays");
}

#[tokio::test]
async fn sigterm_past_the_grace_interrupts_the_install_with_its_cleanup() {
    let data = temp_dir("term-grace");
    let server = process_server(&data, &[("SHUTDOWN_GRACE_SECS", "0")]).await;
    fault(&server, SLOW_IMPORT).await;
    let id = start_install(&server.url, INSTALL).await;
    wait_for(&server, id, "[*] import disk image").await;
    let stream = follow(&server.url, id).await;
    server.signal("TERM");
    // The stream open at the signal gets the end of the job, then `close`.
    let events = read_events(stream, None).await;
    assert!(events.last().is_some_and(Sse::is_close), "{events:#?}");
    let words = messages(&events);
    assert!(
        words.contains(
            &"[-] interrupted: pvedeck is stopping and the job did not end within \
               SHUTDOWN_GRACE_SECS (0s)"
        ),
        "{words:#?}"
    );
    assert_eq!(server.exit_code().await, Some(0), "a clean exit");

    let server = process_server(&data, &[]).await;
    let record = job(&server, id).await;
    assert_eq!(record["state"], "interrupted");
    assert_eq!(record["outcome"], "destroyed");
    let vmid = record["vmid"].as_u64().expect("VMID");
    assert!(
        said(&words, &format!("[+] VM {vmid} destroyed")),
        "{words:#?}"
    );
    assert!(vm(&server.url, vmid).await.is_none(), "VM {vmid} is gone");
}

#[tokio::test]
async fn sigterm_refuses_new_jobs_and_lets_the_running_one_finish() {
    let data = temp_dir("term-finish");
    let server = process_server(&data, &[("SHUTDOWN_GRACE_SECS", "600")]).await;
    fault(&server, SLOW_IMPORT).await;
    let id = start_install(&server.url, INSTALL).await;
    wait_for(&server, id, "[*] import disk image").await;
    server.signal("TERM");
    wait_for(&server, id, "[*] pvedeck is stopping").await;

    let (status, body) = post_json(&format!("{}/api/vm/install", server.url), INSTALL).await;
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("pvedeck is stopping"), "{body}");

    let events = to_the_end(&server, id).await;
    let words = messages(&events);
    assert!(said(&words, "[+] VM installation completed"), "{words:#?}");
    assert_eq!(server.exit_code().await, Some(0));

    let server = process_server(&data, &[]).await;
    assert_eq!(job(&server, id).await["state"], "succeeded");
}

#[tokio::test]
async fn a_start_whose_proxmox_task_outlives_pvedeck_ends_as_the_task_does() {
    if lane() != Lane::Api {
        // Only the api backend's operations are Proxmox tasks pvedeck can
        // find again (`qm` waits on its own, and dies with pvedeck).
        return;
    }
    let data = temp_dir("reattach");
    let server = process_server(&data, &[]).await;
    let (installed, _) = install(&server.url, INSTALL).await;
    let vmid = job(&server, installed).await["vmid"]
        .as_u64()
        .expect("VMID");
    let u = &server.url;
    assert_eq!(post(&format!("{u}/api/vm/{vmid}/stop")).await.0, 200);
    fault(
        &server,
        r#"{"op":"start","action":"delay","delay_ms":3600000,"times":1}"#,
    )
    .await;
    let res = open_post(&format!("{u}/api/vm/{vmid}/start"), "").await;
    let id = job_id(&res);
    wait_for(&server, id, "[*] starting VM").await;
    task_recorded(&data, id).await;
    server.signal("KILL");
    assert_eq!(server.exit_code().await, None);

    let server = process_server(&data, &[]).await;
    let words: Vec<String> = to_the_end(&server, id)
        .await
        .iter()
        .map(|e| e.message().to_string())
        .collect();
    assert!(
        words
            .iter()
            .any(|w| w.starts_with("[+] Proxmox task UPID:pve1:") && w.contains("ended OK")),
        "{words:#?}"
    );
    assert_eq!(job(&server, id).await["state"], "succeeded");
    let vm = vm(&server.url, vmid).await.expect("the VM");
    assert_eq!(vm["status"], "running");
}
