//! What a simulated guest shows on its consoles: the boot's lines and a
//! getty's login prompt. Both consoles, the VGA screen of `rfb` and the
//! serial line of `serial`, draw the same text; only how they draw differs.

use crate::state::SimVm;

/// What a console needs to know of its VM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuestInfo {
    pub vmid: u32,
    /// The VM's name: cloud-init makes it the guest's hostname.
    pub hostname: String,
    pub os: GuestOs,
    pub memory_mib: u64,
    pub cores: u32,
}

/// The distributions pvedeck installs, as their consoles greet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GuestOs {
    Debian,
    Ubuntu,
    Rocky,
}

impl GuestInfo {
    /// The VM as the simulator keeps it: the OS from its tags (pvedeck
    /// tags a VM with its OS), Debian when none says.
    pub fn of(vm: &SimVm) -> GuestInfo {
        let tags = vm.conf("tags").unwrap_or("");
        let os = tags
            .split([';', ',', ' '])
            .find_map(|tag| match tag {
                "debian" => Some(GuestOs::Debian),
                "ubuntu" => Some(GuestOs::Ubuntu),
                "rockylinux" | "rocky" => Some(GuestOs::Rocky),
                _ => None,
            })
            .unwrap_or(GuestOs::Debian);
        GuestInfo {
            vmid: vm.vmid,
            hostname: vm
                .conf("name")
                .map_or_else(|| format!("vm{}", vm.vmid), str::to_string),
            os,
            memory_mib: vm.memory_mib(),
            cores: vm.vcpus(),
        }
    }

    fn kernel(&self) -> &'static str {
        match self.os {
            GuestOs::Debian => "6.1.0-28-cloud-amd64",
            GuestOs::Ubuntu => "6.8.0-51-generic",
            GuestOs::Rocky => "5.14.0-503.14.1.el9_5.x86_64",
        }
    }

    fn pretty_name(&self) -> &'static str {
        match self.os {
            GuestOs::Debian => "Debian GNU/Linux 12",
            GuestOs::Ubuntu => "Ubuntu 24.04.1 LTS",
            GuestOs::Rocky => "Rocky Linux 9.5 (Blue Onyx)",
        }
    }

    /// What the firmware prints before the kernel: on the VGA screen only,
    /// the serial line stays silent until the kernel speaks.
    pub fn firmware_lines(&self) -> Vec<String> {
        vec![
            "SeaBIOS (version rel-1.16.3-0-ga6ed6b701f0a-prebuilt.qemu.org)".to_string(),
            String::new(),
            "iPXE (http://ipxe.org) 00:12.0 CA00 PCI2.10 PnP PMM+7EFD0F90+7EF30F90 CA00"
                .to_string(),
            String::new(),
            String::new(),
            "Booting from Hard Disk...".to_string(),
        ]
    }

    /// The kernel's and init's lines, as a console shows them.
    pub fn boot_lines(&self) -> Vec<String> {
        let mem_kib = self.memory_mib * 1024;
        vec![
            format!("[    0.000000] Linux version {} (QEMU)", self.kernel()),
            format!(
                "[    0.000000] Command line: BOOT_IMAGE=/boot/vmlinuz-{} root=/dev/sda1 ro console=tty0 console=ttyS0,115200",
                self.kernel()
            ),
            format!("[    0.012345] Memory: {mem_kib}K available"),
            format!("[    0.045678] smpboot: Allowing {} CPUs", self.cores),
            "[    1.234567] sd 2:0:0:0: [sda] Attached SCSI disk".to_string(),
            "[  OK  ] Reached target multi-user.target - Multi-User System.".to_string(),
            "[  OK  ] Finished cloud-init.service - Cloud-init: Network Stage.".to_string(),
        ]
    }

    /// The getty's greeting above its prompt (`/etc/issue`), for `tty`
    /// (`tty1`, `ttyS0`).
    pub fn issue(&self, tty: &str) -> Vec<String> {
        match self.os {
            GuestOs::Rocky => vec![
                self.pretty_name().to_string(),
                format!("Kernel {} on an x86_64", self.kernel()),
                String::new(),
            ],
            _ => vec![
                String::new(),
                format!("{} {} {tty}", self.pretty_name(), self.hostname),
                String::new(),
            ],
        }
    }

    /// What a guest prints as it goes down for a reboot (Ctrl-Alt-Del).
    pub fn reboot_lines(&self) -> Vec<String> {
        vec![
            "[  OK  ] Stopped target multi-user.target - Multi-User System.".to_string(),
            "[  OK  ] Reached target shutdown.target - System Shutdown.".to_string(),
            "[  OK  ] Reached target final.target - Late Shutdown Services.".to_string(),
            "[  OK  ] Finished systemd-reboot.service - System Reboot.".to_string(),
            "[  OK  ] Reached target reboot.target - System Reboot.".to_string(),
            "[   12.345678] reboot: Restarting system".to_string(),
        ]
    }

    pub fn prompt(&self) -> String {
        format!("{} login: ", self.hostname)
    }
}

