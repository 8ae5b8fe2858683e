//! What the client prints: for people, step lines, a progress bar and a
//! summary; with `--json`, one JSON object per line on stdout. Errors go
//! to stderr either way.

use indicatif::{ProgressBar, ProgressStyle};
use pvedeck_domain::format::age;
use pvedeck_domain::text::strip_controls as clean;
use pvedeck_domain::timeline::{self, progress_of};
use pvedeck_domain::types::{Job, JobEvent, JobState, StepEvent, StepStatus, VmList, VmOutcome};
use pvedeck_support::clock::now_ms;
use serde_json::{Value, json};

use super::Exit;
use super::failure::Failure;

pub struct Show {
    json: bool,
}

impl Show {
    pub fn new(json: bool) -> Show {
        Show { json }
    }

    fn line(&self, value: Value) {
        println!("{value}");
    }

    pub fn failure(&self, failure: &Failure) -> Exit {
        eprintln!("pvedeck-cli: {}", clean(&failure.to_string()));
        if self.json {
            let (status, message) = match failure {
                Failure::Refused { status, message } | Failure::Server { status, message } => {
                    (Some(*status), message.clone())
                }
                other => (None, other.to_string()),
            };
            self.line(json!({"error": {"status": status, "message": message}}));
        }
        Exit::from(failure)
    }

    pub fn done(&self, what: &str, answer: &str) -> Exit {
        if self.json {
            self.line(json!({"done": what, "answer": answer}));
        } else {
            println!("{what}: {}", clean(answer));
        }
        Exit::Done
    }

    pub fn vm_status(&self, vmid: u32, status: &str) -> Exit {
        if self.json {
            self.line(json!({"vmid": vmid, "status": status}));
        } else {
            println!("{}", clean(status));
        }
        Exit::Done
    }

    pub fn vm_list(&self, list: &Value) -> Exit {
        if self.json {
            self.line(list.clone());
            return Exit::Done;
        }
        let list: VmList = match serde_json::from_value(list.clone()) {
            Ok(list) => list,
            Err(e) => return self.failure(&Failure::Garbled(e.to_string())),
        };
        println!(
            "{:>6}  {:<24} {:<10} {:<9} {:<16} {:>4} {:>8}  OS",
            "VMID", "NAME", "NODE", "STATUS", "IP", "CPU", "RAM GiB"
        );
        for vm in &list.list {
            println!(
                "{:>6}  {:<24} {:<10} {:<9} {:<16} {:>4} {:>8.2}  {}",
                vm.vmid,
                clean(&vm.name),
                clean(&vm.node),
                clean(&vm.status),
                clean(&vm.ip),
                vm.cpu,
                vm.memory,
                clean(&vm.os),
            );
        }
        println!();
        println!(
            "{:<10} {:<8} {:>7} {:>9} {:>13}",
            "NODE", "STATUS", "CPU %", "RAM %", "VMS' vCPUs"
        );
        for node in &list.cluster {
            println!(
                "{:<10} {:<8} {:>7.1} {:>9.1} {:>13}",
                clean(&node.node),
                clean(&node.status),
                node.cpu_used,
                node.memory_used,
                node.vcpus,
            );
        }
        Exit::Done
    }

    pub fn job_list(&self, jobs: &Value) -> Exit {
        if self.json {
            self.line(jobs.clone());
            return Exit::Done;
        }
        let jobs: Vec<Job> = match serde_json::from_value(jobs.clone()) {
            Ok(jobs) => jobs,
            Err(e) => return self.failure(&Failure::Garbled(e.to_string())),
        };
        println!(
            "{:>5}  {:<9} {:<12} {:>6}  {:<12} TITLE",
            "ID", "KIND", "STATE", "VMID", "CREATED"
        );
        let now = now_ms();
        for job in &jobs {
            println!(
                "{:>5}  {:<9} {:<12} {:>6}  {:<12} {}",
                job.id,
                job.kind.as_str(),
                job.state.as_str(),
                job.vmid.map_or("-".to_string(), |v| v.to_string()),
                age(now - job.created),
                clean(&job.title),
            );
        }
        Exit::Done
    }

    /// Starts watching job `id` (on the server at `base`).
    pub fn job<'a>(&'a self, id: u64, base: &str) -> Watch<'a> {
        if !self.json {
            eprintln!("job {id} (Ctrl-C stops following; the job goes on)");
        }
        Watch {
            show: self,
            id,
            base: base.trim_end_matches('/').to_string(),
            last_seq: 0,
            step: None,
            bar: None,
            last_progress: None,
            seen: Vec::new(),
        }
    }
}

/// A job as it is being followed.
pub struct Watch<'a> {
    show: &'a Show,
    id: u64,
    base: String,
    last_seq: u64,
    step: Option<String>,
    bar: Option<ProgressBar>,
    /// The progress line the bar shows now, printed when it ends.
    last_progress: Option<String>,
    /// The events so far: the summary and the failure are read from them
    /// as the web UI's timeline reads them (`pvedeck_domain::timeline`).
    seen: Vec<JobEvent>,
}

/// `(45%)`, `(1.00%)` at the end of a progress line: the percentage, as
/// the web UI's timeline reads it, when it is one.
pub fn percent(message: &str) -> Option<f64> {
    progress_of(message).filter(|p| (0.0..=100.0).contains(p))
}

