#!/bin/sh
# Installs what vramd needs to build and test on Debian 12 (run as root).
set -eu
pkgs="build-essential cmake pkg-config libuv1-dev libcjson-dev systemd"
missing=""
for p in $pkgs; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
    echo "== installing:$missing"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi
