//! Memory options of `qm create` and `qm set` with the balloon rules of
//! docs/provisioning.md#balloon-rules.

use pvedeck_proxmox::QmOptions;

/// `--balloon <n>` for a VM of `ram_mb` when `VM_BALLOON_MIN` is `min`:
/// 64 GB and more → 49152; at least `min` + 1024 → `ram_mb` − `min`;
/// otherwise none.
pub fn balloon(ram_mb: u64, min: Option<u32>) -> Option<u64> {
    let min = u64::from(min?);
    if ram_mb <= min {
        None
    } else if ram_mb >= 65_536 {
        Some(49_152)
    } else if ram_mb >= min + 1024 {
        Some(ram_mb - min)
    } else {
        None
    }
}

/// `--numa 1 --balloon <n>` when the rules give a balloon, else nothing.
pub fn balloon_options(ram_mb: u64, min: Option<u32>) -> QmOptions {
    balloon(ram_mb, min)
        .map(|b| {
            vec![
                ("numa".into(), "1".into()),
                ("balloon".into(), b.to_string()),
            ]
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn balloon_rules_of_spec_3_4() {
        let min = Some(2048);
        assert_eq!(balloon(2048, min), None);
        assert_eq!(balloon(3000, min), None);
        assert_eq!(balloon(3072, min), Some(1024));
        assert_eq!(balloon(8192, min), Some(6144));
        assert_eq!(balloon(65_536, min), Some(49_152));
        assert_eq!(balloon(8192, None), None);
    }

    #[test]
    fn numa_goes_with_the_balloon() {
        let pairs = |o: QmOptions| {
            o.into_iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            pairs(balloon_options(8192, Some(2048))),
            ["numa=1", "balloon=6144"]
        );
        assert!(balloon_options(8192, None).is_empty());
    }
}
