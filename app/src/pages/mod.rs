pub mod jobs;
pub mod login;
pub mod new_vm;
pub mod node;
pub mod not_found;
pub mod overview;
pub mod templates;
pub mod vm;
