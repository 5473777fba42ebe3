#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# No circle of calls between the files of a program, checked on its
# compiled objects (the calls as the linker sees them, not the includes):
# a file that uses a symbol another file of the same program defines calls
# it. daemon/ledger/ is one module (its files may call each other), and so
# is client/lib/ (layering_libvram checks the library's own files). Calls
# through function pointers (the daemon's struct vd_port, the backends'
# operations, libuv's callbacks) are not references: they are how a lower
# file answers the one above it.
# daemon/core/'s folders call one way: daemon/ -> requests/ -> clients/.
# Fails, naming the files of each circle and the calls between them, and
# each call up the core's folders.
# Usage: check_calls.sh NM [--cc CC] --program NAME OBJECT... [--program ...]
# (each program: its own objects and those of the libraries it links);
# with --cc, first proves on three small objects that a circle is found and
# that the ledger's files calling each other are not one.
set -u
export LC_ALL=C # sort and join agree on the order
nm=${1:?usage: check_calls.sh NM [--cc CC] --program NAME OBJECT...}
shift
fail=0
say() {
    echo "calls: $*"
    fail=1
}

# Calls allowed to close a circle, "program from to" a line, each with the
# reason it is not broken yet. Empty: no circle is allowed, and a new one
# fails the test. A line here for a call that is made no more fails too.
allowed=''

# The daemon's core in folders that call one way, the one above first.
order='daemon/core/daemon/ daemon/core/requests/ daemon/core/clients/'

tmp=$(mktemp -d) || exit 2
trap 'rm -rf "$tmp"' EXIT INT TERM

# "SYMBOL FILE" lines from nm -A's "OBJECT:... SYMBOL": FILE is the file
# the object was compiled from, relative to the tree (CMake names objects
# .../CMakeFiles/TARGET.dir/PATH.c.o), or its module.
to_files() {
    awk '{
        i = index($0, ":")
        f = substr($0, 1, i - 1)
        sub(/^.*CMakeFiles\/[^\/]*\.dir\//, "", f)
        sub(/\.(o|obj)$/, "", f)
        sub(/^daemon\/ledger\/.*/, "daemon/ledger/", f)
        sub(/^client\/lib\/.*/, "client/lib/", f)
        print $NF, f
    }'
}

# check PROGRAM OBJECT...: prints each circle's files and the calls between
# them ("calls: ..." lines); returns 1 when there is one.
check() {
    prog=$1
    shift
    "$nm" -A -g --defined-only "$@" >"$tmp/nm.defs" || return 2
    "$nm" -A -u "$@" >"$tmp/nm.uses" || return 2
    to_files <"$tmp/nm.defs" >"$tmp/defs"
    to_files <"$tmp/nm.uses" >"$tmp/uses"
    sort -u "$tmp/defs" >"$tmp/defs.s"
    sort -u "$tmp/uses" >"$tmp/uses.s"
    # Edges "from to symbol": from uses a symbol that to defines, less the
    # allowed ones.
    join "$tmp/uses.s" "$tmp/defs.s" | awk '$2 != $3 { print $2, $3, $1 }' | sort -u |
        tee "$tmp/all.$prog" | awk -v prog="$prog" -v allowed="$allowed" '
            BEGIN {
                n = split(allowed, l, "\n")
                for (i = 1; i <= n; i++) {
                    split(l[i], w, " ")
                    if (w[1] == prog) skip[w[2] " " w[3]] = 1
                }
            }
            !(($1 " " $2) in skip)' >"$tmp/edges"
    # The strongly connected components of more than one file (Tarjan),
    # one a line, their files sorted.
    awk '
        function strong(v,   i, w, k, comp) {
            idx[v] = low[v] = ++count
            stack[++sp] = v
            on[v] = 1
            for (i = 1; i <= deg[v]; i++) {
                w = adj[v, i]
                if (!(w in idx)) {
                    strong(w)
                    if (low[w] < low[v]) low[v] = low[w]
                } else if (on[w] && idx[w] < low[v])
                    low[v] = idx[w]
            }
            if (low[v] == idx[v]) {
                k = 0
                comp = ""
                do {
                    w = stack[sp--]
                    on[w] = 0
                    comp = comp " " w
                    k++
                } while (w != v)
                if (k > 1) print substr(comp, 2)
            }
        }
        !(($1 " " $2) in seen) {
            seen[$1 " " $2] = 1
            adj[$1, ++deg[$1]] = $2
            nodes[$1] = nodes[$2] = 1
        }
        END { for (v in nodes) if (!(v in idx)) strong(v) }' "$tmp/edges" |
        while read -r line; do
            # shellcheck disable=SC2086 # split into its files
            printf '%s\n' $line | sort | tr '\n' ' ' | sed 's/ $//'
            echo
        done | sort >"$tmp/circles"
    # The core's folders call one way (docs/architecture.md): a file of a
    # folder calls none of a folder before it in order.
    awk -v order="$order" '
        function rank(f,   i) {
            for (i = 1; i <= n; i++)
                if (index(f, o[i]) == 1) return i
            return 0
        }
        BEGIN { n = split(order, o, " ") }
        {
            a = rank($1)
            b = rank($2)
            if (a && b && a > b)
                printf "calls: %s: %s calls %s (%s), a folder above its own (the order: %s)\n", prog, $1, $2, $3, order
        }' prog="$prog" "$tmp/edges" >"$tmp/up"
    if [ -s "$tmp/up" ]; then
        cat "$tmp/up"
        [ -s "$tmp/circles" ] || return 1
    fi
    [ -s "$tmp/circles" ] || return 0
    while read -r circle; do
        echo "calls: $prog: files that call each other in a circle: $circle"
        while read -r from to sym; do
            case " $circle " in *" $from "*) ;; *) continue ;; esac
            case " $circle " in *" $to "*) ;; *) continue ;; esac
            echo "calls:   $from -> $to ($sym)"
        done <"$tmp/edges"
    done <"$tmp/circles"
    return 1
}

