//! The pvedeck server: provisions and runs QEMU/KVM VMs on a Proxmox VE
//! cluster. `main` reads the configuration (`pvedeck-config`) and calls
//! `server::serve`; `api` is the HTTP edge, `ui` the engine as the Leptos
//! app's server functions see it, `engine` the rules, `jobs` and `store`
//! what a job leaves; `admin` the admin commands on the people. Proxmox is reached only through `pvedeck-proxmox`'s
//! port (docs/architecture.md draws the whole).
// The UI's job panel, rendered here through `AnyView`, nests deeper than
// the default limit allows.
#![recursion_limit = "256"]

pub mod admin;
pub mod api;
pub mod engine;
pub mod jobs;
pub mod metrics;
mod secret;
pub mod server;
pub mod store;
pub mod tls;
pub mod ui;
