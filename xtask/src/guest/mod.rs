//! `cargo xtask guest`: the pipeline against real Debian guests
//! (docs/development.md#real-guests): the disk image they boot, built here
//! once, and the lane that runs pvedeck against them.

mod console;
pub mod image;
pub mod lane;
