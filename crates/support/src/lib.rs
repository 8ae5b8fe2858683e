//! Small helpers every native part of pvedeck needs the same way: time at
//! the simulated cluster's speed, files written whole or not at all,
//! private directories, and locks that keep serving after a panic. One copy
//! each, so that a fix (a mode, a rename) reaches every caller.

pub mod clock;
pub mod files;
pub mod sync;
