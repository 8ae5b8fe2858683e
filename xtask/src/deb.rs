//! `cargo xtask deb`: pvedeck as a Debian package, written with `dpkg-deb`
//! from what the release build made — the binary, the site bundle, a
//! hardened systemd unit, the commented configuration as a conffile, and
//! maintainer scripts that never delete data on remove (only on purge).
//! `check` reads a built package back: its files, its control data, and
//! its unit through `systemd-analyze`.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::run::{Failed, output, status, step};

/// The files of the package besides the build's, under `xtask/deb/`.
const UNIT: &str = include_str!("../deb/pvedeck.service");
const POSTINST: &str = include_str!("../deb/postinst");
const PRERM: &str = include_str!("../deb/prerm");
const POSTRM: &str = include_str!("../deb/postrm");

const CONFFILE: &str = "etc/pvedeck/pvedeck.env";
/// What goes to `/usr/bin`.
const BINARIES: [&str; 2] = ["pvedeck", "pvedeck-cli"];
/// Paths every package must hold (without the leading `./`).
const EXPECTED: &[&str] = &[
    "usr/bin/pvedeck",
    "usr/bin/pvedeck-cli",
    "usr/share/pvedeck/site/pkg/",
    "lib/systemd/system/pvedeck.service",
    CONFFILE,
    "usr/share/doc/pvedeck/README.md",
    "usr/share/doc/pvedeck/pvedeck.env.example",
];
/// The worst `systemd-analyze security` exposure the unit may reach
/// (0 = fully locked down, 10 = none).
const MAX_EXPOSURE: f64 = 2.5;

fn io(what: &str) -> impl Fn(std::io::Error) -> Failed + '_ {
    move |e| Failed(format!("{what}: {e}"))
}

/// `dpkg-deb`, or the sentence saying how to get it.
fn dpkg_deb() -> Result<(), Failed> {
    if output(Command::new("dpkg-deb").arg("--version")).is_some() {
        Ok(())
    } else {
        Err(Failed(
            "dpkg-deb is missing: install it with `apt-get install dpkg` (Debian, Ubuntu)"
                .to_string(),
        ))
    }
}

/// The package's version: the crate's.
fn version(root: &Path) -> Result<String, Failed> {
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).map_err(io("Cargo.toml"))?;
    package_version(&manifest).ok_or_else(|| Failed("no version in Cargo.toml's [package]".into()))
}

/// `version = "…"` of the `[package]` table.
fn package_version(manifest: &str) -> Option<String> {
    let mut in_package = false;
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            in_package = line == "[package]";
        } else if in_package && let Some(rest) = line.strip_prefix("version") {
            let value = rest.trim_start().strip_prefix('=')?.trim();
            return Some(value.trim_matches('"').to_string());
        }
    }
    None
}

