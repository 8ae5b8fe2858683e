//! The `api` backend's parts: Proxmox's REST API (`/api2/json`) with an API
//! token, over one pinned HTTPS client (`client`, `pin`), its long
//! operations followed as tasks (`tasks`).

pub mod backend;
pub mod client;
pub mod console;
pub mod pin;
pub mod tasks;
