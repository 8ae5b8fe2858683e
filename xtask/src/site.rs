//! Builds the browser side into `target/site`: the WASM bundle (cargo →
//! wasm-split, one module per lazy island and per set of islands sharing
//! code → each split point's modules merged into one → wasm-bindgen as a
//! library → binaryen's wasm-opt on each module), the stylesheet and the
//! static files, each bundle file also gzip-compressed for the server to
//! send as is.

mod loader;
mod merge;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::run::{Failed, cargo, status, step};

/// The loader wasm-split writes and the main module imports (relative to
/// `pkg`): the name Leptos links to when files are not hashed.
const LINK_NAME: &str = "./__wasm_split.______________________.js";
/// The main module's JS, relative to the loader, which sits beside it.
const MAIN_MODULE: &str = "./pvedeck.js";
/// What the split modules import from the main module.
const SHARED_MODULE: &str = "__wasm_split";
/// The code that makes the bundle from cargo's module: a change to it
/// makes the bundle again.
const RECIPE: [&str; 3] = [
    include_str!("site.rs"),
    include_str!("site/merge.rs"),
    include_str!("site/loader.rs"),
];

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
    // wasm-opt takes minutes: skip the split, the merge, bindgen and opt
    // when cargo produced the very same module as last time and the code
    // that does them is the same.
    let stamp_path = pkg.join(".source-stamp");
    let source = std::fs::read(&input).map_err(io(&input))?;
    let stamp = format!(
        "{:x} {:x}",
        fingerprint(&source),
        fingerprint(RECIPE.concat().as_bytes())
    );
    let fresh = wasm.exists() && std::fs::read_to_string(&stamp_path).is_ok_and(|s| s == stamp);
    if fresh {
        println!("\n==> wasm-bindgen and wasm-opt: bundle is up to date");
    } else {
        let manifest = step("wasm-split: each lazy island into its own module", || {
            if pkg.exists() {
                std::fs::remove_dir_all(&pkg).map_err(io(&pkg))?;
            }
            std::fs::create_dir_all(&pkg).map_err(io(&pkg))?;
            split(&source, &pkg, &main)
        })?;
        let mut optimize = step("merge each split point's modules into one bundle", || {
            bundle(&source, &pkg, &manifest)
        })?;
        optimize.push(wasm.clone());
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
            for module in &optimize {
                status(
                    Command::new(&wasm_opt)
                        .arg("-Oz")
                        .args(WASM_FEATURES)
                        .arg(module)
                        .arg("-o")
                        .arg(module),
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
        for path in files_under(&pkg)? {
            let bundle_file = ["js", "mjs", "wasm", "css"]
                .iter()
                .any(|ext| path.extension().is_some_and(|e| e == *ext));
            let mut gz_path = path.clone().into_os_string();
            gz_path.push(".gz");
            // zopfli takes a minute over the whole bundle: only what changed.
            if bundle_file && !newer(Path::new(&gz_path), &path) {
                let raw = std::fs::read(&path).map_err(io(&path))?;
                let gz = gzip(&raw).map_err(io(&path))?;
                std::fs::write(&gz_path, &gz).map_err(io(&path))?;
                println!(
                    "    {:<28} {:>9} bytes, {:>8} gzip",
                    path.strip_prefix(&pkg)
                        .unwrap_or(&path)
                        .display()
                        .to_string(),
                    raw.len(),
                    gz.len()
                );
            }
        }
        Ok(())
    })
}

/// Splits the module at its `#[lazy]` points (each `#[island(lazy)]`):
/// the main module goes to `main`, the islands' modules and the modules
/// they share into `pkg`. Returns which modules each split point needs.
/// The module must be linked with `--emit-relocs` (`.cargo/config.toml`).
fn split(source: &[u8], pkg: &Path, main: &Path) -> Result<loader::Manifest, Failed> {
    let mut options = wasm_split_cli_support::Options::new(source);
    options.output_dir = pkg;
    options.main_out_path = main;
    options.main_module = MAIN_MODULE;
    options.link_name = LINK_NAME;
    let split = wasm_split_cli_support::transform(options)
        .map_err(|e| Failed(format!("splitting the module: {e:#}")))?;
    Ok(split.prefetch_map.into_iter().collect())
}

