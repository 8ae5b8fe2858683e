//! The Debian 12 guest image that `pvedeck_sim::machine` boots under QEMU,
//! built once from Debian's own packages and cached under
//! `target/guest/`:
//!
//! * `debian-12-guest.qcow2` — one ext4 filesystem over the whole disk (no
//!   partition table, no boot loader: QEMU boots the kernel directly, so a
//!   clone is resized with `qemu-img resize` and cloud-init's `resizefs`
//!   alone, no `growpart`);
//! * `vmlinuz`, `initrd.img` — the image's own kernel and initramfs, for
//!   `-kernel`/`-initrd`;
//! * `debian-12-guest.qcow2.sha512` — in `sha512sum` form, what the image
//!   mirror publishes beside the image;
//! * `debian-12-guest.stamp` — the recipe the files were built from: a
//!   second run with the same recipe does nothing.
//!
//! Building needs root (debootstrap, `chroot`) and Debian's archive; the
//! guest it makes needs no network at all: its apt sources name only an
//! empty repository inside the image, so the project's init script
//! (`apt-get update`, then installing what is already installed) passes
//! offline, as it would against a real mirror.

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::run::{Failed, output, status, step};
use crate::setup::apt_install;

/// What the guest needs beyond `minbase`. Kept to what a Debian 12 cloud
/// image has that the project's code touches: cloud-init (NoCloud seed,
/// users, keys, `resizefs`), sshd, the guest agent, the tools the init
/// script (`crates/domain/src/scripts/apt.sh`) calls (`fuser`, `locale-gen`,
/// `timedatectl` through dbus, `fallocate`/`mkswap`/`swapon`, `chpasswd`,
/// `curl`), and ifupdown with a DHCP client, which is how Debian 12's own
/// cloud images render cloud-init's network config (its `eni` renderer).
const PACKAGES: &[&str] = &[
    "linux-image-cloud-amd64",
    "initramfs-tools",
    "zstd",
    "systemd-sysv",
    "dbus",
    "udev",
    "cloud-init",
    // debootstrap's resolver skips virtual packages: this one provides the
    // `python3-cffi-backend-api-*` that cloud-init's python3-cryptography
    // depends on, and without it cloud-init is left unconfigured.
    "python3-cffi-backend",
    "cloud-guest-utils",
    "openssh-server",
    "qemu-guest-agent",
    "locales",
    "tzdata",
    "ca-certificates",
    "curl",
    "sudo",
    "iproute2",
    "ifupdown",
    "isc-dhcp-client",
    "netbase",
    "psmisc",
    "util-linux",
    "e2fsprogs",
    "procps",
];

/// Raised whenever the configuration below changes, so that a cached image
/// built from an older recipe is rebuilt rather than trusted.
const RECIPE_VERSION: u32 = 3;

/// Size of the image's filesystem. Small, because every clone is resized
/// to its VM's disk size before its first boot (cloud-init's `resizefs`
/// then grows the filesystem): the content is about 0.8 GiB.
const DISK_BYTES: u64 = 2 << 30;

const SUITE: &str = "bookworm";
const DEFAULT_MIRROR: &str = "http://deb.debian.org/debian";

/// The built image, as `pvedeck_sim::machine::MachineSpec` wants it.
#[derive(Debug, Clone)]
pub struct GuestImage {
    pub disk: PathBuf,
    pub kernel: PathBuf,
    pub initrd: PathBuf,
    /// Lower-case hex SHA-512 of `disk`.
    pub sha512: String,
}

