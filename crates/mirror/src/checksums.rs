//! The checksum lists mirrors publish beside their images (docs/security.md#images): Debian's
//! `SHA512SUMS` and Ubuntu's `SHA256SUMS` in `sha*sum`'s own format, Rocky's
//! `CHECKSUM` in the BSD (`--tag`) format with `#` comments. pvedeck's record
//! of a verified cache file uses the `sha*sum` format as well, so that an
//! admin can run `sha512sum -c` on it.

use pvedeck_domain::os::Os;
use sha2::Digest;

/// A hash a mirror publishes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algo {
    Sha256,
    Sha512,
}

impl Algo {
    /// `SHA-512`, as messages name it.
    pub fn name(self) -> &'static str {
        match self {
            Algo::Sha256 => "SHA-256",
            Algo::Sha512 => "SHA-512",
        }
    }

    /// The tag of a BSD-style line: `SHA512 (file) = …`.
    fn tag(self) -> &'static str {
        match self {
            Algo::Sha256 => "SHA256",
            Algo::Sha512 => "SHA512",
        }
    }

    /// `sha512`: the extension of the cache's record of a verified image.
    pub fn extension(self) -> &'static str {
        match self {
            Algo::Sha256 => "sha256",
            Algo::Sha512 => "sha512",
        }
    }

    fn hex_len(self) -> usize {
        match self {
            Algo::Sha256 => 64,
            Algo::Sha512 => 128,
        }
    }

    pub fn hasher(self) -> Hasher {
        match self {
            Algo::Sha256 => Hasher::Sha256(sha2::Sha256::new()),
            Algo::Sha512 => Hasher::Sha512(sha2::Sha512::new()),
        }
    }

    /// The lower-case hex digest of `bytes`.
    pub fn hex(self, bytes: &[u8]) -> String {
        let mut hasher = self.hasher();
        hasher.update(bytes);
        hasher.finish()
    }
}

/// A running hash of one of the [`Algo`]s.
pub enum Hasher {
    Sha256(sha2::Sha256),
    Sha512(sha2::Sha512),
}

impl Hasher {
    pub fn update(&mut self, bytes: &[u8]) {
        match self {
            Hasher::Sha256(h) => h.update(bytes),
            Hasher::Sha512(h) => h.update(bytes),
        }
    }

    /// The lower-case hex digest.
    pub fn finish(self) -> String {
        match self {
            Hasher::Sha256(h) => hex(&h.finalize()),
            Hasher::Sha512(h) => hex(&h.finalize()),
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// The list a mirror of `os` publishes in the image's directory, and its hash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Published {
    pub list: &'static str,
    pub algo: Algo,
    /// Where the list's detached signature may be, in the same directory,
    /// tried in this order (docs/security.md#images): Ubuntu's
    /// `SHA256SUMS.gpg`; `SHA512SUMS.sign` as Debian's CD images have it
    /// (its cloud images publish none); `CHECKSUM.sig` as Rocky 8 had it
    /// and `CHECKSUM.asc`. A list that is itself cleartext-signed needs none.
    pub signatures: &'static [&'static str],
}

pub fn published(os: Os) -> Published {
    match os {
        Os::Debian => Published {
            list: "SHA512SUMS",
            algo: Algo::Sha512,
            signatures: &["SHA512SUMS.sign"],
        },
        Os::Ubuntu => Published {
            list: "SHA256SUMS",
            algo: Algo::Sha256,
            signatures: &["SHA256SUMS.gpg"],
        },
        Os::Rockylinux => Published {
            list: "CHECKSUM",
            algo: Algo::Sha256,
            signatures: &["CHECKSUM.sig", "CHECKSUM.asc"],
        },
    }
}

#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum ListError {
    /// Something answered 200 that is no checksum list (an HTML page of a
    /// proxy, a truncated file): not the same as a mirror without one.
    #[error("it holds no {} checksum line", .0.name())]
    NotAList(Algo),
    #[error("it gives {file} two different checksums")]
    Conflict { file: String },
}

/// `<hex>  <file>` (text mode) or `<hex> *<file>` (binary mode), as
/// `sha512sum` writes them; a bare `<hex> <file>` is taken too.
fn gnu_line(line: &str, algo: Algo) -> Option<(&str, &str)> {
    let (hex, rest) = line.split_once(' ')?;
    let file = rest
        .strip_prefix('*')
        .or_else(|| rest.strip_prefix(' '))
        .unwrap_or(rest);
    Some((valid_hex(hex, algo)?, file))
}

/// `SHA256 (<file>) = <hex>`, as `sha256sum --tag` and Rocky write them.
fn bsd_line(line: &str, algo: Algo) -> Option<(&str, &str)> {
    let rest = line.strip_prefix(algo.tag())?.strip_prefix(" (")?;
    let (file, hex) = rest.rsplit_once(") = ")?;
    Some((valid_hex(hex, algo)?, file))
}

fn valid_hex(hex: &str, algo: Algo) -> Option<&str> {
    (hex.len() == algo.hex_len() && hex.bytes().all(|b| b.is_ascii_hexdigit())).then_some(hex)
}

