//! `pvedeck-sim`: the simulated cluster's outer faces, for tests, demos and
//! benchmarks. The server links only the simulator's core (its default
//! backend); these faces are this binary's alone:
//!
//! * `cli`: answers as `qm`, `pvesh`, `pvesm` and `ssh` (called through a
//!   link of that name, or as `pvedeck-sim qm …`), so that the server's
//!   `cli` backend runs real command lines against it;
//! * `api`: Proxmox's REST API over HTTPS (`pvedeck-sim api`), for the
//!   server's `api` backend;
//! * `mirror`: the cloud images and their checksum lists over HTTP
//!   (`pvedeck-sim mirror`), for `IMAGE_BASE_<OS>`.

mod api;
mod cli;
mod mirror;

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let code = cli::dispatch(&args);
    ExitCode::from(u8::try_from(code).unwrap_or(255))
}
