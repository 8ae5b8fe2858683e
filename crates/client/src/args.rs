//! The command line, as clap reads it.

use clap::{Args, Parser, Subcommand, ValueEnum};
use serde_json::{Map, Value, json};

#[derive(Debug, Parser)]
#[command(
    name = "pvedeck-cli",
    version,
    about = "Installs and runs VMs through a pvedeck server",
    after_help = "Exit codes: 0 done, 1 the job failed, 2 refused (by the server or this \
                  command line), 3 server unreachable or in error, 130 interrupted (the job \
                  goes on)."
)]
pub struct Cli {
    /// The pvedeck server.
    #[arg(long, env = "PVEDECK_URL", default_value = "http://127.0.0.1:8080")]
    pub url: String,
    /// An API token (one of the server's API_TOKENS), for changes.
    #[arg(long, env = "PVEDECK_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// One JSON object per line on stdout, for scripts.
    #[arg(long, global = true)]
    pub json: bool,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// VMs: install, list, status, power.
    #[command(subcommand)]
    Vm(VmCommand),
    /// The job history (newest first), or `follow <id>`.
    Jobs(Jobs),
}

#[derive(Debug, Args)]
pub struct Jobs {
    /// At most this many.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=10000))]
    pub limit: u32,
    #[command(subcommand)]
    pub command: Option<JobsCommand>,
}

#[derive(Debug, Subcommand)]
pub enum JobsCommand {
    /// Follows a job's steps to its end (from its first event).
    Follow { id: u64 },
}

#[derive(Debug, Subcommand)]
pub enum VmCommand {
    /// Creates a VM and follows its steps to a ready VM.
    Install(Box<Install>),
    /// Every VM of the cluster.
    List(ListFilter),
    /// `running` or `stopped`.
    Status { vmid: u32 },
    #[command(flatten)]
    Power(Power),
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Method {
    /// Import the cloud image into a new VM.
    Import,
    /// Clone the OS's golden template.
    Clone,
}

#[derive(Debug, Args)]
pub struct Install {
    /// ubuntu, debian, rockylinux…
    #[arg(long)]
    pub os: String,
    /// 12, 24.04, 9…
    #[arg(long)]
    pub version: String,
    /// Host name label: the VM is named `<name>-<vmid>`.
    #[arg(long)]
    pub name: Option<String>,
    /// A VMID of the assignable range (default: the first free one).
    #[arg(long)]
    pub id: Option<u32>,
    /// The node the VM moves to once configured.
    #[arg(long)]
    pub node: Option<String>,
    /// vCPUs.
    #[arg(long)]
    pub cpu: Option<u32>,
    /// RAM, MB.
    #[arg(long)]
    pub ram: Option<u32>,
    /// Disk, `<n>G`.
    #[arg(long)]
    pub disk: Option<String>,
    #[arg(long)]
    pub user: Option<String>,
    /// Password of the user (else none: the user logs in with keys only).
    #[arg(long, env = "PVEDECK_VM_PASSWORD", hide_env_values = true)]
    pub passwd: Option<String>,
    /// An SSH public key for the user.
    #[arg(long)]
    pub pubkey: Option<String>,
    /// (default: the server's INSTALL_METHOD)
    #[arg(long, value_enum)]
    pub method: Option<Method>,
}

impl Install {
    /// The `/api/vm/install` body: only what was given, so the server's
    /// defaults apply to the rest.
    pub fn body(&self) -> Value {
        let mut body = Map::new();
        body.insert("os".into(), json!(self.os));
        body.insert("version".into(), json!(self.version));
        let mut put = |key: &str, value: Option<Value>| {
            if let Some(v) = value {
                body.insert(key.into(), v);
            }
        };
        put("name", self.name.as_ref().map(|v| json!(v)));
        put("id", self.id.map(|v| json!(v)));
        put("node", self.node.as_ref().map(|v| json!(v)));
        put("cpu", self.cpu.map(|v| json!(v)));
        put("ram", self.ram.map(|v| json!(v)));
        put("disk", self.disk.as_ref().map(|v| json!(v)));
        put("user", self.user.as_ref().map(|v| json!(v)));
        put("passwd", self.passwd.as_ref().map(|v| json!(v)));
        put("pubkey", self.pubkey.as_ref().map(|v| json!(v)));
        put(
            "method",
            self.method.map(|m| {
                json!(match m {
                    Method::Import => "import",
                    Method::Clone => "clone",
                })
            }),
        );
        Value::Object(body)
    }
}

#[derive(Debug, Args)]
pub struct ListFilter {
    /// Only running VMs.
    #[arg(long, conflicts_with = "stopped")]
    pub running: bool,
    /// Only stopped VMs.
    #[arg(long)]
    pub stopped: bool,
}

impl ListFilter {
    pub fn path(&self) -> String {
        match (self.running, self.stopped) {
            (true, _) => "/api/vm/list?disable=0".to_string(),
            (_, true) => "/api/vm/list?disable=1".to_string(),
            _ => "/api/vm/list".to_string(),
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum Power {
    /// Starts a VM (a job: its steps stream).
    Start { vmid: u32 },
    /// Stops a VM at once.
    Stop { vmid: u32 },
    /// Asks the guest to shut down.
    Shutdown { vmid: u32 },
    /// Reboots a VM (a job).
    Reboot { vmid: u32 },
    /// Destroys a VM.
    Destroy { vmid: u32 },
}

impl Power {
    fn parts(&self) -> (&'static str, u32) {
        match *self {
            Power::Start { vmid } => ("start", vmid),
            Power::Stop { vmid } => ("stop", vmid),
            Power::Shutdown { vmid } => ("shutdown", vmid),
            Power::Reboot { vmid } => ("reboot", vmid),
            Power::Destroy { vmid } => ("destroy", vmid),
        }
    }

    pub fn path(&self) -> String {
        let (verb, vmid) = self.parts();
        format!("/api/vm/{vmid}/{verb}")
    }

    pub fn describe(&self) -> String {
        let (verb, vmid) = self.parts();
        format!("{verb} VM {vmid}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_install_sends_only_what_was_given() {
        let cli = Cli::try_parse_from([
            "pvedeck-cli",
            "vm",
            "install",
            "--os",
            "debian",
            "--version",
            "12",
            "--name",
            "web",
            "--method",
            "clone",
        ])
        .unwrap();
        let Command::Vm(VmCommand::Install(install)) = cli.command else {
            panic!("not an install: {cli:?}");
        };
        assert_eq!(
            install.body(),
            json!({"os": "debian", "version": "12", "name": "web", "method": "clone"})
        );
    }

    #[test]
    fn power_verbs_are_routes() {
        let cli = Cli::try_parse_from(["pvedeck-cli", "vm", "reboot", "106"]).unwrap();
        let Command::Vm(VmCommand::Power(power)) = cli.command else {
            panic!("not a power verb");
        };
        assert_eq!(power.path(), "/api/vm/106/reboot");
    }

    #[test]
    fn a_wrong_command_line_is_refused() {
        assert!(Cli::try_parse_from(["pvedeck-cli", "vm", "install", "--os", "debian"]).is_err());
        assert!(Cli::try_parse_from(["pvedeck-cli", "vm", "start", "abc"]).is_err());
        assert!(
            Cli::try_parse_from(["pvedeck-cli", "vm", "list", "--running", "--stopped"]).is_err()
        );
    }
}