impl Watch<'_> {
    pub fn last_seq(&self) -> u64 {
        self.last_seq
    }

    pub fn event(&mut self, seq: u64, event: &StepEvent) {
        if seq <= self.last_seq {
            return;
        }
        self.last_seq = seq;
        // What a guest printed reaches this terminal: no escape sequence
        // of it does, whatever the server let through.
        let event = &StepEvent {
            step: clean(&event.step).into_owned(),
            message: clean(&event.message).into_owned(),
            ip: event.ip.as_deref().map(|ip| clean(ip).into_owned()),
            host_key: event.host_key.as_deref().map(|k| clean(k).into_owned()),
            ..event.clone()
        };
        self.seen.push(JobEvent {
            seq,
            at: 0,
            event: event.clone(),
        });
        if self.show.json {
            let mut value = serde_json::to_value(event).unwrap_or(Value::Null);
            if let Value::Object(fields) = &mut value {
                fields.insert("job".into(), json!(self.id));
                fields.insert("seq".into(), json!(seq));
            }
            self.show.line(value);
            return;
        }
        if self.step.as_deref() != Some(event.step.as_str()) {
            self.end_bar();
            println!("{}", event.step);
            self.step = Some(event.step.clone());
        }
        let progress = (event.status == StepStatus::Processing)
            .then(|| percent(&event.message))
            .flatten();
        match progress {
            Some(pct) => self.progress(pct, &event.message),
            None => {
                self.end_bar();
                println!("  {}", event.message.trim_start());
            }
        }
    }

    fn progress(&mut self, pct: f64, message: &str) {
        let bar = self.bar.get_or_insert_with(|| {
            let style = ProgressStyle::with_template("  {bar:32.cyan/blue} {pos:>3}% {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar());
            ProgressBar::new(100).with_style(style)
        });
        if bar.is_hidden() {
            // Not a terminal: the lines themselves, as the server throttles them.
            println!("  {}", message.trim_start());
        } else {
            bar.set_position(pct as u64);
            let text = message.trim();
            let shown = text.rfind(" (").map_or(text, |cut| &text[..cut]);
            bar.set_message(shown.to_string());
            self.last_progress = Some(message.trim_start().to_string());
        }
    }

    /// The bar gives way to its last line.
    fn end_bar(&mut self) {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
        if let Some(line) = self.last_progress.take() {
            println!("  {line}");
        }
    }

    fn follow_hint(&self) -> String {
        format!("pvedeck-cli --url {} jobs follow {}", self.base, self.id)
    }

    /// Ctrl-C: the job is not ours to stop.
    pub fn interrupted(mut self) -> Exit {
        self.end_bar();
        let hint = self.follow_hint();
        if self.show.json {
            self.show
                .line(json!({"job": self.id, "following": false, "follow": hint}));
        }
        eprintln!(
            "\nstopped following job {}: it goes on on the server. Follow it again with:\n  {hint}",
            self.id
        );
        Exit::Interrupted
    }

    /// The job's end as the server recorded it.
    pub fn ended(mut self, job: &Job) -> Exit {
        self.end_bar();
        let ok = job.state == JobState::Succeeded;
        let summary = timeline::summary(&self.seen);
        let (vmid, ip, user, host_key) = match &summary {
            Some(s) => (
                Some(s.vmid),
                Some(&s.ip),
                s.user.as_ref(),
                s.host_key.as_ref(),
            ),
            None => (job.vmid, None, None, None),
        };
        let ssh = match (user, ip) {
            (Some(user), Some(ip)) => Some(format!("ssh {user}@{ip}")),
            _ => None,
        };
        let failure = timeline::failure(&self.seen);
        let failed_message = failure.as_ref().map(|(_, m)| m.clone());
        if self.show.json {
            self.show.line(json!({
                "job": self.id,
                "kind": job.kind.as_str(),
                "state": job.state.as_str(),
                "vmid": vmid,
                "ip": ip,
                "user": user,
                "ssh": ssh,
                "host_key": host_key,
                "failed_step": job.failed_step,
                "error": failed_message,
                "outcome": job.outcome.map(outcome_word),
            }));
        } else if ok {
            println!();
            println!(
                "job {} {}: {}",
                self.id,
                job.state.as_str(),
                clean(&job.title)
            );
            if let Some(vmid) = vmid {
                println!("  VMID      {vmid}");
            }
            if let Some(ip) = ip {
                println!("  IP        {ip}");
            }
            if let Some(ssh) = &ssh {
                println!("  ssh       {ssh}");
            }
            if let Some(key) = host_key {
                println!("  host key  {key}");
            }
        }
        if ok {
            return Exit::Done;
        }
        let step = job
            .failed_step
            .clone()
            .or_else(|| failure.map(|(s, _)| s))
            .unwrap_or_else(|| "-".to_string());
        eprintln!(
            "\njob {} {} at step '{}': {}",
            self.id,
            job.state.as_str(),
            clean(&step),
            clean(failed_message.as_deref().unwrap_or("(no message)"))
        );
        if let Some(outcome) = job.outcome {
            eprintln!("  the VM: {}", outcome_word(outcome));
        }
        Exit::JobFailed
    }
}

fn outcome_word(outcome: VmOutcome) -> &'static str {
    match outcome {
        VmOutcome::None => "none was created",
        VmOutcome::Destroyed => "destroyed",
        VmOutcome::Kept => "kept for debugging",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_lines_give_their_percentage() {
        assert_eq!(
            percent("[*] downloaded 1.0 MiB of 2.0 MiB (50%)"),
            Some(50.0)
        );
        assert_eq!(
            percent("  transferred 20.5 MiB of 2.0 GiB (1.00%)"),
            Some(1.0)
        );
        assert_eq!(percent("[+] auto-assigned VMID: 106 (0.01s)"), None);
        assert_eq!(percent("(250%)"), None);
    }
}
