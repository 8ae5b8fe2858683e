//! A job's events as the timeline shows them: stages, their steps, each
//! step's state, messages, elapsed time, progress and folded command output.

use crate::types::{JobEvent, StepStatus};

#[derive(Debug, Clone, PartialEq)]
pub struct StepView {
    pub name: String,
    pub status: StepStatus,
    /// `[*]`/`[+]`/`[-]` messages, in order.
    pub messages: Vec<String>,
    /// Lines a command printed (relayed with two spaces), without the indent.
    pub output: Vec<String>,
    /// `1.23s`, from the step's success message.
    pub elapsed: Option<String>,
    /// The latest percentage the step reported.
    pub progress: Option<f64>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct StageView {
    pub name: String,
    pub steps: Vec<StepView>,
}

/// `… (1.23s)` → `1.23s`.
fn elapsed_of(message: &str) -> Option<String> {
    let inner = message.strip_suffix(')')?.rsplit_once(" (")?.1;
    let number = inner.strip_suffix('s')?;
    decimal(number).map(|_| inner.to_string())
}

/// `… (30%)`, `… (45.00%)` → the percentage.
pub fn progress_of(message: &str) -> Option<f64> {
    let inner = message.strip_suffix("%)")?.rsplit_once('(')?.1;
    decimal(inner)
}

/// `45`, `45.5`: digits with at most one point. Not `str::parse::<f64>`,
/// whose general parser would add kilobytes to the browser bundle.
fn decimal(text: &str) -> Option<f64> {
    let (whole, frac) = text.split_once('.').unwrap_or((text, ""));
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty() || !digits(whole) || !digits(frac) || whole.len() + frac.len() > 15 {
        return None;
    }
    let whole: u64 = whole.parse().ok()?;
    let (mut value, mut scale) = (0u64, 1u64);
    for b in frac.bytes() {
        value = value * 10 + u64::from(b - b'0');
        scale *= 10;
    }
    Some(whole as f64 + value as f64 / scale as f64)
}

/// Groups events by stage (`<stage> > <step>`; lifecycle jobs' bare step
/// names go under `default_stage`), steps in order of first appearance.
/// Once the job has `ended`, no step is left running, whatever its last
/// event said: a step still open then is done, or failed when its last
/// word was a `[-]` one.
pub fn group(events: &[JobEvent], default_stage: &str, ended: bool) -> Vec<StageView> {
    let mut stages: Vec<StageView> = Vec::new();
    for e in events {
        let (stage, step) = match e.event.step.split_once(" > ") {
            Some((stage, step)) => (stage.to_string(), step.to_string()),
            None => (default_stage.to_string(), e.event.step.clone()),
        };
        if stages.last().is_none_or(|s| s.name != stage) {
            stages.push(StageView {
                name: stage,
                steps: Vec::new(),
            });
        }
        let Some(current) = stages.last_mut() else {
            continue;
        };
        if current.steps.last().is_none_or(|s| s.name != step) {
            current.steps.push(StepView {
                name: step,
                status: StepStatus::Processing,
                messages: Vec::new(),
                output: Vec::new(),
                elapsed: None,
                progress: None,
            });
        }
        let Some(view) = current.steps.last_mut() else {
            continue;
        };
        let message = &e.event.message;
        if let Some(line) = message.strip_prefix("  ") {
            view.output.push(line.to_string());
        } else {
            // Progress reports replace each other: the step shows the latest.
            let replaces = progress_of(message).is_some()
                && view
                    .messages
                    .last()
                    .is_some_and(|m| progress_of(m).is_some());
            if replaces {
                view.messages.pop();
            }
            view.messages.push(message.clone());
            if e.event.status == StepStatus::Success
                && let Some(elapsed) = elapsed_of(message)
            {
                view.elapsed = Some(elapsed);
            }
        }
        if let Some(p) = progress_of(message) {
            view.progress = Some(p);
        }
        view.status = match (view.status, e.event.status) {
            (StepStatus::Error, _) | (_, StepStatus::Error) => StepStatus::Error,
            (_, status) => status,
        };
    }
    // A step that other steps followed is done, whatever its last word was.
    // The last one is closed by the job's end: a cleanup step may only say
    // what it did, and the job's `close` follows.
    let total: usize = stages.iter().map(|s| s.steps.len()).sum();
    let mut seen = 0;
    for stage in &mut stages {
        for step in &mut stage.steps {
            seen += 1;
            if step.status != StepStatus::Processing {
                continue;
            }
            if seen < total {
                step.status = StepStatus::Success;
            } else if ended {
                step.status = closed(step);
            }
        }
    }
    stages
}

/// What an open step was when no more events came: failed if its last
/// message says so (`[-] could not destroy VM 106: …; it stays`), else done.
fn closed(step: &StepView) -> StepStatus {
    if step.messages.last().is_some_and(|m| m.starts_with("[-]")) {
        StepStatus::Error
    } else {
        StepStatus::Success
    }
}

/// What a finished install says in its last step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    pub vmid: u32,
    pub ip: String,
    pub user: Option<String>,
    /// The host key fingerprint the guest agent reported (clone path).
    pub host_key: Option<String>,
}

