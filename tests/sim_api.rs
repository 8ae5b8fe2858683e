//! The simulated cluster's REST face (`pvedeck-sim api`), as a process on
//! its own data directory, spoken to over HTTPS with the token it wrote to
//! `DATA_DIR/sim/api.json`, trusting its certificate `DATA_DIR/sim/api/cert.pem`.

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{Killed, image_server, qcow2, sim_binary, temp_dir};
use serde_json::Value;

struct SimApi {
    _process: Killed,
    data_dir: PathBuf,
    url: String,
    token: String,
    client: reqwest::Client,
}

/// Starts `pvedeck-sim api` on a fresh data directory with `vars` and waits
/// for the URL line on its stdout.
fn start(vars: &[(&str, &str)]) -> SimApi {
    let data_dir = temp_dir("simapi");
    let mut command = std::process::Command::new(sim_binary());
    command
        .arg("api")
        .current_dir(&data_dir)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("DATA_DIR", &data_dir)
        .env("GATEWAY", "127.0.0.1")
        .env("SIM_SPEED", "2000")
        .env("SIM_JITTER", "0")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null());
    for (k, v) in vars {
        command.env(k, v);
    }
    let mut child = command.spawn().expect("start pvedeck-sim api");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let process = Killed(child);
    let line = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("pvedeck-sim api printed its URL");
    let about: Value = serde_json::from_str(
        &std::fs::read_to_string(data_dir.join("sim/api.json")).expect("api.json"),
    )
    .expect("api.json is JSON");
    let url = about["url"].as_str().expect("url").to_string();
    assert_eq!(line, url);
    assert!(
        url.starts_with("https://127.0.0.1:") && url.ends_with("/api2/json"),
        "{url}"
    );
    let fingerprint = about["fingerprint"].as_str().expect("fingerprint");
    assert_eq!(fingerprint.len(), 95, "{fingerprint}");
    let cert = std::fs::read(data_dir.join("sim/api/cert.pem")).expect("cert.pem");
    let client = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(&cert).expect("PEM"))
        .build()
        .expect("client");
    SimApi {
        _process: process,
        data_dir,
        url,
        token: about["token"].as_str().expect("token").to_string(),
        client,
    }
}

struct Answer {
    status: u16,
    reason: String,
    body: Value,
}

impl SimApi {
    fn auth(&self) -> String {
        format!("PVEAPIToken={}", self.token)
    }

    async fn send(&self, req: reqwest::RequestBuilder) -> Answer {
        let res = req.send().await.expect("request");
        let status = res.status().as_u16();
        let reason = res
            .extensions()
            .get::<hyper::ext::ReasonPhrase>()
            .map(|r| String::from_utf8_lossy(r.as_bytes()).into_owned())
            .unwrap_or_default();
        let text = res.text().await.expect("body");
        let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
        Answer {
            status,
            reason,
            body,
        }
    }

    async fn get(&self, path: &str) -> Answer {
        let req = self.client.get(format!("{}{path}", self.url));
        self.send(req.header("Authorization", self.auth())).await
    }

    async fn post(&self, path: &str, form: &[(&str, &str)]) -> Answer {
        let req = self.client.post(format!("{}{path}", self.url)).form(form);
        self.send(req.header("Authorization", self.auth())).await
    }

    async fn put(&self, path: &str, form: &[(&str, &str)]) -> Answer {
        let req = self.client.put(format!("{}{path}", self.url)).form(form);
        self.send(req.header("Authorization", self.auth())).await
    }

    /// `POST …/upload` as pvedeck's client sends it: the fields, then the
    /// file as the `filename` part, with its length announced.
    async fn upload(&self, path: &str, fields: &[(&str, &str)], name: &str, file: &[u8]) -> Answer {
        let boundary = "pvedeck-5eed0123456789ab";
        let mut body = Vec::new();
        for (key, value) in fields {
            body.extend_from_slice(
                format!(
                    "--{boundary}\r\nContent-Disposition: form-data; name=\"{key}\"\r\n\r\n{value}\r\n"
                )
                .as_bytes(),
            );
        }
        body.extend_from_slice(
            format!(
                "--{boundary}\r\nContent-Disposition: form-data; name=\"filename\"; filename=\"{name}\"\r\n\
                 Content-Type: application/octet-stream\r\n\r\n"
            )
            .as_bytes(),
        );
        body.extend_from_slice(file);
        body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
        let req = self
            .client
            .post(format!("{}{path}", self.url))
            .header(
                "Content-Type",
                format!("multipart/form-data; boundary={boundary}"),
            )
            .body(body);
        self.send(req.header("Authorization", self.auth())).await
    }