# The check checked: a.c and b.c of daemon/core/ call each other (a circle),
# the ledger's p.c and q.c too (one module: none), c.c calls a.c (no
# circle of its own).
self_test() {
    cc=$1
    d=$tmp/self/CMakeFiles/t.dir
    mkdir -p "$d/daemon/core" "$d/daemon/ledger" || return 2
    printf 'int b(void);\nint a(void) { return b(); }\nint p(void);\nint a2(void) { return p(); }\n' >"$tmp/a.c"
    printf 'int a(void);\nint b(void) { return a() + 1; }\n' >"$tmp/b.c"
    printf 'int a(void);\nint c(void) { return a(); }\n' >"$tmp/c.c"
    printf 'int q(void);\nint p(void) { return q(); }\n' >"$tmp/p.c"
    printf 'int p(void);\nint q(void) { return p(); }\n' >"$tmp/q.c"
    for f in a b c; do
        "$cc" -c -o "$d/daemon/core/$f.c.o" "$tmp/$f.c" || return 2
    done
    for f in p q; do
        "$cc" -c -o "$d/daemon/ledger/$f.c.o" "$tmp/$f.c" || return 2
    done
    out=$(check self "$d"/daemon/core/*.o "$d"/daemon/ledger/*.o)
    [ $? = 1 ] || { echo "calls: self-test: the circle a.c <-> b.c was not found"; return 1; }
    want='calls: self: files that call each other in a circle: daemon/core/a.c daemon/core/b.c
calls:   daemon/core/a.c -> daemon/core/b.c (b)
calls:   daemon/core/b.c -> daemon/core/a.c (a)'
    [ "$out" = "$want" ] || {
        printf 'calls: self-test: expected\n%s\ncalls: self-test: got\n%s\n' "$want" "$out"
        return 1
    }
    # A file of clients/ calling one of requests/: up, against the order.
    mkdir -p "$d/daemon/core/requests" "$d/daemon/core/clients" || return 2
    printf 'int r(void) { return 1; }\n' >"$tmp/r.c"
    printf 'int r(void);\nint k(void) { return r(); }\n' >"$tmp/k.c"
    "$cc" -c -o "$d/daemon/core/requests/r.c.o" "$tmp/r.c" || return 2
    "$cc" -c -o "$d/daemon/core/clients/k.c.o" "$tmp/k.c" || return 2
    out=$(check self2 "$d"/daemon/core/requests/r.c.o "$d"/daemon/core/clients/k.c.o)
    [ $? = 1 ] && printf '%s\n' "$out" | grep -q 'daemon/core/clients/k.c calls daemon/core/requests/r.c (r), a folder above' || {
        printf 'calls: self-test: the call up from clients/ to requests/ was not found: %s\n' "$out"
        return 1
    }
    echo "calls: self-test: a circle found and named, the ledger's files one module, a call up the core's folders found"
}

if [ "${1:-}" = --cc ]; then
    self_test "${2:?--cc takes the C compiler}" || exit 1
    shift 2
fi
[ "${1:-}" = --program ] || { echo "calls: usage: check_calls.sh NM [--cc CC] --program NAME OBJECT..."; exit 2; }

progs=0
while [ $# -gt 0 ]; do
    shift # --program
    prog=${1:?--program takes a name}
    shift
    : >"$tmp/objs"
    while [ $# -gt 0 ] && [ "$1" != --program ]; do
        printf '%s\n' "$1" >>"$tmp/objs"
        shift
    done
    [ -s "$tmp/objs" ] || { echo "calls: $prog: no object given"; exit 2; }
    # shellcheck disable=SC2046 # object paths have no blanks (CMake's)
    check "$prog" $(cat "$tmp/objs")
    case $? in
    0) echo "calls: $prog: $(wc -l <"$tmp/objs") objects, no circle of calls between files" ;;
    1) fail=1 ;;
    *) exit 2 ;;
    esac
    progs=$((progs + 1))
done

# An allowed call that is made no more is left over: take it out.
printf '%s\n' "$allowed" >"$tmp/allowed"
while read -r prog from to; do
    [ -n "$prog" ] || continue
    if ! [ -f "$tmp/all.$prog" ] || ! awk -v f="$from" -v t="$to" \
        '$1 == f && $2 == t { found = 1 } END { exit !found }' "$tmp/all.$prog"; then
        say "$prog: $from calls $to no more: take the line out of allowed in $0"
    fi
done <"$tmp/allowed"
exit $fail
