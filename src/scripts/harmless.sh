#!/usr/bin/env bash
# pvedeck test variant of the init script for @OS@ @VERSION@: it prints what
# the real one would and changes nothing (INIT_SCRIPTS=test).
set -euo pipefail

root_password="${PVEDECK_ROOT_PASSWORD:-}"
if [ -z "$root_password" ] && [ ! -t 0 ]; then
  IFS= read -r root_password || true
fi

echo "[pvedeck] test init for @OS@ @VERSION@"
if [ -n "$root_password" ]; then
  printf '%s\n' "[pvedeck] root password received"
fi
echo "[pvedeck] quoting survives: \"double\" 'single' back\\slash and ünïcödé"
echo "[pvedeck] initialization complete"
