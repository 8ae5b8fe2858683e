//! Running commands: visible, timed, and failing loudly with what failed.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

/// A step that failed, with a sentence saying which and why.
#[derive(Debug)]
pub struct Failed(pub String);

pub fn step<T>(name: &str, f: impl FnOnce() -> Result<T, Failed>) -> Result<T, Failed> {
    println!("\n==> {name}");
    let started = Instant::now();
    let out = f().map_err(|Failed(why)| Failed(format!("{name}: {why}")))?;
    println!(
        "==> {name}: done in {:.1}s",
        started.elapsed().as_secs_f64()
    );
    Ok(out)
}

pub fn status(cmd: &mut Command) -> Result<(), Failed> {
    let shown = format!("{cmd:?}");
    let status = cmd
        .status()
        .map_err(|e| Failed(format!("cannot run {shown}: {e}")))?;
    if status.success() {
        Ok(())
    } else {
        Err(Failed(format!("{shown} exited with {status}")))
    }
}

/// Output of a command that is expected to succeed quickly (a probe).
pub fn output(cmd: &mut Command) -> Option<String> {
    let out = cmd.output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

pub fn cargo(root: &Path, args: &[&str]) -> Result<(), Failed> {
    cargo_env(root, args, &[])
}

/// `cargo <args>` with extra environment variables.
pub fn cargo_env(root: &Path, args: &[&str], env: &[(&str, &str)]) -> Result<(), Failed> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    status(
        Command::new(cargo)
            .args(args)
            .envs(env.iter().copied())
            .current_dir(root),
    )
}

/// Replaces this process with the program (so Ctrl-C reaches the server
/// directly and it shuts down cleanly).
pub fn exec(root: &Path, program: &Path) -> Result<(), Failed> {
    use std::os::unix::process::CommandExt;
    let err = Command::new(program).current_dir(root).exec();
    Err(Failed(format!("cannot run {}: {err}", program.display())))
}
