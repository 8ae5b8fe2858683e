//! Which merged modules the bundle gets, and the loader that fetches them.
//!
//! wasm-split makes a module of the code each set of split points shares,
//! so a split point (a lazy island, or a `#[lazy]` function) needs its own
//! module and every such chunk of its set: 24–74 files. Each split point
//! gets one *bundle*, its own module and all its chunks merged, so that a
//! page hydrating one island fetches one file besides the main module.
//! Bundles overlap (two islands share chunks), and a chunk must not be
//! instantiated twice (its data would be written again over state the
//! program changed since), so the loader tracks which chunks are in: a
//! split point whose chunks are partly in already gets a bundle of exactly
//! the missing ones when the build made one (an island's page, then a lazy
//! function it calls: a *delta* bundle), else the missing chunks one by one.
//!
//! The loader also starts fetching the bundles of the islands a page has as
//! soon as it runs, beside the main module's start, rather than when each
//! island's turn to hydrate comes (islands hydrate one after another).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;

/// A merged module: its file stem and the modules (file stems) it holds,
/// in the order they are merged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bundle {
    pub file: String,
    pub parts: Vec<String>,
}

/// What a split point needs: its name (wasm-split's, e.g.
/// `live_vm_loader_5028918566240359583`) → its modules' file stems.
pub type Manifest = BTreeMap<String, Vec<String>>;

/// Whether a split point is a lazy island's (Leptos names it
/// `<island>_loader_<hash>`) rather than a `#[lazy]` function's.
fn is_island(split: &str) -> bool {
    split
        .rsplit_once("_loader_")
        .is_some_and(|(_, hash)| !hash.is_empty() && hash.bytes().all(|b| b.is_ascii_digit()))
}

/// What the loader fetches at once, named for the bundle that would hold
/// it: each split point's modules, and per island and lazy function what
/// the function needs beyond what the island's page has in already.
/// Islands get none of each other: a page hydrates one (a page with two
/// fetches the second's missing modules one by one).
fn loads(manifest: &Manifest) -> Vec<(String, Vec<String>)> {
    let mut loads: Vec<(String, Vec<String>)> = manifest
        .iter()
        .map(|(split, parts)| (format!("bundle_{split}"), parts.clone()))
        .collect();
    let islands: Vec<(&String, &Vec<String>)> =
        manifest.iter().filter(|(s, _)| is_island(s)).collect();
    for (lazy, needs) in manifest.iter().filter(|(s, _)| !is_island(s)) {
        for (island, has) in &islands {
            let missing = needs.iter().filter(|p| !has.contains(p)).cloned().collect();
            loads.push((format!("bundle_{lazy}_after_{island}"), missing));
        }
    }
    loads
}

/// The bundles to build: each load of more than one module, once.
pub fn plan(manifest: &Manifest) -> Vec<Bundle> {
    let mut bundles: Vec<Bundle> = Vec::new();
    for (file, parts) in loads(manifest) {
        let same =
            |b: &Bundle| b.parts.len() == parts.len() && parts.iter().all(|p| b.parts.contains(p));
        if parts.len() > 1 && !bundles.iter().any(same) {
            bundles.push(Bundle { file, parts });
        }
    }
    bundles
}

/// The modules a load fetches alone (no bundle is made of one module).
pub fn fetched_alone(manifest: &Manifest) -> BTreeSet<String> {
    loads(manifest)
        .into_iter()
        .filter_map(|(_, parts)| match <[String; 1]>::try_from(parts) {
            Ok([part]) => Some(part),
            Err(_) => None,
        })
        .collect()
}

/// The manifest Leptos reads (`HydrationScripts`: the modules to preload
/// for a lazy function the server rendered): each split point's bundle,
/// or its one module.
pub fn leptos_manifest(manifest: &Manifest, bundles: &[Bundle]) -> Manifest {
    manifest
        .iter()
        .map(|(split, parts)| {
            let files = bundles
                .iter()
                .find(|b| b.file == format!("bundle_{split}"))
                .map(|b| vec![b.file.clone()])
                .unwrap_or_else(|| parts.clone());
            (split.clone(), files)
        })
        .collect()
}

