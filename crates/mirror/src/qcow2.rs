//! The qcow2 header of an image, read before it is imported
//! (docs/security.md#images). A qcow2 file may name other files that QEMU
//! and `qemu-img` open with it: a backing file (`backing_file_offset`) and,
//! from version 3, an external data file (incompatible feature bit 2).
//! Importing such an image reads those files of the node — `/etc/shadow`,
//! another VM's disk — into the new VM's disk. Proxmox refuses both for
//! files from outside its own stack (pve-storage `PVE/Storage/Plugin.pm`,
//! `file_size_info` with `$untrusted`, since libpve-storage-perl 8.2.7),
//! and so does pvedeck, before the import, on every backend.
//!
//! The official cloud images of the three distributions are qcow2 files;
//! anything else (raw, VMDK, whose descriptor may name extents) is refused
//! too, as no mirror pvedeck knows publishes it.

/// How many bytes of an image the check reads: the fields used end at
/// byte 80 (version 3's header is 104 bytes and more).
pub const HEADER_BYTES: usize = 512;

const MAGIC: &[u8; 4] = b"QFI\xfb";
/// `incompatible_features` bit 2: the guest data lives in an external file.
const EXTERNAL_DATA_FILE: u64 = 1 << 2;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("it is not a qcow2 image (its first bytes are not QFI\\xfb)")]
    NotQcow2,
    #[error("its qcow2 header is cut short ({0} bytes)")]
    Short(usize),
    #[error("it is a qcow2 image of version {0}, which pvedeck does not read")]
    Version(u32),
    #[error("it names a backing file (a qcow2 image from a mirror must stand alone)")]
    BackingFile,
    #[error("it names an external data file")]
    DataFile,
}

fn be_u32(header: &[u8], at: usize) -> Option<u32> {
    let bytes: [u8; 4] = header.get(at..at + 4)?.try_into().ok()?;
    Some(u32::from_be_bytes(bytes))
}

fn be_u64(header: &[u8], at: usize) -> Option<u64> {
    let bytes: [u8; 8] = header.get(at..at + 8)?.try_into().ok()?;
    Some(u64::from_be_bytes(bytes))
}

/// Checks the first bytes of an image (at least [`HEADER_BYTES`] when the
/// file has them): a stand-alone qcow2 image, or why not.
pub fn check(header: &[u8]) -> Result<(), Refusal> {
    if header.len() < 4 || &header[..4] != MAGIC {
        return Err(Refusal::NotQcow2);
    }
    let short = || Refusal::Short(header.len());
    let version = be_u32(header, 4).ok_or_else(short)?;
    if !(2..=3).contains(&version) {
        return Err(Refusal::Version(version));
    }
    // The offset of the backing file's name; 0 when there is none.
    if be_u64(header, 8).ok_or_else(short)? != 0 {
        return Err(Refusal::BackingFile);
    }
    if version >= 3 && be_u64(header, 72).ok_or_else(short)? & EXTERNAL_DATA_FILE != 0 {
        return Err(Refusal::DataFile);
    }
    Ok(())
}

/// A qcow2 header as the tests and the simulator's mirror need it:
/// version 3, `virtual_size` bytes, optionally naming a backing file
/// and/or an external data file (what a hostile mirror would serve).
pub fn header(virtual_size: u64, backing_file: bool, data_file: bool) -> Vec<u8> {
    let mut header = vec![0u8; HEADER_BYTES];
    header[..4].copy_from_slice(MAGIC);
    header[4..8].copy_from_slice(&3u32.to_be_bytes());
    if backing_file {
        // The name right after the header, as qemu-img writes it.
        let name = b"/etc/shadow";
        header[8..16].copy_from_slice(&112u64.to_be_bytes());
        header[16..20].copy_from_slice(&(name.len() as u32).to_be_bytes());
        header[112..112 + name.len()].copy_from_slice(name);
    }
    header[20..24].copy_from_slice(&16u32.to_be_bytes());
    header[24..32].copy_from_slice(&virtual_size.to_be_bytes());
    if data_file {
        header[72..80].copy_from_slice(&EXTERNAL_DATA_FILE.to_be_bytes());
    }
    // header_length, version 3's.
    header[100..104].copy_from_slice(&104u32.to_be_bytes());
    header
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plain_qcow2_passes_and_links_to_other_files_do_not() {
        assert_eq!(check(&header(2 << 30, false, false)), Ok(()));
        assert_eq!(
            check(&header(2 << 30, true, false)),
            Err(Refusal::BackingFile)
        );
        assert_eq!(check(&header(2 << 30, false, true)), Err(Refusal::DataFile));
        // Version 2 has no feature fields: bit 2 there is not read.
        let mut v2 = header(1 << 30, false, true);
        v2[4..8].copy_from_slice(&2u32.to_be_bytes());
        assert_eq!(check(&v2), Ok(()));
    }

    #[test]
    fn anything_else_is_refused_with_its_reason() {
        assert_eq!(check(b"\0\0\0\0raw disk"), Err(Refusal::NotQcow2));
        assert_eq!(check(b"QF"), Err(Refusal::NotQcow2));
        assert_eq!(check(b"QFI\xfb\0\0\0\x03\0"), Err(Refusal::Short(9)));
        let mut v9 = header(1, false, false);
        v9[4..8].copy_from_slice(&9u32.to_be_bytes());
        assert_eq!(check(&v9), Err(Refusal::Version(9)));
        assert_eq!(
            Refusal::BackingFile.to_string(),
            "it names a backing file (a qcow2 image from a mirror must stand alone)"
        );
    }

    #[test]
    fn any_bytes_are_answered_without_a_panic() {
        for len in 0..120 {
            let bytes: Vec<u8> = (0..len).map(|i| (i * 37 % 256) as u8).collect();
            let _ = check(&bytes);
            let mut qcow = header(1, true, true);
            qcow.truncate(len);
            let _ = check(&qcow);
        }
    }
}
