#!/usr/bin/env bash
# pvedeck initialization for @OS@ @VERSION@ (@CODENAME@).
# pvedeck runs this as root over SSH after the VM's first boot. Running it
# again changes nothing that is already in place.
# The root password arrives as its SHA-512 crypt hash in PVEDECK_ROOT_HASH
# (set at the top of the copy pvedeck sends; empty leaves root's password
# alone): the clear text never leaves pvedeck.
set -euo pipefail

root_hash="${PVEDECK_ROOT_HASH:-}"
timezone="${PVEDECK_TIMEZONE:-Etc/UTC}"
export DEBIAN_FRONTEND=noninteractive

echo "[pvedeck] waiting for cloud-init to finish"
cloud-init status --wait >/dev/null 2>&1 || true

echo "[pvedeck] waiting for the package manager"
while fuser /var/lib/dpkg/lock-frontend /var/lib/apt/lists/lock >/dev/null 2>&1; do
  sleep 2
done

echo "[pvedeck] updating package lists"
apt-get update -q

echo "[pvedeck] installing qemu-guest-agent"
apt-get install -y -q --no-install-recommends qemu-guest-agent locales ca-certificates curl

echo "[pvedeck] enabling qemu-guest-agent"
systemctl enable qemu-guest-agent
systemctl start qemu-guest-agent || true

echo "[pvedeck] setting the locale to en_US.UTF-8"
sed -i 's/^# *\(en_US.UTF-8 UTF-8\)/\1/' /etc/locale.gen
grep -q '^en_US.UTF-8 UTF-8' /etc/locale.gen || echo 'en_US.UTF-8 UTF-8' >> /etc/locale.gen
locale-gen >/dev/null
update-locale LANG=en_US.UTF-8

echo "[pvedeck] setting the timezone"
timedatectl set-timezone "$timezone"

if [ -n "$root_hash" ]; then
  echo "[pvedeck] setting the root password"
  printf 'root:%s\n' "$root_hash" | chpasswd -e
fi

echo "[pvedeck] adding 2G of swap"
if ! swapon --show=NAME --noheadings | grep -qx /swapfile; then
  if [ ! -f /swapfile ]; then
    fallocate -l 2G /swapfile
    chmod 600 /swapfile
    mkswap /swapfile >/dev/null
  fi
  swapon /swapfile
fi
grep -q '^/swapfile ' /etc/fstab || echo '/swapfile none swap sw 0 0' >> /etc/fstab

echo "[pvedeck] initialization complete"
