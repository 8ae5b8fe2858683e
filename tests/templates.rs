//! Golden templates (docs/provisioning.md#golden-templates): a build job from the cached image to a
//! template with a cleaned identity, listed apart from the VMs, refused when
//! it exists or is being built, destroyed when a step fails.

mod common;

const DEBIAN: &str = r#"{"os":"debian","version":"12"}"#;

#[tokio::test]
async fn a_template_is_built_listed_apart_from_vms_and_deleted() {
    let server = common::server(&[]).await;
    let url = &server.url;
    // 9000 holds the demo cluster's own template, which pvedeck did not make.
    let (_, job, events) = common::post_sse(&format!("{url}/api/templates"), DEBIAN).await;
    let job = job.expect("x-job-id");
    assert!(events.iter().all(|e| e.status() != "error"), "{events:#?}");
    let steps: Vec<&str> = events.iter().map(|e| e.step()).collect();
    let order = [
        "preparation > choosing template ID",
        "preparation > borrowing an address",
        "OS preparation > getting OS image",
        "SSH preparation > checking SSH key",
        "template build > creating VM",
        "template build > importing disk image",
        "template build > initializing configuration",
        "template build > waiting for ready",
        "template build > SSH initialization",
        "template build > cleaning identity",
        "template build > shutting down",
        "template build > converting to template",
        "template build > finalizing",
    ];
    let positions: Vec<usize> = order
        .iter()
        .map(|s| {
            steps
                .iter()
                .position(|t| t == s)
                .unwrap_or_else(|| panic!("{s}: {steps:?}"))
        })
        .collect();
    assert!(positions.windows(2).all(|w| w[0] < w[1]), "{steps:?}");
    let last = events.iter().rfind(|e| !e.is_close()).expect("events");
    assert!(
        last.message()
            .starts_with("[+] template tpl-debian-12 (VM 9001) built in "),
        "{last:?}"
    );
    assert_eq!(last.data["vm_id"], 9001);
    let job_state = common::json(&format!("{url}/api/jobs/{job}")).await;
    assert_eq!(job_state["kind"], "template");
    assert_eq!(job_state["state"], "succeeded");

    // The identity was cleaned through the agent, then the VM became a template.
    let ran = common::commands(&server).await;
    let at = |prefix: &str| {
        ran.iter()
            .position(|c| c.starts_with(prefix))
            .unwrap_or_else(|| panic!("{prefix}: {ran:#?}"))
    };
    assert!(
        at(
            "qm guest exec 9001 -- sh -c cloud-init clean --logs --machine-id && rm -f /etc/ssh/ssh_host_*"
        ) < at("qm template 9001")
    );
    // A cloud image's 2 GiB disk cannot hold the init script's swap file
    // (found on a real guest): the template grows to the smallest disk a
    // clone may ask for before it first boots.
    assert!(at("qm resize 9001 scsi0 16G") < at("qm start 9001"));

    let mut templates = common::json(&format!("{url}/api/templates")).await;
    let built = templates[0]
        .as_object_mut()
        .and_then(|t| t.remove("built"))
        .and_then(|b| b.as_i64())
        .expect("built");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as i64;
    assert!(
        (0..60_000).contains(&(now - built)),
        "built {built}, now {now}"
    );
    assert_eq!(
        templates,
        serde_json::json!([{"vmid": 9001, "name": "tpl-debian-12", "os": "debian",
            "version": "12", "node": "pve1", "state": "ready", "job": job,
            "image": "debian-12-generic-amd64.qcow2"}])
    );
    assert!(
        common::vm(url, 9001).await.is_none(),
        "a template is not a VM"
    );

    // The borrowed address went back to the pool: the next install gets it.
    let borrowed = events
        .iter()
        .find(|e| e.step() == "preparation > borrowing an address" && e.status() == "success")
        .expect("borrowed");
    let lent = borrowed
        .message()
        .split("free VMID ")
        .nth(1)
        .and_then(|m| m.split('\'').next());
    let (_, install) = common::install(url, DEBIAN).await;
    let assigned = install
        .iter()
        .find(|e| e.message().starts_with("[+] auto-assigned VMID: "))
        .expect("assigned");
    assert_eq!(
        assigned
            .message()
            .trim_start_matches("[+] auto-assigned VMID: ")
            .split(' ')
            .next(),
        lent
    );

    // It exists: building it again is refused, as are releases that are not.
    let (status, body) = common::post_json(&format!("{url}/api/templates"), DEBIAN).await;
    assert_eq!(
        (status, body.as_str()),
        (
            409,
            "template tpl-debian-12 exists (VM 9001): rebuild or delete it"
        )
    );
    let (status, body) = common::post_json(
        &format!("{url}/api/templates"),
        r#"{"os":"debian","version":"99"}"#,
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body.starts_with("version '99' of debian is not supported"),
        "{body}"
    );
    let (status, _) = common::post_json(&format!("{url}/api/templates"), r#"{"os":"plan9"}"#).await;
    assert_eq!(status, 400);

    let (status, body) = common::delete(&format!("{url}/api/templates/101")).await;
    assert_eq!(
        (status, body.as_str()),
        (404, "VM 101 is not a template pvedeck built")
    );
    assert_eq!(
        common::delete(&format!("{url}/api/templates/9001")).await,
        (200, "ok".to_string())
    );
    assert_eq!(
        common::json(&format!("{url}/api/templates")).await,
        serde_json::json!([])
    );
    assert_eq!(
        common::delete(&format!("{url}/api/templates/9001")).await.0,
        404
    );
}

#[tokio::test]
async fn a_failed_build_destroys_what_it_made() {
    let server = common::server(&[]).await;
    let url = &server.url;
    common::fault(&server, r#"{"op":"ssh-init","action":"fail"}"#).await;
    let (_, job, events) = common::post_sse(&format!("{url}/api/templates"), DEBIAN).await;
    let failed = events
        .iter()
        .find(|e| e.status() == "error")
        .expect("an error");
    assert_eq!(failed.step(), "template build > SSH initialization");
    assert!(
        events.iter().any(|e| e.step() == "cleanup > destroying VM"
            && e.message().starts_with("[+] VM 9001 destroyed")),
        "{events:#?}"
    );
    let detail = common::json(&format!("{url}/api/jobs/{}", job.expect("job"))).await;
    assert_eq!(detail["outcome"], "destroyed");
    assert_eq!(
        common::json(&format!("{url}/api/templates")).await,
        serde_json::json!([])
    );
}

#[tokio::test]
async fn a_template_being_built_is_neither_built_twice_nor_deleted() {
    let server = common::server(&[]).await;
    let url = &server.url;
    common::fault(&server, r#"{"op":"importdisk","action":"hang"}"#).await;
    let stream = common::open_post(&format!("{url}/api/templates"), DEBIAN).await;
    assert_eq!(stream.status(), 200);
    // Read until the build is at the import, which hangs.
    let events = common::read_until(stream, |e| {
        e.step() == "template build > importing disk image"
    })
    .await;
    assert!(events.iter().all(|e| e.status() != "error"), "{events:#?}");

    let listed = common::json(&format!("{url}/api/templates")).await;
    assert_eq!(listed[0]["state"], "building", "{listed}");
    assert_eq!(listed[0]["vmid"], 9001);
    let (status, body) = common::post_json(&format!("{url}/api/templates"), DEBIAN).await;
    assert_eq!(status, 409, "{body}");
    assert!(
        body.starts_with("template tpl-debian-12 is being built (job "),
        "{body}"
    );
    let (status, body) = common::delete(&format!("{url}/api/templates/9001")).await;
    assert_eq!(status, 409, "{body}");
}

const CLONE: &str = r#"{"os":"debian","version":"12","method":"clone"}"#;

fn steps(events: &[common::Sse]) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for e in events {
        if !e.is_close() && names.last().map(String::as_str) != Some(e.step()) {
            names.push(e.step().to_string());
        }
    }
    names
}

#[tokio::test]
async fn a_clone_install_builds_the_template_once_links_to_it_and_is_ready_when_cloud_init_is_done()
{
    let server = common::server(&[]).await;
    let url = &server.url;
    let (job, events) = common::install(url, CLONE).await;
    assert!(events.iter().all(|e| e.status() != "error"), "{events:#?}");
    assert_eq!(
        steps(&events),
        [
            "preparation > checking VMID",
            "preparation > assigning IP",
            "preparation > validating CPU and RAM",
            "preparation > validating disk size",
            "preparation > setting default config values",
            "preparation > checking storage pool",
            "template > finding template",
            "SSH preparation > checking SSH key",
            "VM creation > cloning template",
            "VM initialization > initializing configuration",
            "VM initialization > waiting for ready",
            "VM initialization > verifying identity",
            "VM initialization > finalizing",
        ]
    );
    let building = events
        .iter()
        .find(|e| {
            e.message()
                .starts_with("[*] no template tpl-debian-12 yet: building it (job ")
        })
        .expect("the template was built first");
    assert!(building.step() == "template > finding template");
    assert!(
        events
            .iter()
            .any(|e| e.message() == "[*] linked clone of tpl-debian-12 (VM 9001)"),
        "{events:#?}"
    );
    let ready = events
        .iter()
        .find(|e| e.step() == "VM initialization > waiting for ready" && e.status() == "success")
        .expect("ready");
    assert!(
        ready
            .message()
            .starts_with("[+] VM is ready: the guest agent answers and cloud-init is done")
    );
    let detail = common::json(&format!("{url}/api/jobs/{job}")).await;
    assert_eq!(detail["state"], "succeeded");
    let vmid = detail["vmid"].as_u64().expect("vmid");

    // The second clone finds the template; neither imports, runs a script or reboots.
    let (_, again) = common::install(url, CLONE).await;
    assert!(
        again.iter().any(|e| e
            .message()
            .starts_with("[+] template tpl-debian-12 (VM 9001)")),
        "{again:#?}"
    );
    let ran = common::commands(&server).await;
    assert!(
        ran.iter()
            .any(|c| c.starts_with(&format!("qm clone 9001 {vmid} --name vm-{vmid} --full 0"))),
        "{ran:#?}"
    );
    assert_eq!(
        ran.iter().filter(|c| c.starts_with("qm template ")).count(),
        1,
        "one build"
    );
    for absent in [
        format!("qm importdisk {vmid} "),
        format!("qm reboot {vmid}"),
    ] {
        assert!(!ran.iter().any(|c| c.starts_with(&absent)), "{absent}");
    }
    assert!(
        !ran.iter()
            .any(|c| c.starts_with(&format!("ssh debian@{}", common::ip(vmid as u32)))),
        "no SSH to the clone"
    );
    assert_eq!(
        common::vm(url, vmid).await.expect("listed")["status"],
        "running"
    );
}

#[tokio::test]
async fn install_method_is_checked_and_install_method_clone_makes_it_the_default() {
    let server = common::server(&[("INSTALL_METHOD", "clone")]).await;
    let url = &server.url;
    let install = format!("{url}/api/vm/install");
    let (status, body) = common::post_json(
        &install,
        r#"{"os":"debian","version":"12","method":"copy"}"#,
    )
    .await;
    assert_eq!(
        (status, body.as_str()),
        (400, "method 'copy' is not one of: clone, import")
    );
    let (status, body) =
        common::post_json(&install, r#"{"os":"debian","version":"12","method":1}"#).await;
    assert_eq!((status, body.as_str()), (400, "method must be a string"));
    assert!(
        common::commands(&server)
            .await
            .iter()
            .all(|c| !c.starts_with("qm ")),
        "refused: no qm"
    );

    let (_, events) = common::install(url, r#"{"os":"debian","version":"12"}"#).await;
    assert!(
        events
            .iter()
            .any(|e| e.step() == "VM creation > cloning template"),
        "{events:#?}"
    );
    let (_, events) =
        common::install(url, r#"{"os":"debian","version":"12","method":"import"}"#).await;
    assert!(
        events
            .iter()
            .any(|e| e.step() == "VM creation > importing disk image"),
        "{events:#?}"
    );
}

#[tokio::test]
async fn a_cloud_init_error_fails_the_clone_install_and_keeps_the_vm() {
    let server = common::server(&[]).await;
    let url = &server.url;
    let (_, _, built) = common::post_sse(&format!("{url}/api/templates"), DEBIAN).await;
    assert!(built.iter().all(|e| e.status() != "error"), "{built:#?}");
    common::fault(
        &server,
        r#"{"op":"cloud-init","action":"fail","message":"Failed to run module scripts_user"}"#,
    )
    .await;
    let (job, events) = common::install(url, CLONE).await;
    let failed = events
        .iter()
        .find(|e| e.status() == "error")
        .expect("an error");
    assert_eq!(failed.step(), "VM initialization > waiting for ready");
    assert_eq!(
        failed.message(),
        "[-] cloud-init reported an error: status: error; Failed to run module scripts_user"
    );
    let detail = common::json(&format!("{url}/api/jobs/{job}")).await;
    assert_eq!(detail["outcome"], "kept");
    let vmid = detail["vmid"].as_u64().expect("vmid");
    assert!(common::vm(url, vmid).await.is_some(), "kept for debugging");
}

#[tokio::test]
async fn clones_prove_their_own_identity_and_a_template_that_kept_its_own_is_caught() {
    let server = common::server(&[]).await;
    let url = &server.url;
    // Two clones of a cleaned template: each its own identity, its host key
    // fingerprint in the summary and on the last events.
    let fingerprint = |events: &[common::Sse]| {
        let last = events.iter().rfind(|e| !e.is_close()).expect("events");
        let key = last.data["host_key"]
            .as_str()
            .expect("host_key")
            .to_string();
        assert!(key.starts_with("SHA256:") && key.len() == 50, "{key}");
        assert!(
            events
                .iter()
                .any(|e| e.message() == format!("[*] Host key: {key}"))
        );
        key
    };
    let (_, first) = common::install(url, CLONE).await;
    let (_, second) = common::install(url, CLONE).await;
    for events in [&first, &second] {
        assert!(events.iter().all(|e| e.status() != "error"), "{events:#?}");
        assert!(events.iter().any(|e| {
            e.step() == "VM initialization > verifying identity"
                && e.message()
                    .starts_with("[+] identity verified: machine-id ")
        }));
    }
    assert_ne!(fingerprint(&first), fingerprint(&second));

    // A template whose cleaning did nothing: its first clone is caught.
    assert_eq!(
        common::delete(&format!("{url}/api/templates/9001")).await.0,
        409,
        "clones use it"
    );
    common::fault(&server, r#"{"op":"clean","action":"fail"}"#).await;
    let ubuntu = r#"{"os":"ubuntu","version":"24.04"}"#;
    let (_, _, built) = common::post_sse(&format!("{url}/api/templates"), ubuntu).await;
    assert!(built.iter().all(|e| e.status() != "error"), "{built:#?}");
    let tpl = built.iter().rfind(|e| !e.is_close()).expect("built").data["vm_id"]
        .as_u64()
        .expect("id");
    let (job, events) =
        common::install(url, r#"{"os":"ubuntu","version":"24.04","method":"clone"}"#).await;
    let failed = events
        .iter()
        .find(|e| e.status() == "error")
        .expect("caught");
    assert_eq!(failed.step(), "VM initialization > verifying identity");
    let detail = common::json(&format!("{url}/api/jobs/{job}")).await;
    let vmid = detail["vmid"].as_u64().expect("vmid");
    assert_eq!(
        failed.message(),
        format!(
            "[-] VM {vmid} has the same machine-id as template tpl-ubuntu-24.04 (VM {tpl}): it \
             was cloned from a template whose identity was not cleaned"
        )
    );
    assert_eq!(detail["outcome"], "kept");
    assert!(
        events.iter().all(|e| e.data.get("host_key").is_none()),
        "no fingerprint for it"
    );
}

/// The lines of pvedeck's known-hosts file for an address.
fn known(server: &common::Server, ip: &str) -> Vec<String> {
    std::fs::read_to_string(server.data_dir.join("known_hosts"))
        .unwrap_or_default()
        .lines()
        .filter(|l| {
            l.split_whitespace()
                .next()
                .is_some_and(|h| h == ip || h.starts_with(&format!("[{ip}]:")))
        })
        .map(str::to_string)
        .collect()
}

#[tokio::test]
async fn ssh_requires_the_host_key_recorded_at_first_contact_or_proved_through_the_agent() {
    let server = common::server(&[]).await;
    let url = &server.url;
    // Import path: recorded by ssh at first contact.
    let (job, events) = common::install(url, DEBIAN).await;
    assert!(events.iter().all(|e| e.status() != "error"), "{events:#?}");
    let vmid = common::json(&format!("{url}/api/jobs/{job}")).await["vmid"]
        .as_u64()
        .expect("vmid");
    let ip = common::ip(vmid as u32);
    assert_eq!(known(&server, &ip).len(), 1, "recorded once");
    // Its fingerprint ends the install, as on the clone path.
    let fingerprint = events.iter().rfind(|e| !e.is_close()).expect("events").data["host_key"]
        .as_str()
        .expect("host_key of an import")
        .to_string();
    assert!(fingerprint.starts_with("SHA256:"), "{fingerprint}");
    // Clone path: pinned from what the agent read, before any SSH.
    let (job, events) = common::install(url, CLONE).await;
    let last = events.iter().rfind(|e| !e.is_close()).expect("events");
    let clone = common::json(&format!("{url}/api/jobs/{job}")).await["vmid"]
        .as_u64()
        .expect("vmid");
    let pinned = known(&server, &common::ip(clone as u32));
    assert_eq!(pinned.len(), 1, "{pinned:?}");
    assert!(last.data["host_key"].is_string());

    if common::process_lane() {
        // After first contact, no ssh to a VM goes without checking.
        let argvs: Vec<String> = std::fs::read_to_string(server.data_dir.join("sim/argv.log"))
            .unwrap_or_default()
            .lines()
            .filter(|l| l.starts_with("[\"ssh\"") && l.contains(&format!("@{ip}\"")))
            .map(str::to_string)
            .collect();
        assert!(!argvs.is_empty());
        assert!(
            argvs
                .iter()
                .all(|a| !a.contains("StrictHostKeyChecking=no")),
            "{argvs:#?}"
        );
        assert!(
            argvs[0].contains("StrictHostKeyChecking=accept-new"),
            "{}",
            argvs[0]
        );
        // The init script goes only to the host whose key the first
        // answered `echo ready` recorded, as does all that follows.
        let script = argvs
            .iter()
            .position(|a| a.contains("f=$(mktemp) && cat > "))
            .expect("the init script");
        assert!(
            argvs[script..]
                .iter()
                .all(|a| a.contains("StrictHostKeyChecking=yes")),
            "{argvs:#?}"
        );
    }

    // Someone else at the address (another key): the reboot's SSH check
    // refuses at once, naming why.
    let file = server.data_dir.join("known_hosts");
    let text = std::fs::read_to_string(&file).expect("known_hosts");
    let token = known(&server, &ip)[0]
        .split_whitespace()
        .next()
        .expect("host")
        .to_string();
    let forged = text.replace(
        &known(&server, &ip)[0],
        &format!("{token} ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOw2TvqgEE1mMDlRYVIf6mF+Zqy4DPzTIxfGaezAA4aB"),
    );
    std::fs::write(&file, forged).expect("write");
    let (_, _, events) = common::post_sse(&format!("{url}/api/vm/{vmid}/reboot"), "").await;
    let failed = events
        .iter()
        .find(|e| e.status() == "error")
        .expect("refused");
    assert!(
        failed
            .message()
            .contains("the host key is not the one recorded for this VM"),
        "{failed:?}"
    );
}

#[tokio::test]
async fn a_rebuild_replaces_the_template_and_retires_the_old_one_while_linked_clones_use_it() {
    let server = common::server(&[]).await;
    let url = &server.url;
    // A linked clone of the first template.
    let (_, events) = common::install(url, CLONE).await;
    assert!(events.iter().all(|e| e.status() != "error"), "{events:#?}");
    let clone = events.iter().rfind(|e| !e.is_close()).expect("events").data["vm_id"]
        .as_u64()
        .expect("vm_id");

    let rebuild = |id: u32| {
        let url = url.clone();
        async move { common::post_sse(&format!("{url}/api/templates/{id}/rebuild"), "").await }
    };
    let (status, body) = common::post_json(&format!("{url}/api/templates/101/rebuild"), "").await;
    assert_eq!(
        (status, body.as_str()),
        (404, "VM 101 is not a template pvedeck built")
    );

    let (_, _, events) = rebuild(9001).await;
    assert!(events.iter().all(|e| e.status() != "error"), "{events:#?}");
    let retired = events
        .iter()
        .find(|e| e.step() == "template build > retiring the old template")
        .expect("retiring step");
    assert!(
        retired.message().starts_with(
            "[*] old template 9001 kept, retired: linked clones use its disk; delete it once \
             they are gone"
        ),
        "{retired:?}"
    );
    let states: Vec<(u64, String)> = common::json(&format!("{url}/api/templates"))
        .await
        .as_array()
        .expect("list")
        .iter()
        .map(|t| {
            (
                t["vmid"].as_u64().unwrap_or(0),
                t["state"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    assert_eq!(
        states,
        [(9001, "retired".to_string()), (9002, "ready".to_string())]
    );

    // New clones come from the new template; a retired one is not rebuilt.
    let (_, events) = common::install(url, CLONE).await;
    assert!(
        events.iter().any(|e| e
            .message()
            .starts_with("[+] template tpl-debian-12 (VM 9002) (")),
        "{events:#?}"
    );
    let (status, body) = common::post_json(&format!("{url}/api/templates/9001/rebuild"), "").await;
    assert_eq!(
        (status, body.as_str()),
        (
            409,
            "template tpl-debian-12 (VM 9001) is retired: build its release instead"
        )
    );

    let second = events.iter().rfind(|e| !e.is_close()).expect("events").data["vm_id"]
        .as_u64()
        .expect("vm_id");

    // Once its clone is gone, the retired template can go too.
    let (status, _) = common::delete(&format!("{url}/api/templates/9001")).await;
    assert_eq!(status, 409, "a linked clone still uses it");
    for vm in [clone, second] {
        for action in ["stop", "destroy"] {
            let (status, body) =
                common::post_json(&format!("{url}/api/vm/{vm}/{action}"), "").await;
            assert_eq!(status, 200, "{action}: {body}");
        }
    }
    assert_eq!(
        common::delete(&format!("{url}/api/templates/9001")).await,
        (200, "ok".to_string())
    );

    // Without linked clones, a rebuild destroys the old template at once.
    let (_, _, events) = rebuild(9002).await;
    assert!(
        events
            .iter()
            .any(|e| e.message().starts_with("[+] old template 9002 destroyed (")),
        "{events:#?}"
    );
}

#[tokio::test]
async fn a_clone_for_another_node_on_zfs_is_a_full_copy_that_migrates() {
    // The template lives on pve1's ZFS: a linked clone there could not
    // leave pve1 (QemuMigrate: "can't migrate … as it's a clone of …").
    let server = common::server(&[]).await;
    let url = &server.url;
    let (job, events) = common::install(
        url,
        r#"{"os":"debian","version":"12","method":"clone","node":"pve2"}"#,
    )
    .await;
    assert!(events.iter().all(|e| e.status() != "error"), "{events:#?}");
    assert!(
        events.iter().any(|e| e.message()
            == "[*] full clone of tpl-debian-12 (VM 9001): storage local-zfs (zfspool) cannot move a linked clone to another node"),
        "{events:#?}"
    );
    assert!(
        events
            .iter()
            .any(|e| e.step() == "VM initialization > migrating VM"
                && e.message().contains("migration finished successfully")),
        "{events:#?}"
    );
    let detail = common::json(&format!("{url}/api/jobs/{job}")).await;
    assert_eq!(detail["state"], "succeeded");
    let vmid = detail["vmid"].as_u64().expect("vmid");
    let ran = common::commands(&server).await;
    assert!(
        ran.iter()
            .any(|c| c.starts_with(&format!("qm clone 9001 {vmid} --name vm-{vmid} --full 1"))),
        "{ran:#?}"
    );
    let vm = common::vm(url, vmid).await.expect("listed");
    assert_eq!(vm["node"], "pve2");
    assert_eq!(vm["status"], "running");
}
