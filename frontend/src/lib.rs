//! The browser entry point. The app runs in islands mode: the server
//! renders every page, and the browser hydrates only the interactive parts
//! (`#[island]` components of `app`), each through its own exported
//! function, which the hydration script calls after `hydrate()`.

// Linked for its islands' exported functions, which nothing here names.
extern crate app;

#[wasm_bindgen::prelude::wasm_bindgen]
pub fn hydrate() {
    console_error_panic_hook::set_once();
    leptos::mount::hydrate_islands();
}
