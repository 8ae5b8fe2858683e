//! `cargo xtask bench replicas`: pvedeck processes sharing one PostgreSQL
//! (started here, `pvedeck_testkit::postgres`) and one simulated Proxmox
//! (the REST face, each answer `API_MS` late): installs through one
//! replica and through two, the list under load on both, a follower on one
//! replica of a job on the other, and a replica killed mid-install.

use std::io::{BufRead, BufReader};
use std::sync::mpsc;

use pvedeck_testkit::postgres::Postgres;

use super::*;

/// 200 s of simulated time (10 s at SIM_SPEED=20) for each of the next
/// `times` disk imports: installs are still importing when their replica is
/// killed, and the replica that takes them over follows each import task
/// to its end before it cleans up (Proxmox holds the VM's lock until then).
fn slow_imports(times: usize) -> String {
    format!(r#"{{"op":"importdisk","action":"delay","delay_ms":200000,"times":{times}}}"#)
}

/// The simulated Proxmox, and what a replica needs to run installs on it.
struct Cluster {
    _face: Server,
    _mirror: Server,
    /// The cluster's data directory (the guests' `ssh` stand-in finds it
    /// through `DATA_DIR`).
    data: PathBuf,
    env: Vec<(String, String)>,
}

fn cluster(root: &Path, dir: &Path, db: &str) -> Result<Cluster, Failed> {
    std::fs::create_dir_all(dir.join("data")).map_err(io("bench dir"))?;
    let (face, settings) = crate::e2e::start_sim_api(
        root,
        dir,
        &[
            ("SIM_API_MS", API_MS),
            ("SIM_SPEED", "20"),
            ("SIM_JITTER", "0"),
        ],
    )?;
    // The cloud images from the simulator's own mirror, on loopback.
    let mut mirror = crate::e2e::binary(root, crate::e2e::SIM, dir);
    mirror.arg("mirror");
    let (mirror, images) = crate::e2e::start_logged(mirror, dir, "mirror.log", "http://")?;
    let path = super::stand_ins(root, dir, &["ssh"])?;
    let closed = crate::e2e::closed_port()?;
    let data = dir.join("data");
    let mut env: Vec<(String, String)> = settings
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
    for (k, v) in [
        ("PATH", path),
        ("DATABASE_URL", db.to_string()),
        ("DATA_DIR", data.display().to_string()),
        ("MAIN_NODE", "pve1".into()),
        ("GATEWAY", "127.0.0.1".into()),
        ("ASSIGN_STORAGE", "local-zfs".into()),
        ("ASSIGN_IP_START", "101".into()),
        ("SSH_PORT", closed.to_string()),
        ("SSH_POLL_INTERVAL_MS", "20".into()),
        ("SSH_POLL_ATTEMPTS", "3000".into()),
        ("SIM_SPEED", "20".into()),
        ("IMAGE_CACHE_DIR", dir.join("images").display().to_string()),
        ("IMAGE_BASE_DEBIAN", images.trim().to_string()),
    ] {
        env.push((k.to_string(), v));
    }
    Ok(Cluster {
        _face: face,
        _mirror: mirror,
        data,
        env,
    })
}

/// Replica `name` of `cluster`, its log and key in `dir/<name>`.
fn replica(
    root: &Path,
    dir: &Path,
    cluster: &Cluster,
    name: &str,
    extra: &[(&str, &str)],
) -> Result<(Server, String), Failed> {
    let own = dir.join(name);
    std::fs::create_dir_all(&own).map_err(io("replica dir"))?;
    let ssh = own.join("ssh").display().to_string();
    let mut env = pairs(&cluster.env);
    env.extend([("REPLICA_NAME", name), ("SSH_KEY_DIR", ssh.as_str())]);
    env.extend_from_slice(extra);
    start(root, &own, &env)
}

/// `count` installs at once, spread over `addrs` in turn: the wall time
/// and the VMIDs they got.
fn installs(addrs: &[String], count: usize) -> Result<(Duration, Vec<String>), Failed> {
    let started = Instant::now();
    let runs: Vec<_> = (0..count)
        .map(|i| {
            let addr = addrs[i % addrs.len()].clone();
            std::thread::spawn(move || install(&addr))
        })
        .collect();
    let mut vmids = Vec::new();
    for run in runs {
        let (_, events) = run
            .join()
            .map_err(|_| Failed("an install thread panicked".into()))??;
        vmids.extend(events.iter().find_map(|(_, m)| {
            m.strip_prefix("[+] auto-assigned VMID: ")
                .and_then(|rest| rest.split_whitespace().next())
                .map(str::to_string)
        }));
    }
    let wall = started.elapsed();
    vmids.sort();
    vmids.dedup();
    Ok((wall, vmids))
}

/// Job `job`'s event stream on `addr` to its end: `(event id, when it
/// arrived)` of each event.
fn arrivals(addr: &str, job: u64) -> Result<Vec<(u64, Instant)>, Failed> {
    let mut stream = http::connect(addr).map_err(Failed)?;
    write!(stream, "GET /api/jobs/{job}/events HTTP/1.0\r\n\r\n").map_err(io("send"))?;
    timed_ids(stream)
}

/// Reads an event stream to its end, noting when each event id arrived.
fn timed_ids(stream: TcpStream) -> Result<Vec<(u64, Instant)>, Failed> {
    let mut seen = Vec::new();
    for line in BufReader::new(stream).lines() {
        let line = line.map_err(io("stream"))?;
        if let Some(id) = line
            .strip_prefix("id: ")
            .and_then(|v| v.trim().parse::<u64>().ok())
        {
            seen.push((id, Instant::now()));
        }
    }
    Ok(seen)
}

/// Reads job `id`'s events on `addr` until one's message holds `text`.
fn wait_for(addr: &str, id: u64, text: &str) -> Result<(), Failed> {
    let mut stream = http::connect(addr).map_err(Failed)?;
    write!(stream, "GET /api/jobs/{id}/events HTTP/1.0\r\n\r\n").map_err(io("send"))?;
    for line in BufReader::new(stream).lines() {
        if line.map_err(io("stream"))?.contains(text) {
            return Ok(());
        }
    }
    Err(Failed(format!("job {id} never said {text:?}")))
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let at = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted.get(at).copied().unwrap_or(f64::NAN)
}

pub(super) fn replicas(root: &Path, dir: &Path, figures: &mut Vec<Figure>) -> Result<(), Failed> {
    let pg = Postgres::shared()
        .ok_or_else(|| Failed("PostgreSQL is missing: apt-get install postgresql".into()))?;

    // 100 installs through one replica, then through two, each on a
    // Proxmox of its own (100 VMIDs each).
    let alone = cluster(root, &dir.join("alone"), &pg.database())?;
    let (_r0, a0) = replica(root, &dir.join("alone"), &alone, "r0", &[])?;
    install(&a0)?; // the image, fetched once
    let (one, ids_one) = installs(std::slice::from_ref(&a0), 100)?;
    drop(_r0);
    let pair = cluster(root, &dir.join("pair"), &pg.database())?;
    let (_p0, b0) = replica(root, &dir.join("pair"), &pair, "r0", &[])?;
    let (_p1, b1) = replica(root, &dir.join("pair"), &pair, "r1", &[])?;
    install(&b0)?;
    let (two, ids_two) = installs(&[b0.clone(), b1.clone()], 100)?;
    figure(
        figures,
        format!(
            "100 concurrent installs, one replica vs two on one PostgreSQL (API {API_MS} ms, SIM_SPEED=20)"
        ),
        format!(
            "{:.1} s vs {:.1} s ({:.2}×); {} and {} distinct VMIDs",
            one.as_secs_f64(),
            two.as_secs_f64(),
            two.as_secs_f64() / one.as_secs_f64(),
            ids_one.len(),
            ids_two.len()
        ),
    );

    // The list at 8 clients on each replica at once.
    let loads: Vec<_> = [b0.clone(), b1.clone()]
        .into_iter()
        .map(|addr| std::thread::spawn(move || wrk(&addr, "/api/vm/list", 8, 10)))
        .collect();
    let mut shown = Vec::new();
    for load in loads {
        let load = load
            .join()
            .map_err(|_| Failed("a wrk thread panicked".into()))??;
        shown.push(format!(
            "{:.0} req/s, p50 {:.2} ms, p99 {:.2} ms",
            load.rps, load.p50_ms, load.p99_ms
        ));
    }
    figure(
        figures,
        "/api/vm/list, 8 clients on each of 2 replicas at once",
        shown.join("; "),
    );

    // A follower on r1 of an install r0 runs: when each event reaches it,
    // against when it reaches r0's own stream.
    let (tx, rx) = mpsc::channel();
    let starter = {
        let b0 = b0.clone();
        std::thread::spawn(move || {
            let (stream, job) = start_install(&b0)?;
            let _ = tx.send(job);
            timed_ids(stream)
        })
    };
    let job = rx
        .recv()
        .map_err(|_| Failed("the install did not start".into()))?;
    let there = arrivals(&b1, job)?;
    let here = starter
        .join()
        .map_err(|_| Failed("the install thread panicked".into()))??;
    let mut late: Vec<f64> = there
        .iter()
        .filter_map(|(id, at)| {
            let (_, first) = here.iter().find(|(i, _)| i == id)?;
            Some(at.saturating_duration_since(*first).as_secs_f64() * 1000.0)
        })
        .collect();
    late.sort_by(f64::total_cmp);
    let in_order = there.windows(2).all(|w| w[0].0 + 1 == w[1].0);
    figure(
        figures,
        "a follower on replica r1 of an install on r0: each event after r0's own stream",
        format!(
            "{} of {} events, {}; p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
            there.len(),
            here.len(),
            if in_order {
                "once each, in order"
            } else {
                "NOT in order"
            },
            percentile(&late, 0.5),
            percentile(&late, 0.99),
            late.last().copied().unwrap_or(f64::NAN)
        ),
    );
    drop((_p0, _p1));

    // kill -9 of a replica with 10 installs importing: the other takes them
    // over once the lease lapses.
    let lease = "5";
    let killed = cluster(root, &dir.join("killed"), &pg.database())?;
    let extra = [("JOB_LEASE_SECS", lease)];
    let (mut k0, c0) = replica(root, &dir.join("killed"), &killed, "r0", &extra)?;
    let (_k1, c1) = replica(root, &dir.join("killed"), &killed, "r1", &extra)?;
    install(&c0)?;
    let fault = Command::new(root.join(crate::e2e::SIM))
        .args(["fault", &slow_imports(10)])
        .env_clear()
        .env("DATA_DIR", &killed.data)
        .env("GATEWAY", "127.0.0.1")
        .output()
        .map_err(io("pvedeck-sim fault"))?;
    if !fault.status.success() {
        return Err(Failed(format!("pvedeck-sim fault: {fault:?}")));
    }
    let mut jobs = Vec::new();
    let mut streams = Vec::new();
    for _ in 0..10 {
        let (stream, job) = start_install(&c0)?;
        streams.push(stream);
        jobs.push(job);
    }
    for job in &jobs {
        wait_for(&c0, *job, "[*] import disk image")?;
    }
    k0.0.kill().map_err(io("kill -9"))?;
    let _ = k0.0.wait();
    let at_kill = Instant::now();
    drop(streams);
    let ends: Vec<_> = jobs
        .iter()
        .map(|job| {
            let (c1, job) = (c1.clone(), *job);
            std::thread::spawn(move || {
                arrivals(&c1, job)?;
                Ok::<_, Failed>((job, at_kill.elapsed()))
            })
        })
        .collect();
    let mut slowest = Duration::ZERO;
    let mut outcomes = std::collections::BTreeMap::<String, usize>::new();
    let mut vmids = Vec::new();
    for end in ends {
        let (job, took) = end
            .join()
            .map_err(|_| Failed("a follower thread panicked".into()))??;
        slowest = slowest.max(took);
        let record = get(&c1, &format!("/api/jobs/{job}"))?;
        let record: serde_json::Value =
            serde_json::from_str(&record.body).map_err(|e| Failed(format!("job {job}: {e}")))?;
        let outcome = format!(
            "{} ({})",
            record["state"].as_str().unwrap_or("?"),
            record["outcome"].as_str().unwrap_or("-")
        );
        *outcomes.entry(outcome).or_default() += 1;
        vmids.extend(record["vmid"].as_u64());
    }
    let list = get(&c1, "/api/vm/list")?.body;
    let left = vmids
        .iter()
        .filter(|vmid| list.contains(&format!("\"vmid\":{vmid},")))
        .count();
    figure(
        figures,
        format!("kill -9 of a replica with 10 installs importing (JOB_LEASE_SECS={lease})"),
        format!(
            "all 10 ended on r1 within {:.1} s of the kill: {}; {} of their VMs left",
            slowest.as_secs_f64(),
            outcomes
                .iter()
                .map(|(o, n)| format!("{n} {o}"))
                .collect::<Vec<_>>()
                .join(", "),
            left
        ),
    );
    Ok(())
}