/// Merges each split point's modules into a bundle (and what a lazy
/// function needs after an island's page: `loader::plan`), and writes the
/// loader that fetches them in place of wasm-split's, and the manifest
/// `HydrationScripts` reads. The modules stay too, for what no bundle
/// holds exactly (no page's load: see `loader`); those are only stripped
/// of their names, not optimized (wasm-opt from npm starts in seconds,
/// and there are a hundred of them). Returns the modules to optimize: the
/// bundles, and a module a load fetches alone.
fn bundle(source: &[u8], pkg: &Path, manifest: &loader::Manifest) -> Result<Vec<PathBuf>, Failed> {
    let bundles = loader::plan(manifest);
    let mut shared = BTreeSet::new();
    let mut optimize = Vec::new();
    for bundle in &bundles {
        let wasm = bundle
            .parts
            .iter()
            .map(|part| {
                let path = pkg.join(format!("{part}.wasm"));
                std::fs::read(&path).map_err(io(&path))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let parts: Vec<merge::Part<'_>> = bundle
            .parts
            .iter()
            .zip(&wasm)
            .map(|(name, wasm)| merge::Part { name, wasm })
            .collect();
        let merged = merge::merge(&parts).map_err(|e| Failed(format!("{}: {e}", bundle.file)))?;
        let path = pkg.join(format!("{}.wasm", bundle.file));
        std::fs::write(&path, &merged.wasm).map_err(io(&path))?;
        println!(
            "    {}: {} modules, {} calls made direct",
            bundle.file,
            bundle.parts.len(),
            merged.direct_calls
        );
        optimize.push(path);
    }
    let alone = loader::fetched_alone(manifest);
    let parts: BTreeSet<&String> = manifest.values().flatten().collect();
    for part in parts {
        let path = pkg.join(format!("{part}.wasm"));
        let wasm = std::fs::read(&path).map_err(io(&path))?;
        for (module, name) in imports(&wasm).map_err(|e| Failed(format!("{part}: {e}")))? {
            if module != SHARED_MODULE {
                return Err(Failed(format!(
                    "{part} imports {module}.{name}; the loader gives only {SHARED_MODULE}"
                )));
            }
            shared.insert(name);
        }
        if alone.contains(part) {
            optimize.push(path);
        } else {
            let stripped = merge::merge(&[merge::Part {
                name: part,
                wasm: &wasm,
            }])
            .map_err(|e| Failed(format!("{part}: {e}")))?;
            std::fs::write(&path, &stripped.wasm).map_err(io(&path))?;
        }
    }
    let exports = exports(source).map_err(|e| Failed(format!("the module's exports: {e}")))?;
    let islands = loader::islands(exports.iter().map(String::as_str), manifest.keys());
    let shared: Vec<String> = shared.into_iter().collect();
    let js = loader::loader_js(MAIN_MODULE, &shared, manifest, &bundles, &islands);
    let link = pkg.join(LINK_NAME);
    std::fs::write(&link, js).map_err(io(&link))?;
    let path = pkg.join("__wasm_split_manifest.json");
    let json = serde_json::to_string_pretty(&loader::leptos_manifest(manifest, &bundles))
        .map_err(|e| Failed(format!("{}: {e}", path.display())))?;
    std::fs::write(&path, json).map_err(io(&path))?;
    Ok(optimize)
}

/// A module's imports: (module, name).
fn imports(wasm: &[u8]) -> Result<Vec<(String, String)>, wasmparser::BinaryReaderError> {
    let mut found = Vec::new();
    for payload in wasmparser::Parser::new(0).parse_all(wasm) {
        if let wasmparser::Payload::ImportSection(reader) = payload? {
            for import in reader.into_imports() {
                let import = import?;
                found.push((import.module.to_string(), import.name.to_string()));
            }
        }
    }
    Ok(found)
}

/// A module's export names.
fn exports(wasm: &[u8]) -> Result<Vec<String>, wasmparser::BinaryReaderError> {
    let mut found = Vec::new();
    for payload in wasmparser::Parser::new(0).parse_all(wasm) {
        if let wasmparser::Payload::ExportSection(reader) = payload? {
            for export in reader {
                found.push(export?.name.to_string());
            }
        }
    }
    Ok(found)
}

/// Whether `file` exists and was written after `than`.
fn newer(file: &Path, than: &Path) -> bool {
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    matches!((modified(file), modified(than)), (Some(a), Some(b)) if a > b)
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

/// Every file below `dir`, in its subfolders too (the console's clients).
fn files_under(dir: &Path) -> Result<Vec<PathBuf>, Failed> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io(dir))? {
        let path = entry.map_err(io(dir))?.path();
        if path.is_dir() {
            files.extend(files_under(&path)?);
        } else {
            files.push(path);
        }
    }
    Ok(files)
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
