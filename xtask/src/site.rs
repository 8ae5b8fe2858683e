//! Builds the browser side into `target/site`: the WASM bundle (cargo →
//! wasm-split, one module per lazy island → wasm-bindgen as a library →
//! binaryen's wasm-opt on each module), the stylesheet and the static files,
//! each bundle file also gzip-compressed for the server to send as is.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::run::{Failed, cargo, status, step};

pub const WASM_TARGET: &str = "wasm32-unknown-unknown";
pub const WASM_PROFILE: &str = "wasm-release";
/// Must match `app::OUTPUT_NAME` and `output-name` in Cargo.toml.
const OUTPUT_NAME: &str = "pvedeck";

/// What rustc enables by default for wasm32 and binaryen must accept.
const WASM_FEATURES: [&str; 6] = [
    "--enable-bulk-memory",
    "--enable-mutable-globals",
    "--enable-nontrapping-float-to-int",
    "--enable-sign-ext",
    "--enable-reference-types",
    "--enable-multivalue",
];

fn io(path: &Path) -> impl Fn(std::io::Error) -> Failed + '_ {
    move |e| Failed(format!("{}: {e}", path.display()))
}

pub fn build(root: &Path) -> Result<(), Failed> {
    let site = root.join("target/site");
    let pkg = site.join("pkg");

    step("build the browser bundle (wasm32, wasm-release)", || {
        cargo(
            root,
            &[
                "build",
                "--package",
                "frontend",
                "--lib",
                "--target",
                WASM_TARGET,
                "--profile",
                WASM_PROFILE,
            ],
        )
    })?;

    let input = root.join(format!("target/{WASM_TARGET}/{WASM_PROFILE}/frontend.wasm"));
    let main = root.join(format!(
        "target/{WASM_TARGET}/{WASM_PROFILE}/frontend_split.wasm"
    ));
    let wasm = pkg.join(format!("{OUTPUT_NAME}_bg.wasm"));
    // wasm-opt takes ~20 s: skip bindgen and opt when cargo produced the very
    // same module as last time.
    let stamp_path = pkg.join(".source-stamp");
    let source = std::fs::read(&input).map_err(io(&input))?;
    let stamp = format!("{:x}", fingerprint(&source));
    let fresh = wasm.exists() && std::fs::read_to_string(&stamp_path).is_ok_and(|s| s == stamp);
    if fresh {
        println!("\n==> wasm-bindgen and wasm-opt: bundle is up to date");
    } else {
        step("wasm-split: each lazy island into its own module", || {
            if pkg.exists() {
                std::fs::remove_dir_all(&pkg).map_err(io(&pkg))?;
            }
            std::fs::create_dir_all(&pkg).map_err(io(&pkg))?;
            split(&source, &pkg, &main)
        })?;
        step("wasm-bindgen", || {
            let mut bindgen = wasm_bindgen_cli_support::Bindgen::new();
            bindgen
                .input_path(&main)
                .out_name(OUTPUT_NAME)
                .typescript(false)
                // The split modules import the main module's functions by
                // their linker names.
                .keep_lld_exports(true)
                .demangle(false);
            bindgen
                .web(true)
                .and_then(|b| b.generate(&pkg))
                .map_err(|e| Failed(format!("{}: {e:#}", main.display())))
        })?;
        step("wasm-opt -Oz (binaryen 132 from npm)", || {
            let wasm_opt = root.join("frontend/node_modules/.bin/wasm-opt");
            for module in wasm_files(&pkg)? {
                status(
                    Command::new(&wasm_opt)
                        .arg("-Oz")
                        .args(WASM_FEATURES)
                        .arg(&module)
                        .arg("-o")
                        .arg(&module),
                )?;
            }
            Ok(())
        })?;
        std::fs::write(&stamp_path, &stamp).map_err(io(&stamp_path))?;
    }

    step("stylesheet and static files", || {
        let css = root.join("style/main.css");
        let to = pkg.join(format!("{OUTPUT_NAME}.css"));
        std::fs::copy(&css, &to).map_err(io(&css))?;
        copy_tree(&root.join("public"), &site)
    })?;
    step("the console page's script, noVNC and xterm.js", || {
        crate::console_page::copy(root, &pkg)
    })?;

    step("gzip the bundle", || {
        for entry in std::fs::read_dir(&pkg).map_err(io(&pkg))? {
            let path = entry.map_err(io(&pkg))?.path();
            let bundle_file = ["js", "wasm", "css"]
                .iter()
                .any(|ext| path.extension().is_some_and(|e| e == *ext));
            if bundle_file {
                let raw = std::fs::read(&path).map_err(io(&path))?;
                let gz = gzip(&raw).map_err(io(&path))?;
                let mut gz_path = path.clone().into_os_string();
                gz_path.push(".gz");
                std::fs::write(&gz_path, &gz).map_err(io(&path))?;
                println!(
                    "    {:<28} {:>9} bytes, {:>8} gzip",
                    file_name(&path),
                    raw.len(),
                    gz.len()
                );
            }
        }
        Ok(())
    })
}

/// Splits the module at its `#[lazy]` points (each `#[island(lazy)]`):
/// the main module goes to `main`, the islands' modules, the loader
/// `__wasm_split.*.js` and the manifest `HydrationScripts` reads (which
/// modules each island needs, to preload them) into `pkg`. The module must
/// be linked with `--emit-relocs` (`.cargo/config.toml`).
fn split(source: &[u8], pkg: &Path, main: &Path) -> Result<(), Failed> {
    let mut options = wasm_split_cli_support::Options::new(source);
    options.output_dir = pkg;
    options.main_out_path = main;
    // Relative to the loader, which sits beside the main module's JS.
    options.main_module = "./pvedeck.js";
    // The name Leptos links to when files are not hashed.
    options.link_name = "./__wasm_split.______________________.js";
    let split = wasm_split_cli_support::transform(options)
        .map_err(|e| Failed(format!("splitting the module: {e:#}")))?;
    let manifest = pkg.join("__wasm_split_manifest.json");
    let json = serde_json::to_string_pretty(&split.prefetch_map)
        .map_err(|e| Failed(format!("{}: {e}", manifest.display())))?;
    std::fs::write(&manifest, json).map_err(io(&manifest))
}

/// The `.wasm` files in `dir`: the main module and the split ones.
fn wasm_files(dir: &Path) -> Result<Vec<PathBuf>, Failed> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io(dir))? {
        let path = entry.map_err(io(dir))?.path();
        if path.extension().is_some_and(|e| e == "wasm") {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

/// FNV-1a: enough to tell whether cargo wrote a different module.
fn fingerprint(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

fn gzip(data: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::new();
    zopfli::compress(
        zopfli::Options::default(),
        zopfli::Format::Gzip,
        data,
        &mut out,
    )?;
    Ok(out)
}

fn copy_tree(from: &Path, to: &Path) -> Result<(), Failed> {
    std::fs::create_dir_all(to).map_err(io(to))?;
    for entry in std::fs::read_dir(from).map_err(io(from))? {
        let path = entry.map_err(io(from))?.path();
        let target: PathBuf = to.join(file_name(&path));
        if path.is_dir() {
            copy_tree(&path, &target)?;
        } else {
            std::fs::copy(&path, &target).map_err(io(&path))?;
        }
    }
    Ok(())
}
