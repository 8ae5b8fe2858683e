//! The browser tests' second lane: the release server with
//! `PVE_BACKEND=api`, talking HTTPS to the simulator's REST face
//! (`pvedeck-sim api`) on the same data directory, as the integration
//! tests' api lane does (`tests/common`). Everything stays on loopback: the
//! VMs' addresses are `127.0.0.<vmid>`, the guests' `ssh` is the simulator's
//! stand-in, and the cloud images come from `pvedeck-sim mirror`.
//!
//! The tests reach the simulated cluster "behind the server's back"
//! (faults, nodes going offline) through `pvedeck-sim …` on the data
//! directory (`PVEDECK_SIM_BIN`, `SIM_DATA_DIR`): an api server has no
//! `/api/sim/…` routes.

use std::path::Path;

use super::{browser_tests, closed_port, fresh_dir, io, start, start_server, start_sim_api};
use crate::run::{Failed, status};

/// The VMs' network: loopback, so that the VMID probe's connection
/// attempts never leave the machine.
const GATEWAY: &str = "127.0.0.1";

pub fn run(root: &Path) -> Result<(), Failed> {
    let out = root.join("target/e2e-api");
    let data = out.join("data");
    fresh_dir(&data)?;
    // The guests' `ssh`: the simulator's binary answers as its stand-in
    // when called by that name.
    let bin = out.join("bin");
    fresh_dir(&bin)?;
    std::os::unix::fs::symlink(root.join(super::SIM), bin.join("ssh"))
        .map_err(io("target/e2e-api/bin/ssh"))?;
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );

    let mut mirror = super::binary(root, super::SIM, &out);
    mirror.arg("mirror");
    let (mirror, images) = start(mirror, &out, "mirror.log", "http://")?;
    println!("    image mirror at {images}, log in target/e2e-api/mirror.log");

    let ssh_port = closed_port()?.to_string();
    let data_dir = data.to_string_lossy().into_owned();
    let ssh_keys = data.join("ssh").to_string_lossy().into_owned();
    // What the REST face (the simulated cluster) and the server share.
    let common = [
        ("PATH", path.as_str()),
        ("GATEWAY", GATEWAY),
        ("MAIN_NODE", "pve1"),
        ("ASSIGN_STORAGE", "local-zfs"),
        // .100 is where the demo cluster's foreign host answers: the real
        // VMID probe of the api backend would not see it.
        ("ASSIGN_IP_START", "101"),
        // Where nothing listens: the probe finds every address free.
        ("SSH_PORT", ssh_port.as_str()),
        // The simulated guests boot SIM_SPEED times faster; so may the
        // polling (what the sim backend does by itself).
        ("SSH_POLL_INTERVAL_MS", "100"),
        ("SSH_KEY_DIR", ssh_keys.as_str()),
        ("SIM_SPEED", "50"),
        ("IMAGE_BASE_DEBIAN", images.as_str()),
        ("IMAGE_BASE_UBUNTU", images.as_str()),
        ("IMAGE_BASE_ROCKYLINUX", images.as_str()),
        ("RUST_LOG", "info"),
    ];

    let (sim_api, settings) = start_sim_api(root, &out, &common)?;
    println!("    simulator's REST face, log in target/e2e-api/sim-api.log");

    let mut env = common.to_vec();
    env.extend(settings.iter().map(|(k, v)| (*k, v.as_str())));
    let (server, url) = start_server(root, &out, &env)?;
    println!("    server at {url}, log in target/e2e-api/server.log");
    let result = status(
        browser_tests(root, &url, &out)
            .env("PVEDECK_SIM_BIN", root.join(super::SIM))
            .env("SIM_DATA_DIR", &data_dir)
            .env("PVEDECK_GATEWAY", GATEWAY),
    );
    drop(server);
    drop(sim_api);
    drop(mirror);
    result
}
