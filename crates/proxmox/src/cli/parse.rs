//! Parsers for what `pvesh`, `pvesm` and `qm` print (formats in
//! `docs/backends.md#output-the-cli-backend-reads`). Output that does not parse is an error
//! naming the command and the offending line, never a panic.

use std::collections::BTreeMap;

use serde::de::DeserializeOwned;

use crate::{AgentExec, PveError, StorageStatus};

fn bad(command: &str, detail: String) -> PveError {
    PveError::Parse {
        command: command.to_string(),
        detail,
    }
}

/// `pvesh … --output-format json`: one line of JSON.
pub fn json<T: DeserializeOwned>(command: &str, text: &str) -> Result<T, PveError> {
    let line = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .ok_or_else(|| bad(command, "no output".to_string()))?;
    serde_json::from_str(line).map_err(|e| {
        let shown: String = line.chars().take(200).collect();
        bad(command, format!("{e} in line '{shown}'"))
    })
}

/// `qm guest exec`: the agent's report as pretty JSON (several lines).
pub fn agent_exec(command: &str, text: &str) -> Result<AgentExec, PveError> {
    #[derive(serde::Deserialize)]
    struct Report {
        exitcode: Option<i32>,
        signal: Option<i32>,
        #[serde(rename = "out-data", default)]
        out: String,
        #[serde(rename = "err-data", default)]
        err: String,
    }
    let report: Report = serde_json::from_str(text.trim()).map_err(|e| {
        let shown: String = text.chars().take(200).collect();
        bad(command, format!("{e} in '{shown}'"))
    })?;
    Ok(AgentExec {
        exitcode: report.exitcode,
        signal: report.signal,
        out: report.out,
        err: report.err,
    })
}

/// `pvesm status`: a header (`Total (KiB)` since 2025, `Total` before),
/// then `name type status total used available percent` rows in KiB.
pub fn pvesm_status(text: &str) -> Result<Vec<StorageStatus>, PveError> {
    let command = "pvesm status";
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    let header = lines
        .next()
        .ok_or_else(|| bad(command, "no output".to_string()))?;
    if !header.trim_start().starts_with("Name") {
        return Err(bad(command, format!("unexpected header '{header}'")));
    }
    lines
        .map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let number = |i: usize| -> Result<u64, PveError> {
                fields
                    .get(i)
                    .and_then(|f| f.parse::<u64>().ok())
                    .ok_or_else(|| bad(command, format!("bad number in line '{line}'")))
            };
            if fields.len() != 7 {
                return Err(bad(command, format!("expected 7 columns in line '{line}'")));
            }
            Ok(StorageStatus {
                name: fields[0].to_string(),
                kind: fields[1].to_string(),
                status: fields[2].to_string(),
                total_kib: number(3)?,
                used_kib: number(4)?,
                avail_kib: number(5)?,
            })
        })
        .collect()
}

/// `qm status <id>` → `running`.
pub fn qm_status(text: &str) -> Result<String, PveError> {
    text.lines()
        .find_map(|l| l.trim().strip_prefix("status: "))
        .map(|s| s.trim().to_string())
        .ok_or_else(|| {
            bad(
                "qm status",
                format!("no 'status:' line in '{}'", text.trim()),
            )
        })
}

/// `qm config <id>`: `key: value` lines. The notes (`description`) come
/// encoded on one line (`%0A`, `%3A`: qemu-server `PVE/CLI/qm.pm`'s `config`
/// printer calls `encode_text`) and are decoded here, so that they read as
/// the API returns them.
pub fn qm_config(text: &str) -> Result<BTreeMap<String, String>, PveError> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            line.split_once(": ")
                .or_else(|| line.strip_suffix(':').map(|k| (k, "")))
                .map(|(k, v)| {
                    let value = if k.trim() == "description" {
                        crate::escape::uri_unescape(v).into_owned()
                    } else {
                        v.to_string()
                    };
                    (k.trim().to_string(), value)
                })
                .ok_or_else(|| bad("qm config", format!("not 'key: value': '{line}'")))
        })
        .collect()
}

