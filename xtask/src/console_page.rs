//! The console page's files (app/src/pages/console.rs): its own script and
//! stylesheet (`frontend/console/`) and the two clients it loads, noVNC
//! and xterm.js, from `frontend/node_modules` (npm, `frontend/package.json`),
//! copied into `target/site/pkg`. No other page loads any of them, and no
//! WASM module carries them.

use std::path::Path;

use crate::run::Failed;

fn io(path: &Path) -> impl Fn(std::io::Error) -> Failed + '_ {
    move |e| Failed(format!("{}: {e}", path.display()))
}

/// `(from under frontend/, to under pkg/)`: noVNC's ES modules keep their
/// layout (`core/rfb.js` imports `../vendor/pako/…`).
const COPIES: [(&str, &str); 6] = [
    ("console/console.js", "console/console.js"),
    ("console/console.css", "console/console.css"),
    ("node_modules/@novnc/novnc/core", "novnc/core"),
    ("node_modules/@novnc/novnc/vendor", "novnc/vendor"),
    ("node_modules/@xterm/xterm/lib/xterm.mjs", "xterm/xterm.mjs"),
    ("node_modules/@xterm/xterm/css/xterm.css", "xterm/xterm.css"),
];

/// Licences shipped beside what they cover.
const LICENCES: [(&str, &str); 2] = [
    ("node_modules/@novnc/novnc/LICENSE.txt", "novnc/LICENSE.txt"),
    ("node_modules/@xterm/xterm/LICENSE", "xterm/LICENSE"),
];

pub fn copy(root: &Path, pkg: &Path) -> Result<(), Failed> {
    let frontend = root.join("frontend");
    for (from, to) in COPIES.iter().chain(LICENCES.iter()) {
        let (from, to) = (frontend.join(from), pkg.join(to));
        if from.is_dir() {
            copy_js_tree(&from, &to)?;
        } else {
            if let Some(parent) = to.parent() {
                std::fs::create_dir_all(parent).map_err(io(parent))?;
            }
            copy_if_changed(&from, &to)?;
        }
    }
    Ok(())
}

/// The `.js` files of a tree (not noVNC's tests or maps).
fn copy_js_tree(from: &Path, to: &Path) -> Result<(), Failed> {
    std::fs::create_dir_all(to).map_err(io(to))?;
    for entry in std::fs::read_dir(from).map_err(io(from))? {
        let path = entry.map_err(io(from))?.path();
        let Some(name) = path.file_name() else {
            continue;
        };
        if path.is_dir() {
            copy_js_tree(&path, &to.join(name))?;
        } else if path.extension().is_some_and(|e| e == "js") {
            copy_if_changed(&path, &to.join(name))?;
        }
    }
    Ok(())
}

/// Copies `from` to `to` unless `to` already holds the same bytes: an
/// untouched copy keeps its time, so its `.gz` is not made again.
fn copy_if_changed(from: &Path, to: &Path) -> Result<(), Failed> {
    let new = std::fs::read(from).map_err(io(from))?;
    if std::fs::read(to).is_ok_and(|old| old == new) {
        return Ok(());
    }
    std::fs::write(to, new).map_err(io(to))
}
