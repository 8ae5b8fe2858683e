//! The operating systems pvedeck installs (docs/provisioning.md#os-images): the one table of
//! releases, their cloud image locations and default users. The server, the
//! request checks, the OpenAPI document and the create form all read it.

use serde::{Deserialize, Serialize};

/// An OS family pvedeck installs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum Os {
    Debian,
    Ubuntu,
    Rockylinux,
}

impl Os {
    pub const ALL: [Os; 3] = [Os::Debian, Os::Ubuntu, Os::Rockylinux];

    /// The name clients send and VMs are tagged with.
    pub fn name(self) -> &'static str {
        match self {
            Os::Debian => "debian",
            Os::Ubuntu => "ubuntu",
            Os::Rockylinux => "rockylinux",
        }
    }

    pub fn parse(name: &str) -> Option<Os> {
        Os::ALL.into_iter().find(|os| os.name() == name)
    }

    /// `debian, ubuntu, rockylinux`: for messages that list what is accepted.
    pub fn names() -> String {
        Os::ALL.map(Os::name).join(", ")
    }

    /// The cloud image's default user.
    pub fn default_user(self) -> &'static str {
        match self {
            Os::Debian => "debian",
            Os::Ubuntu => "ubuntu",
            Os::Rockylinux => "rocky",
        }
    }

    /// The versions pvedeck installs, oldest first.
    pub fn versions(self) -> Vec<&'static str> {
        RELEASES
            .iter()
            .filter(|r| r.os == self)
            .map(|r| r.version)
            .collect()
    }
}

impl std::fmt::Display for Os {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One installable release.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Release {
    pub os: Os,
    pub version: &'static str,
    /// Debian's codename (part of the image path); the version elsewhere.
    pub codename: &'static str,
}

pub const RELEASES: [Release; 9] = [
    release(Os::Debian, "11", "bullseye"),
    release(Os::Debian, "12", "bookworm"),
    release(Os::Debian, "13", "trixie"),
    release(Os::Ubuntu, "20.04", "20.04"),
    release(Os::Ubuntu, "22.04", "22.04"),
    release(Os::Ubuntu, "24.04", "24.04"),
    release(Os::Rockylinux, "8", "8"),
    release(Os::Rockylinux, "9", "9"),
    release(Os::Rockylinux, "10", "10"),
];

const fn release(os: Os, version: &'static str, codename: &'static str) -> Release {
    Release {
        os,
        version,
        codename,
    }
}

pub fn find(os: Os, version: &str) -> Option<Release> {
    RELEASES
        .iter()
        .find(|r| r.os == os && r.version == version)
        .copied()
}

impl Release {
    /// The image's file name, also its name in the cache.
    pub fn file_name(&self) -> String {
        let v = self.version;
        match self.os {
            Os::Debian => format!("debian-{v}-generic-amd64.qcow2"),
            Os::Ubuntu => format!("ubuntu-{v}-server-cloudimg-amd64.img"),
            Os::Rockylinux => format!("Rocky-{v}-GenericCloud-Base.latest.x86_64.qcow2"),
        }
    }

    /// The official directory the image lives in.
    fn official_base(&self) -> String {
        match self.os {
            Os::Debian => format!(
                "https://cloud.debian.org/images/cloud/{}/latest",
                self.codename
            ),
            Os::Ubuntu => format!(
                "https://cloud-images.ubuntu.com/releases/{}/release",
                self.version
            ),
            Os::Rockylinux => format!(
                "https://dl.rockylinux.org/pub/rocky/{}/images/x86_64",
                self.version
            ),
        }
    }

    /// The image URL; `base` (`IMAGE_BASE_<OS>`) replaces the directory.
    pub fn image_url(&self, base: Option<&str>) -> String {
        let dir = base.map_or_else(|| self.official_base(), str::to_string);
        format!("{dir}/{}", self.file_name())
    }

    /// `tpl-debian-12`: the name of the release's golden template.
    pub fn template_name(&self) -> String {
        format!("tpl-{}-{}", self.os, self.version)
    }

    /// `debian_12.sh`: the init script's name under `/sh/`.
    pub fn script_name(&self) -> String {
        format!("{}_{}.sh", self.os, self.version)
    }

    /// The release a script name (`debian_12.sh`) stands for.
    pub fn from_script_name(name: &str) -> Option<Release> {
        let (os, version) = name.strip_suffix(".sh")?.split_once('_')?;
        find(Os::parse(os)?, version)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_follow_spec_3_2() {
        let d = find(Os::Debian, "12").unwrap();
        assert_eq!(
            d.image_url(None),
            "https://cloud.debian.org/images/cloud/bookworm/latest/debian-12-generic-amd64.qcow2"
        );
        assert_eq!(
            find(Os::Ubuntu, "24.04").unwrap().image_url(None),
            "https://cloud-images.ubuntu.com/releases/24.04/release/ubuntu-24.04-server-cloudimg-amd64.img"
        );
        assert_eq!(
            find(Os::Rockylinux, "9").unwrap().image_url(None),
            "https://dl.rockylinux.org/pub/rocky/9/images/x86_64/Rocky-9-GenericCloud-Base.latest.x86_64.qcow2"
        );
        assert_eq!(
            d.image_url(Some("http://127.0.0.1:9000/mirror")),
            "http://127.0.0.1:9000/mirror/debian-12-generic-amd64.qcow2"
        );
    }

    #[test]
    fn nine_releases_and_their_users() {
        assert_eq!(Os::Debian.versions(), ["11", "12", "13"]);
        assert_eq!(Os::Ubuntu.versions(), ["20.04", "22.04", "24.04"]);
        assert_eq!(Os::Rockylinux.versions(), ["8", "9", "10"]);
        assert_eq!(Os::Rockylinux.default_user(), "rocky");
        assert!(find(Os::Debian, "10").is_none());
        assert_eq!(Os::names(), "debian, ubuntu, rockylinux");
        assert_eq!(Os::parse("rockylinux"), Some(Os::Rockylinux));
        assert_eq!(Os::parse("arch"), None);
    }

    #[test]
    fn script_names_round_trip() {
        for release in RELEASES {
            assert_eq!(
                Release::from_script_name(&release.script_name()),
                Some(release)
            );
        }
        assert_eq!(Release::from_script_name("debian_10.sh"), None);
        assert_eq!(Release::from_script_name("debian_12"), None);
    }
}