/// The volume `qm importdisk` imported, from its last line:
/// `unused0: successfully imported disk 'local-lvm:vm-101-disk-0'` (since
/// qemu-server 8.2.7) or `Successfully imported disk as
/// 'unused0:local-lvm:vm-101-disk-0'` (before).
pub fn imported_volume(text: &str) -> Result<String, PveError> {
    let found = text.lines().rev().find_map(|line| {
        let line = line.trim();
        if let Some(rest) = line.strip_prefix("Successfully imported disk as '") {
            let quoted = rest.strip_suffix('\'')?;
            return quoted.split_once(':').map(|(_, volid)| volid.to_string());
        }
        let (_, rest) = line.split_once(": successfully imported disk '")?;
        let drive = rest.strip_suffix('\'')?;
        // With --target-disk the quoted value is a whole drive string.
        Some(drive.split(',').next().unwrap_or(drive).to_string())
    });
    found.ok_or_else(|| {
        let last = text.lines().last().unwrap_or_default();
        bad(
            "qm importdisk",
            format!("no 'successfully imported disk' line (last line '{last}')"),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{NodeResource, NodeStatus, VmResource};

    // Real outputs (docs/backends.md#proxmox-facts).
    const PVESM_NEW: &str = "\
Name             Type     Status     Total (KiB)      Used (KiB) Available (KiB)        %
local             dir     active        98497780        11778920        81669312   11.96%
local-lvm     lvmthin     active       365760512        18123456       347637056    4.95%
nas               nfs   disabled               0               0               0      N/A
";
    const PVESM_OLD: &str = "\
Name                  Type     Status           Total            Used       Available        %
local                  dir   disabled               0               0               0      N/A
local-zfs          zfspool     active      1394081792        87896381      1306185410    6.30%
nas                    nfs   inactive               0               0               0    0.00%
";
    const VMS: &str = r#"[{"cpu":0.0123,"disk":0,"diskread":51511296,"diskwrite":8192,"id":"qemu/101","maxcpu":2,"maxdisk":34359738368,"maxmem":2147483648,"mem":734003200,"memhost":812646400,"name":"web1","netin":12345,"netout":6789,"node":"pve1","status":"running","tags":"prod;web","template":0,"type":"qemu","uptime":3600,"vmid":101},{"id":"qemu/102","node":"pve1","status":"unknown","type":"qemu","vmid":102},{"cpu":0,"disk":0,"id":"qemu/9000","maxcpu":2,"maxdisk":2361393152,"maxmem":2147483648,"mem":0,"name":"tpl","node":"pve2","status":"stopped","template":1,"type":"qemu","uptime":0,"vmid":9000},{"cpu":0.001,"disk":1073741824,"id":"lxc/200","maxcpu":1,"maxdisk":8589934592,"maxmem":536870912,"mem":41943040,"name":"dns","node":"pve1","status":"running","template":0,"type":"lxc","uptime":100,"vmid":200}]"#;
    const NODES: &str = r#"[{"cgroup-mode":2,"cpu":0.0286,"disk":12836159488,"id":"node/pve1","level":"","maxcpu":8,"maxdisk":13471539200,"maxmem":33537990656,"mem":1818017792,"node":"pve1","status":"online","type":"node","uptime":22924},{"id":"node/pve2","level":"","maxcpu":8,"maxdisk":13471539200,"maxmem":33537990656,"node":"pve2","status":"offline","type":"node"}]"#;
    const NODE_STATUS: &str = r##"{"boot-info":{"mode":"legacy-bios"},"cpu":0,"cpuinfo":{"cores":4,"cpus":8,"flags":"fpu vme de pse sse4_1 sse4_2 ssse3 cx16 lahf_lm popcnt aes pclmulqdq","hvm":"1","mhz":"800.000","model":"Intel(R) Core(TM) i7-6700 CPU @ 3.40GHz","sockets":1,"user_hz":100},"current-kernel":{"machine":"x86_64","release":"6.8.12-15-pve","sysname":"Linux","version":"#1 SMP"},"idle":0,"ksm":{"shared":0},"kversion":"Linux 6.8.12-15-pve #1 SMP PREEMPT_DYNAMIC PMX 6.8.12-15 (2025-09-12T11:02Z)","loadavg":["0.16","0.10","0.02"],"memory":{"free":31460552704,"total":33537990656,"used":1952485376},"pveversion":"pve-manager/8.4.14/b502d23c55afcba1","rootfs":{"avail":1,"free":1,"total":2,"used":1},"swap":{"free":0,"total":0,"used":0},"uptime":23433,"wait":0}"##;

    #[test]
    fn pvesm_status_new_header() {
        let rows = pvesm_status(PVESM_NEW).unwrap();
        assert_eq!(rows.len(), 3);
        assert_eq!(rows[1].name, "local-lvm");
        assert_eq!(rows[1].kind, "lvmthin");
        assert_eq!(rows[1].total_kib, 365_760_512);
        assert_eq!(rows[2].status, "disabled");
    }

    #[test]
    fn pvesm_status_old_header_and_inactive_storages() {
        let rows = pvesm_status(PVESM_OLD).unwrap();
        assert_eq!(rows[0].status, "disabled");
        assert_eq!(rows[1].used_kib, 87_896_381);
        assert_eq!(rows[2].status, "inactive");
        assert_eq!(rows[2].total_kib, 0);
    }

    #[test]
    fn pvesm_status_nonsense_names_the_line() {
        let err = pvesm_status("Name Type\nlocal dir active lots 1 2 3%\n").unwrap_err();
        assert_eq!(
            err.to_string(),
            "pvesm status: cannot parse output: bad number in line 'local dir active lots 1 2 3%'"
        );
        assert!(pvesm_status("").is_err());
        assert!(pvesm_status("garbage\n").is_err());
    }

    #[test]
    fn cluster_resources_with_templates_containers_and_vms_without_stats() {
        let vms: Vec<VmResource> = json("pvesh", VMS).unwrap();
        assert_eq!(vms.len(), 4);
        assert_eq!(vms[0].os_tag(), Some("prod"));
        assert_eq!(vms[1].status, "unknown");
        assert_eq!(vms[1].tags, None);
        assert!(vms[2].template);
        assert!(!vms[3].is_qemu());
        let nodes: Vec<NodeResource> = json("pvesh", NODES).unwrap();
        assert!(nodes[0].is_online());
        assert!(!nodes[1].is_online());
        assert_eq!(nodes[1].mem, None);
    }

    #[test]
    fn node_status_cpu_flags() {
        let status: NodeStatus = json("pvesh", NODE_STATUS).unwrap();
        assert_eq!(status.cpuinfo.cpus, 8);
        assert!(status.cpuinfo.flags.contains("pclmulqdq"));
        assert_eq!(status.memory.total, 33_537_990_656);
    }

    #[test]
    fn json_errors_name_the_command_and_line() {
        let err = json::<Vec<VmResource>>(
            "pvesh get /cluster/resources",
            "Use of uninitialized value\n",
        )
        .unwrap_err();
        assert!(
            err.to_string()
                .starts_with("pvesh get /cluster/resources: cannot parse output:"),
            "{err}"
        );
        assert!(
            err.to_string().contains("'Use of uninitialized value'"),
            "{err}"
        );
    }

    #[test]
    fn qm_status_and_config() {
        assert_eq!(qm_status("status: running\n").unwrap(), "running");
        assert!(qm_status("nonsense").is_err());
        let config = qm_config(
            "agent: 1\nboot: order=scsi0;ide2\ncipassword: **********\n\
             scsi0: local-lvm:vm-101-disk-0,size=32G\nsshkeys: ssh-ed25519%20AAAA\n",
        )
        .unwrap();
        assert_eq!(config["scsi0"], "local-lvm:vm-101-disk-0,size=32G");
        assert_eq!(config["boot"], "order=scsi0;ide2");
        assert!(qm_config("what is this\n").is_err());
    }

    #[test]
    fn notes_come_decoded_as_the_api_gives_them() {
        let config = qm_config(
            "description: made by pvedeck%0Apvedeck-owner%3A alice\nname: web-107\nsshkeys: ssh-ed25519%20AAAA\n",
        )
        .unwrap();
        assert_eq!(
            config["description"],
            "made by pvedeck\npvedeck-owner: alice"
        );
        // Only the notes: `sshkeys` stays as Proxmox stores it.
        assert_eq!(config["sshkeys"], "ssh-ed25519%20AAAA");
    }

    #[test]
    fn importdisk_both_final_line_forms() {
        let new = "importing disk 'debian-12-genericcloud-amd64.qcow2' to VM 101 ...\n\
                   transferred 0.0 B of 2.0 GiB (0.00%)\n\
                   transferred 2.0 GiB of 2.0 GiB (100.00%)\n\
                   transferred 2.0 GiB of 2.0 GiB (100.00%)\n\
                   unused0: successfully imported disk 'local-lvm:vm-101-disk-0'\n";
        assert_eq!(imported_volume(new).unwrap(), "local-lvm:vm-101-disk-0");
        let old = "transferred 2.0 GiB of 2.0 GiB (100.00%)\n\
                   Successfully imported disk as 'unused0:local:107/vm-107-disk-1.raw'\n";
        assert_eq!(imported_volume(old).unwrap(), "local:107/vm-107-disk-1.raw");
        let target = "scsi0: successfully imported disk 'local-lvm:vm-101-disk-0,size=2G'\n";
        assert_eq!(imported_volume(target).unwrap(), "local-lvm:vm-101-disk-0");
        let err = imported_volume("transferred 1.0 GiB of 2.0 GiB (50.00%)\n").unwrap_err();
        assert!(
            err.to_string().contains("last line 'transferred 1.0 GiB"),
            "{err}"
        );
    }

    #[test]
    fn agent_reports_read_as_qm_prints_them() {
        let done = "{\n   \"exitcode\" : 0,\n   \"exited\" : 1,\n   \"out-data\" : \"status: done\\n\"\n}\n";
        assert_eq!(
            agent_exec("qm guest exec 107", done).unwrap(),
            AgentExec {
                exitcode: Some(0),
                out: "status: done\n".into(),
                ..AgentExec::default()
            }
        );
        // Killed: qemu-ga reports the signal and no exit code.
        let killed = "{\n   \"exited\" : 1,\n   \"signal\" : 9\n}\n";
        let report = agent_exec("c", killed).unwrap();
        assert_eq!((report.exitcode, report.signal), (None, Some(9)));
        assert_eq!(
            report
                .output("cloud-init status --wait")
                .map_err(|e| e.to_string()),
            Err("cloud-init status --wait: killed by signal 9".into())
        );
        // Still running at the timeout: no exit code yet.
        let running = "{\n   \"exited\" : 0,\n   \"pid\" : 1234\n}\n";
        assert_eq!(agent_exec("c", running).unwrap().exitcode, None);
        let failed = AgentExec {
            exitcode: Some(1),
            err: "cat: /etc/machine-id: No such file or directory\n".into(),
            ..AgentExec::default()
        };
        assert_eq!(
            failed
                .output("cat /etc/machine-id")
                .map_err(|e| e.to_string()),
            Err(
                "cat /etc/machine-id: exit 1: cat: /etc/machine-id: No such file or directory"
                    .into()
            )
        );
        assert_eq!(
            agent_exec("c", done).unwrap().output("c"),
            Ok("status: done\n".into())
        );
        assert!(agent_exec("c", running).unwrap().output("c").is_err());
        let err = agent_exec("qm guest exec 107", "QEMU guest agent is not running").unwrap_err();
        assert!(
            err.to_string()
                .starts_with("qm guest exec 107: cannot parse output"),
            "{err}"
        );
    }
}

/// Property tests: no output, however mangled, makes a parser panic; what
/// Proxmox prints in the formats of docs/backends.md#proxmox-facts reads back as written.
#[cfg(test)]
mod fuzz {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;
    use crate::{NodeResource, NodeStatus, VmResource};
    use pvedeck_testkit::{config, json_value, output};

    /// Real outputs of every command these parsers read (docs/backends.md#proxmox-facts).
    const SEEDS: &[&str] = &[
        r#"[{"cpu":0.0123,"disk":0,"diskread":51511296,"diskwrite":8192,"id":"qemu/101","maxcpu":2,"maxdisk":34359738368,"maxmem":2147483648,"mem":734003200,"memhost":812646400,"name":"web1","netin":12345,"netout":6789,"node":"pve1","status":"running","tags":"prod;web","template":0,"type":"qemu","uptime":3600,"vmid":101},{"id":"qemu/102","node":"pve1","status":"unknown","type":"qemu","vmid":102}]"#,
        r#"[{"cgroup-mode":2,"cpu":0.0286,"disk":12836159488,"id":"node/pve1","level":"","maxcpu":8,"maxdisk":13471539200,"maxmem":33537990656,"mem":1818017792,"node":"pve1","status":"online","type":"node","uptime":22924},{"id":"node/pve2","level":"","maxcpu":8,"maxdisk":13471539200,"maxmem":33537990656,"node":"pve2","status":"offline","type":"node"}]"#,
        r##"{"boot-info":{"mode":"legacy-bios"},"cpu":0,"cpuinfo":{"cores":4,"cpus":8,"flags":"fpu vme sse4_1 sse4_2 ssse3 cx16 lahf_lm popcnt aes pclmulqdq","hvm":"1","mhz":"800.000","model":"Intel(R) Core(TM) i7-6700 CPU @ 3.40GHz","sockets":1,"user_hz":100},"idle":0,"kversion":"Linux 6.8.12-15-pve #1 SMP","loadavg":["0.16","0.10","0.02"],"memory":{"free":31460552704,"total":33537990656,"used":1952485376},"pveversion":"pve-manager/8.4.14/b502d23c55afcba1","uptime":23433,"wait":0}"##,
        "Name             Type     Status     Total (KiB)      Used (KiB) Available (KiB)        %\n\
         local             dir     active        98497780        11778920        81669312   11.96%\n\
         nas               nfs   disabled               0               0               0      N/A\n",
        "Name                  Type     Status           Total            Used       Available        %\n\
         local-zfs          zfspool     active      1394081792        87896381      1306185410    6.30%\n",
        "status: running\n",
        "agent: 1\nboot: order=scsi0;ide2\ncipassword: **********\nciuser: debian\n\
         description: made by pvedeck%0Asecond line\n\
         ide2: local-zfs:vm-101-cloudinit,media=cdrom,size=4M\n\
         scsi0: local-zfs:vm-101-disk-0,iothread=1,size=32G\nsshkeys: ssh-ed25519%20AAAA\n\
         tags: debian;pvedeck\ntemplate: 1\n",
        "importing disk 'debian-12-genericcloud-amd64.qcow2' to VM 101 ...\n\
         transferred 0.0 B of 2.0 GiB (0.00%)\n\
         transferred 2.0 GiB of 2.0 GiB (100.00%)\n\
         unused0: successfully imported disk 'local-lvm:vm-101-disk-0'\n",
        "transferred 2.0 GiB of 2.0 GiB (100.00%)\n\
         Successfully imported disk as 'unused0:local:107/vm-107-disk-1.raw'\n",
        "scsi0: successfully imported disk 'local-lvm:vm-101-disk-0,size=2G'\n",
        "{\n   \"exitcode\" : 0,\n   \"exited\" : 1,\n   \"out-data\" : \"status: done\\n\"\n}\n",
        "{\n   \"exited\" : 0,\n   \"pid\" : 1234\n}\n",
    ];

    /// A refusal names the command and says what it could not read.
    fn named(result: Result<impl Sized, PveError>, command: &str) {
        if let Err(e) = result {
            assert!(
                matches!(&e, PveError::Parse { command: c, detail } if c == command && !detail.is_empty()),
                "{e:?}"
            );
            assert!(e.to_string().starts_with(command), "{e}");
        }
    }

    /// A fraction pvesh could print that reads back exactly.
    fn fraction() -> impl Strategy<Value = f64> {
        (0u32..=4096).prop_map(|n| f64::from(n) / 1024.0)
    }

    fn word() -> impl Strategy<Value = String> {
        "[a-z][a-z0-9-]{0,15}"
    }

    fn vm() -> impl Strategy<Value = VmResource> {
        let text = || prop::collection::vec(any::<char>(), 0..24).prop_map(String::from_iter);
        (
            (
                any::<u32>(),
                word(),
                word(),
                word(),
                proptest::option::of(text()),
            ),
            (
                any::<bool>(),
                any::<u32>(),
                fraction(),
                any::<u64>(),
                any::<u64>(),
            ),
            (
                any::<u64>(),
                any::<u64>(),
                any::<u64>(),
                any::<u64>(),
                any::<u64>(),
            ),
            (any::<u64>(), any::<u64>(), proptest::option::of(text())),
            proptest::option::of(word()),
        )
            .prop_map(
                |(
                    (vmid, node, kind, status, name),
                    (template, maxcpu, cpu, maxmem, mem),
                    (maxdisk, disk, uptime, netin, netout),
                    (diskread, diskwrite, tags),
                    lock,
                )| VmResource {
                    id: format!("{kind}/{vmid}"),
                    vmid,
                    node,
                    kind,
                    status,
                    name,
                    template,
                    maxcpu,
                    cpu,
                    maxmem,
                    mem,
                    maxdisk,
                    disk,
                    uptime,
                    netin,
                    netout,
                    diskread,
                    diskwrite,
                    tags,
                    lock,
                },
            )
    }

    fn node() -> impl Strategy<Value = NodeResource> {
        use proptest::option::of;
        (
            (
                word(),
                word(),
                of(fraction()),
                of(any::<u32>()),
                of(any::<u64>()),
            ),
            (of(any::<u64>()), of(any::<u64>()), of(any::<u64>())),
            (of(any::<u64>()), of("[a-z]{0,2}")),
        )
            .prop_map(
                |((node, status, cpu, maxcpu, mem), (maxmem, disk, maxdisk), (uptime, level))| {
                    NodeResource {
                        id: format!("node/{node}"),
                        node,
                        kind: "node".into(),
                        status,
                        cpu,
                        maxcpu,
                        mem,
                        maxmem,
                        disk,
                        maxdisk,
                        uptime,
                        level,
                    }
                },
            )
    }

    /// `value` as pvesh prints it — one line, keys sorted — with fields
    /// pvedeck does not read (`memhost`, `hastate`, newer ones) added to
    /// every object of the list.
    fn pvesh_line(
        value: impl serde::Serialize,
        extra: &BTreeMap<String, serde_json::Value>,
    ) -> String {
        let mut value = serde_json::to_value(value).unwrap();
        if let serde_json::Value::Array(items) = &mut value {
            for item in items {
                if let serde_json::Value::Object(fields) = item {
                    for (k, v) in extra {
                        fields.insert(format!("x-{k}"), v.clone());
                    }
                }
            }
        }
        format!("{value}\n")
    }

    const STORAGE_TYPES: &[&str] = &[
        "dir", "lvm", "lvmthin", "zfspool", "nfs", "cifs", "rbd", "btrfs", "pbs",
    ];

    fn storage() -> impl Strategy<Value = StorageStatus> {
        (
            word(),
            prop::sample::select(STORAGE_TYPES),
            prop::sample::select(&["active", "inactive", "disabled"][..]),
            any::<u64>(),
            any::<u64>(),
            any::<u64>(),
        )
            .prop_map(|(name, kind, status, total_kib, used_kib, avail_kib)| {
                StorageStatus {
                    name,
                    kind: kind.into(),
                    status: status.into(),
                    total_kib,
                    used_kib,
                    avail_kib,
                }
            })
    }

    /// `pvesm status` as `pvesm.pm`'s `printf`s write it, with the header
    /// of libpve-storage-perl 9.0.14 or of the versions before.
    fn pvesm_print(rows: &[StorageStatus], new_header: bool) -> String {
        let w = rows.iter().map(|r| r.name.len()).max().unwrap_or(0) + 1;
        let (total, used, avail) = if new_header {
            ("Total (KiB)", "Used (KiB)", "Available (KiB)")
        } else {
            ("Total", "Used", "Available")
        };
        let mut out = format!(
            "{:<w$} {:>10} {:>10} {total:>15} {used:>15} {avail:>15} {:>8}\n",
            "Name", "Type", "Status", "%"
        );
        for r in rows {
            let pct = if r.status == "disabled" {
                format!("{:>8}", "N/A")
            } else if r.total_kib == 0 {
                format!("{:>7.2}%", 0.0)
            } else {
                format!("{:>7.2}%", r.used_kib as f64 * 100.0 / r.total_kib as f64)
            };
            out.push_str(&format!(
                "{:<w$} {:>10} {:>10} {:>15} {:>15} {:>15} {pct}\n",
                r.name, r.kind, r.status, r.total_kib, r.used_kib, r.avail_kib
            ));
        }
        out
    }

    /// A line no parser mistakes for its own: no `:` and no `'`.
    fn chatter() -> impl Strategy<Value = Vec<String>> {
        prop::collection::vec("[a-zA-Z0-9 ().%,/-]{0,50}", 0..4)
    }

    proptest! {
        #![proptest_config(config(4000))]

        #[test]
        fn no_output_makes_a_parser_panic(text in output(SEEDS)) {
            named(json::<Vec<VmResource>>("pvesh vms", &text), "pvesh vms");
            named(json::<Vec<NodeResource>>("pvesh nodes", &text), "pvesh nodes");
            named(json::<NodeStatus>("pvesh status", &text), "pvesh status");
            named(agent_exec("qm guest exec 101", &text), "qm guest exec 101");
            named(pvesm_status(&text), "pvesm status");
            named(qm_status(&text), "qm status");
            named(qm_config(&text), "qm config");
            named(imported_volume(&text), "qm importdisk");
            if let Ok(vms) = json::<Vec<VmResource>>("pvesh", &text) {
                for vm in &vms {
                    let os = vm.os_tag();
                    prop_assert!(os.is_none_or(|t| !t.starts_with("pvedeck") && vm.has_tag(t)));
                }
            }
        }
    }

    proptest! {
        #![proptest_config(config(1000))]

        #[test]
        fn cluster_resources_read_back_as_pvesh_prints_them(
            vms in prop::collection::vec(vm(), 0..5),
            nodes in prop::collection::vec(node(), 0..5),
            extra in prop::collection::btree_map("[a-z]{1,8}", json_value(), 0..3),
            blank in "[ \t\n]{0,4}",
        ) {
            let line = format!("{blank}{}", pvesh_line(&vms, &extra));
            prop_assert_eq!(json::<Vec<VmResource>>("pvesh", &line).unwrap(), vms);
            let line = format!("{blank}{}", pvesh_line(&nodes, &extra));
            prop_assert_eq!(json::<Vec<NodeResource>>("pvesh", &line).unwrap(), nodes);
        }

        #[test]
        fn pvesm_status_reads_back_both_headers(
            rows in prop::collection::vec(storage(), 0..6),
            new_header in any::<bool>(),
        ) {
            prop_assert_eq!(pvesm_status(&pvesm_print(&rows, new_header)).unwrap(), rows);
        }

        #[test]
        fn qm_status_finds_its_line(
            status in "[a-z-]{1,12}",
            before in chatter(),
            after in chatter(),
        ) {
            let text = format!("{}status: {status}\n{}", lines(&before), lines(&after));
            prop_assert_eq!(qm_status(&text).unwrap(), status);
        }

        #[test]
        fn qm_config_reads_back(
            pairs in prop::collection::btree_map("[a-z][a-z0-9]{0,12}", "[^\n\r]{0,60}", 0..12),
            bare in any::<bool>(),
        ) {
            // `key:` alone is how an empty value may come, as `key: ` may.
            let text: String = pairs
                .iter()
                .map(|(k, v)| if v.is_empty() && bare { format!("{k}:\n") } else { format!("{k}: {v}\n") })
                .collect();
            let read = qm_config(&text).unwrap();
            prop_assert_eq!(read, pairs);
        }

        #[test]
        fn imported_volume_reads_every_final_line_form(
            storage in word(),
            vmid in 100u32..1_000_000_000,
            disk in 0u32..100,
            unused in 0u32..256,
            (path, form) in (any::<bool>(), 0..3),
            progress in chatter(),
            after in chatter(),
        ) {
            let volid = if path {
                format!("{storage}:{vmid}/vm-{vmid}-disk-{disk}.raw")
            } else {
                format!("{storage}:vm-{vmid}-disk-{disk}")
            };
            let last = match form {
                0 => format!("unused{unused}: successfully imported disk '{volid}'"),
                1 => format!("Successfully imported disk as 'unused{unused}:{volid}'"),
                _ => format!("scsi0: successfully imported disk '{volid},size=2G'"),
            };
            let text = format!("{}{last}\n{}", lines(&progress), lines(&after));
            prop_assert_eq!(imported_volume(&text).unwrap(), volid);
        }

        #[test]
        fn agent_reports_read_back(
            exitcode in proptest::option::of(any::<i32>()),
            out in any::<String>(),
            err in any::<String>(),
            pid in any::<u32>(),
        ) {
            let mut report = serde_json::json!({ "exited": u8::from(exitcode.is_some()), "pid": pid });
            if let Some(code) = exitcode {
                report["exitcode"] = code.into();
            }
            if !out.is_empty() {
                report["out-data"] = out.clone().into();
            }
            if !err.is_empty() {
                report["err-data"] = err.clone().into();
            }
            let text = format!("{}\n", serde_json::to_string_pretty(&report).unwrap());
            prop_assert_eq!(agent_exec("c", &text).unwrap(), AgentExec { exitcode, out, err, signal: None });
        }
    }

    fn lines(lines: &[String]) -> String {
        lines.iter().map(|l| format!("{l}\n")).collect()
    }
}
