#!/usr/bin/env bash
# pvedeck test variant of the init script for @OS@ @VERSION@: it prints what
# the real one would and changes nothing (INIT_SCRIPTS=test).
set -euo pipefail

root_hash="${PVEDECK_ROOT_HASH:-}"

echo "[pvedeck] test init for @OS@ @VERSION@"
if [ -n "$root_hash" ]; then
  printf '%s\n' "[pvedeck] root password hash received: ${root_hash:0:3}"
fi
echo "[pvedeck] quoting survives: \"double\" 'single' back\\slash and ünïcödé"
echo "[pvedeck] initialization complete"
