//! Helpers shared by the integration tests: a server on a free loopback port,
//! in-process, with its own data directory, configured only by what the test
//! passes (over fast-forwarded, motionless defaults).

#![allow(dead_code)]

pub mod mirror;

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};

use pvedeck::server::{Running, spawn};
use pvedeck_config::Config;

/// A fresh directory under the system's temp dir.
pub fn temp_dir(name: &str) -> PathBuf {
    static N: AtomicU32 = AtomicU32::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("pvedeck-test-{}-{name}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// The `pvedeck-sim` binary: the simulated cluster's stand-ins, REST face
/// and mirror.
pub fn sim_binary() -> PathBuf {
    sibling_binary("pvedeck-sim")
}

/// The `pvedeck-cli` binary.
pub fn client_binary() -> PathBuf {
    sibling_binary("pvedeck-cli")
}

/// A binary of another package of the workspace, built into the same
/// target directory as the server by the same `cargo test` (the
/// workspace's default members, or `cargo xtask test`).
fn sibling_binary(name: &str) -> PathBuf {
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_pvedeck")).with_file_name(name);
    assert!(
        bin.exists(),
        "{} is not built: run the tests with `cargo test` from the workspace root \
         (its default members include pvedeck-sim) or `cargo xtask test`",
        bin.display()
    );
    bin
}

/// Which backend the suite runs against (`PVEDECK_TEST_BACKEND`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lane {
    /// The in-process simulated cluster (the default).
    Sim,
    /// The `cli` backend: a server process running the simulator's
    /// command-line stand-ins (`qm`, `pvesh`, `pvesm`, `ssh`) from `PATH`.
    Cli,
    /// The `api` backend: a server process talking to the simulator's REST
    /// face (`pvedeck-sim api`) over HTTPS; only the guests' `ssh` is a
    /// stand-in.
    Api,
}

pub fn lane() -> Lane {
    match std::env::var("PVEDECK_TEST_BACKEND").as_deref() {
        Ok("cli") => Lane::Cli,
        Ok("api") => Lane::Api,
        _ => Lane::Sim,
    }
}

/// The server is a process over one of the simulator's outer faces, with
/// VM addresses on loopback and the simulator's state in its data
/// directory (`cli`, `api`).
pub fn process_lane() -> bool {
    lane() != Lane::Sim
}

/// The VM network of the suite's cluster: with `cli` and `api`, loopback, so that no
/// real connection attempt (the VMID probe) leaves the machine.
pub fn ip(last: u32) -> String {
    if process_lane() {
        format!("127.0.0.{last}")
    } else {
        format!("192.168.0.{last}")
    }
}

enum Handle {
    InProcess(Running),
    Process(std::process::Child),
    /// A process that has exited.
    Gone,
}

pub struct Server {
    pub url: String,
    pub data_dir: PathBuf,
    running: Handle,
}

/// The environment of a server process on the lane (`cli`, `api`), or of
/// the in-process server (`sim`), with `vars` over it (the simulator's
/// settings reach the REST face's process as well).
pub async fn lane_env(data_dir: &std::path::Path, vars: &[(&str, &str)]) -> Vec<(String, String)> {
    match lane() {
        Lane::Sim => with(base_env(data_dir), vars),
        Lane::Cli => with(cli_env(data_dir, false).await, vars),
        Lane::Api => api_env_with(data_dir, vars).await.0,
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        match &mut self.running {
            Handle::InProcess(r) => r.task.abort(),
            Handle::Process(child) => {
                let _ = child.kill();
                let _ = child.wait();
            }
            Handle::Gone => {}
        }
    }
}

impl Server {
    /// The server's process id: its own process on the `cli` and `api`
    /// lanes, this test's on the `sim` lane.
    pub fn pid(&self) -> u32 {
        match &self.running {
            Handle::Process(child) => child.id(),
            _ => std::process::id(),
        }
    }

    /// Sends a signal (`KILL`, `TERM`) to a server running as a process.
    pub fn signal(&self, name: &str) {
        let Handle::Process(child) = &self.running else {
            panic!("only a process server takes signals");
        };
        let status = std::process::Command::new("kill")
            .arg(format!("-{name}"))
            .arg(child.id().to_string())
            .status()
            .expect("kill");
        assert!(status.success(), "kill -{name}");
    }

    /// Waits for a process server to end; its exit code (`None`: a signal).
    pub async fn exit_code(mut self) -> Option<i32> {
        let Handle::Process(mut child) = std::mem::replace(&mut self.running, Handle::Gone) else {
            panic!("only a process server exits");
        };
        tokio::task::spawn_blocking(move || child.wait().expect("wait").code())
            .await
            .expect("wait task")
    }
}

/// A server as its own process on either lane (to be killed or stopped):
/// the sim backend's binary, or the cli backend's with its stand-ins.
pub async fn process_server(data_dir: &std::path::Path, vars: &[(&str, &str)]) -> Server {
    let env = lane_env(data_dir, vars).await;
    let (child, url) = start_process(data_dir, &env);
    Server {
        url,
        data_dir: data_dir.to_path_buf(),
        running: Handle::Process(child),
    }
}

/// A server process on exactly `env`, its log in `log_dir`, acting on the
/// simulated cluster of `data_dir` (faults, commands behind its back): one
/// of several replicas over one cluster.
pub fn process_server_logged(
    data_dir: &std::path::Path,
    log_dir: &std::path::Path,
    env: &[(String, String)],
) -> Server {
    let (child, url) = start_process(log_dir, env);
    Server {
        url,
        data_dir: data_dir.to_path_buf(),
        running: Handle::Process(child),
    }
}

pub async fn server(vars: &[(&str, &str)]) -> Server {
    let data_dir = temp_dir("data");
    server_in(&data_dir, vars).await
}

/// What every test server starts from: loopback, a free port, its own data
/// directory, the simulated cluster fast-forwarded and still.
pub fn base_env(data_dir: &std::path::Path) -> Vec<(String, String)> {
    let data = data_dir.to_string_lossy().into_owned();
    [
        ("PORT", "0"),
        ("BIND_ADDR", "127.0.0.1"),
        ("DATA_DIR", data.as_str()),
        ("SIM_SPEED", "2000"),
        ("SIM_JITTER", "0"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

/// `vars` over `env`: a later setting of a variable wins.
pub fn with(mut env: Vec<(String, String)>, vars: &[(&str, &str)]) -> Vec<(String, String)> {
    for (k, v) in vars {
        env.retain(|(key, _)| key != k);
        env.push((k.to_string(), v.to_string()));
    }
    env
}

/// A server on an existing data directory (to test what survives a restart).
pub async fn server_in(data_dir: &std::path::Path, vars: &[(&str, &str)]) -> Server {
    if process_lane() {
        let env = lane_env(data_dir, vars).await;
        let (child, url) = start_process(data_dir, &env);
        return Server {
            url,
            data_dir: data_dir.to_path_buf(),
            running: Handle::Process(child),
        };
    }
    let all = with(base_env(data_dir), vars);
    let config = Config::from_vars(all).expect("test configuration");
    let running = spawn(config).await.expect("server starts");
    Server {
        url: running.url.clone(),
        data_dir: data_dir.to_path_buf(),
        running: Handle::InProcess(running),
    }
}

/// A directory with `qm`, `pvesh`, `pvesm`, `socat` (and `ssh` unless `real_ssh`)
/// linked to the pvedeck binary: the simulator's command-line face.
pub fn stand_ins(real_ssh: bool) -> PathBuf {
    if real_ssh {
        links(&["qm", "pvesh", "pvesm", "socat"])
    } else {
        links(&["qm", "pvesh", "pvesm", "socat", "ssh"])
    }
}

/// A fresh directory where each of `tools` is the pvedeck binary.
fn links(tools: &[&str]) -> PathBuf {
    let dir = temp_dir("bin");
    for tool in tools {
        std::os::unix::fs::symlink(sim_binary(), dir.join(tool)).expect("link");
    }
    dir
}

/// A loopback port where nothing listens (the VMID probe's port).
pub fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("addr").port()
}

/// The environment of a `cli` server: a cluster on loopback whose `qm` and
/// friends are the stand-ins, images from a local mirror.
pub async fn cli_env(data_dir: &std::path::Path, real_ssh: bool) -> Vec<(String, String)> {
    let env = loopback_env(data_dir, &stand_ins(real_ssh)).await;
    with(
        env,
        &[
            ("PVE_BACKEND", "cli"),
            ("NODE_pve1", "127.0.0.1"),
            ("NODE_pve2", "127.0.0.12"),
            ("NODE_pve3", "127.0.0.13"),
        ],
    )
}

/// What a server process over one of the simulator's outer faces needs
/// (`cli`, `api`): `bin` first on `PATH`, the cluster on loopback, images
/// from a local mirror.
async fn loopback_env(data_dir: &std::path::Path, bin: &std::path::Path) -> Vec<(String, String)> {
    let mut env = base_env(data_dir);
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let images = format!("{}/img", image_server().await);
    let data = |sub: &str| data_dir.join(sub).to_string_lossy().into_owned();
    let port = closed_port().to_string();
    for (k, v) in [
        ("PATH", path.as_str()),
        ("HOME", &data("home")),
        ("GATEWAY", "127.0.0.1"),
        ("MAIN_NODE", "pve1"),
        ("ASSIGN_STORAGE", "local-zfs"),
        // .100 is where the demo cluster's foreign host answers: the real
        // probe of the cli backend would not see it.
        ("ASSIGN_IP_START", "101"),
        ("SSH_PORT", port.as_str()),
        // The simulated guests boot SIM_SPEED times faster; so may the polling.
        ("SSH_POLL_INTERVAL_MS", "5"),
        ("SSH_KEY_DIR", &data("ssh")),
        ("IMAGE_CACHE_DIR", &data("images")),
        ("IMAGE_BASE_DEBIAN", images.as_str()),
        ("IMAGE_BASE_UBUNTU", images.as_str()),
        ("IMAGE_BASE_ROCKYLINUX", images.as_str()),
        ("RUST_LOG", "info"),
    ] {
        env.push((k.to_string(), v.to_string()));
    }
    env
}

/// Starts `pvedeck` as a process with `env` (nothing else), waits for the
/// line that says where it listens. Its output goes to `<data>/server.log`.
pub fn start_process(
    data_dir: &std::path::Path,
    env: &[(String, String)],
) -> (std::process::Child, String) {
    let (child, url, _) = start_process_with_lines(data_dir, env);
    (child, url)
}

/// [`start_process`], and every line the server prints from then on (its
/// log), for a test to wait on.
pub fn start_process_with_lines(
    data_dir: &std::path::Path,
    env: &[(String, String)],
) -> (
    std::process::Child,
    String,
    std::sync::mpsc::Receiver<String>,
) {
    use std::io::{BufRead, BufReader, Read, Write};
    let (lines_tx, lines) = std::sync::mpsc::channel();
    let log_path = data_dir.join("server.log");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_pvedeck"))
        .current_dir(data_dir)
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start pvedeck");
    let stdout = child.stdout.take().expect("stdout");
    let mut stderr = child.stderr.take().expect("stderr");
    let log = std::fs::File::create(&log_path).expect("server.log");
    let mut err_log = log.try_clone().expect("log");
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = stderr.read(&mut buf) {
            if n == 0 || err_log.write_all(&buf[..n]).is_err() {
                break;
            }
        }
    });
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut log = log;
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = writeln!(log, "{line}");
            let _ = lines_tx.send(line.clone());
            if let Some(url) = line
                .split_whitespace()
                .find(|w| w.starts_with("http://") || w.starts_with("https://"))
            {
                let _ = tx.send(url.to_string());
            }
        }
    });
    let url = rx
        .recv_timeout(std::time::Duration::from_secs(30))
        .unwrap_or_else(|_| {
            let log = std::fs::read_to_string(&log_path).unwrap_or_default();
            panic!("pvedeck did not start: {log}")
        });
    (child, url, lines)
}

