#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# The ledger's rules carry the same numbers in its README, code and tests.
# Fails (exit 1, saying which) unless every rule R<n> that
# daemon/ledger/README.md lists (a line "## R<n>. ...") is tagged R<n> in a
# daemon/ledger/*.c file and has a test function test_r<NN>_... in
# tests/unit/test_ledger*.c, and unless every R<n> the code tags is listed
# in the README.
# Usage: check_rules.sh SOURCE_DIR
set -u

src=${1:?usage: check_rules.sh SOURCE_DIR}
readme=$src/daemon/ledger/README.md
[ -f "$readme" ] || { echo "check_rules: no $readme"; exit 1; }
for f in "$src"/daemon/ledger/*.c; do
    [ -f "$f" ] || { echo "check_rules: no daemon/ledger/*.c in $src"; exit 1; }
    break
done
for f in "$src"/tests/unit/test_ledger*.c; do
    [ -f "$f" ] || { echo "check_rules: no tests/unit/test_ledger*.c in $src"; exit 1; }
    break
done

# POSIX ERE has no \b: a word boundary is a non-word character or an end.
nw='(^|[^A-Za-z0-9_])'
ew='([^A-Za-z0-9_]|$)'

listed=$(sed -n 's/^## R\([0-9][0-9]*\)\..*/\1/p' "$readme")
[ -n "$listed" ] || { echo "check_rules: $readme lists no rule (## R<n>. ...)"; exit 1; }

fail=0
for n in $listed; do
    if ! grep -Eq "${nw}R${n}${ew}" "$src"/daemon/ledger/*.c; then
        echo "check_rules: R$n is listed in README.md but tagged in no daemon/ledger/*.c file"
        fail=1
    fi
    nn=$(printf '%02d' "$n")
    if ! grep -Eq "${nw}test_r${nn}_[A-Za-z0-9_]*[[:space:]]*\(" \
            "$src"/tests/unit/test_ledger*.c; then
        echo "check_rules: R$n has no test function test_r${nn}_... in tests/unit/test_ledger*.c"
        fail=1
    fi
done

# Every word R<digits> in the code (words split at non-word characters, as
# \b does), each number once.
used=$(cat "$src"/daemon/ledger/*.c | tr -c 'A-Za-z0-9_' '\n' |
       sed -n 's/^R\([0-9][0-9]*\)$/\1/p' | sort -nu)
for n in $used; do
    if ! printf '%s\n' "$listed" | grep -qx "$n"; then
        echo "check_rules: R$n is tagged in daemon/ledger/*.c but not listed in README.md"
        fail=1
    fi
done

if [ "$fail" -eq 0 ]; then
    all=$(printf '%s\n' "$listed" | sed 's/^/R/' | tr '\n' ' ')
    echo "check_rules: ${all}each tagged in daemon/ledger/*.c and tested"
fi
exit "$fail"
