use leptos::either::Either;
use leptos::prelude::*;
use pvedeck_domain::timeline::{StepView, failure, group, summary};
use pvedeck_domain::types::{JobDetail, JobEvent, JobKind, JobState, StepStatus, VmOutcome};

use crate::api::get_job;
use crate::error::UiError;
use crate::keys;
use crate::refresh::Latest;

fn status_word(status: StepStatus) -> &'static str {
    match status {
        StepStatus::Processing => "running",
        StepStatus::Success => "done",
        StepStatus::Error => "failed",
    }
}

fn status_icon(status: StepStatus) -> &'static str {
    match status {
        StepStatus::Processing => "◌",
        StepStatus::Success => "✓",
        StepStatus::Error => "✕",
    }
}

#[component]
fn Step(step: StepView) -> impl IntoView {
    let status = step.status;
    let lines = step.output.len();
    view! {
        <li class=format!("step step-{}", status_word(status)) data-step=step.name.clone()>
            <div class="step-head">
                <span class="step-icon" aria-hidden="true">{status_icon(status)}</span>
                <span class="step-name">{step.name.clone()}</span>
                <span class="step-status">{status_word(status)}</span>
                {step.elapsed.clone().map(|e| view! { <span class="step-elapsed">{e}</span> })}
            </div>
            {step.progress.map(|p| view! {
                <progress class="step-progress" max="100" value=p aria-label=format!("{} progress", step.name)>
                    {format!("{}%", p.round() as i64)}
                </progress>
            })}
            <ul class="step-messages">
                {step.messages.iter().map(|m| view! { <li>{m.clone()}</li> }).collect_view()}
            </ul>
            {(lines > 0).then(|| view! {
                <details class="step-output">
                    <summary>{format!("output ({lines} lines)")}</summary>
                    <pre tabindex="0" aria-label=format!("output of {}", step.name)>{step.output.join("\n")}</pre>
                </details>
            })}
        </li>
    }
}

/// A job's timeline: the events so far, then (in the browser) the live ones
/// until the job ends, when `on_close` runs.
#[component]
pub fn Timeline(
    id: u64,
    kind: JobKind,
    initial: Vec<JobEvent>,
    running: bool,
    #[prop(into)] on_close: Callback<()>,
) -> impl IntoView {
    let events = RwSignal::new(initial);
    let live = RwSignal::new(running);

    #[cfg(feature = "hydrate")]
    {
        Effect::new(move |started: Option<bool>| {
            if started.is_some() || !running {
                return true;
            }
            let after = events.with_untracked(|e| e.last().map_or(0, |e| e.seq));
            let followed = crate::live::follow(
                id,
                after,
                move |event| {
                    events.update(|list| {
                        if list.last().is_none_or(|last| event.seq > last.seq) {
                            list.push(event);
                        }
                    })
                },
                move || {
                    live.set(false);
                    on_close.run(());
                },
            );
            match followed {
                Ok(follow) => {
                    let follow = send_wrapper::SendWrapper::new(follow);
                    on_cleanup(move || drop(follow));
                }
                Err(e) => leptos::logging::warn!("cannot follow job {id}: {e}"),
            }
            true
        });
    }
    #[cfg(not(feature = "hydrate"))]
    let _ = (id, on_close);

    // Once the job has ended (read so, or its stream closed) nothing runs.
    let stages = move || events.with(|e| group(e, kind.as_str(), !live.get()));
    view! {
        <section class="timeline" aria-label="timeline" data-live=move || live.get().to_string()>
            <For each=stages key=keys::stage let:stage>
                <div class="stage">
                    <h3>{stage.name.clone()}</h3>
                    <ol class="steps">
                        {stage.steps.into_iter().map(|step| view! { <Step step/> }).collect_view()}
                    </ol>
                </div>
            </For>
            <p class="live-note" role="status">
                {move || if live.get() { "following live…" } else { "" }}
            </p>
        </section>
    }
}

fn outcome_text(outcome: Option<VmOutcome>, vmid: Option<u32>) -> String {
    let vm = vmid.map_or_else(|| "The VM".to_string(), |id| format!("VM {id}"));
    match outcome {
        Some(VmOutcome::Destroyed) => {
            format!("{vm} was destroyed (qm destroy --purge): no half-made VM is left.")
        }
        Some(VmOutcome::Kept) => {
            format!("{vm} was kept for debugging: it is still on the cluster.")
        }
        _ => "No VM was created.".to_string(),
    }
}

