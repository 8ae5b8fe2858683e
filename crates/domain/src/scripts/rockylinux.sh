#!/usr/bin/env bash
# pvedeck initialization for Rocky Linux @VERSION@.
# pvedeck runs this as root over SSH after the VM's first boot. Running it
# again changes nothing that is already in place.
# The root password arrives as its SHA-512 crypt hash in PVEDECK_ROOT_HASH
# (set at the top of the copy pvedeck sends; empty leaves root's password
# alone): the clear text never leaves pvedeck.
set -euo pipefail

root_hash="${PVEDECK_ROOT_HASH:-}"
timezone="${PVEDECK_TIMEZONE:-Etc/UTC}"

echo "[pvedeck] waiting for cloud-init to finish"
cloud-init status --wait >/dev/null 2>&1 || true

echo "[pvedeck] installing qemu-guest-agent"
dnf -y -q install qemu-guest-agent glibc-langpack-en

echo "[pvedeck] enabling qemu-guest-agent"
systemctl enable qemu-guest-agent
systemctl start qemu-guest-agent || true

echo "[pvedeck] setting the locale to en_US.UTF-8"
localectl set-locale LANG=en_US.UTF-8

echo "[pvedeck] setting the timezone"
timedatectl set-timezone "$timezone"

if [ -n "$root_hash" ]; then
  echo "[pvedeck] setting the root password"
  printf 'root:%s\n' "$root_hash" | chpasswd -e
fi

echo "[pvedeck] adding 2G of swap"
if ! swapon --show=NAME --noheadings | grep -qx /swapfile; then
  if [ ! -f /swapfile ]; then
    # XFS swap files must be written out, not fallocated.
    dd if=/dev/zero of=/swapfile bs=1M count=2048 status=none
    chmod 600 /swapfile
    mkswap /swapfile >/dev/null
  fi
  swapon /swapfile
fi
grep -q '^/swapfile ' /etc/fstab || echo '/swapfile none swap sw 0 0' >> /etc/fstab

echo "[pvedeck] initialization complete"
