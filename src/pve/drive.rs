//! Proxmox's drive property strings (`local-zfs:vm-101-disk-0,size=40G`) and
//! the sizes written in them, as `qm config` prints them and `qm set` takes
//! them.

pub const GIB: u64 = 1 << 30;
pub const MIB: u64 = 1 << 20;

/// `size=` of a drive property string, in bytes.
pub fn drive_size(drive: &str) -> Option<u64> {
    drive
        .split(',')
        .find_map(|part| part.strip_prefix("size="))
        .and_then(parse_size)
}

/// The volume id of a drive property string (its first part).
pub fn drive_volume(drive: &str) -> &str {
    drive.split(',').next().unwrap_or(drive)
}

/// Proxmox sizes: a number with an optional `K`, `M`, `G` or `T` suffix (bytes without one).
pub fn parse_size(raw: &str) -> Option<u64> {
    let (num, unit) = match raw.char_indices().find(|(_, c)| c.is_ascii_alphabetic()) {
        Some((i, _)) => raw.split_at(i),
        None => (raw, ""),
    };
    let factor: u64 = match unit {
        "" => 1,
        "K" => 1 << 10,
        "M" => 1 << 20,
        "G" => 1 << 30,
        "T" => 1 << 40,
        _ => return None,
    };
    let value: f64 = num.parse().ok()?;
    (value >= 0.0).then_some((value * factor as f64) as u64)
}

/// Sizes as Proxmox writes them into a config: the largest unit that
/// divides the size exactly.
pub fn format_size(bytes: u64) -> String {
    for (unit, factor) in [
        ("T", 1u64 << 40),
        ("G", 1 << 30),
        ("M", 1 << 20),
        ("K", 1 << 10),
    ] {
        if bytes >= factor && bytes.is_multiple_of(factor) {
            return format!("{}{unit}", bytes / factor);
        }
    }
    bytes.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_and_format_like_proxmox() {
        assert_eq!(parse_size("40G"), Some(40 * GIB));
        assert_eq!(parse_size("512M"), Some(512 * MIB));
        assert_eq!(parse_size("1.5T"), Some(3 * (1 << 39)));
        assert_eq!(parse_size("1024"), Some(1024));
        assert_eq!(parse_size("4X"), None);
        assert_eq!(
            drive_size("local-zfs:vm-101-disk-0,iothread=1,size=32G"),
            Some(32 * GIB)
        );
        assert_eq!(drive_size("local-zfs:vm-101-cloudinit,media=cdrom"), None);
        assert_eq!(
            drive_volume("local:101/vm-101-disk-0.raw,size=2G"),
            "local:101/vm-101-disk-0.raw"
        );
        assert_eq!(format_size(32 * GIB), "32G");
        assert_eq!(format_size(2252 * MIB), "2252M");
        assert_eq!(format_size(1000), "1000");
    }
}