/// Island components (`data-component` of a `<leptos-island>`, the name
/// of its hydrating function, e.g. `LiveVm_80816203957786831`) → their
/// split point (`live_vm_loader_5028918566240359583`), from the module's
/// exports. Leptos names the split point after the component in snake
/// case; the two are matched without case and underscores, and a name two
/// could match is left out (that island is then not fetched early).
pub fn islands<'a>(
    exports: impl IntoIterator<Item = &'a str>,
    splits: impl IntoIterator<Item = &'a String>,
) -> BTreeMap<String, String> {
    let key = |name: &str| name.replace('_', "").to_ascii_lowercase();
    let mut by_key: BTreeMap<String, Vec<&String>> = BTreeMap::new();
    for split in splits.into_iter().filter(|s| is_island(s)) {
        if let Some((name, _)) = split.rsplit_once("_loader_") {
            by_key.entry(key(name)).or_default().push(split);
        }
    }
    let mut islands = BTreeMap::new();
    for export in exports {
        let Some((name, hash)) = export.rsplit_once('_') else {
            continue;
        };
        let component = name.starts_with(|c: char| c.is_ascii_uppercase())
            && !hash.is_empty()
            && hash.bytes().all(|b| b.is_ascii_digit());
        if let (true, Some([split])) = (component, by_key.get(&key(name)).map(Vec::as_slice)) {
            islands.insert(export.to_string(), (*split).clone());
        }
    }
    islands
}