/// The configuration the package installs: `.env.example` with every
/// setting commented out (the service's defaults apply, and the unit's
/// `DATA_DIR` is not overridden), listening on loopback until an admin says
/// otherwise.
pub fn config_file(example: &str) -> String {
    let mut out = String::from(
        "# /etc/pvedeck/pvedeck.env: pvedeck's settings, read by pvedeck.service.\n\
         # Every setting is explained in /usr/share/doc/pvedeck/README.md. After a\n\
         # change: systemctl restart pvedeck. DATA_DIR is /var/lib/pvedeck (set by\n\
         # the unit). This file holds secrets: root:pvedeck, mode 0640.\n\n\
         # Loopback until you choose who may reach it (ALLOW_IPS, API_TOKENS).\n\
         BIND_ADDR=127.0.0.1\n\n",
    );
    for line in example.lines() {
        let setting = line
            .split_once('=')
            .is_some_and(|(k, _)| !k.is_empty() && !k.starts_with('#') && !k.contains(' '));
        if setting {
            out.push('#');
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// The package's README: the repository's, then the documents an admin of
/// an installed pvedeck needs without the repository at hand — every
/// setting (what the configuration file points to) and operations (the
/// unit, the cli backend's drop-in, metrics, the client).
fn package_readme(root: &Path) -> Result<String, Failed> {
    let mut out = String::new();
    for file in ["README.md", "docs/configuration.md", "docs/operations.md"] {
        let text = std::fs::read_to_string(root.join(file)).map_err(io(file))?;
        if !out.is_empty() {
            out.push_str("\n---\n\n");
        }
        out.push_str(&text);
    }
    Ok(out)
}

fn arch() -> Result<String, Failed> {
    output(Command::new("dpkg").arg("--print-architecture"))
        .map(|a| a.trim().to_string())
        .ok_or_else(|| Failed("cannot run dpkg --print-architecture".to_string()))
}

fn control(version: &str, arch: &str, installed_kib: u64) -> String {
    format!(
        "Package: pvedeck\n\
         Version: {version}\n\
         Architecture: {arch}\n\
         Maintainer: pvedeck maintainers <pvedeck@localhost>\n\
         Installed-Size: {installed_kib}\n\
         Depends: adduser, openssh-client\n\
         Section: admin\n\
         Priority: optional\n\
         Homepage: https://pvedeck.invalid/\n\
         Description: create and run QEMU/KVM VMs on a Proxmox VE cluster\n \
         One request turns into a ready VM (VMID and address chosen, cloud\n \
         image fetched, created, imported, booted, initialised) while every\n \
         step streams live to the browser or to a script. Talks to Proxmox\n \
         through its REST API with a scoped token, or runs qm/pvesh on a node.\n"
    )
}

fn write(path: &Path, text: &str, mode: u32) -> Result<(), Failed> {
    use std::os::unix::fs::PermissionsExt;
    let shown = path.display().to_string();
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(io(&shown))?;
    }
    std::fs::write(path, text).map_err(io(&shown))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(io(&shown))
}

fn copy_tree(from: &Path, to: &Path) -> Result<u64, Failed> {
    let mut bytes = 0;
    std::fs::create_dir_all(to).map_err(io("site dir"))?;
    for entry in std::fs::read_dir(from).map_err(io("target/site"))? {
        let entry = entry.map_err(io("target/site"))?;
        let (src, dst) = (entry.path(), to.join(entry.file_name()));
        if entry.file_type().map_err(io("target/site"))?.is_dir() {
            bytes += copy_tree(&src, &dst)?;
        } else {
            bytes += std::fs::copy(&src, &dst).map_err(io("site file"))?;
        }
    }
    Ok(bytes)
}

/// Builds `target/debian/pvedeck_<version>_<arch>.deb` from the release
/// binary and `target/site` (both built already); its path.
pub fn build(root: &Path) -> Result<PathBuf, Failed> {
    step("the Debian package (dpkg-deb)", || {
        dpkg_deb()?;
        let (version, arch) = (version(root)?, arch()?);
        let out = root.join("target/debian");
        let stage = out.join(format!("pvedeck_{version}_{arch}"));
        if stage.exists() {
            std::fs::remove_dir_all(&stage).map_err(io("target/debian"))?;
        }
        // The server and its command-line client.
        std::fs::create_dir_all(stage.join("usr/bin")).map_err(io("stage"))?;
        let mut bin_len = 0;
        for name in BINARIES {
            let built = format!("target/release/{name}");
            let bin = std::fs::read(root.join(&built)).map_err(io(&built))?;
            let staged = stage.join("usr/bin").join(name);
            std::fs::write(&staged, &bin).map_err(io("stage"))?;
            {
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(&staged, std::fs::Permissions::from_mode(0o755))
                    .map_err(io("stage"))?;
            }
            // As dh_strip does: symbols are half the binary.
            if output(Command::new("strip").arg("--version")).is_some() {
                status(Command::new("strip").arg("--strip-unneeded").arg(&staged))?;
            }
            bin_len += std::fs::metadata(&staged).map_err(io("stage"))?.len();
        }
        let site = copy_tree(
            &root.join("target/site"),
            &stage.join("usr/share/pvedeck/site"),
        )?;
        let example =
            std::fs::read_to_string(root.join(".env.example")).map_err(io(".env.example"))?;
        let readme = package_readme(root)?;
        let doc = stage.join("usr/share/doc/pvedeck");
        write(&doc.join("README.md"), &readme, 0o644)?;
        write(&doc.join("pvedeck.env.example"), &example, 0o644)?;
        write(
            &stage.join("lib/systemd/system/pvedeck.service"),
            UNIT,
            0o644,
        )?;
        // 0640 root:pvedeck once postinst has made the user.
        write(&stage.join(CONFFILE), &config_file(&example), 0o600)?;
        let debian = stage.join("DEBIAN");
        write(&debian.join("postinst"), POSTINST, 0o755)?;
        write(&debian.join("prerm"), PRERM, 0o755)?;
        write(&debian.join("postrm"), POSTRM, 0o755)?;
        write(&debian.join("conffiles"), &format!("/{CONFFILE}\n"), 0o644)?;
        let kib = (bin_len + site + readme.len() as u64 + 2 * example.len() as u64).div_ceil(1024);
        write(
            &debian.join("control"),
            &control(&version, &arch, kib),
            0o644,
        )?;

        let deb = out.join(format!("pvedeck_{version}_{arch}.deb"));
        status(
            Command::new("dpkg-deb")
                .args(["--root-owner-group", "-Zxz", "--build"])
                .arg(&stage)
                .arg(&deb),
        )?;
        println!("    {}", deb.display());
        Ok(deb)
    })
}

/// Reads a built package back: what it holds, its control data and
/// conffiles, its maintainer scripts (`sh -n`), and its unit
/// (`systemd-analyze verify` and `security`, where systemd is installed).
pub fn check(root: &Path, deb: &Path) -> Result<(), Failed> {
    step("check the Debian package", || {
        let listing = output(Command::new("dpkg-deb").arg("-c").arg(deb))
            .ok_or_else(|| Failed("dpkg-deb -c failed".to_string()))?;
        check_listing(&listing)?;
        let info = output(Command::new("dpkg-deb").arg("-I").arg(deb))
            .ok_or_else(|| Failed("dpkg-deb -I failed".to_string()))?;
        for field in [
            "Package: pvedeck",
            "Depends: adduser, openssh-client",
            "conffiles",
            "postinst",
            "postrm",
        ] {
            if !info.contains(field) {
                return Err(Failed(format!("dpkg-deb -I shows no {field}:\n{info}")));
            }
        }
        let unpacked = root.join("target/debian/check");
        let _ = std::fs::remove_dir_all(&unpacked);
        status(Command::new("dpkg-deb").arg("-R").arg(deb).arg(&unpacked))?;
        for script in ["postinst", "prerm", "postrm"] {
            status(
                Command::new("sh")
                    .arg("-n")
                    .arg(unpacked.join("DEBIAN").join(script)),
            )?;
        }
        let conffiles =
            std::fs::read_to_string(unpacked.join("DEBIAN/conffiles")).map_err(io("conffiles"))?;
        if conffiles.trim() != format!("/{CONFFILE}") {
            return Err(Failed(format!("conffiles: {conffiles}")));
        }
        check_unit(&unpacked)
    })
}

/// Every expected path is in `dpkg-deb -c`'s listing, owned by root.
fn check_listing(listing: &str) -> Result<(), Failed> {
    for path in EXPECTED {
        let line = listing
            .lines()
            .find(|l| l.ends_with(&format!("./{path}")))
            .ok_or_else(|| Failed(format!("the package lacks /{path}:\n{listing}")))?;
        if !line.contains("root/root") {
            return Err(Failed(format!("/{path} is not root's: {line}")));
        }
    }
    Ok(())
}

fn check_unit(unpacked: &Path) -> Result<(), Failed> {
    if output(Command::new("systemd-analyze").arg("--version")).is_none() {
        println!("    systemd-analyze not installed: unit not verified");
        return Ok(());
    }
    // `verify` wants the ExecStart binary where the unit says: a copy of
    // the unit pointing into the unpacked package.
    let unit = std::fs::read_to_string(unpacked.join("lib/systemd/system/pvedeck.service"))
        .map_err(io("pvedeck.service"))?;
    let bin = unpacked.join("usr/bin/pvedeck");
    let copy = unpacked.join("pvedeck.service");
    write(
        &copy,
        &unit.replace(
            "ExecStart=/usr/bin/pvedeck",
            &format!("ExecStart={}", bin.display()),
        ),
        0o644,
    )?;
    status(Command::new("systemd-analyze").arg("verify").arg(&copy))?;
    let report = Command::new("systemd-analyze")
        .args(["security", "--offline=yes"])
        .arg(&copy)
        .output()
        .map_err(io("systemd-analyze security"))?;
    let text = String::from_utf8_lossy(&report.stdout);
    let level = exposure(&text).ok_or_else(|| Failed(format!("no exposure level in:\n{text}")))?;
    println!("    systemd-analyze security: exposure {level:.1}");
    if level > MAX_EXPOSURE {
        return Err(Failed(format!(
            "the unit's exposure is {level:.1}, above {MAX_EXPOSURE}"
        )));
    }
    Ok(())
}

/// `→ Overall exposure level for pvedeck.service: 1.8 OK 🙂` → 1.8
fn exposure(report: &str) -> Option<f64> {
    let line = report
        .lines()
        .find(|l| l.contains("Overall exposure level"))?;
    line.rsplit_once(": ")?
        .1
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_version_is_the_package_table_s() {
        let manifest = "[workspace]\nversion = \"9\"\n[package]\nname = \"pvedeck\"\nversion = \"0.1.0\"\n[dependencies]\nx = { version = \"1\" }\n";
        assert_eq!(package_version(manifest).as_deref(), Some("0.1.0"));
    }

    #[test]
    fn the_config_file_comments_every_setting_and_listens_on_loopback() {
        let example = "# server\nPORT=8080\nDATA_DIR=./data\n#IMAGE_FETCH=download\n# a = b text\n";
        let file = config_file(example);
        let active: Vec<&str> = file
            .lines()
            .filter(|l| !l.starts_with('#') && l.contains('='))
            .collect();
        assert_eq!(active, ["BIND_ADDR=127.0.0.1"]);
        assert!(file.contains("\n#PORT=8080\n"));
        assert!(file.contains("\n#DATA_DIR=./data\n"));
        assert!(file.contains("\n#IMAGE_FETCH=download\n"));
    }

    #[test]
    fn the_exposure_level_is_read_from_the_report() {
        let report = "✓ UMask= …\n\n→ Overall exposure level for pvedeck.service: 1.8 OK 🙂\n";
        assert_eq!(exposure(report), Some(1.8));
        assert_eq!(exposure("nothing"), None);
    }

    #[test]
    fn a_missing_path_or_a_foreign_owner_fails_the_listing() {
        let good: String = EXPECTED
            .iter()
            .map(|p| format!("-rw-r--r-- root/root 1 2026-12-05 12:00 ./{p}\n"))
            .collect();
        assert!(check_listing(&good).is_ok());
        let lacking = good.replace("./usr/bin/pvedeck\n", "./usr/bin/other\n");
        assert!(check_listing(&lacking).is_err());
        let foreign = good.replace(
            "root/root 1 2026-12-05 12:00 ./usr/bin/pvedeck",
            "user/user 1 2026-12-05 12:00 ./usr/bin/pvedeck",
        );
        assert!(check_listing(&foreign).is_err());
    }
}
