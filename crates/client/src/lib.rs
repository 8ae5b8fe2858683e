//! `pvedeck-cli`: the `/api` routes for people at a terminal and for
//! scripts. Installs and other jobs print their steps as they happen (a
//! progress bar for downloads and imports), end with a summary, and exit
//! with a code a script can act on:
//!
//! - 0: done;
//! - 1: the job failed (its failed step's message is printed);
//! - 2: the server refused the request (its refusal is printed), or the
//!   command line was wrong;
//! - 3: the server could not be reached or answered with an error of its own;
//! - 130: Ctrl-C: the job goes on; how to follow it again is printed.

mod args;
mod connection;
mod failure;
mod show;
mod sse;

use std::process::ExitCode;

use clap::Parser;

pub use args::Cli;
use args::{Command, JobsCommand, VmCommand};
use connection::Connection;
use failure::Failure;
use show::Show;

/// What a run ends with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    Done,
    JobFailed,
    Refused,
    Unreachable,
    Interrupted,
}

impl Exit {
    pub fn code(self) -> u8 {
        match self {
            Exit::Done => 0,
            Exit::JobFailed => 1,
            Exit::Refused => 2,
            Exit::Unreachable => 3,
            Exit::Interrupted => 130,
        }
    }
}

/// The binary's `main`.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cannot start the async runtime: {e}");
            return ExitCode::from(Exit::Unreachable.code());
        }
    };
    ExitCode::from(runtime.block_on(run(cli)).code())
}

/// Runs one command against the server.
pub async fn run(cli: Cli) -> Exit {
    let show = Show::new(cli.json);
    let connection = match Connection::new(&cli.url, cli.token.as_deref()) {
        Ok(c) => c,
        Err(e) => return show.failure(&e),
    };
    let outcome = match cli.command {
        Command::Vm(VmCommand::Install(install)) => {
            let body = install.body();
            match connection.post_json("/api/vm/install", &body).await {
                Ok(res) => connection.follow_response(res, &show).await,
                Err(e) => Err(e),
            }
        }
        Command::Vm(VmCommand::List(filter)) => connection
            .get_json(&filter.path())
            .await
            .map(|list| show.vm_list(&list)),
        Command::Vm(VmCommand::Status { vmid }) => connection
            .get_text(&format!("/api/vm/{vmid}/status"))
            .await
            .map(|status| show.vm_status(vmid, &status)),
        Command::Vm(VmCommand::Power(power)) => {
            match connection.post_empty(&power.path()).await {
                // Start and reboot are jobs (their steps stream); stop,
                // shutdown and destroy answer when done.
                Ok(res) if connection::is_stream(&res) => {
                    connection.follow_response(res, &show).await
                }
                Ok(res) => connection
                    .text_of(res)
                    .await
                    .map(|text| show.done(&power.describe(), &text)),
                Err(e) => Err(e),
            }
        }
        Command::Jobs(jobs) => match jobs.command {
            Some(JobsCommand::Follow { id }) => connection.follow_job(id, &show).await,
            None => connection
                .get_json(&format!("/api/jobs?limit={}", jobs.limit))
                .await
                .map(|list| show.job_list(&list)),
        },
    };
    match outcome {
        Ok(exit) => exit,
        Err(e) => show.failure(&e),
    }
}

impl From<&Failure> for Exit {
    fn from(failure: &Failure) -> Exit {
        match failure {
            Failure::Refused { .. } | Failure::Usage(_) => Exit::Refused,
            Failure::Server { .. } | Failure::Unreachable(_) | Failure::Garbled(_) => {
                Exit::Unreachable
            }
        }
    }
}
