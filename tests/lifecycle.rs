//! Lifecycle routes (docs/provisioning.md#lifecycle) over real HTTP: go-pve-qemu's
//! preconditions and status codes, the streamed actions, the allow-list.

mod common;

use common::{Sse, post, post_json, post_sse, steps};

#[tokio::test]
async fn preconditions_answer_like_go_pve_qemu() {
    let s = common::server(&[("RESERVED", "120:router")]).await;
    let u = &s.url;
    // 101 runs, 103 is stopped.
    for (path, expected) in [
        ("101/start", "VM is running"),
        ("101/destroy", "VM is running"),
        ("103/stop", "VM is not running"),
        ("103/shutdown", "VM is not running"),
        ("103/reboot", "VM is not running"),
    ] {
        let (status, body) = post(&format!("{u}/api/vm/{path}")).await;
        assert_eq!((status, body.as_str()), (400, expected), "{path}");
    }
    for (path, body) in [
        ("101/set/cpu", r#"{"cpu":4}"#),
        ("101/set/memory", r#"{"memory":4096}"#),
        ("101/set/disk", r#"{"disk":"10G"}"#),
        ("101/set/node", r#"{"node":"pve2"}"#),
    ] {
        let (status, text) = post_json(&format!("{u}/api/vm/{path}"), body).await;
        assert_eq!((status, text.as_str()), (400, "VM is running"), "{path}");
    }
    let (status, body) = common::get(&format!("{u}/api/vm/999/status")).await;
    assert_eq!((status, body.as_str()), (404, "VM 999 not found"));
    let (status, _) = post(&format!("{u}/api/vm/999/start")).await;
    assert_eq!(status, 404);
    let (status, body) = post(&format!("{u}/api/vm/120/stop")).await;
    assert_eq!(status, 400);
    assert!(body.contains("reserved"), "{body}");
    let (status, body) = post(&format!("{u}/api/vm/abc/stop")).await;
    assert_eq!(status, 400, "{body}");
    // Containers and templates are not VMs pvedeck acts on.
    let (status, _) = post(&format!("{u}/api/vm/9000/start")).await;
    assert_eq!(status, 404);
    // None of the refusals ran a state-changing command (the reads are the
    // cluster snapshot's, `qm config` read again before acting, and `qm
    // status`).
    let commands = common::commands(&s).await;
    assert!(
        commands.iter().all(|c| c.starts_with("pvesh")
            || c.starts_with("pvesm status")
            || c.starts_with("qm config")
            || c.starts_with("qm status")),
        "{commands:?}"
    );
}

#[tokio::test]
async fn status_stop_start_shutdown_reboot() {
    let s = common::server(&[]).await;
    let u = &s.url;
    assert_eq!(
        common::get(&format!("{u}/api/vm/101/status")).await,
        (200, "running".into())
    );
    assert_eq!(
        post(&format!("{u}/api/vm/101/stop")).await,
        (200, "ok".into())
    );
    assert_eq!(
        common::get(&format!("{u}/api/vm/101/status")).await,
        (200, "stopped".into())
    );

    let (_, job, events) = post_sse(&format!("{u}/api/vm/101/start"), "").await;
    assert!(job.is_some());
    assert_eq!(
        steps(&events),
        ["starting VM", "waiting for SSH", "finalizing"]
    );
    let last = &events[events.len() - 2];
    assert_eq!(last.message(), "[+] VM started successfully");
    assert_eq!(last.data["vm_id"], 101);
    assert_eq!(last.data["ip"], common::ip(101));
    assert!(events.last().is_some_and(Sse::is_close));
    // The SSH user comes from the OS tag (ubuntu).
    assert!(
        common::commands(&s)
            .await
            .iter()
            .any(|c| *c == format!("ssh ubuntu@{}", common::ip(101)))
    );

    let (_, _, events) = post_sse(&format!("{u}/api/vm/101/reboot"), "").await;
    assert_eq!(
        steps(&events),
        ["rebooting VM", "waiting for SSH", "finalizing"]
    );
    assert_eq!(
        post(&format!("{u}/api/vm/101/shutdown")).await,
        (200, "ok".into())
    );
    assert_eq!(
        common::get(&format!("{u}/api/vm/101/status")).await,
        (200, "stopped".into())
    );
}

#[tokio::test]
async fn resize_migrate_and_destroy_a_stopped_vm() {
    let s = common::server(&[("VM_BALLOON_MIN", "2048")]).await;
    let u = &s.url;
    assert_eq!(
        post_json(&format!("{u}/api/vm/103/set/cpu"), r#"{"cpu":4}"#).await,
        (200, "ok".into())
    );
    assert_eq!(
        post_json(&format!("{u}/api/vm/103/set/memory"), r#"{"memory":8192}"#).await,
        (200, "ok".into())
    );
    assert_eq!(
        post_json(&format!("{u}/api/vm/103/set/disk"), r#"{"disk":"10G"}"#).await,
        (200, "ok".into())
    );
    let vm = common::vm(u, 103).await.expect("103");
    assert_eq!(vm["cpu"], 4);
    assert_eq!(vm["memory"], 8.0);
    assert_eq!(vm["disk"], 74.0);
    // Options in any order: a REST call's parameters have none.
    let words = |c: &str| {
        let mut w: Vec<String> = c.split(" --").map(str::to_string).collect();
        w.sort();
        w
    };
    let commands: Vec<Vec<String>> = common::commands(&s)
        .await
        .iter()
        .map(|c| words(c))
        .collect();
    for expected in [
        "qm set 103 --cores 4",
        "qm set 103 --memory 8192 --numa 1 --balloon 6144",
        "qm resize 103 scsi0 +10G",
    ] {
        assert!(
            commands.contains(&words(expected)),
            "{expected} in {commands:?}"
        );
    }

    let (_, _, events) = post_sse(&format!("{u}/api/vm/103/set/node"), r#"{"node":"pve3"}"#).await;
    assert_eq!(steps(&events), ["migrating VM", "finalizing"]);
    assert!(events.iter().any(|e| {
        e.message()
            .contains("starting migration of VM 103 to node 'pve3'")
    }));
    assert!(
        events
            .iter()
            .any(|e| e.message().contains("migration finished successfully"))
    );
    assert_eq!(common::vm(u, 103).await.expect("103")["node"], "pve3");
    // Commands now go to pve3, where the VM lives.
    assert_eq!(
        post(&format!("{u}/api/vm/103/destroy")).await,
        (200, "ok".into())
    );
    assert!(common::vm(u, 103).await.is_none());
    assert_eq!(post(&format!("{u}/api/vm/103/destroy")).await.0, 404);
}

#[tokio::test]
async fn set_bodies_are_checked_before_anything_runs() {
    let s = common::server(&[
        ("VM_MAX_CPU", "8"),
        ("VM_MAX_RAM", "16384"),
        ("VM_MAX_DISK", "80"),
    ])
    .await;
    let u = &s.url;
    for (path, body, expected) in [
        (
            "set/cpu",
            r#"{"cpu":0}"#,
            "cpu must be an integer from 1 to 8",
        ),
        (
            "set/cpu",
            r#"{"cpu":16}"#,
            "cpu must be an integer from 1 to 8",
        ),
        (
            "set/cpu",
            r#"{"cpu":"4"}"#,
            "cpu must be an integer from 1 to 8",
        ),
        ("set/cpu", r#"{}"#, "cpu is required"),
        (
            "set/memory",
            r#"{"memory":256}"#,
            "memory must be an integer from 512 to 16384 (MB)",
        ),
        (
            "set/memory",
            r#"{"memory":32768}"#,
            "memory must be an integer from 512 to 16384 (MB)",
        ),
        (
            "set/disk",
            r#"{"disk":"-5G"}"#,
            "disk must be a size to add, like \"10G\"",
        ),
        (
            "set/disk",
            r#"{"disk":10}"#,
            "disk must be a size to add, like \"10G\"",
        ),
        (
            "set/node",
            r#"{"node":"pve9"}"#,
            "node 'pve9' is not a node of the cluster",
        ),
        (
            "set/node",
            r#"{"node":5}"#,
            "node must be the name of a cluster node",
        ),
        ("set/cpu", "not json", "request body is not valid JSON"),
    ] {
        let (status, text) = post_json(&format!("{u}/api/vm/103/{path}"), body).await;
        assert_eq!(status, 400, "{path} {body}: {text}");
        assert!(text.starts_with(expected), "{path} {body}: '{text}'");
    }
    // 64G + 20G would pass the 80G limit.
    let (status, text) = post_json(&format!("{u}/api/vm/103/set/disk"), r#"{"disk":"20G"}"#).await;
    assert_eq!(
        (status, text.as_str()),
        (400, "disk would grow to 84G, above the limit of 80G")
    );
    let (status, text) = post_json(&format!("{u}/api/vm/103/set/node"), r#"{"node":"pve2"}"#).await;
    assert_eq!(
        (status, text.as_str()),
        (400, "VM 103 is on node pve2 already")
    );
    assert!(
        common::commands(&s)
            .await
            .iter()
            .all(|c| !c.starts_with("qm set") && !c.starts_with("qm resize"))
    );
}

#[tokio::test]
async fn a_locked_vm_is_409() {
    let s = common::server(&[]).await;
    let u = &s.url;
    // A `qm create` that never ends holds its `create` lock.
    common::fault(&s, r#"{"op":"create","action":"hang"}"#).await;
    let res = reqwest::Client::new()
        .post(format!("{u}/api/vm/install"))
        .header("content-type", "application/json")
        .body(r#"{"os":"debian","version":"12","id":150}"#)
        .send()
        .await
        .unwrap();
    // The event announcing `qm create`; the VM exists once the job runs it.
    let events = common::read_until(res, |e| e.message().starts_with("[*] CPU type")).await;
    assert_eq!(
        events.last().map(Sse::step),
        Some("VM creation > creating VM")
    );
    let mut vm = None;
    for _ in 0..1000 {
        vm = common::vm(u, 150).await;
        if vm.is_some() {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(vm.expect("VM 150 exists")["lock"], "create");
    let (status, text) = post(&format!("{u}/api/vm/150/start")).await;
    assert_eq!((status, text.as_str()), (409, "VM 150 is locked (create)"));
    // Its id is taken for other installs too.
    let (status, _) = post_json(
        &format!("{u}/api/vm/install"),
        r#"{"os":"debian","version":"12","id":150}"#,
    )
    .await;
    assert_eq!(status, 409);
}

#[tokio::test]
async fn clients_outside_allow_ips_get_403_also_on_streaming_routes() {
    let s = common::server(&[("ALLOW_IPS", "10.0.0.0/8,192.168.1.7")]).await;
    let u = &s.url;
    let (status, text) = post_json(
        &format!("{u}/api/vm/install"),
        r#"{"os":"debian","version":"12"}"#,
    )
    .await;
    assert_eq!(status, 403, "{text}");
    assert_eq!(post(&format!("{u}/api/vm/103/start")).await.0, 403);
    assert_eq!(post(&format!("{u}/api/vm/101/stop")).await.0, 403);
    assert_eq!(
        post_json(&format!("{u}/api/vm/103/set/cpu"), r#"{"cpu":2}"#)
            .await
            .0,
        403
    );
    // Reads stay open, and nothing ran.
    assert_eq!(common::get(&format!("{u}/api/vm/101/status")).await.0, 200);
    assert!(
        common::commands(&s)
            .await
            .iter()
            .all(|c| !c.starts_with("qm ") || c.starts_with("qm status"))
    );
}

#[tokio::test]
async fn init_scripts_are_served_as_text() {
    let s = common::server(&[]).await;
    let res = reqwest::get(format!("{}/sh/rockylinux_9.sh", s.url))
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(res.headers()["content-type"], "text/plain; charset=utf-8");
    let body = res.text().await.unwrap();
    assert!(
        body.contains("Rocky Linux 9") && body.contains("dnf"),
        "{body}"
    );
    assert_eq!(
        common::get(&format!("{}/sh/debian_10.sh", s.url)).await.0,
        404
    );
}

#[tokio::test]
async fn a_disk_resize_whose_task_failed_is_an_error_with_proxmox_s_message() {
    let s = common::server(&[]).await;
    let u = &s.url;
    // With the cli backend, `qm disk resize` prints the failure and exits 0.
    common::fault(
        &s,
        r#"{"op":"resize","action":"fail","message":"zfs error: out of space"}"#,
    )
    .await;
    let (status, body) = post_json(&format!("{u}/api/vm/103/set/disk"), r#"{"disk":"10G"}"#).await;
    assert_eq!(status, 500, "{body}");
    assert!(body.contains("out of space"), "{body}");
    assert_eq!(common::vm(u, 103).await.expect("103")["disk"], 64.0);
}

#[tokio::test]
async fn a_ciuser_that_is_no_user_name_is_not_put_in_an_ssh_destination() {
    let s = common::server(&[]).await;
    let u = &s.url;
    // Someone with access to the node sets a hostile cloud-init user.
    if !common::qm_behind(
        &s,
        &["set", "101", "--ciuser", "-oProxyCommand=touch /tmp/pwned"],
    ) {
        return;
    }
    let (status, body) = post(&format!("{u}/api/vm/101/reboot")).await;
    assert_eq!(status, 500, "{body}");
    assert!(body.contains("is not a user name"), "{body}");
    let argv = std::fs::read_to_string(s.data_dir.join("sim/argv.log")).unwrap_or_default();
    assert!(
        !argv
            .lines()
            .any(|l| l.starts_with("[\"ssh\"") && l.contains("ProxyCommand")),
        "{argv}"
    );
    assert!(
        !argv.lines().any(|l| l.starts_with("[\"qm\",\"reboot\"")),
        "nothing rebooted"
    );
}

#[tokio::test]
async fn a_vm_changed_behind_pvedecks_back_is_not_acted_on() {
    // The list is read once and not again for an hour: what it says is
    // as old as a list can be when an action comes.
    let s = common::server(&[("SNAPSHOT_INTERVAL_MS", "3600000")]).await;
    let u = &s.url;
    // The list has read 103 as one of pvedeck's (tagged), stopped.
    assert!(common::vm(u, 103).await.is_some());
    let before = common::commands(&s).await.len();
    // Meanwhile someone makes it another VM: the tag is gone.
    common::set_behind(&s, "pve2", 103, &[("tags", "router")]).await;
    let (status, body) = post(&format!("{u}/api/vm/103/destroy")).await;
    assert_eq!(status, 409, "{body}");
    assert!(
        body.contains("VM 103 is not the VM pvedeck last read: its tags are now 'router'"),
        "{body}"
    );
    let (status, body) = post(&format!("{u}/api/vm/103/start")).await;
    assert_eq!(status, 409, "{body}");
    let after: Vec<String> = common::commands(&s)
        .await
        .into_iter()
        .skip(before)
        .collect();
    assert!(
        !after
            .iter()
            .any(|c| c.starts_with("qm destroy") || c.starts_with("qm start")),
        "{after:?}"
    );
    assert!(common::vm(u, 103).await.is_some(), "103 is still there");
    // Notes naming an owner pvedeck does not record for it: the same.
    common::set_behind(
        &s,
        "pve2",
        103,
        &[
            ("tags", "rockylinux;pvedeck"),
            ("description", "pvedeck-owner: mallory"),
        ],
    )
    .await;
    let (status, body) = post(&format!("{u}/api/vm/103/destroy")).await;
    assert_eq!(status, 409, "{body}");
    assert!(
        body.contains("its notes name the owner 'mallory'"),
        "{body}"
    );
}

#[tokio::test]
async fn status_reads_are_served_from_a_short_memory_and_limited_per_client() {
    let s = common::server(&[]).await;
    let u = &s.url;
    let before = common::commands(&s).await;
    let qm_status = |commands: &[String]| {
        commands
            .iter()
            .filter(|c| c.starts_with("qm status 101"))
            .count()
    };
    let mut answers = Vec::new();
    for _ in 0..30 {
        answers.push(common::get(&format!("{u}/api/vm/101/status")).await);
    }
    assert!(
        answers
            .iter()
            .all(|(status, body)| (*status, body.as_str()) == (200, "running"))
    );
    let after = common::commands(&s).await;
    // Thirty asks within the memory's two seconds cost one or two reads.
    assert!(
        qm_status(&after) - qm_status(&before) <= 2,
        "{:?}",
        &after[before.len()..]
    );
    // A stop is seen at once: the memory forgets the VM it acted on.
    assert_eq!(post(&format!("{u}/api/vm/101/stop")).await.0, 200);
    assert_eq!(
        common::get(&format!("{u}/api/vm/101/status")).await,
        (200, "stopped".to_string())
    );
    // Past its burst a client waits; what it was refused ran nothing.
    let mut refused = None;
    for _ in 0..60 {
        let (status, body) = common::get(&format!("{u}/api/vm/102/status")).await;
        if status == 429 {
            refused = Some(body);
            break;
        }
    }
    let refused = refused.expect("a 429 within 60 reads");
    assert!(
        refused.contains("too many VM reads from 127.0.0.1"),
        "{refused}"
    );
}