/// The loader module: `__wasm_split_load_<split>` for each split point (the
/// main module imports them), called with a callback to run once the split
/// point's modules are instantiated. `main_module` is the main module's JS,
/// relative to the loader; `shared` are the names, under `__wasm_split`,
/// the split modules import from the main module's exports.
pub fn loader_js(
    main_module: &str,
    shared: &[String],
    manifest: &Manifest,
    bundles: &[Bundle],
    islands: &BTreeMap<String, String>,
) -> String {
    let json = |value: serde_json::Value| value.to_string();
    let parts = json(serde_json::json!(manifest));
    let bundles = json(serde_json::Value::Array(
        bundles
            .iter()
            .map(|b| serde_json::json!([b.file, b.parts]))
            .collect(),
    ));
    let islands = json(serde_json::json!(islands));
    let shared = shared.join(", ");
    let mut js = format!(
        r#"// Written by `cargo xtask site` (xtask/src/site/loader.rs).
import {{ initSync }} from "{main_module}";

// Each split point's modules; merged modules and what each holds; each
// island component's split point.
const PARTS = {parts};
const BUNDLES = {bundles};
const ISLANDS = {islands};

let sharedImports;
function getSharedImports() {{
    if (sharedImports === undefined) {{
        // The main module is instantiated by the time a split point loads.
        const {{ {shared} }} = initSync(undefined, undefined);
        sharedImports = {{ __wasm_split: {{ {shared} }} }};
    }}
    return sharedImports;
}}

// Module (file stem) → the request of the file that holds it: each module
// is instantiated once, from the first file asked for that holds it.
const requested = new Map();

function request(file, parts) {{
    const response = fetch(new URL(`./${{file}}.wasm`, import.meta.url));
    // Seen when the module is instantiated; not an unhandled rejection before.
    response.catch(() => {{}});
    const entry = {{ parts, response, instance: undefined }};
    for (const part of parts) requested.set(part, entry);
}}

// Asks for what `split` needs and nothing asked for holds yet: one bundle
// when a bundle holds exactly that, else each module.
function ask(split) {{
    const missing = PARTS[split].filter((part) => !requested.has(part));
    if (missing.length === 0) return;
    const bundle = BUNDLES.find(
        ([, parts]) => parts.length === missing.length && parts.every((p) => missing.includes(p)),
    );
    if (bundle !== undefined) request(bundle[0], bundle[1]);
    else for (const part of missing) request(part, [part]);
}}

function instantiate(entry) {{
    if (entry.instance === undefined) {{
        entry.instance = WebAssembly.instantiateStreaming(entry.response, getSharedImports());
        // Forgotten when it fails, so that the next load asks again.
        entry.instance.catch(() => {{
            for (const part of entry.parts) {{
                if (requested.get(part) === entry) requested.delete(part);
            }}
        }});
    }}
    return entry.instance;
}}

async function load(split) {{
    ask(split);
    await Promise.all(PARTS[split].map((part) => instantiate(requested.get(part))));
}}

function loader(split) {{
    return async (callbackIndex, callbackData) => {{
        let success = false;
        try {{
            await load(split);
            success = true;
        }} catch (e) {{
            console.error(e);
        }} finally {{
            const {{ __indirect_function_table }} = initSync(undefined, undefined);
            __indirect_function_table.get(callbackIndex)(callbackData, success);
        }}
    }};
}}

// For the browser tests (end2end/tests/bundle.test.mjs).
export {{ load as loadSplit, PARTS as splitParts, BUNDLES as splitBundles }};

// The islands of this page, fetched while the main module starts.
if (typeof document !== "undefined") {{
    for (const island of document.querySelectorAll("leptos-island")) {{
        const split = ISLANDS[island.dataset.component];
        if (split !== undefined) ask(split);
    }}
}}

"#
    );
    for split in manifest.keys() {
        // Split names are Rust identifiers with a hash: valid JS names.
        let _ = writeln!(
            js,
            "export const __wasm_split_load_{split} = loader({});",
            serde_json::Value::from(split.as_str())
        );
    }
    js
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| n.to_string()).collect()
    }

    fn manifest() -> Manifest {
        Manifest::from([
            (
                "live_vm_loader_1".to_string(),
                parts(&["chunk_1", "chunk_2", "chunk_3", "split_live_vm_loader_1"]),
            ),
            (
                "live_loader_2".to_string(),
                parts(&["chunk_1", "chunk_4", "chunk_5", "split_live_loader_2"]),
            ),
            (
                "job_panel_3".to_string(),
                parts(&["chunk_2", "chunk_5", "chunk_6", "split_job_panel_3"]),
            ),
            (
                "login_loader_4".to_string(),
                parts(&["split_login_loader_4"]),
            ),
            ("empty_loader_5".to_string(), Vec::new()),
        ])
    }

    fn island_map() -> BTreeMap<String, String> {
        BTreeMap::from([
            ("LiveVm_11".to_string(), "live_vm_loader_1".to_string()),
            ("Live_22".to_string(), "live_loader_2".to_string()),
            ("Login_44".to_string(), "login_loader_4".to_string()),
        ])
    }

    #[test]
    fn each_split_point_gets_a_bundle_and_each_lazy_function_one_per_island() {
        let bundles = plan(&manifest());
        let files: Vec<&str> = bundles.iter().map(|b| b.file.as_str()).collect();
        assert_eq!(
            files,
            [
                "bundle_job_panel_3",
                "bundle_live_loader_2",
                "bundle_live_vm_loader_1",
                "bundle_job_panel_3_after_live_loader_2",
                "bundle_job_panel_3_after_live_vm_loader_1",
            ]
        );
        assert_eq!(
            bundles[3].parts,
            parts(&["chunk_2", "chunk_6", "split_job_panel_3"])
        );
        // After the login page's (or the empty island's) nothing of
        // job_panel is in: the same modules as its own bundle, not built
        // twice.
        let after_live_vm = &bundles[4];
        assert_eq!(
            after_live_vm.parts,
            parts(&["chunk_5", "chunk_6", "split_job_panel_3"])
        );
    }

    #[test]
    fn a_load_of_one_module_fetches_that_module() {
        let mut manifest = manifest();
        // After `live_vm`, job_panel lacks only its own module.
        manifest.insert(
            "job_panel_3".to_string(),
            parts(&["chunk_2", "chunk_3", "split_job_panel_3"]),
        );
        assert_eq!(
            fetched_alone(&manifest),
            BTreeSet::from([
                "split_login_loader_4".to_string(),
                "split_job_panel_3".to_string()
            ])
        );
        assert!(
            plan(&manifest)
                .iter()
                .all(|b| b.file != "bundle_job_panel_3_after_live_vm_loader_1")
        );
    }

    #[test]
    fn leptos_preloads_the_bundle_or_the_one_module() {
        let manifest = manifest();
        let leptos = leptos_manifest(&manifest, &plan(&manifest));
        assert_eq!(leptos["live_vm_loader_1"], ["bundle_live_vm_loader_1"]);
        assert_eq!(leptos["login_loader_4"], ["split_login_loader_4"]);
        assert!(leptos["empty_loader_5"].is_empty());
    }

    #[test]
    fn islands_are_matched_to_their_split_points_by_name() {
        let splits = parts(&[
            "live_vm_loader_1",
            "live_loader_2",
            "job_panel_3",
            "form_loader_7",
            "form_loader_8",
        ]);
        let found = islands(
            [
                "LiveVm_11",
                "Live_22",
                "Form_77",
                "hydrate",
                "__wbindgen_start",
                "Hydrated_9",
            ],
            &splits,
        );
        assert_eq!(
            found,
            BTreeMap::from([
                ("LiveVm_11".to_string(), "live_vm_loader_1".to_string()),
                ("Live_22".to_string(), "live_loader_2".to_string()),
            ]),
            "two `form` split points: ambiguous, left out"
        );
    }

    #[test]
    fn the_loader_exports_a_load_function_per_split_point() {
        let manifest = manifest();
        let bundles = plan(&manifest);
        let js = loader_js(
            "./pvedeck.js",
            &parts(&["__indirect_function_table", "memory"]),
            &manifest,
            &bundles,
            &island_map(),
        );
        for split in manifest.keys() {
            assert!(
                js.contains(&format!(
                    "export const __wasm_split_load_{split} = loader(\"{split}\");"
                )),
                "{split}"
            );
        }
        assert!(js.contains(r#"import { initSync } from "./pvedeck.js";"#));
        assert!(js.contains(
            r#"["bundle_live_loader_2",["chunk_1","chunk_4","chunk_5","split_live_loader_2"]]"#
        ));
        assert!(js.contains(r#"const { __indirect_function_table, memory } = initSync"#));
    }
}