/// Builds the image unless the cached one was built from this recipe.
pub fn ensure(root: &Path) -> Result<GuestImage, Failed> {
    let out = root.join("target/guest");
    let image = GuestImage {
        disk: out.join("debian-12-guest.qcow2"),
        kernel: out.join("vmlinuz"),
        initrd: out.join("initrd.img"),
        sha512: String::new(),
    };
    let sums = out.join("debian-12-guest.qcow2.sha512");
    let stamp = out.join("debian-12-guest.stamp");
    let recipe = recipe();
    let built = [&image.disk, &image.kernel, &image.initrd, &sums]
        .iter()
        .all(|file| file.is_file());
    if built && fs::read_to_string(&stamp).is_ok_and(|done| done == recipe) {
        let sha512 = read_sum(&sums)?;
        println!("guest image {} is up to date", image.disk.display());
        return Ok(GuestImage { sha512, ..image });
    }

    tools()?;
    if output(Command::new("id").arg("-u")).is_none_or(|id| id.trim() != "0") {
        return Err(Failed(
            "building the guest image needs root (debootstrap, chroot)".into(),
        ));
    }
    let work = out.join("build");
    let tree = work.join("tree");
    debootstrap(&work, &tree)?;
    step("configure the guest tree", || configure(&tree))?;
    step("check the guest kernel boots from virtio and ext4", || {
        check_initrd(&tree)
    })?;
    let raw = work.join("disk.raw");
    step("make the ext4 filesystem from the tree", || {
        make_filesystem(&tree, &raw)
    })?;
    let partial = out.join("debian-12-guest.qcow2.partial");
    step("convert the filesystem to qcow2", || {
        status(
            Command::new("qemu-img")
                .args(["convert", "-q", "-f", "raw", "-O", "qcow2", "-c"])
                .arg(&raw)
                .arg(&partial),
        )
    })?;
    let (kernel, initrd) = boot_files(&tree)?;
    copy(&kernel, &image.kernel)?;
    copy(&initrd, &image.initrd)?;
    let sha512 = step("SHA-512 of the image", || {
        let sum = output(Command::new("sha512sum").arg(&partial))
            .ok_or_else(|| Failed(format!("sha512sum {} failed", partial.display())))?;
        let hex = sum
            .split_whitespace()
            .next()
            .unwrap_or_default()
            .to_string();
        let line = format!("{hex}  debian-12-guest.qcow2\n");
        write(&sums, line.as_bytes())?;
        Ok(hex)
    })?;
    fs::rename(&partial, &image.disk)
        .map_err(|e| Failed(format!("{}: {e}", image.disk.display())))?;
    write(&stamp, recipe.as_bytes())?;
    // The tree and the raw file are twice the image's size and only a
    // failed build's restart point.
    fs::remove_dir_all(&work).map_err(|e| Failed(format!("{}: {e}", work.display())))?;
    let size = fs::metadata(&image.disk).map_or(0, |m| m.len());
    println!(
        "guest image {} ({:.0} MiB), sha512 {}…",
        image.disk.display(),
        size as f64 / f64::from(1 << 20),
        &sha512[..16]
    );
    Ok(GuestImage { sha512, ..image })
}

/// What decides the image's content: a different one means rebuild.
fn recipe() -> String {
    format!(
        "recipe {RECIPE_VERSION}\nsuite {SUITE}\nsize {DISK_BYTES}\npackages {}\n",
        PACKAGES.join(",")
    )
}

fn read_sum(sums: &Path) -> Result<String, Failed> {
    let text = fs::read_to_string(sums).map_err(|e| Failed(format!("{}: {e}", sums.display())))?;
    text.split_whitespace()
        .next()
        .map(str::to_string)
        .ok_or_else(|| Failed(format!("{} is empty", sums.display())))
}

/// The host's tools, installed when missing, by a file each one ships (as
/// `setup::test_tools` does).
fn tools() -> Result<(), Failed> {
    let wanted = [
        ("/usr/bin/qemu-system-x86_64", "qemu-system-x86"),
        ("/usr/bin/qemu-img", "qemu-utils"),
        ("/usr/sbin/debootstrap", "debootstrap"),
        ("/usr/bin/genisoimage", "genisoimage"),
        ("/usr/sbin/mkfs.ext4", "e2fsprogs"),
    ];
    let mut missing: Vec<&str> = wanted
        .iter()
        .filter(|(file, _)| !Path::new(file).exists())
        .map(|(_, package)| *package)
        .collect();
    // qemu-system-x86 pins qemu-utils to its own version: a machine whose
    // qemu-img came from backports loses it to the install unless both are
    // asked for together (seen on a new machine).
    if missing.contains(&"qemu-system-x86") && !missing.contains(&"qemu-utils") {
        missing.push("qemu-utils");
    }
    if missing.is_empty() {
        Ok(())
    } else {
        apt_install(&missing)
    }
}

