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
    // Whole numbers exactly: through f64, a size past 2^53 bytes came back
    // rounded, and one past u64 as u64::MAX.
    if let Ok(n) = num.parse::<u64>() {
        return n.checked_mul(factor);
    }
    let value: f64 = num.parse().ok()?;
    let bytes = value * factor as f64;
    (value >= 0.0 && bytes < u64::MAX as f64).then_some(bytes as u64)
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

/// Property tests: any text read as a size or a drive string is a size or
/// nothing, never a panic; every size written reads back as itself.
#[cfg(test)]
mod fuzz {
    use proptest::prelude::*;

    use super::*;
    use pvedeck_testkit::{config, output};

    const SEEDS: &[&str] = &[
        "local-zfs:vm-101-disk-0,iothread=1,size=32G",
        "local:101/vm-101-disk-0.raw,discard=on,size=2252M",
        "local-lvm:vm-101-cloudinit,media=cdrom,size=4M",
        "nas:base-9000-disk-0/vm-251-disk-0,size=1.5T",
        "40G",
        "1024",
    ];

    /// Sizes as Proxmox writes them, and the sizes around each unit.
    fn size() -> impl Strategy<Value = u64> {
        prop_oneof![
            any::<u64>(),
            (0u64..=1 << 24, 0u32..=4).prop_map(|(n, unit)| n << (10 * unit)),
            (0u32..64, -2i64..=2).prop_map(|(bit, d)| (1u64 << bit).saturating_add_signed(d)),
        ]
    }

    proptest! {
        #![proptest_config(config(4000))]

        #[test]
        fn any_text_is_a_size_or_nothing(text in output(SEEDS)) {
            let _ = parse_size(&text);
            let _ = drive_size(&text);
            let volume = drive_volume(&text);
            prop_assert!(text.starts_with(volume) && !volume.contains(','));
        }

        #[test]
        fn sizes_read_back_as_written(bytes in size()) {
            let written = format_size(bytes);
            prop_assert_eq!(parse_size(&written), Some(bytes), "{}", written);
        }

        #[test]
        fn a_drive_string_tells_its_size_and_volume(
            volume in "[a-z][a-z0-9-]{0,12}:[a-z0-9/.-]{1,30}",
            before in prop::collection::vec("[a-z]{1,8}=[a-z0-9]{0,8}", 0..3),
            after in prop::collection::vec("[a-z]{1,8}=[a-z0-9]{0,8}", 0..3),
            bytes in size(),
        ) {
            // A drive string has one `size=`, where Proxmox puts it or not.
            let before: Vec<_> = before.into_iter().filter(|o| !o.starts_with("size=")).collect();
            let mut parts = vec![volume.clone()];
            parts.extend(before);
            parts.push(format!("size={}", format_size(bytes)));
            parts.extend(after);
            let drive = parts.join(",");
            prop_assert_eq!(drive_volume(&drive), volume.as_str());
            prop_assert_eq!(drive_size(&drive), Some(bytes));
        }
    }
}