/// Kills a child process however the test ends.
pub struct Killed(pub std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub async fn get(url: &str) -> (u16, String) {
    let res = reqwest::get(url).await.expect("request");
    let status = res.status().as_u16();
    (status, res.text().await.expect("body"))
}

pub async fn delete(url: &str) -> (u16, String) {
    let res = reqwest::Client::new()
        .delete(url)
        .send()
        .await
        .expect("request");
    let status = res.status().as_u16();
    (status, res.text().await.expect("body"))
}

/// A POST with a JSON body, answered as it comes (a stream to read).
pub async fn open_post(url: &str, body: &str) -> reqwest::Response {
    send_post(url, Some(body)).await
}

async fn send_post(url: &str, body: Option<&str>) -> reqwest::Response {
    let mut req = reqwest::Client::new().post(url);
    if let Some(body) = body {
        req = req
            .header("content-type", "application/json")
            .body(body.to_string());
    }
    req.send().await.expect("request")
}

pub async fn post(url: &str) -> (u16, String) {
    let res = send_post(url, None).await;
    let status = res.status().as_u16();
    (status, res.text().await.expect("body"))
}

pub async fn post_json(url: &str, body: &str) -> (u16, String) {
    let res = send_post(url, Some(body)).await;
    let status = res.status().as_u16();
    (status, res.text().await.expect("body"))
}

/// One server-sent event.
#[derive(Debug, Clone, PartialEq)]
pub struct Sse {
    pub id: Option<u64>,
    pub event: Option<String>,
    pub data: serde_json::Value,
}

impl Sse {
    pub fn step(&self) -> &str {
        self.data["step"].as_str().unwrap_or_default()
    }
    pub fn status(&self) -> &str {
        self.data["status"].as_str().unwrap_or_default()
    }
    pub fn message(&self) -> &str {
        self.data["message"].as_str().unwrap_or_default()
    }
    pub fn is_close(&self) -> bool {
        self.event.as_deref() == Some("close")
    }
}

/// Parses one `\n\n`-terminated block; `None` for a keep-alive comment.
fn parse_block(block: &str) -> Option<Sse> {
    let mut sse = Sse {
        id: None,
        event: None,
        data: serde_json::Value::Null,
    };
    let mut data = None;
    for line in block.lines() {
        if let Some(v) = line.strip_prefix("id: ") {
            sse.id = v.parse().ok();
        } else if let Some(v) = line.strip_prefix("event: ") {
            sse.event = Some(v.to_string());
        } else if let Some(v) = line.strip_prefix("data: ") {
            assert!(data.is_none(), "one data line per event: {block}");
            data = Some(v.to_string());
        }
    }
    let data = data?;
    sse.data =
        serde_json::from_str(&data).unwrap_or_else(|e| panic!("data is not JSON ({e}): {data}"));
    Some(sse)
}

/// Reads a stream of events: all of them (`limit` = None) or the first few.
pub async fn read_events(res: reqwest::Response, limit: Option<usize>) -> Vec<Sse> {
    let mut n = 0;
    read_until(res, |_| {
        n += 1;
        limit.is_some_and(|l| n >= l)
    })
    .await
}

/// Reads events until one satisfies `stop` (included) or the stream ends.
pub async fn read_until(res: reqwest::Response, mut stop: impl FnMut(&Sse) -> bool) -> Vec<Sse> {
    use futures_util::StreamExt;
    let mut stream = res.bytes_stream();
    let mut buf = String::new();
    let mut events = Vec::new();
    // A safety net for a broken server, not a wait: streams end by themselves.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(120);
    loop {
        let chunk = tokio::time::timeout_at(deadline, stream.next())
            .await
            .expect("the event stream ended within 120s");
        let Some(chunk) = chunk else { break };
        buf.push_str(std::str::from_utf8(&chunk.expect("chunk")).expect("UTF-8"));
        while let Some(end) = buf.find("\n\n") {
            let block: String = buf.drain(..end + 2).collect();
            if let Some(sse) = parse_block(&block) {
                let done = stop(&sse);
                events.push(sse);
                if done {
                    return events;
                }
            }
        }
    }
    events
}

pub async fn post_sse(url: &str, body: &str) -> (u16, Option<u64>, Vec<Sse>) {
    let res = send_post(url, Some(body)).await;
    let status = res.status().as_u16();
    let job = res
        .headers()
        .get("x-job-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok());
    if status != 200 {
        let text = res.text().await.unwrap_or_default();
        panic!("POST {url} answered {status}: {text}");
    }
    (status, job, read_events(res, None).await)
}

pub async fn install(url: &str, body: &str) -> (u64, Vec<Sse>) {
    let (_, job, events) = post_sse(&format!("{url}/api/vm/install"), body).await;
    (job.expect("x-job-id header"), events)
}

pub async fn json(url: &str) -> serde_json::Value {
    let (status, body) = get(url).await;
    assert_eq!(status, 200, "GET {url}: {body}");
    serde_json::from_str(&body).expect("JSON")
}

/// The simulated cluster's command log.
pub async fn commands(server: &Server) -> Vec<String> {
    if process_lane() {
        return std::fs::read_to_string(server.data_dir.join("sim/commands.log"))
            .map(|t| t.lines().map(str::to_string).collect())
            .unwrap_or_default();
    }
    serde_json::from_value(json(&format!("{}/api/sim/commands", server.url)).await).expect("list")
}

/// Runs `pvedeck-sim <args>` on a cli server's simulated cluster.
pub fn sim_command(server: &Server, args: &[&str]) {
    let out = std::process::Command::new(sim_binary())
        .args(args)
        .env_clear()
        .env("DATA_DIR", &server.data_dir)
        .env("GATEWAY", "127.0.0.1")
        .output()
        .expect("pvedeck-sim");
    assert!(out.status.success(), "pvedeck-sim {args:?}: {out:?}");
}

pub async fn fault(server: &Server, fault: &str) {
    if process_lane() {
        return sim_command(server, &["fault", fault]);
    }
    let (status, body) = post_json(&format!("{}/api/sim/faults", server.url), fault).await;
    assert_eq!(status, 200, "{body}");
}

/// Runs a `qm` command on a cli server's simulated cluster, behind its back
/// (as an admin on the node would); `false` on the in-process lane, which
/// has no such face.
pub fn qm_behind(server: &Server, args: &[&str]) -> bool {
    if !process_lane() {
        return false;
    }
    let mut all = vec!["qm"];
    all.extend(args);
    sim_command(server, &all);
    true
}

/// `qm set <vmid> --<key> <value>…` on `node`, behind pvedeck's back, on every lane:
/// the stand-in `qm` on the shared data directory, or the in-process
/// simulator's control route.
pub async fn set_behind(server: &Server, node: &str, vmid: u32, options: &[(&str, &str)]) {
    if process_lane() {
        let id = vmid.to_string();
        let mut args = vec!["qm", "set", id.as_str()];
        let flags: Vec<String> = options.iter().map(|(k, _)| format!("--{k}")).collect();
        for ((_, value), flag) in options.iter().zip(&flags) {
            args.push(flag);
            args.push(value);
        }
        // `qm` acts on the VMs of the node it runs on.
        let out = std::process::Command::new(sim_binary())
            .args(&args)
            .env_clear()
            .env("DATA_DIR", &server.data_dir)
            .env("GATEWAY", "127.0.0.1")
            .env("PVEDECK_SIM_NODE", node)
            .output()
            .expect("pvedeck-sim");
        assert!(out.status.success(), "pvedeck-sim {args:?}: {out:?}");
        return;
    }
    let body: serde_json::Map<String, serde_json::Value> = options
        .iter()
        .map(|(k, v)| (k.to_string(), serde_json::Value::from(*v)))
        .collect();
    let (status, said) = post_json(
        &format!("{}/api/sim/vm/{vmid}/set", server.url),
        &serde_json::Value::Object(body).to_string(),
    )
    .await;
    assert_eq!(status, 200, "{said}");
}

/// Takes a node of the simulated cluster offline or brings it back.
pub async fn node_state(server: &Server, node: &str, state: &str) {
    if process_lane() {
        return sim_command(server, &["node", node, state]);
    }
    let (status, body) = post(&format!("{}/api/sim/node/{node}/{state}", server.url)).await;
    assert_eq!((status, body.as_str()), (200, "ok"));
}

/// A small qcow2 image of virtual size 2 GiB; `tag` tells images apart.
pub fn qcow2(tag: u8) -> Vec<u8> {
    let mut image = pvedeck_mirror::qcow2::header(2 << 30, false, false);
    image.resize(4096, 0);
    image[4095] = tag;
    image
}

/// The checksum list a mirror publishes as `list` (`SHA512SUMS`,
/// `SHA256SUMS`, `CHECKSUM`), in that mirror's format, giving every image
/// of its OS the checksum of `image`; `None` for another name.
pub fn checksum_list(list: &str, image: &[u8]) -> Option<String> {
    use pvedeck_domain::os::{Os, RELEASES};
    use sha2::Digest;
    let hex = |digest: &[u8]| {
        digest
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    };
    let (os, sum) = match list {
        "SHA512SUMS" => (Os::Debian, hex(&sha2::Sha512::digest(image))),
        "SHA256SUMS" => (Os::Ubuntu, hex(&sha2::Sha256::digest(image))),
        "CHECKSUM" => (Os::Rockylinux, hex(&sha2::Sha256::digest(image))),
        _ => return None,
    };
    let lines = RELEASES.iter().filter(|r| r.os == os).map(|r| {
        let file = r.file_name();
        match os {
            Os::Debian => format!("{sum}  {file}\n"),
            Os::Ubuntu => format!("{sum} *{file}\n"),
            Os::Rockylinux => {
                format!("# {file}: 4096 bytes\nSHA256 ({file}) = {sum}\n")
            }
        }
    });
    Some(lines.collect())
}

/// A local HTTP server with one small qcow2 image (virtual size 2 GiB) under
/// `/img/`, and the checksum lists of the three mirrors, which give it;
/// anything else is 404. Returns its base URL.
pub async fn image_server() -> String {
    use axum::response::IntoResponse;
    use axum::routing::get;
    let image = qcow2(0);
    let app = axum::Router::new().route(
        "/img/{file}",
        get(
            move |axum::extract::Path(file): axum::extract::Path<String>| {
                let image = image.clone();
                async move {
                    let list = checksum_list(&file, &image);
                    list.map_or_else(|| image.into_response(), IntoResponse::into_response)
                }
            },
        ),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    format!("http://{addr}")
}

pub async fn vm(url: &str, vmid: u64) -> Option<serde_json::Value> {
    let list = json(&format!("{url}/api/vm/list")).await;
    list["list"]
        .as_array()
        .and_then(|l| l.iter().find(|v| v["vmid"] == vmid))
        .cloned()
}

/// The simulator's REST API face (`pvedeck-sim api`) on `data_dir`'s
/// cluster, and what a `PVE_BACKEND=api` server needs to reach it: its
/// address, token and certificate fingerprint (from `sim/api.json`).
pub struct SimApi {
    pub process: Killed,
    pub url: String,
    pub token: String,
    pub fingerprint: String,
}

/// The REST face of `data_dir`'s simulated cluster: one per data directory
/// for the whole test, so that a restarted pvedeck finds the same Proxmox
/// (and its running tasks) as a restarted pvedeck would.
pub fn sim_api(data_dir: &std::path::Path, env: &[(String, String)]) -> std::sync::Arc<SimApi> {
    static RUNNING: std::sync::Mutex<Vec<(PathBuf, std::sync::Arc<SimApi>)>> =
        std::sync::Mutex::new(Vec::new());
    let mut running = RUNNING.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((_, api)) = running.iter().find(|(dir, _)| dir == data_dir) {
        return api.clone();
    }
    let api = std::sync::Arc::new(start_sim_api(data_dir, env));
    running.push((data_dir.to_path_buf(), api.clone()));
    api
}

pub fn start_sim_api(data_dir: &std::path::Path, env: &[(String, String)]) -> SimApi {
    use std::io::{BufRead, BufReader};
    use std::os::unix::process::CommandExt;
    let log = std::fs::File::create(data_dir.join("sim-api.log")).expect("sim-api.log");
    let mut command = std::process::Command::new(sim_binary());
    command
        .arg("api")
        .current_dir(data_dir)
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdout(std::process::Stdio::piped())
        .stderr(log);
    // The registry above never drops it: it goes when the thread that
    // started it (the test's) does, or the test binary.
    // SAFETY: prctl is async-signal-safe; nothing else runs between fork
    // and exec.
    unsafe {
        command.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
    let mut child = command.spawn().expect("start pvedeck-sim api");
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = BufReader::new(stdout).lines();
    // It prints its address once it listens (after writing api.json).
    let listening = lines
        .by_ref()
        .map_while(Result::ok)
        .any(|line| line.contains("https://"));
    std::thread::spawn(move || for _ in lines.by_ref() {});
    let process = Killed(child);
    assert!(
        listening,
        "pvedeck-sim api did not start: {}",
        std::fs::read_to_string(data_dir.join("sim-api.log")).unwrap_or_default()
    );
    let about: serde_json::Value = serde_json::from_slice(
        &std::fs::read(data_dir.join("sim/api.json")).expect("sim/api.json"),
    )
    .expect("api.json");
    let field = |k: &str| about[k].as_str().expect("api.json field").to_string();
    SimApi {
        process,
        url: field("url"),
        token: field("token"),
        fingerprint: field("fingerprint"),
    }
}

/// The environment of an `api` server over the simulator's API face: the
/// cli lane's, without the `qm`/`pvesh`/`pvesm` stand-ins (only the guests'
/// `ssh`), and with the API's settings.
pub async fn api_env(
    data_dir: &std::path::Path,
) -> (Vec<(String, String)>, std::sync::Arc<SimApi>) {
    api_env_with(data_dir, &[]).await
}

/// `api_env` with `vars` over it, for pvedeck and the REST face alike.
pub async fn api_env_with(
    data_dir: &std::path::Path,
    vars: &[(&str, &str)],
) -> (Vec<(String, String)>, std::sync::Arc<SimApi>) {
    let mut env = with(loopback_env(data_dir, &links(&["ssh"])).await, vars);
    let api = sim_api(data_dir, &env);
    for (k, v) in [
        ("PVE_BACKEND", "api"),
        ("PVE_API_URL", api.url.as_str()),
        ("PVE_API_TOKEN", api.token.as_str()),
        ("PVE_API_FINGERPRINT", api.fingerprint.as_str()),
    ] {
        env.push((k.to_string(), v.to_string()));
    }
    // What the test sets wins, the API's settings included.
    (with(env, vars), api)
}

/// Turns the simulated cluster's datacenter firewall on or off: through
/// `pvesh set /cluster/firewall/options` on a process lane, as an admin on
/// a node would.
pub async fn datacenter_firewall(server: &Server, on: bool) {
    let enable = if on { "1" } else { "0" };
    if process_lane() {
        return sim_command(
            server,
            &[
                "pvesh",
                "set",
                "/cluster/firewall/options",
                "--enable",
                enable,
            ],
        );
    }
    let state = if on { "on" } else { "off" };
    let (status, body) = post(&format!("{}/api/sim/firewall/{state}", server.url)).await;
    assert_eq!((status, body.as_str()), (200, "ok"));
}

/// Stages a hostile guest: VM `vmid` answers for `ip` too.
pub async fn claim(server: &Server, vmid: u32, ip: &str) {
    if process_lane() {
        return sim_command(server, &["claim", &vmid.to_string(), ip]);
    }
    let (status, body) = post(&format!("{}/api/sim/claim/{vmid}/{ip}", server.url)).await;
    assert_eq!((status, body.as_str()), (200, "ok"));
}

/// The simulated cluster's state as it is saved (`DATA_DIR/sim/cluster.json`).
pub fn sim_state(server: &Server) -> serde_json::Value {
    serde_json::from_slice(
        &std::fs::read(server.data_dir.join("sim/cluster.json")).expect("sim state"),
    )
    .expect("sim state JSON")
}

/// The job a streamed answer (an install's, an action's) belongs to.
pub fn job_id(res: &reqwest::Response) -> u64 {
    res.headers()
        .get("x-job-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .expect("x-job-id")
}

/// Starts an install of `body` on `url` without reading its stream (the
/// job goes on either way); its job id.
pub async fn start_install(url: &str, body: &str) -> u64 {
    let res = open_post(&format!("{url}/api/vm/install"), body).await;
    assert_eq!(res.status().as_u16(), 200);
    job_id(&res)
}

/// Job `job`'s event stream on `url`, from its first event.
pub async fn follow(url: &str, job: u64) -> reqwest::Response {
    reqwest::get(format!("{url}/api/jobs/{job}/events"))
        .await
        .expect("follow")
}

/// The steps of a timeline, in the order they first appear.
pub fn steps(events: &[Sse]) -> Vec<&str> {
    let mut out: Vec<&str> = Vec::new();
    for e in events.iter().filter(|e| !e.is_close()) {
        if out.last() != Some(&e.step()) {
            out.push(e.step());
        }
    }
    out
}

/// A server function call, with the session cookie when given; the status,
/// the `Set-Cookie` and the body.
pub async fn call_fn(
    url: &str,
    name: &str,
    body: &str,
    session: Option<&str>,
) -> (u16, Option<String>, String) {
    let mut req = reqwest::Client::new()
        .post(format!("{url}/fn/{name}"))
        .header("content-type", "application/json")
        .body(body.to_string());
    if let Some(id) = session {
        req = req.header("cookie", format!("pvedeck_session={id}"));
    }
    let res = req.send().await.expect("request");
    let status = res.status().as_u16();
    let cookie = res
        .headers()
        .get("set-cookie")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    (status, cookie, res.text().await.expect("body"))
}

/// The session id a `Set-Cookie` of a login carries.
pub fn session_of(cookie: &str) -> String {
    cookie
        .split(';')
        .next()
        .and_then(|kv| kv.split_once('='))
        .map(|(_, v)| v.to_string())
        .expect("session id")
}
