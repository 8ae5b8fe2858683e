//! Helpers shared by the integration tests: a server on a free loopback port,
//! in-process, with its own data directory, configured only by what the test
//! passes (over fast-forwarded, motionless defaults).

#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};

use pvedeck::config::Config;
use pvedeck::server::{Running, spawn};

/// A fresh directory under the system's temp dir.
pub fn temp_dir(name: &str) -> PathBuf {
    static N: AtomicU32 = AtomicU32::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("pvedeck-test-{}-{name}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

pub struct Server {
    pub url: String,
    pub data_dir: PathBuf,
    running: Running,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.running.task.abort();
    }
}

pub async fn server(vars: &[(&str, &str)]) -> Server {
    let data_dir = temp_dir("data");
    server_in(&data_dir, vars).await
}

/// A server on an existing data directory (to test what survives a restart).
pub async fn server_in(data_dir: &std::path::Path, vars: &[(&str, &str)]) -> Server {
    let data = data_dir.to_string_lossy().into_owned();
    let mut all = vec![
        ("PORT", "0"),
        ("BIND_ADDR", "127.0.0.1"),
        ("DATA_DIR", data.as_str()),
        ("SIM_SPEED", "2000"),
        ("SIM_JITTER", "0"),
    ];
    all.extend_from_slice(vars);
    let config = Config::from_vars(all.iter().copied()).expect("test configuration");
    let running = spawn(config).await.expect("server starts");
    Server {
        url: running.url.clone(),
        data_dir: data_dir.to_path_buf(),
        running,
    }
}

pub async fn get(url: &str) -> (u16, String) {
    let res = reqwest::get(url).await.expect("request");
    let status = res.status().as_u16();
    (status, res.text().await.expect("body"))
}

pub async fn post(url: &str) -> (u16, String) {
    let res = reqwest::Client::new()
        .post(url)
        .send()
        .await
        .expect("request");
    let status = res.status().as_u16();
    (status, res.text().await.expect("body"))
}

pub async fn post_json(url: &str, body: &str) -> (u16, String) {
    let res = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .expect("request");
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
    let res = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .expect("request");
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
pub async fn commands(url: &str) -> Vec<String> {
    serde_json::from_value(json(&format!("{url}/api/sim/commands")).await).expect("list")
}

pub async fn fault(url: &str, fault: &str) {
    let (status, body) = post_json(&format!("{url}/api/sim/faults"), fault).await;
    assert_eq!(status, 200, "{body}");
}

/// A local HTTP server with one small qcow2 image (virtual size 2 GiB) under
/// `/img/`; anything else is 404. Returns its base URL.
pub async fn image_server() -> String {
    use axum::routing::get;
    let mut image = vec![0u8; 4096];
    image[..4].copy_from_slice(b"QFI\xfb");
    image[24..32].copy_from_slice(&(2u64 << 30).to_be_bytes());
    let app = axum::Router::new().route(
        "/img/{file}",
        get(move || {
            let image = image.clone();
            async move { image }
        }),
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