/// The checksum `list` gives `file` (lower-case hex), in either format;
/// `None` when it lists other files only. Lines of neither format
/// (comments, sizes, other hashes) are skipped.
pub fn find(list: &str, algo: Algo, file: &str) -> Result<Option<String>, ListError> {
    let mut lines = 0;
    let mut found: Option<String> = None;
    for line in list.lines() {
        let line = line.trim_end_matches('\r');
        let Some((hex, name)) = bsd_line(line, algo).or_else(|| gnu_line(line, algo)) else {
            continue;
        };
        lines += 1;
        // Some lists name files from their directory (`./file`).
        if name.strip_prefix("./").unwrap_or(name) != file {
            continue;
        }
        let hex = hex.to_ascii_lowercase();
        match &found {
            Some(earlier) if *earlier != hex => {
                return Err(ListError::Conflict {
                    file: file.to_string(),
                });
            }
            _ => found = Some(hex),
        }
    }
    if lines == 0 {
        return Err(ListError::NotAList(algo));
    }
    Ok(found)
}

/// The record of a verified cache file, in `sha*sum`'s format.
pub fn record_line(hex: &str, file: &str) -> String {
    format!("{hex}  {file}\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEBIAN_12: &str = "debian-12-generic-amd64.qcow2";

    fn sha512(c: char) -> String {
        c.to_string().repeat(128)
    }

    fn sha256(c: char) -> String {
        c.to_string().repeat(64)
    }

    #[test]
    fn debian_sha512sums_in_text_mode() {
        let list = format!(
            "{}  debian-12-generic-amd64.json\n{}  {DEBIAN_12}\n{}  debian-12-generic-amd64.raw\n",
            sha512('1'),
            sha512('a'),
            sha512('2'),
        );
        let found = find(&list, Algo::Sha512, DEBIAN_12);
        assert_eq!(found, Ok(Some(sha512('a'))));
    }

    #[test]
    fn ubuntu_sha256sums_in_binary_mode() {
        let file = "ubuntu-24.04-server-cloudimg-amd64.img";
        let list = format!(
            "{} *ubuntu-24.04-server-cloudimg-amd64.tar.gz\r\n{} *{file}\r\n",
            sha256('0'),
            sha256('B'),
        );
        assert_eq!(find(&list, Algo::Sha256, file), Ok(Some(sha256('b'))));
    }

    #[test]
    fn rocky_checksum_in_bsd_format_with_comments() {
        let file = "Rocky-9-GenericCloud-Base.latest.x86_64.qcow2";
        let list = format!(
            "# Rocky-9-GenericCloud-Base-9.5-20241118.0.x86_64.qcow2: 609812480 bytes\n\
             SHA256 (Rocky-9-GenericCloud-Base-9.5-20241118.0.x86_64.qcow2) = {}\n\
             # {file}: 609812480 bytes\n\
             SHA256 ({file}) = {}\n",
            sha256('c'),
            sha256('d'),
        );
        assert_eq!(find(&list, Algo::Sha256, file), Ok(Some(sha256('d'))));
    }

    #[test]
    fn a_list_without_the_file_gives_nothing() {
        let list = format!("{}  debian-12-generic-amd64.raw\n", sha512('1'));
        assert_eq!(find(&list, Algo::Sha512, DEBIAN_12), Ok(None));
        // A name that only ends like the file is another file.
        let list = format!("{}  old-{DEBIAN_12}\n", sha512('1'));
        assert_eq!(find(&list, Algo::Sha512, DEBIAN_12), Ok(None));
    }

    #[test]
    fn garbage_lines_are_skipped_and_a_list_of_garbage_is_no_list() {
        let list = format!(
            "<html>\n\n{}  {DEBIAN_12}\nzz{}  {DEBIAN_12}\nSHA512 ({DEBIAN_12}) = short\n{}  {DEBIAN_12}\n",
            sha256('e'),
            &sha512('f')[2..],
            sha512('9'),
        );
        assert_eq!(find(&list, Algo::Sha512, DEBIAN_12), Ok(Some(sha512('9'))));

        let page = "<html><body>Welcome to our proxy</body></html>\n";
        assert_eq!(
            find(page, Algo::Sha512, DEBIAN_12),
            Err(ListError::NotAList(Algo::Sha512))
        );
        assert_eq!(
            find("", Algo::Sha256, DEBIAN_12).map_err(|e| e.to_string()),
            Err("it holds no SHA-256 checksum line".to_string())
        );
        // SHA-256 lines do not count in a list where SHA-512 is expected.
        let list = format!("{}  {DEBIAN_12}\n", sha256('1'));
        assert_eq!(
            find(&list, Algo::Sha512, DEBIAN_12),
            Err(ListError::NotAList(Algo::Sha512))
        );
    }

    #[test]
    fn two_different_checksums_for_the_file_are_refused() {
        let list = format!(
            "{}  {DEBIAN_12}\n{}  ./{DEBIAN_12}\n",
            sha512('1'),
            sha512('2')
        );
        assert_eq!(
            find(&list, Algo::Sha512, DEBIAN_12),
            Err(ListError::Conflict {
                file: DEBIAN_12.to_string()
            })
        );
        let same = format!(
            "{}  {DEBIAN_12}\n{}  {DEBIAN_12}\n",
            sha512('1'),
            sha512('1')
        );
        assert_eq!(find(&same, Algo::Sha512, DEBIAN_12), Ok(Some(sha512('1'))));
    }

    #[test]
    fn a_record_reads_back_and_digests_are_the_known_ones() {
        let hex = Algo::Sha256.hex(b"abc");
        assert_eq!(
            hex,
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert!(Algo::Sha512.hex(b"abc").starts_with("ddaf35a193617aba"));
        let record = record_line(&hex, DEBIAN_12);
        assert_eq!(find(&record, Algo::Sha256, DEBIAN_12), Ok(Some(hex)));
    }
}
