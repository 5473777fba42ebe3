#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# vramd is Apache-2.0: LICENSE holds the licence's text, every source file
# (C, headers, shell, Python, CMake, the Containerfile) says so in an SPDX line within its
# first three lines, debian/copyright says the same in Debian's machine-
# readable format, and the Python package's metadata names it. Lists every
# file that does not.
# Usage: check_licence.sh SOURCE_DIR
set -eu
src=$1
cd "$src"
fail=0
grep -q "Apache License" LICENSE 2>/dev/null && grep -q "Version 2.0, January 2004" LICENSE ||
    { echo "check_licence: LICENSE is not the Apache License 2.0"; fail=1; }
# The tracked files where this is a checkout; else (a source package) all.
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    list() { git ls-files; }
else
    list() { find . -path ./.git -prune -o -path './build*' -prune -o -type f -print | sed 's|^\./||'; }
fi
missing=$(list | grep -E '\.(c|h|sh|py|cmake)$|(^|/)CMakeLists\.txt$' | grep -v '^tests/fuzz/corpus/' |
    while read -r f; do
        head -3 "$f" | grep -q 'SPDX-License-Identifier: Apache-2.0' || echo "$f"
    done)
if [ -n "$missing" ]; then
    echo "check_licence: no 'SPDX-License-Identifier: Apache-2.0' in the first three lines of:"
    echo "$missing" | sed 's/^/  /'
    fail=1
fi
c=packaging/debian/copyright
grep -q '^Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/' "$c" &&
    grep -q '^License: Apache-2.0' "$c" ||
    { echo "check_licence: $c is not machine-readable with License: Apache-2.0"; fail=1; }
grep -q 'Apache-2.0' python/pyproject.toml ||
    { echo "check_licence: python/pyproject.toml does not name the licence"; fail=1; }
[ $fail -eq 0 ] && echo "check_licence: Apache-2.0 throughout"
exit $fail