/// The end of a job: what was made, or what failed and what became of the VM.
#[component]
pub fn JobResult(detail: JobDetail) -> impl IntoView {
    let job = detail.job;
    match job.state {
        JobState::Running => Either::Left(().into_view()),
        JobState::Succeeded => {
            let done = summary(&detail.events);
            Either::Right(Either::Left(view! {
                <div class="result result-ok" role="status">
                    <h3>"✓ " {format!("{} succeeded", job.kind.as_str())}</h3>
                    {done.map(|s| {
                        let login = s.user.clone().map(|u| format!("ssh {u}@{}", s.ip));
                        view! {
                            <dl class="facts">
                                <dt>"VMID"</dt><dd class="vmid">{s.vmid}</dd>
                                <dt>"IP"</dt><dd class="ip">{s.ip.clone()}</dd>
                                {s.user.clone().map(|u| view! { <dt>"User"</dt><dd>{u}</dd> })}
                                {s.host_key.clone().map(|k| view! { <dt>"Host key"</dt><dd class="host-key"><code>{k}</code></dd> })}
                            </dl>
                            {login.map(|cmd| view! { <CopyLine text=cmd/> })}
                            <p><a href=format!("/vm/{}", s.vmid)>"Open the VM's page"</a></p>
                        }
                    })}
                </div>
            }))
        }
        JobState::Failed | JobState::Interrupted => {
            let (step, message) = failure(&detail.events).unwrap_or_else(|| {
                (
                    job.failed_step.clone().unwrap_or_default(),
                    String::from("[-] the job failed"),
                )
            });
            let outcome = outcome_text(job.outcome, job.vmid);
            // Interrupted: pvedeck stopped under the job, which did not fail.
            let (ended, at) = match job.state {
                JobState::Interrupted => ("interrupted", "Stopped at: "),
                _ => ("failed", "Failed step: "),
            };
            Either::Right(Either::Right(view! {
                <div class="result result-failed" role="alert">
                    <h3>"✕ " {format!("{} {ended}", job.kind.as_str())}</h3>
                    <p class="failed-step">{at} <strong>{step}</strong></p>
                    <p class="failed-message">{message}</p>
                    <p class="outcome">{outcome}</p>
                </div>
            }))
        }
    }
}

/// A command to copy, with a button that copies it.
#[component]
pub fn CopyLine(text: String) -> impl IntoView {
    let (copied, set_copied) = signal(false);
    let value = text.clone();
    let copy = move |_| {
        #[cfg(feature = "hydrate")]
        {
            let clipboard = window().navigator().clipboard();
            let _ = clipboard.write_text(&value);
        }
        #[cfg(not(feature = "hydrate"))]
        let _ = &value;
        set_copied.set(true);
    };
    view! {
        <div class="copy-line">
            <code>{text}</code>
            <button type="button" on:click=copy>
                {move || if copied.get() { "Copied" } else { "Copy" }}
            </button>
        </div>
    }
}

/// A job, read on the server: its timeline and, once it has ended, its
/// result; the `LiveJob` island follows it while it runs.
#[component]
pub fn JobView(id: u64) -> impl IntoView {
    view! {
        <Suspense fallback=|| view! { <p class="loading">"Reading the job…"</p> }>
            {Suspend::new(async move {
                let initial = get_job(id).await.and_then(|a| a);
                view! { <LiveJob id initial/> }
            })}
        </Suspense>
    }
}

#[island(lazy)]
fn LiveJob(id: u64, initial: Result<JobDetail, UiError>) -> impl IntoView {
    view! { <JobPanel id initial=Some(initial)/> }
}

/// A job: its timeline (live while it runs) and, once it has ended, its
/// result. Without `initial` (a job an island started) it reads the job
/// first.
#[component]
pub fn JobPanel(
    id: u64,
    initial: Option<Result<JobDetail, UiError>>,
    /// Runs when a job followed live ends.
    #[prop(optional)]
    on_done: Option<Callback<()>>,
) -> impl IntoView {
    let unread = initial.is_none();
    let detail = RwSignal::new(initial);
    let latest = Latest::default();
    // Read again when the live stream says the job ended: the result needs
    // the job's final record.
    let read = move || {
        latest.load(
            async move { get_job(id).await.and_then(|a| a) },
            move |answer| detail.set(Some(answer)),
        );
    };
    if unread {
        read();
    }
    let on_close = Callback::new(move |()| {
        read();
        if let Some(done) = on_done {
            done.run(());
        }
    });
    move || {
        detail.get().map(|answer| match answer {
            Ok(d) => {
                let running = d.job.state == JobState::Running;
                let state = d.job.state.as_str();
                let (job_id, kind, title) = (d.job.id, d.job.kind, d.job.title.clone());
                let initial = d.events.clone();
                Either::Left(view! {
                    <div class="job" data-job=job_id data-state=state>
                        <header class="job-head">
                            <h2>{format!("Job #{job_id} — {title}")}</h2>
                        </header>
                        <Timeline id=job_id kind initial running on_close/>
                        <JobResult detail=d/>
                    </div>
                })
            }
            Err(e) => Either::Right(view! { <p class="error" role="alert">{e.message}</p> }),
        })
    }
}
