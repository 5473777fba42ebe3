#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Prints the system calls a unit's SystemCallFilter= lets through, one a
# line, sorted: its groups expanded by systemd-analyze syscall-filter, as
# systemd applies them (an allow list starts with @default; a line with ~
# takes its calls away from what the lines before it let through). It makes
# tests/systemd/vramd.syscalls, the list vram-seccomp applies where no
# systemd does:
#   sh tests/systemd/syscall_list.sh systemd/vramd.service.in >tests/systemd/vramd.syscalls
# Usage: syscall_list.sh UNIT
set -eu
unit=$1
command -v systemd-analyze >/dev/null || { echo "syscall_list: no systemd-analyze" >&2; exit 77; }
expand() { # names and @groups: the names, the groups' recursively
    for x in "$@"; do
        case $x in
        @*) systemd-analyze syscall-filter "$x" | sed -n 's/^ \{1,\}//p' | grep -v '^#' |
                while read -r y; do expand "$y"; done ;;
        *) echo "$x" ;;
        esac
    done
}
allow=$(mktemp) deny=$(mktemp)
trap 'rm -f "$allow" "$deny"' EXIT
expand @default >"$allow"
sed -n 's/^SystemCallFilter=//p' "$unit" | while read -r line; do
    case $line in
    "~"*)
        # shellcheck disable=SC2086
        expand ${line#\~} | sort -u >"$deny"
        sort -u "$allow" | comm -23 - "$deny" >"$allow.new" && mv "$allow.new" "$allow" ;;
    *)
        # shellcheck disable=SC2086
        expand $line >>"$allow" ;;
    esac
done
echo "# The system calls $(basename "$unit" .in)'s SystemCallFilter= lets through:"
sed -n 's/^SystemCallFilter=/#   SystemCallFilter=/p' "$unit"
echo "# as $(systemctl --version 2>/dev/null | head -1 | cut -d' ' -f1-2) expands its groups (tests/systemd/syscall_list.sh)."
sort -u "$allow"