pub fn summary(events: &[JobEvent]) -> Option<Summary> {
    let last = events.iter().rev().find(|e| e.event.vm_id.is_some())?;
    let user = events
        .iter()
        .filter_map(|e| e.event.message.strip_prefix("[*] User: "))
        .next_back()
        .map(str::to_string);
    Some(Summary {
        vmid: last.event.vm_id?,
        ip: last.event.ip.clone()?,
        user,
        host_key: last.event.host_key.clone(),
    })
}

/// The failed step and its message (the job's first error).
pub fn failure(events: &[JobEvent]) -> Option<(String, String)> {
    events
        .iter()
        .find(|e| e.event.status == StepStatus::Error)
        .map(|e| (e.event.step.clone(), e.event.message.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::StepEvent;

    fn ev(seq: u64, step: &str, status: StepStatus, message: &str) -> JobEvent {
        JobEvent {
            seq,
            at: 0,
            event: StepEvent {
                step: step.into(),
                status,
                message: message.into(),
                vm_id: None,
                ip: None,
                host_key: None,
            },
        }
    }

    #[test]
    fn percentages_and_seconds_read_as_plain_decimals() {
        assert_eq!(decimal("45"), Some(45.0));
        assert_eq!(decimal("45.50"), Some(45.5));
        assert_eq!(decimal("0.25"), Some(0.25));
        for bad in ["", ".5", "4.5.1", "-3", "1e3", "12a", "nan"] {
            assert_eq!(decimal(bad), None, "{bad}");
        }
    }

    #[test]
    fn stages_steps_output_elapsed_and_progress() {
        use StepStatus::*;
        let events = [
            ev(
                1,
                "preparation > checking VMID",
                Processing,
                "[*] start VM installation",
            ),
            ev(
                2,
                "preparation > checking VMID",
                Success,
                "[+] auto-assigned VMID: 106 (0.02s)",
            ),
            ev(
                3,
                "OS preparation > downloading OS image",
                Processing,
                "[*] downloaded 40.0 MiB of 400.0 MiB (10%)",
            ),
            ev(
                3,
                "OS preparation > downloading OS image",
                Processing,
                "[*] downloaded 80.0 MiB of 400.0 MiB (20%)",
            ),
            ev(
                4,
                "SSH preparation > checking SSH key",
                Processing,
                "[*] no SSH key in /x",
            ),
            ev(
                5,
                "SSH preparation > creating SSH key",
                Success,
                "[+] created (0.05s)",
            ),
            ev(
                6,
                "VM creation > importing disk image",
                Processing,
                "  transferred 1.0 GiB of 2.0 GiB (50.00%)",
            ),
            ev(
                7,
                "VM creation > importing disk image",
                Error,
                "[-] failed to import disk image: full",
            ),
        ];
        let stages = group(&events, "install", false);
        let names: Vec<&str> = stages.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "preparation",
                "OS preparation",
                "SSH preparation",
                "VM creation"
            ]
        );
        let vmid = &stages[0].steps[0];
        assert_eq!(vmid.status, Success);
        assert_eq!(vmid.elapsed.as_deref(), Some("0.02s"));
        assert_eq!(stages[1].steps[0].progress, Some(20.0));
        assert_eq!(stages[1].steps[0].messages.len(), 1);
        // Followed by another step: done.
        assert_eq!(stages[2].steps[0].status, Success);
        let import = &stages[3].steps[0];
        assert_eq!(import.status, Error);
        assert_eq!(import.output, ["transferred 1.0 GiB of 2.0 GiB (50.00%)"]);
        assert_eq!(import.progress, Some(50.0));
        assert_eq!(
            failure(&events),
            Some((
                "VM creation > importing disk image".into(),
                "[-] failed to import disk image: full".into()
            ))
        );
    }

    #[test]
    fn a_finished_job_shows_no_running_step() {
        use StepStatus::*;
        let failed = [
            ev(
                1,
                "VM initialization > waiting for ready",
                Processing,
                "[*] VM started",
            ),
            ev(
                2,
                "VM initialization > waiting for ready",
                Error,
                "[-] VM did not answer",
            ),
            ev(
                3,
                "cleanup > keeping VM",
                Processing,
                "[*] VM 106 is kept for debugging",
            ),
        ];
        let status = |stages: &[StageView]| -> Vec<(String, StepStatus)> {
            stages
                .iter()
                .flat_map(|s| s.steps.iter().map(|t| (t.name.clone(), t.status)))
                .collect()
        };
        // While the job runs, its last step may still be at work.
        let live = group(&failed, "install", false);
        assert_eq!(status(&live)[1], ("keeping VM".into(), Processing));
        // Ended: the cleanup that only said what it did is done; the failed
        // step stays failed.
        let ended = group(&failed, "install", true);
        assert_eq!(
            status(&ended),
            [
                ("waiting for ready".into(), Error),
                ("keeping VM".into(), Success)
            ]
        );
        // A last word of failure closes the step as failed.
        let undestroyed = [
            ev(1, "VM creation > importing disk image", Error, "[-] full"),
            ev(
                2,
                "cleanup > destroying VM",
                Processing,
                "[*] stopping and destroying VM 106",
            ),
            ev(
                3,
                "cleanup > destroying VM",
                Processing,
                "[-] could not destroy VM 106: locked; it stays",
            ),
        ];
        assert_eq!(status(&group(&undestroyed, "install", true))[1].1, Error);
        // Nothing else changes at the end: a step done stays done.
        let done = [ev(1, "starting VM", Success, "[+] VM started (0.10s)")];
        assert_eq!(status(&group(&done, "start", true))[0].1, Success);
    }

    #[test]
    fn lifecycle_steps_go_under_the_job_kind() {
        let stages = group(
            &[ev(
                1,
                "starting VM",
                StepStatus::Processing,
                "[*] starting VM",
            )],
            "start",
            false,
        );
        assert_eq!(stages[0].name, "start");
        assert_eq!(stages[0].steps[0].name, "starting VM");
    }

    #[test]
    fn the_summary_comes_from_the_final_events() {
        let mut last = ev(
            9,
            "VM initialization > finalizing",
            StepStatus::Success,
            "[*] User: deploy",
        );
        last.event.vm_id = Some(106);
        last.event.ip = Some("192.168.0.106".into());
        last.event.host_key = Some("SHA256:abc".into());
        assert_eq!(
            summary(&[last]),
            Some(Summary {
                vmid: 106,
                ip: "192.168.0.106".into(),
                user: Some("deploy".into()),
                host_key: Some("SHA256:abc".into()),
            })
        );
        assert_eq!(summary(&[]), None);
    }
}
