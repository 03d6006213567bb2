#!/usr/bin/env bash
# Installs the Debian packages listed in scripts/system-deps.txt that are missing.
# Runs apt-get only when something is missing, so a prepared machine stays offline.
set -euo pipefail
cd "$(dirname "$0")"
missing=()
while read -r pkg; do
  [[ -z "$pkg" || "$pkg" == \#* ]] && continue
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" \
    || missing+=("$pkg")
done < system-deps.txt
[[ ${#missing[@]} -eq 0 ]] && exit 0
echo "installing Debian packages: ${missing[*]}"
SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO="sudo"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