/// The base system, kept across failed builds: the package list is its
/// stamp, so a changed list starts again from an empty tree (debootstrap
/// cannot add to a tree it made before).
fn debootstrap(work: &Path, tree: &Path) -> Result<(), Failed> {
    let stamp = work.join("debootstrap.done");
    let wanted = PACKAGES.join(",");
    if tree.is_dir() && fs::read_to_string(&stamp).is_ok_and(|done| done == wanted) {
        println!("debootstrap tree {} is reused", tree.display());
        return Ok(());
    }
    let mirror = std::env::var("PVEDECK_DEBIAN_MIRROR").unwrap_or_else(|_| DEFAULT_MIRROR.into());
    step(&format!("debootstrap {SUITE} from {mirror}"), || {
        if work.exists() {
            fs::remove_dir_all(work).map_err(|e| Failed(format!("{}: {e}", work.display())))?;
        }
        fs::create_dir_all(work).map_err(|e| Failed(format!("{}: {e}", work.display())))?;
        status(
            Command::new("debootstrap")
                .arg("--variant=minbase")
                .arg(format!("--include={wanted}"))
                .arg(SUITE)
                .arg(tree)
                .arg(&mirror),
        )?;
        write(&stamp, wanted.as_bytes())
    })
}

/// Turns the installed tree into a cloud image: what Debian's cloud images
/// do at the end of their build (no machine identity, no host keys, no
/// package lists), plus what direct kernel boot and the offline guest need.
fn configure(tree: &Path) -> Result<(), Failed> {
    let put = |path: &str, text: &str| write(&tree.join(path), text.as_bytes());
    // The seed ISO (label `cidata`) is the only source: no minute-long
    // probing of cloud metadata services that do not exist here.
    put(
        "etc/cloud/cloud.cfg.d/99_pvedeck.cfg",
        "# pvedeck guest image: the NoCloud seed ISO is the only data source.\n\
         datasource_list: [ NoCloud, None ]\n\
         # ifupdown, as Debian 12's cloud images: with systemd-networkd also\n\
         # installed, a clone's first boot otherwise renders for networkd,\n\
         # whose wait-online then waits two minutes for a link it never matches.\n\
         system_info:\n  network:\n    renderers: [ eni ]\n",
    )?;
    // What waits for networkd's links: nothing here is networkd's.
    let wait = tree.join("etc/systemd/system/systemd-networkd-wait-online.service");
    let _ = fs::remove_file(&wait);
    std::os::unix::fs::symlink("/dev/null", &wait)
        .map_err(|e| Failed(format!("{}: {e}", wait.display())))?;
    // The whole disk is the filesystem (no partition table).
    put("etc/fstab", "/dev/vda / ext4 defaults 0 1\n")?;
    put("etc/hostname", "debian\n")?;
    put(
        "etc/hosts",
        "127.0.0.1\tlocalhost\n::1\t\tlocalhost ip6-localhost ip6-loopback\n",
    )?;
    // debootstrap copied the build host's; the guest's comes from DHCP.
    put("etc/resolv.conf", "")?;
    // cloud-init's eni renderer writes interfaces.d/50-cloud-init, loopback
    // included; as in Debian 12's cloud images.
    put(
        "etc/network/interfaces",
        "source /etc/network/interfaces.d/*\n",
    )?;
    offline_apt(tree)?;
    locale(tree)?;
    // An empty machine-id: systemd makes a new one at the first boot that
    // finds it empty (Debian's cloud images ship it so); dbus reads the same.
    put("etc/machine-id", "")?;
    let dbus_id = tree.join("var/lib/dbus/machine-id");
    let _ = fs::remove_file(&dbus_id);
    std::os::unix::fs::symlink("/etc/machine-id", &dbus_id)
        .map_err(|e| Failed(format!("{}: {e}", dbus_id.display())))?;
    // The guest agent needs no enabling: Debian starts it from a udev rule
    // when QEMU's `org.qemu.guest_agent.0` port appears.
    // No host keys: each guest's cloud-init (cc_ssh) makes its own.
    remove_matching(&tree.join("etc/ssh"), |name| name.starts_with("ssh_host_"))?;
    chroot(tree, &["apt-get", "clean"])?;
    // The image starts with no log or cache of its build.
    remove_matching(&tree.join("var/log"), |name| {
        name.ends_with(".log") || name == "apt" || name.starts_with("bootstrap")
    })?;
    remove_matching(&tree.join("var/cache/debconf"), |name| {
        name.ends_with("-old")
    })?;
    remove_matching(&tree.join("tmp"), |_| true)?;
    Ok(())
}

/// en_US.UTF-8 generated and set: cloud-init's `locale` module sets that
/// locale when none is configured, and on Debian it cannot generate it
/// (Debian's `locale-gen` ignores the locale named on its command line), so
/// `update-locale` fails and cloud-init ends in `status: error`. With the
/// locale already the system's, the module has nothing to do.
fn locale(tree: &Path) -> Result<(), Failed> {
    let path = tree.join("etc/locale.gen");
    let text = fs::read_to_string(&path).map_err(|e| Failed(format!("{}: {e}", path.display())))?;
    let wanted = "en_US.UTF-8 UTF-8";
    let mut lines: Vec<String> = text
        .lines()
        .map(|line| {
            let bare = line.trim_start_matches(['#', ' ']);
            if bare == wanted {
                wanted.to_string()
            } else {
                line.to_string()
            }
        })
        .collect();
    if !lines.iter().any(|line| line == wanted) {
        lines.push(wanted.to_string());
    }
    write(&path, (lines.join("\n") + "\n").as_bytes())?;
    chroot(tree, &["locale-gen"])?;
    write(&tree.join("etc/default/locale"), b"LANG=en_US.UTF-8\n")
}

/// apt's sources are one empty local repository, so that `apt-get update`
/// succeeds with no network and `apt-get install` of what the image has
/// finds it installed. The lists fetched from Debian while building go.
fn offline_apt(tree: &Path) -> Result<(), Failed> {
    let repo = "var/local/offline";
    // SHA-256 of the empty `Packages` file.
    let empty = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
    write(&tree.join(repo).join("Packages"), b"")?;
    let mut release = String::new();
    let _ = write!(
        release,
        "Origin: pvedeck\nLabel: pvedeck offline\nSuite: offline\nCodename: offline\n\
         Date: Thu, 01 Jan 2026 00:00:00 UTC\nSHA256:\n {empty} 0 Packages\n"
    );
    write(&tree.join(repo).join("Release"), release.as_bytes())?;
    write(
        &tree.join("etc/apt/sources.list"),
        format!(
            "# The guest has no network to Debian: one empty local repository.\n\
             deb [trusted=yes] file:/{repo} ./\n"
        )
        .as_bytes(),
    )?;
    remove_matching(&tree.join("etc/apt/sources.list.d"), |_| true)?;
    remove_matching(&tree.join("var/lib/apt/lists"), |name| name != "partial")?;
    Ok(())
}

/// Direct kernel boot has no boot loader to load modules from the disk:
/// the block device, its PCI transport and the root filesystem must be in
/// the kernel or in its initramfs.
fn check_initrd(tree: &Path) -> Result<(), Failed> {
    let (kernel, initrd) = boot_files(tree)?;
    let version = kernel
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.strip_prefix("vmlinuz-"))
        .ok_or_else(|| Failed(format!("{}: no version in the name", kernel.display())))?;
    let config_path = tree.join(format!("boot/config-{version}"));
    let config = fs::read_to_string(&config_path)
        .map_err(|e| Failed(format!("{}: {e}", config_path.display())))?;
    let inside = format!(
        "/boot/{}",
        initrd.file_name().unwrap_or_default().to_string_lossy()
    );
    let listing = chroot_output(tree, &["lsinitramfs", &inside])?;
    for (option, module) in [
        ("CONFIG_VIRTIO_BLK", "virtio_blk"),
        ("CONFIG_VIRTIO_PCI", "virtio_pci"),
        ("CONFIG_EXT4_FS", "ext4"),
    ] {
        let built_in = config.lines().any(|l| l == format!("{option}=y"));
        let in_initrd = listing.lines().any(|l| {
            l.ends_with(&format!("/{module}.ko")) || l.contains(&format!("/{module}.ko."))
        });
        println!(
            "{option}: {}",
            if built_in {
                "built in"
            } else if in_initrd {
                "module in the initramfs"
            } else {
                "MISSING"
            }
        );
        if !built_in && !in_initrd {
            return Err(Failed(format!(
                "{module} is neither built into {} nor in {}",
                kernel.display(),
                initrd.display()
            )));
        }
    }
    Ok(())
}

/// The newest kernel and its initramfs in the tree's `/boot`.
fn boot_files(tree: &Path) -> Result<(PathBuf, PathBuf), Failed> {
    let boot = tree.join("boot");
    let mut kernels: Vec<String> = fs::read_dir(&boot)
        .map_err(|e| Failed(format!("{}: {e}", boot.display())))?
        .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
        .filter(|name| name.starts_with("vmlinuz-"))
        .collect();
    kernels.sort();
    let kernel = kernels
        .pop()
        .ok_or_else(|| Failed(format!("no vmlinuz-* in {}", boot.display())))?;
    let initrd = boot.join(kernel.replacen("vmlinuz-", "initrd.img-", 1));
    if !initrd.is_file() {
        return Err(Failed(format!("{} is missing", initrd.display())));
    }
    Ok((boot.join(kernel), initrd))
}

/// `mkfs.ext4 -d` fills the filesystem from the tree as it makes it: no
/// loop mount, so no privileges beyond reading the tree.
fn make_filesystem(tree: &Path, raw: &Path) -> Result<(), Failed> {
    let _ = fs::remove_file(raw);
    let file = fs::File::create(raw).map_err(|e| Failed(format!("{}: {e}", raw.display())))?;
    file.set_len(DISK_BYTES)
        .map_err(|e| Failed(format!("{}: {e}", raw.display())))?;
    drop(file);
    status(
        Command::new("mkfs.ext4")
            .args(["-q", "-F", "-L", "debian-root", "-d"])
            .arg(tree)
            .arg(raw),
    )
}

fn chroot_command(tree: &Path, argv: &[&str]) -> Command {
    let mut cmd = Command::new("chroot");
    cmd.arg(tree)
        .args(argv)
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .env("LC_ALL", "C");
    cmd
}

fn chroot(tree: &Path, argv: &[&str]) -> Result<(), Failed> {
    status(&mut chroot_command(tree, argv))
}

fn chroot_output(tree: &Path, argv: &[&str]) -> Result<String, Failed> {
    output(&mut chroot_command(tree, argv)).ok_or_else(|| {
        Failed(format!(
            "chroot {} {} failed",
            tree.display(),
            argv.join(" ")
        ))
    })
}

fn remove_matching(dir: &Path, matches: impl Fn(&str) -> bool) -> Result<(), Failed> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Ok(());
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !matches(&name) {
            continue;
        }
        let path = entry.path();
        let removed = if entry.file_type().is_ok_and(|t| t.is_dir()) {
            fs::remove_dir_all(&path)
        } else {
            fs::remove_file(&path)
        };
        removed.map_err(|e| Failed(format!("{}: {e}", path.display())))?;
    }
    Ok(())
}

fn write(path: &Path, bytes: &[u8]) -> Result<(), Failed> {
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent).map_err(|e| Failed(format!("{}: {e}", parent.display())))?;
    }
    // A symlink in the tree (resolv.conf, machine-id) is replaced, never
    // followed out of the tree onto the build host.
    if path.is_symlink() {
        fs::remove_file(path).map_err(|e| Failed(format!("{}: {e}", path.display())))?;
    }
    fs::write(path, bytes).map_err(|e| Failed(format!("{}: {e}", path.display())))
}

fn copy(from: &Path, to: &Path) -> Result<(), Failed> {
    fs::copy(from, to)
        .map(drop)
        .map_err(|e| Failed(format!("copy {} to {}: {e}", from.display(), to.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The image alone, without the lane's server and stages (to rebuild
    /// it by hand): `cargo test -p xtask --release builds_the_guest_image
    /// -- --ignored --nocapture`.
    #[test]
    #[ignore = "needs root and Debian's archive, takes minutes"]
    fn builds_the_guest_image() {
        let image = ensure(&crate::root()).unwrap_or_else(|Failed(why)| panic!("{why}"));
        assert!(image.disk.is_file() && image.kernel.is_file() && image.initrd.is_file());
        assert_eq!(image.sha512.len(), 128);
        // A second run finds the stamp and builds nothing.
        let again = ensure(&crate::root()).unwrap_or_else(|Failed(why)| panic!("{why}"));
        assert_eq!(again.sha512, image.sha512);
    }

    #[test]
    fn recipe_names_every_package() {
        let recipe = recipe();
        assert!(PACKAGES.iter().all(|p| recipe.contains(p)));
    }
}