/// A key as the getty gets it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Key {
    Char(char),
    Enter,
    Backspace,
}

/// What the getty does on the screen in answer to a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Echo {
    /// Nothing shows (a password's characters, a backspace on nothing).
    None,
    /// This text goes on the current line.
    Text(String),
    /// The last character of the line goes.
    Erase,
    /// The line ends; these lines follow, and the last is left open
    /// (a prompt the next keys are typed after).
    Lines(Vec<String>),
}

/// agetty and login: a name is asked, then a password, which is never
/// right (nobody logs in to a simulated guest).
#[derive(Debug, Clone, Default)]
pub struct Login {
    password: bool,
    typed: String,
}

/// What login takes of a line before it stops listening.
const LINE_MAX: usize = 64;

impl Login {
    pub fn key(&mut self, key: Key, guest: &GuestInfo) -> Echo {
        match key {
            Key::Char(c) if !c.is_control() => {
                if self.typed.len() >= LINE_MAX {
                    return Echo::None;
                }
                self.typed.push(c);
                if self.password {
                    Echo::None
                } else {
                    Echo::Text(c.to_string())
                }
            }
            Key::Char(_) => Echo::None,
            Key::Backspace => {
                let had = self.typed.pop().is_some();
                if had && !self.password {
                    Echo::Erase
                } else {
                    Echo::None
                }
            }
            Key::Enter => {
                let typed = std::mem::take(&mut self.typed);
                if self.password {
                    self.password = false;
                    Echo::Lines(vec![
                        String::new(),
                        "Login incorrect".to_string(),
                        guest.prompt(),
                    ])
                } else if typed.is_empty() {
                    Echo::Lines(vec![guest.prompt()])
                } else {
                    self.password = true;
                    Echo::Lines(vec!["Password: ".to_string()])
                }
            }
        }
    }
}

/// The guest the console's tests draw and greet with.
#[cfg(test)]
pub(crate) fn test_guest() -> GuestInfo {
    GuestInfo {
        vmid: 101,
        hostname: "web-01".into(),
        os: GuestOs::Debian,
        memory_mib: 2048,
        cores: 2,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_then_any_password_is_refused() {
        let g = test_guest();
        let mut login = Login::default();
        assert_eq!(login.key(Key::Char('r'), &g), Echo::Text("r".into()));
        assert_eq!(login.key(Key::Backspace, &g), Echo::Erase);
        assert_eq!(login.key(Key::Backspace, &g), Echo::None);
        login.key(Key::Char('x'), &g);
        assert_eq!(
            login.key(Key::Enter, &g),
            Echo::Lines(vec!["Password: ".into()])
        );
        assert_eq!(login.key(Key::Char('s'), &g), Echo::None, "no echo");
        assert_eq!(login.key(Key::Backspace, &g), Echo::None);
        assert_eq!(
            login.key(Key::Enter, &g),
            Echo::Lines(vec![
                String::new(),
                "Login incorrect".into(),
                "web-01 login: ".into()
            ])
        );
        assert_eq!(login.key(Key::Char('a'), &g), Echo::Text("a".into()));
    }

    #[test]
    fn the_os_comes_from_the_tags() {
        let mut vm: SimVm = serde_json::from_value(serde_json::json!({
            "vmid": 107, "node": "pve1", "kind": "qemu",
            "config": {"name": "db-7", "tags": "rockylinux;pvedeck", "memory": "1024"},
            "running": true, "guest": "up", "mem_plateau": 0, "cpu_load": 0.0
        }))
        .unwrap();
        let info = GuestInfo::of(&vm);
        assert_eq!((info.os, info.hostname.as_str()), (GuestOs::Rocky, "db-7"));
        assert_eq!(info.issue("tty1")[0], "Rocky Linux 9.5 (Blue Onyx)");
        vm.config.remove("tags");
        let info = GuestInfo::of(&vm);
        assert_eq!(info.os, GuestOs::Debian);
        assert_eq!(info.issue("ttyS0")[1], "Debian GNU/Linux 12 db-7 ttyS0");
    }
}
