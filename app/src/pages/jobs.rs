use std::time::Duration;

use leptos::prelude::*;
use leptos_router::components::A;
use leptos_router::hooks::use_params_map;
use pvedeck_domain::format::{duration, utc};
use pvedeck_domain::types::Job;

use crate::api::get_jobs;
use crate::components::timeline::JobView;
use crate::error::UiError;
use crate::keys;
use crate::refresh::Latest;

/// `/jobs`: every job, newest first.
#[component]
pub fn Jobs() -> impl IntoView {
    view! {
        <h1>"Jobs"</h1>
        <Suspense fallback=|| view! { <p class="loading">"Reading the job history…"</p> }>
            {Suspend::new(async move {
                let initial = get_jobs().await.and_then(|a| a);
                view! { <LiveJobs initial/> }
            })}
        </Suspense>
    }
}

/// The table, read again every few seconds in the browser.
#[island(lazy)]
fn LiveJobs(initial: Result<Vec<Job>, UiError>) -> impl IntoView {
    let jobs = RwSignal::new(initial);
    let latest = Latest::default();
    Effect::new(move |_| {
        let read = move || {
            latest.load(async { get_jobs().await.and_then(|a| a) }, move |answer| {
                jobs.set(answer)
            })
        };
        if let Ok(handle) = set_interval_with_handle(read, Duration::from_secs(3)) {
            on_cleanup(move || handle.clear());
        }
    });
    let rows = move || jobs.get().unwrap_or_default();
    view! {
        {move || jobs.get().err().map(|e| view! { <p class="error" role="alert">{e.message}</p> })}
        <div class="table-wrap" tabindex="0" role="region" aria-label="Jobs">
            <table class="jobs-table">
                <thead>
                    <tr>
                        <th scope="col">"Job"</th>
                        <th scope="col">"Kind"</th>
                        <th scope="col">"VM"</th>
                        <th scope="col">"State"</th>
                        <th scope="col">"Started (UTC)"</th>
                        <th scope="col" class="num">"Duration"</th>
                        <th scope="col">"What"</th>
                    </tr>
                </thead>
                <tbody>
                    <For each=rows key=keys::job let:job>
                        <tr data-job=job.id>
                            <td><a href=format!("/jobs/{}", job.id)>{format!("#{}", job.id)}</a></td>
                            <td>{job.kind.as_str()}</td>
                            <td>{job.vmid.map(|v| v.to_string()).unwrap_or_default()}</td>
                            <td><span class=format!("badge job-{}", job.state.as_str())>{job.state.as_str()}</span></td>
                            <td>{utc(job.created)}</td>
                            <td class="num">{job.finished.map(|f| duration(f - job.created)).unwrap_or_else(|| "…".to_string())}</td>
                            <td>{job.title.clone()}</td>
                        </tr>
                    </For>
                </tbody>
            </table>
        </div>
    }
}

/// `/jobs/:id`: one job's timeline, replayed, and followed while it runs.
#[component]
pub fn JobPage() -> impl IntoView {
    let params = use_params_map();
    let id = params
        .read_untracked()
        .get("id")
        .and_then(|v| v.parse::<u64>().ok());
    view! {
        <p><A href="/jobs">"← all jobs"</A></p>
        {match id {
            Some(id) => view! { <JobView id/> }.into_any(),
            None => view! { <p class="error" role="alert">"not a job id"</p> }.into_any(),
        }}
    }
}
