pub mod not_found;
pub mod overview;
