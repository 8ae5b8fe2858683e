//! pvedeck's vocabulary, shared by the server, the browser (compiled to
//! WASM through `app`) and the command-line client: what a request may say
//! and how it is checked, what the answers look like, the OS table and the
//! init scripts. No Leptos, no I/O: everything here is plain data and rules.

pub mod account;
pub mod format;
pub mod os;
pub mod request;
pub mod rules;
pub mod scripts;
pub mod secret;
pub mod text;
pub mod timeline;
pub mod types;