    /// The files in a node's storage's `import` directory, hidden ones too.
    fn import_files(&self, node: &str, storage: &str) -> Vec<String> {
        let dir = self
            .data_dir
            .join(format!("sim/storage/{node}/{storage}/import"));
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .map(|entries| {
                entries
                    .flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names
    }

    async fn delete(&self, path: &str) -> Answer {
        let req = self.client.delete(format!("{}{path}", self.url));
        self.send(req.header("Authorization", self.auth())).await
    }

    /// The `data` of a 200, else a failure showing the answer.
    async fn ok(&self, answer: Answer) -> Value {
        assert_eq!(answer.status, 200, "{} {}", answer.reason, answer.body);
        answer.body["data"].clone()
    }

    /// A UPID's task, polled until it stopped: its status.
    async fn wait(&self, upid: &Value) -> Value {
        let upid = upid.as_str().expect("a UPID");
        let node = upid.split(':').nth(1).expect("node");
        for _ in 0..600 {
            let answer = self
                .get(&format!("/nodes/{node}/tasks/{upid}/status"))
                .await;
            let status = self.ok(answer).await;
            if status["status"] == "stopped" {
                return status;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("task {upid} did not stop");
    }

    async fn log(&self, upid: &Value, start: usize, limit: usize) -> (Vec<(u64, String)>, u64) {
        let upid = upid.as_str().expect("a UPID");
        let answer = self
            .get(&format!(
                "/nodes/pve1/tasks/{upid}/log?start={start}&limit={limit}"
            ))
            .await;
        assert_eq!(answer.status, 200, "{}", answer.body);
        let lines = answer.body["data"]
            .as_array()
            .expect("lines")
            .iter()
            .map(|l| {
                (
                    l["n"].as_u64().expect("n"),
                    l["t"].as_str().expect("t").to_string(),
                )
            })
            .collect();
        (lines, answer.body["total"].as_u64().unwrap_or(0))
    }

    fn commands(&self) -> Vec<String> {
        std::fs::read_to_string(self.data_dir.join("sim/commands.log"))
            .map(|t| t.lines().map(str::to_string).collect())
            .unwrap_or_default()
    }

    /// `pvedeck-sim <args>` on this cluster (faults, as the cli lane does).
    fn sim(&self, args: &[&str]) {
        sim_command(&self.data_dir, args);
    }
}

fn sim_command(data_dir: &Path, args: &[&str]) {
    let out = std::process::Command::new(sim_binary())
        .args(args)
        .env_clear()
        .env("DATA_DIR", data_dir)
        .env("GATEWAY", "127.0.0.1")
        .output()
        .expect("pvedeck-sim");
    assert!(out.status.success(), "pvedeck-sim {args:?}: {out:?}");
}

#[tokio::test]
async fn requests_without_the_token_are_refused() {
    let api = start(&[]);
    let url = format!("{}/version", api.url);
    let none = api.send(api.client.get(&url)).await;
    assert_eq!(none.status, 401);
    let secret = api.token.rsplit_once('=').expect("id=secret").1;
    let wrong = api
        .token
        .replace(secret, "00000000-0000-0000-0000-000000000000");
    let bad = api
        .send(
            api.client
                .get(&url)
                .header("Authorization", format!("PVEAPIToken={wrong}")),
        )
        .await;
    assert_eq!(
        (bad.status, bad.reason.as_str()),
        (401, "authentication failure")
    );
    let version = api.ok(api.get("/version").await).await;
    assert_eq!(version["release"], "9.1");
    let storages = api
        .ok(api.get("/cluster/resources?type=storage").await)
        .await;
    let local = storages
        .as_array()
        .and_then(|l| l.iter().find(|s| s["id"] == "storage/pve1/local"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(local["status"], "available", "{storages}");
    let missing = api.get("/nodes/pve1/nothing").await;
    assert_eq!(missing.status, 501, "{}", missing.body);
}

#[tokio::test]
async fn a_created_vm_is_listed_once_its_task_is_ok() {
    let api = start(&[]);
    let upid = api
        .ok(api
            .post(
                "/nodes/pve1/qemu",
                &[
                    ("vmid", "150"),
                    ("name", "web-150"),
                    ("cores", "2"),
                    ("memory", "2048"),
                ],
            )
            .await)
        .await;
    let text = upid.as_str().expect("UPID");
    assert!(
        text.starts_with("UPID:pve1:") && text.ends_with(":qmcreate:150:pvedeck@pve!deck:"),
        "{text}"
    );
    let status = api.wait(&upid).await;
    assert_eq!(status["exitstatus"], "OK", "{status}");
    assert_eq!(
        (status["user"].as_str(), status["tokenid"].as_str()),
        (Some("pvedeck@pve"), Some("deck"))
    );
    let vms = api.ok(api.get("/cluster/resources?type=vm").await).await;
    let vm = vms
        .as_array()
        .expect("list")
        .iter()
        .find(|v| v["vmid"] == 150)
        .expect("VM 150 listed");
    assert_eq!(
        (vm["node"].as_str(), vm["name"].as_str()),
        (Some("pve1"), Some("web-150"))
    );
    assert!(
        api.commands()
            .iter()
            .any(|c| c.starts_with("qm create 150 ")),
        "{:?}",
        api.commands()
    );

    // The same id again: refused before any task, as Proxmox does.
    let again = api.post("/nodes/pve1/qemu", &[("vmid", "150")]).await;
    assert_eq!(again.status, 500);
    assert_eq!(
        again.reason,
        "unable to create VM 150 - VM 150 already exists on node 'pve1'"
    );
    assert_eq!(
        again.body["message"],
        "unable to create VM 150 - VM 150 already exists on node 'pve1'\n"
    );
    let bad = api
        .post("/nodes/pve1/qemu", &[("vmid", "151"), ("cores", "0")])
        .await;
    assert_eq!(
        (bad.status, bad.reason.as_str()),
        (400, "Parameter verification failed.")
    );
    assert_eq!(
        bad.body["errors"]["cores"],
        "value must have a minimum value of 1\n"
    );

    // sshkeys, percent-encoded by the client and again by the form.
    let key =
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl me@host";
    let encoded: String = key
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect();
    let set = api
        .put(
            "/nodes/pve1/qemu/150/config",
            &[("sshkeys", &encoded), ("ciuser", "debian")],
        )
        .await;
    assert_eq!(api.ok(set).await, Value::Null);
    let config = api.ok(api.get("/nodes/pve1/qemu/150/config").await).await;
    assert_eq!(config["cores"], 2, "integers are numbers: {config}");
    assert_eq!(config["memory"], "2048", "memory is a string: {config}");
    assert!(
        config["sshkeys"]
            .as_str()
            .is_some_and(|k| k.starts_with("ssh-ed25519%20AAAA")),
        "{config}"
    );
    // POST config with background_delay: null once done, or the failure.
    let done = api
        .post(
            "/nodes/pve1/qemu/150/config",
            &[("background_delay", "5"), ("onboot", "1")],
        )
        .await;
    assert_eq!(api.ok(done).await, Value::Null);
    api.sim(&[
        "fault",
        r#"{"op":"set","action":"fail","vmid":150,"times":1}"#,
    ]);
    let failed = api
        .post(
            "/nodes/pve1/qemu/150/config",
            &[("background_delay", "5"), ("onboot", "0")],
        )
        .await;
    assert_eq!(
        (failed.status, failed.reason.as_str()),
        (
            500,
            "failed to update VM 150: VM 150 qmp command 'change' failed - unable to connect"
        )
    );
    let missing = api.get("/nodes/pve1/qemu/999/config").await;
    assert_eq!(missing.status, 500);
    assert_eq!(
        missing.reason,
        "Configuration file 'nodes/pve1/qemu-server/999.conf' does not exist"
    );
}

#[tokio::test]
async fn task_logs_read_in_pages_and_a_failed_task_ends_in_task_error() {
    let api = start(&[]);
    // VM 103 (stopped, on pve2) moves to pve3: a migration log.
    let upid = api
        .ok(api
            .post(
                "/nodes/pve2/qemu/103/migrate",
                &[("target", "pve3"), ("with-local-disks", "1")],
            )
            .await)
        .await;
    assert_eq!(api.wait(&upid).await["exitstatus"], "OK");
    let (all, total) = api.log(&upid, 0, 0).await;
    assert!(total >= 5, "{all:?}");
    assert_eq!(all.last().map(|l| l.1.as_str()), Some("TASK OK"));
    assert!(
        all[0]
            .1
            .contains(" starting migration of VM 103 to node 'pve3' ("),
        "{all:?}"
    );
    let mut paged = Vec::new();
    let mut start = 0;
    loop {
        let (page, page_total) = api.log(&upid, start, 2).await;
        assert_eq!(page_total, total);
        if page.is_empty() {
            break;
        }
        assert!(page.len() <= 2);
        start = page.last().map_or(start, |l| l.0 as usize);
        paged.extend(page);
    }
    assert_eq!(paged, all);

    // A start that fails: TASK ERROR with the simulator's message.
    api.sim(&[
        "fault",
        r#"{"op":"start","action":"fail","vmid":105,"times":1}"#,
    ]);
    let upid = api
        .ok(api.post("/nodes/pve3/qemu/105/status/start", &[]).await)
        .await;
    let status = api.wait(&upid).await;
    assert_eq!(
        status["exitstatus"],
        "start failed: QEMU exited with code 1"
    );
    let (lines, _) = api.log(&upid, 0, 50).await;
    assert_eq!(
        lines.last().map(|l| l.1.as_str()),
        Some("TASK ERROR: start failed: QEMU exited with code 1")
    );

    // A task that has printed nothing yet reads as `no content`.
    api.sim(&["fault", r#"{"op":"start","action":"hang","vmid":105}"#]);
    let upid = api
        .ok(api.post("/nodes/pve3/qemu/105/status/start", &[]).await)
        .await;
    let (lines, total) = api.log(&upid, 0, 50).await;
    assert_eq!((lines, total), (vec![(1, "no content".to_string())], 1));
    let node = upid
        .as_str()
        .and_then(|u| u.split(':').nth(1))
        .unwrap_or_default()
        .to_string();
    let status = api
        .ok(api
            .get(&format!(
                "/nodes/{node}/tasks/{}/status",
                upid.as_str().unwrap_or_default()
            ))
            .await)
        .await;
    assert_eq!(status["status"], "running");
}

#[tokio::test]
async fn a_missing_privilege_is_refused_with_proxmoxs_text() {
    let api = start(&[("SIM_API_PRIVS", "VM.Audit,VM.Allocate,VM.PowerMgmt")]);
    let clone = api
        .post("/nodes/pve2/qemu/9000/clone", &[("newid", "160")])
        .await;
    assert_eq!(clone.status, 403);
    assert_eq!(
        clone.reason,
        "Permission check failed (/vms/9000, VM.Clone)"
    );
    assert_eq!(
        clone.body["message"],
        "Permission check failed (/vms/9000, VM.Clone)\n"
    );
    // Privileges are checked before the VM is looked for, as Proxmox does.
    let nowhere = api
        .post("/nodes/pve1/qemu/999/clone", &[("newid", "160")])
        .await;
    assert_eq!(nowhere.status, 403, "{}", nowhere.body);
    let perms = api
        .ok(api.get("/access/permissions?path=/vms/101").await)
        .await;
    assert_eq!(perms["/vms/101"]["VM.Allocate"], 1, "{perms}");
    assert!(perms["/vms/101"].get("VM.Clone").is_none(), "{perms}");
    assert!(!api.commands().iter().any(|c| c.starts_with("qm clone")));
}

#[tokio::test]
async fn a_downloaded_image_is_imported_by_create() {
    let images = image_server().await;
    let base = format!("{images}/img");
    let api = start(&[("IMAGE_BASE_DEBIAN", base.as_str())]);
    let url = format!("{base}/debian-12-genericcloud-amd64.qcow2");
    let sum = sha256_hex(&qcow2(0));
    let form = [
        ("content", "import"),
        ("filename", "debian-12-genericcloud-amd64.qcow2"),
        ("url", url.as_str()),
        ("checksum", sum.as_str()),
        ("checksum-algorithm", "sha256"),
    ];
    let refused = api
        .post("/nodes/pve1/storage/iso/download-url", &form)
        .await;
    assert_eq!(refused.status, 500);
    assert_eq!(
        refused.reason,
        "storage 'iso' is not configured for content-type 'import'"
    );
    let upid = api
        .ok(api
            .post("/nodes/pve1/storage/local/download-url", &form)
            .await)
        .await;
    assert_eq!(api.wait(&upid).await["exitstatus"], "OK");
    let content = api
        .ok(api
            .get("/nodes/pve1/storage/local/content?content=import")
            .await)
        .await;
    assert_eq!(
        content[0]["volid"], "local:import/debian-12-genericcloud-amd64.qcow2",
        "{content}"
    );
    assert_eq!(content[0]["format"], "qcow2");
    // Again: the file is there with that checksum.
    let upid = api
        .ok(api
            .post("/nodes/pve1/storage/local/download-url", &form)
            .await)
        .await;
    assert_eq!(api.wait(&upid).await["exitstatus"], "OK");
    let (lines, _) = api.log(&upid, 0, 0).await;
    assert_eq!(
        lines[0].1,
        "OK, got correct file already, no need to download"
    );

    let upid = api
        .ok(api
            .post(
                "/nodes/pve1/qemu",
                &[
                    ("vmid", "170"),
                    ("name", "img-170"),
                    (
                        "scsi0",
                        "local-zfs:0,import-from=local:import/debian-12-genericcloud-amd64.qcow2",
                    ),
                    ("boot", "order=scsi0"),
                ],
            )
            .await)
        .await;
    assert_eq!(api.wait(&upid).await["exitstatus"], "OK");
    let (lines, _) = api.log(&upid, 0, 0).await;
    assert!(
        lines
            .iter()
            .any(|l| l.1 == "unused0: successfully imported disk 'local-zfs:vm-170-disk-0'"),
        "{lines:?}"
    );
    let config = api.ok(api.get("/nodes/pve1/qemu/170/config").await).await;
    assert_eq!(
        config["scsi0"], "local-zfs:vm-170-disk-0,size=2G",
        "{config}"
    );
    assert!(config.get("unused0").is_none(), "{config}");

    // A missing source fails the task, and no VM is left behind.
    let upid = api
        .ok(api
            .post(
                "/nodes/pve1/qemu",
                &[
                    ("vmid", "171"),
                    ("scsi0", "local-zfs:0,import-from=local:import/none.qcow2"),
                ],
            )
            .await)
        .await;
    assert_eq!(
        api.wait(&upid).await["exitstatus"],
        "could not get size of local:import/none.qcow2"
    );
    assert_eq!(api.get("/nodes/pve1/qemu/171/config").await.status, 500);

    // A `local` without `import` (PVE 8.4, an upgraded host) refuses.
    api.sim(&["storage", "local", "content", "iso,vztmpl,backup"]);
    let refused = api
        .post("/nodes/pve1/storage/local/download-url", &form)
        .await;
    assert_eq!(
        refused.reason,
        "storage 'local' is not configured for content-type 'import'"
    );
    let listed = api
        .ok(api
            .get("/nodes/pve1/storage/local/content?content=import")
            .await)
        .await;
    assert_eq!(listed, serde_json::json!([]));
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A qcow2 image of `len` bytes (virtual size 2G), larger than axum's
/// default body limit when `len` is.
fn big_qcow2(len: usize, tag: u8) -> Vec<u8> {
    let mut image = qcow2(tag);
    image.resize(len, tag);
    image
}

#[tokio::test]
async fn an_uploaded_image_is_listed_and_imported_by_create() {
    let api = start(&[]);
    let path = "/nodes/pve1/storage/local/upload";
    let name = "debian-12-upload.qcow2";
    // Wrong storage, wrong name: refused after the body, as Proxmox does.
    let refused = api
        .upload(
            "/nodes/pve1/storage/iso/upload",
            &[("content", "import")],
            name,
            &qcow2(1),
        )
        .await;
    assert_eq!(
        (refused.status, refused.reason.as_str()),
        (500, "storage 'iso' does not support 'import' content")
    );
    let img = api
        .upload(path, &[("content", "import")], "noble.img", &qcow2(1))
        .await;
    assert_eq!(img.status, 400, "{}", img.body);
    assert_eq!(
        img.body["errors"]["filename"],
        "invalid filename or wrong extension\n"
    );

    let image = big_qcow2(3 << 20, 7);
    let sum = sha256_hex(&image);
    let fields = [
        ("content", "import"),
        ("checksum-algorithm", "sha256"),
        ("checksum", sum.as_str()),
    ];
    let upid = api.ok(api.upload(path, &fields, name, &image).await).await;
    let text = upid.as_str().expect("UPID");
    assert!(
        text.starts_with("UPID:pve1:") && text.ends_with(":imgcopy::pvedeck@pve!deck:"),
        "{text}"
    );
    assert_eq!(api.wait(&upid).await["exitstatus"], "OK");
    let (lines, _) = api.log(&upid, 0, 0).await;
    let lines: Vec<&str> = lines.iter().map(|l| l.1.as_str()).collect();
    assert!(
        lines[0].starts_with("starting file import from: /var/tmp/pveupload-"),
        "{lines:?}"
    );
    for want in [
        "calculating checksum...OK, checksum verified",
        "target node: pve1",
        "target file: /var/lib/vz/import/debian-12-upload.qcow2",
        "file size is: 3145728",
        "finished file import successfully",
        "TASK OK",
    ] {
        assert!(lines.contains(&want), "{want}: {lines:?}");
    }
    let content = api
        .ok(api
            .get("/nodes/pve1/storage/local/content?content=import")
            .await)
        .await;
    assert_eq!(content[0]["volid"], "local:import/debian-12-upload.qcow2");
    assert_eq!(content[0]["size"], 3 << 20, "{content}");
    assert!(
        api.commands().contains(
            &"pvesh create /nodes/pve1/storage/local/upload --content import --filename debian-12-upload.qcow2"
                .to_string()
        ),
        "{:?}",
        api.commands()
    );

    // The same name again replaces the file (no checksum this time).
    let smaller = qcow2(8);
    let upid = api
        .ok(api
            .upload(path, &[("content", "import")], name, &smaller)
            .await)
        .await;
    assert_eq!(api.wait(&upid).await["exitstatus"], "OK");
    let content = api
        .ok(api
            .get("/nodes/pve1/storage/local/content?content=import")
            .await)
        .await;
    assert_eq!(content[0]["size"], 4096, "{content}");
    assert_eq!(api.import_files("pve1", "local"), [name]);

    let upid = api
        .ok(api
            .post(
                "/nodes/pve1/qemu",
                &[
                    ("vmid", "172"),
                    (
                        "scsi0",
                        "local-zfs:0,import-from=local:import/debian-12-upload.qcow2",
                    ),
                ],
            )
            .await)
        .await;
    assert_eq!(api.wait(&upid).await["exitstatus"], "OK");
    let config = api.ok(api.get("/nodes/pve1/qemu/172/config").await).await;
    assert_eq!(
        config["scsi0"], "local-zfs:vm-172-disk-0,size=2G",
        "{config}"
    );
}

#[tokio::test]
async fn a_failed_upload_task_leaves_no_file() {
    let api = start(&[]);
    let path = "/nodes/pve1/storage/local/upload";
    let image = qcow2(2);
    let wrong = sha256_hex(b"something else");
    let fields = [
        ("content", "import"),
        ("checksum-algorithm", "sha256"),
        ("checksum", wrong.as_str()),
    ];
    let upid = api
        .ok(api.upload(path, &fields, "bad.qcow2", &image).await)
        .await;
    let status = api.wait(&upid).await;
    assert_eq!(
        status["exitstatus"],
        format!(
            "checksum mismatch: got '{}' != expect '{wrong}'",
            sha256_hex(&image)
        )
    );
    let (lines, _) = api.log(&upid, 0, 0).await;
    assert!(
        lines.iter().any(|l| l.1 == "calculating checksum..."),
        "{lines:?}"
    );
    assert_eq!(api.import_files("pve1", "local"), Vec::<String>::new());
    let content = api
        .ok(api
            .get("/nodes/pve1/storage/local/content?content=import")
            .await)
        .await;
    assert_eq!(content, serde_json::json!([]));

    // An injected failure of the task: no file either.
    api.sim(&["fault", r#"{"op":"upload","action":"fail","times":1}"#]);
    let upid = api
        .ok(api
            .upload(path, &[("content", "import")], "ok.qcow2", &image)
            .await)
        .await;
    assert_eq!(
        api.wait(&upid).await["exitstatus"],
        "simulated failure of upload"
    );
    assert_eq!(api.import_files("pve1", "local"), Vec::<String>::new());
}

#[tokio::test]
async fn an_upload_needs_datastore_allocate_template() {
    let api = start(&[(
        "SIM_API_PRIVS",
        "Datastore.Audit,Datastore.AllocateSpace,Sys.AccessNetwork",
    )]);
    let denied = api
        .upload(
            "/nodes/pve1/storage/local/upload",
            &[("content", "import")],
            "d.qcow2",
            &qcow2(1),
        )
        .await;
    assert_eq!(denied.status, 403);
    assert_eq!(
        denied.reason,
        "Permission check failed (/storage/local, Datastore.AllocateTemplate)"
    );
    assert_eq!(
        denied.body["message"],
        "Permission check failed (/storage/local, Datastore.AllocateTemplate)\n"
    );
    assert!(!api.commands().iter().any(|c| c.contains("/upload")));
    assert_eq!(api.import_files("pve1", "local"), Vec::<String>::new());
}

#[tokio::test]
async fn the_guest_agent_runs_a_command() {
    let api = start(&[]);
    let ping = api
        .ok(api.post("/nodes/pve1/qemu/101/agent/ping", &[]).await)
        .await;
    assert_eq!(ping, serde_json::json!({"result": {}}));
    let exec = api
        .ok(api
            .post(
                "/nodes/pve1/qemu/101/agent/exec",
                &[
                    ("command", "sh"),
                    ("command", "-c"),
                    ("command", "cat /etc/machine-id"),
                ],
            )
            .await)
        .await;
    let pid = exec["pid"].as_u64().expect("pid");
    let status = api
        .ok(api
            .get(&format!("/nodes/pve1/qemu/101/agent/exec-status?pid={pid}"))
            .await)
        .await;
    assert_eq!(
        (status["exited"].as_u64(), status["exitcode"].as_u64()),
        (Some(1), Some(0)),
        "{status}"
    );
    assert_eq!(
        status["out-data"].as_str().map(|o| o.trim().len()),
        Some(32),
        "{status}"
    );
    assert_eq!(
        api.get(&format!("/nodes/pve1/qemu/101/agent/exec-status?pid={pid}"))
            .await
            .status,
        500
    );
    let nics = api
        .ok(api
            .get("/nodes/pve1/qemu/101/agent/network-get-interfaces")
            .await)
        .await;
    assert_eq!(
        nics["result"][1]["ip-addresses"][0]["ip-address"], "127.0.0.101",
        "{nics}"
    );
    let stopped = api.post("/nodes/pve3/qemu/105/agent/ping", &[]).await;
    assert_eq!(
        (stopped.status, stopped.reason.as_str()),
        (500, "VM 105 is not running")
    );
}

#[tokio::test]
async fn skiplock_is_for_root_only() {
    let api = start(&[]);
    let destroy = api
        .delete("/nodes/pve1/qemu/101?purge=1&destroy-unreferenced-disks=1&skiplock=1")
        .await;
    assert_eq!(destroy.status, 400);
    assert_eq!(
        destroy.body["errors"]["skiplock"],
        "Only root may use this option.\n"
    );
    let stop = api
        .post("/nodes/pve1/qemu/101/status/stop", &[("skiplock", "1")])
        .await;
    assert_eq!(stop.status, 400);
    let running = api.delete("/nodes/pve1/qemu/101?purge=1").await;
    assert_eq!(
        (running.status, running.reason.as_str()),
        (500, "VM 101 is running - destroy failed")
    );
    let upid = api
        .ok(api.post("/nodes/pve1/qemu/101/status/stop", &[]).await)
        .await;
    assert_eq!(api.wait(&upid).await["exitstatus"], "OK");
    let upid = api
        .ok(api
            .delete("/nodes/pve1/qemu/101?purge=1&destroy-unreferenced-disks=1")
            .await)
        .await;
    assert_eq!(api.wait(&upid).await["exitstatus"], "OK");
    assert!(
        api.commands().contains(&"qm destroy 101".to_string()),
        "{:?}",
        api.commands()
    );
}
