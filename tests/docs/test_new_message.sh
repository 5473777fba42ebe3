#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# docs/architecture.md's walkthrough of a new message holds: in a copy of
# the tree (its git-tracked files), a toy request echo (a u32 there and
# back) is added exactly as "A new message" says, and nothing else is
# touched:
#   1. its entry in proto/messages.json, with "client" naming its call;
#   2. its handler, in a new file of daemon/core/requests/handlers/ named beside
#      handlers/handle_admin.c in each list of vramd's sources;
#   3. its public function in client/include/vram.h;
#   4. the two committed generated files regenerated (Python's ctypes
#      table, PROTOCOL.md's reference).
# The copy is built (Debug, -Werror, vramd, libvram, vramctl), and its
# vramd answers the toy request from a tiny C client and from Python's
# ctypes table; the copy's own freshness checks (python_prototypes,
# protocol_doc) pass. Skipped (77) outside a git checkout.
# Usage: test_new_message.sh SOURCE_DIR C_COMPILER
set -u
src=$1
cc=$2
name=new_message pids="vramd"
vramd=
build=
. "$src/tests/lib/shtest.sh"
git -C "$src" rev-parse --is-inside-work-tree >/dev/null 2>&1 || {
    echo "$name: $src is not a git checkout: skipped"
    passed=1
    exit 77
}
tree=$tmp/tree
mkdir "$tree"
git -C "$src" ls-files -z | (cd "$src" && xargs -0 cp --parents -t "$tree") ||
    fail "copying the tree"

# 1. The catalogue: the request, before ping (any place will do), since the
# version being made (no release of tests/compat/releases.txt speaks
# protocol_version yet: it is that; else one more, raised in both places).
v=$(sed -n 's/^ *"protocol_version": *\([0-9]*\),.*/\1/p' "$tree/proto/messages.json")
made=$v
awk '$1 !~ /^#/ && NF == 2 { print $2 }' "$tree/tests/compat/releases.txt" |
    while read -r commit; do
        git -C "$src" show "$commit:proto/messages.json" 2>/dev/null |
            grep -q "\"protocol_version\": *$v," && echo released
    done | grep -q released && {
    made=$((v + 1))
    sed -i "s/\"protocol_version\": *$v,/\"protocol_version\": $made,/" \
        "$tree/proto/messages.json"
    sed -i "s/^#define VW_PROTOCOL_VERSION $v\$/#define VW_PROTOCOL_VERSION $made/" \
        "$tree/proto/frame.h"
}
entry='    "echo": {
      "doc": "A round trip that sends a number back: a toy.",
      "since": '$made',
      "client": {"function": "vram_client_echo"},
      "fields": {"value": {"type": "u32", "required": true}},
      "reply": {"value": {"type": "u32", "required": true}}
    },'
printf '%s\n' "$entry" >"$tmp/entry"
awk -v f="$tmp/entry" '/^    "ping": \{$/ { while ((getline l < f) > 0) print l } { print }' \
    "$tree/proto/messages.json" >"$tmp/messages.json"
cp "$tmp/messages.json" "$tree/proto/messages.json"
grep -q '"echo": {' "$tree/proto/messages.json" || fail "no place for echo in messages.json"

# 2. Its handler, a file of its own, named beside handlers/handle_admin.c.
cat >"$tree/daemon/core/requests/handlers/handle_echo.c" <<'EOF'
/* SPDX-License-Identifier: Apache-2.0 */
/* echo: the number sent, sent back. */
#include "gen/vd_dispatch.h"

int vd_handle_echo(struct vd_request *rq, const struct vw_req_echo *m,
                   struct vw_rep_echo *rep)
{
    (void)rq;
    rep->value = m->value;
    return 0;
}
EOF
lists=$(cd "$tree" && grep -l 'daemon/core/requests/handlers/handle_admin\.c' CMakeLists.txt cmake/*.cmake)
[ -n "$lists" ] || fail "no source list names daemon/core/requests/handlers/handle_admin.c"
for f in $lists; do
    sed -i 's|daemon/core/requests/handlers/handle_admin\.c|& daemon/core/requests/handlers/handle_echo.c|' "$tree/$f"
done

# 3. The public function.
awk '{ print }
     /^VRAM_API int vram_client_ping\(vram_client \*c\);$/ {
         print "/* The value sent back by vramd (echo). */"
         print "VRAM_API int vram_client_echo(vram_client *c, uint32_t value, uint32_t *value_out);"
     }' "$tree/client/include/vram.h" >"$tmp/vram.h"
