//! pvedeck: provisions and runs QEMU/KVM VMs on a Proxmox VE cluster.
//!
//! `main` reads the configuration and calls `server::serve`; the rest is laid
//! out as `shared/DESIGN.md` draws it: `api` (HTTP edge), `engine` (the
//! rules), `pve` (the port to Proxmox), `sim` (the simulated cluster).
// The UI's job panel, rendered here through `AnyView`, nests deeper than
// the default limit allows.
#![recursion_limit = "256"]

pub mod api;
pub mod client;
pub mod clock;
pub mod config;
pub mod engine;
#[cfg(test)]
mod fuzz;
pub mod jobs;
pub mod metrics;
pub mod mirror;
pub mod net;
pub mod pve;
pub mod scripts;
mod secret;
pub mod server;
pub mod sim;
pub mod sites;
pub mod store;
pub mod ui;