cp "$tmp/vram.h" "$tree/client/include/vram.h"
grep -q vram_client_echo "$tree/client/include/vram.h" || fail "no place for echo in vram.h"

# The build: what the walkthrough's steps need, then vramd and libvram.
build=$tree/build
cmake -S "$tree" -B "$build" -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_COMPILER="$cc" \
    -DVRAM_BUILD_TESTS=OFF -DVRAM_WERROR=ON >"$tmp/configure.log" 2>&1 ||
    fail "configure: $(tail -20 "$tmp/configure.log")"
cmake --build "$build" -j2 --target vram_msggen vramd vram vramctl >"$tmp/build.log" 2>&1 ||
    fail "build: $(grep -E 'error|Error' "$tmp/build.log" | head -20)"

# 4. The generated files the tree commits, regenerated as the walkthrough
# says, and checked as the suite checks them.
(cd "$tree" && python3 python/gen_prototypes.py client/include/vram.h python/vram/_prototypes.py) ||
    fail "regenerating python/vram/_prototypes.py"
(cd "$tree" && sh tests/docs/check_protocol_doc.sh build/vram_msggen proto/messages.json \
    proto/PROTOCOL.md --update >/dev/null) || fail "regenerating PROTOCOL.md's reference"
grep -q '^#### `echo`$' "$tree/proto/PROTOCOL.md" || fail "PROTOCOL.md has no echo"
python3 "$tree/python/gen_prototypes.py" --check "$tree/client/include/vram.h" \
    "$tree/python/vram/_prototypes.py" >/dev/null || fail "python_prototypes in the copy"
sh "$tree/tests/docs/check_protocol_doc.sh" "$build/vram_msggen" "$tree/proto/messages.json" \
    "$tree/proto/PROTOCOL.md" >/dev/null || fail "protocol_doc in the copy"

# The copy's vramd answers echo: from C...
start_vramd
cat >"$tmp/echo.c" <<'EOF'
#include <stdio.h>
#include <stdlib.h>

#include "vram.h"

int main(int argc, char **argv)
{
    vram_client *c;
    int e = vram_client_connect(argv[1], NULL, &c);
    if (e < 0) {
        printf("connect: %s\n", vram_strerror(e));
        return 1;
    }
    uint32_t got = 0;
    e = vram_client_echo(c, (uint32_t)strtoul(argv[2], NULL, 0), &got);
    printf("%d %u\n", e, got);
    vram_client_close(c);
    return e < 0;
}
EOF
"$cc" -std=c11 -Wall -Werror -I"$tree/client/include" -o "$tmp/echo" "$tmp/echo.c" \
    -L"$build" -lvram -Wl,-rpath,"$build" 2>"$tmp/cc.log" || fail "the C client: $(cat "$tmp/cc.log")"
out=$("$tmp/echo" "$sock" 4000000007) || fail "the C client's echo: $out"
[ "$out" = "0 4000000007" ] || fail "C: echo answered '$out', not '0 4000000007'"
echo "$name: C: vram_client_echo(4000000007) -> $out"

# ... and from Python, through the regenerated table.
out=$(VRAM_LIBRARY=$build/libvram.so.0 PYTHONPATH=$tree/python python3 - "$sock" <<'EOF'
import ctypes
import sys

from vram import _lib

lib = _lib.load()
assert _lib.PROTOTYPES["vram_client_echo"] == (
    ctypes.c_int, [_lib.vram_client_p, ctypes.c_uint32, ctypes.POINTER(ctypes.c_uint32)])
c = _lib.vram_client_p()
assert lib.vram_client_connect(sys.argv[1].encode(), None, ctypes.byref(c)) == 0
got = ctypes.c_uint32()
e = lib.vram_client_echo(c, 123456789, ctypes.byref(got))
try:
    lib.vram_client_echo(c, 1)  # argtypes: two arguments are refused
    print("no argtypes")
except TypeError:
    pass
lib.vram_client_close(c)
print(e, got.value)
EOF
) || fail "Python's echo: $out"
[ "$out" = "0 123456789" ] || fail "Python: echo answered '$out', not '0 123456789'"
echo "$name: Python: vram_client_echo(123456789) -> $out"
echo "$name: 1 passed, 0 failed"
passed=1
