#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# The layering rules of docs/architecture.md, checked on the sources ($1: the source
# tree). Fails, naming each offence, when:
#  - code outside platform/ includes a system header other than the C
#    library's and the project's fixed points (libuv, cJSON, cuda.h), calls
#    an operating-system function, or names /proc;
#  - platform/posix/ uses what only Linux has (memfd seals, pidfds, /proc,
#    sd_notify, peer groups: platform/linux/'s);
#  - a layer includes a header of a layer above it (the ledger is pure; the
#    protocol knows nothing of the daemon or the library; the library
#    nothing of the daemon);
#  - daemon/main.c, daemon/backends/ or common/ names _WIN32 (what differs
#    by system is below platform/: entry.h, gpu_share.h);
#  - windows-service/, the Windows service's own program, defines a
#    function a platform/ header declares (the entry below the line is
#    platform/win32/'s; the program above it only installs).
set -u
src=${1:?usage: check_layering.sh SOURCE_DIR}
cd "$src" || exit 2
cc=${CC:-cc}
fail=0
say() {
    echo "layering: $*"
    fail=1
}

dirs="daemon client proto common"
files=$(find $dirs -name '*.[ch]' | sort)

# C11's own headers, getopt, and the fixed points.
allowed='assert|ctype|errno|float|inttypes|limits|locale|math|setjmp|signal|stdalign|stdarg|stdatomic|stdbool|stddef|stdint|stdio|stdlib|stdnoreturn|string|tgmath|threads|time|uchar|wchar|wctype|getopt|uv|cjson/cJSON|cuda'
for f in $files; do
    grep -nE '^[[:space:]]*#[[:space:]]*include[[:space:]]*<' "$f" |
        grep -vE "<($allowed)\.h>" |
        while IFS= read -r line; do
            echo "layering: $f:$line: a system header outside platform/"
        done
done | grep . && fail=1

# Operating-system calls, in the code (comments stripped by the
# preprocessor, strings blanked).
os='socket|socketpair|bind|listen|accept|accept4|connect|sendmsg|recvmsg|sendto|recvfrom|mmap|munmap|mprotect|memfd_create|ftruncate|flock|fcntl|ioctl|getpid|getppid|getuid|geteuid|getgid|kill|raise|syscall|dlopen|dlsym|dlclose|clock_gettime|nanosleep|usleep|sleep|pause|poll|select|fork|execv|execvp|execl|waitpid|pipe|pipe2|dup|dup2|dup3|unlink|rename|open|close|read|write|pread|pwrite|lstat|fstat|chmod|chown|umask|isatty|getpwnam|getgrnam|localtime_r|gmtime_r|getrlimit|setrlimit|getsockopt|setsockopt|getpeername|getsockname|readlink|access|mkdir'
for f in $files; do
    "$cc" -fpreprocessed -dD -E -P "$f" 2>/dev/null |
        sed -e 's/"\([^"\\]\|\\.\)*"/""/g' |
        grep -nE "(^|[^A-Za-z0-9_.>])($os)[[:space:]]*\(" |
        while IFS= read -r line; do
            echo "layering: $f: an operating-system call outside platform/: $line"
        done
done | grep . && fail=1

# (platform/proc.h, included, is not /proc.)
procs=$(grep -n '/proc' $files | grep -v '#[[:space:]]*include[[:space:]]*"platform/proc\.h"')
[ -n "$procs" ] &&
    say "/proc is named outside platform/: $(printf '%s\n' "$procs" | cut -d: -f1 | sort -u | tr '\n' ' ')"

# platform/posix/ is what every POSIX system shares; what only Linux has
# is in platform/linux/ (docs/architecture.md: where another system's
# goes). In the code: comments stripped, strings kept ("/proc/...",
# getenv("NOTIFY_SOCKET")).
linux_only='memfd_create|MFD_[A-Z_]+|F_ADD_SEALS|F_GET_SEALS|F_SEAL_[A-Z]+|pidfd|SO_PEERGROUPS|SO_PEERCRED|SO_PEERPIDFD|struct ucred|"/proc[/"]|NOTIFY_SOCKET|[<"]linux/|prctl|PR_SET_|MAP_FIXED_NOREPLACE|MADV_DONTFORK'
# Files known to use Linux's still, each taken off once clean (none now).
linux_left=''
for f in $(find platform/posix -name '*.[ch]' | sort); do
    case " $linux_left " in *" $f "*) continue ;; esac
    "$cc" -fpreprocessed -dD -E -P "$f" 2>/dev/null |
        grep -E "$linux_only" |
        while IFS= read -r line; do
            echo "layering: $f: Linux only, in platform/posix/ (its place is platform/linux/): $line"
        done
done | grep . && fail=1
for f in $linux_left; do
    if [ ! -f "$f" ]; then
        say "$f is gone: take it off linux_left"
    elif ! "$cc" -fpreprocessed -dD -E -P "$f" 2>/dev/null |
        grep -qE "$linux_only"; then
        say "$f uses nothing of Linux's any more: take it off linux_left"
    fi
done

# No system's name above the line where the entry and the backends are.
for f in daemon/main.c $(find daemon/backends common -name '*.[ch]' | sort); do
    grep -nE '(^|[^A-Za-z0-9_])_WIN32([^A-Za-z0-9_]|$)' "$f" |
        while IFS= read -r line; do
            echo "layering: $f:$line: _WIN32 above platform/"
        done
done | grep . && fail=1

# windows-service/ implements no platform/ header: none of its functions
# has a name that a header of platform/ (or of platform/<os>/) declares.
if [ -d windows-service ]; then
    declared=$(cat platform/*.h platform/*/*.h 2>/dev/null |
        "$cc" -fpreprocessed -dD -E -P - 2>/dev/null |
        grep -oE '(^|[^A-Za-z0-9_])vpw?_[a-z0-9_]+[[:space:]]*\(' |
        sed -E 's/^[^v]*//; s/[[:space:]]*\($//' | sort -u)
    for f in $(find windows-service -name '*.c' | sort); do
        # Definitions: a name and its parameters at the start of a line,
        # the body's brace after them (not a declaration's semicolon).
        "$cc" -fpreprocessed -dD -E -P "$f" 2>/dev/null |
            tr '\n' ' ' | sed -e 's/"\([^"\\]\|\\.\)*"/""/g' |
            grep -oE '[A-Za-z_][A-Za-z0-9_]*[[:space:]]*\([^;{}()]*\)[[:space:]]*\{' |
            sed -E 's/[[:space:]]*\(.*//' | sort -u |
            while IFS= read -r fn; do
                printf '%s\n' "$declared" | grep -qx "$fn" &&
                    echo "layering: $f defines $fn, which a platform/ header declares"
            done
    done | grep . && fail=1
fi

# Dependencies run one way. Each rule: a folder, and the project headers it
# may include (by the folders they live in).
check_includes() { # folder, allowed folders of included headers
    dir=$1
    shift
    for f in $(find "$dir" -maxdepth 1 -name '*.[ch]'); do
        grep -oE '^[[:space:]]*#[[:space:]]*include[[:space:]]*"[^"]+"' "$f" |
            sed -e 's/.*"\(.*\)"/\1/' |
            while IFS= read -r h; do
                ok=0
                # Each include is the header's path from the top (gen/:
                # generated from proto/messages.json into the build tree,
                # the protocol's messages and the core's handler table).
                case $h in
                gen/vram_msg.h) hd=proto ;;
                gen/vd_dispatch.h) hd=daemon/core ;;
                *) hd=$(dirname "$h") ;;
                esac
                for a in "$(dirname "$f")" "$@"; do
                    [ "$hd" = "$a" ] && ok=1
                done
                [ $ok = 1 ] || echo "layering: $f includes \"$h\", which is not in: $(dirname "$f") $*"
            done
    done | grep . && fail=1
}
check_includes daemon/ledger
check_includes daemon/state daemon/ledger platform daemon
check_includes daemon/backends platform common daemon
# daemon/core/: daemon/ (its own life) -> requests/ -> clients/, and core.h
# (the core's shared state) beside them.
check_includes daemon/core daemon/core/clients daemon/ledger daemon/backends daemon/state proto platform daemon
check_includes daemon/core/daemon daemon/core daemon/core/requests daemon/core/clients daemon/ledger daemon/backends daemon/state proto platform daemon
check_includes daemon/core/requests daemon/core daemon/core/clients daemon/ledger daemon/backends daemon/state proto platform daemon
check_includes daemon/core/requests/handlers daemon/core daemon/core/requests daemon/core/clients daemon/ledger daemon/backends daemon/state proto platform daemon
check_includes daemon/core/clients daemon/core daemon/ledger daemon/backends daemon/state proto platform daemon
check_includes daemon/io daemon/core daemon/core/daemon daemon/core/requests daemon/core/clients daemon/ledger daemon/backends daemon/state proto platform daemon
check_includes proto platform
check_includes common platform
check_includes client/lib proto platform common client/include
check_includes client/tools proto platform client/include
check_includes platform/posix platform
check_includes platform/linux platform platform/posix

# daemon/io is one session and one listener for every system: no _WIN32
# there, and of platform/ only the headers both systems implement. A header
# of platform/ is one system's when only that system's folder includes it
# (listener.h is POSIX's); the folders' own headers are theirs (Windows'
# identity.h, pipe_listener.h, push.h and stream.h are in platform/win32/).
one_os_header() { # header's path: prints the system it belongs to, if one
    case $1 in
    platform/win32/*) echo win32; return ;;
    platform/posix/* | platform/linux/*) echo posix; return ;;
    platform/*/*) return ;;
    platform/*) ;;
    *) return ;;
    esac
    inc='^[[:space:]]*#[[:space:]]*include[[:space:]]*"'"$1"'"'
    p=0
    w=0
    grep -qE "$inc" platform/posix/*.[ch] 2>/dev/null && p=1
    grep -qE "$inc" platform/win32/*.[ch] 2>/dev/null && w=1
    [ $p = 0 ] && [ $w = 1 ] && echo win32
    [ $p = 1 ] && [ $w = 0 ] && echo posix
}
for f in daemon/io/*.[ch]; do
    grep -n '_WIN32' "$f" | while IFS= read -r line; do
        echo "layering: $f:$line: _WIN32 in daemon/io (its system is platform/endpoint.h's)"
    done
    grep -oE '^[[:space:]]*#[[:space:]]*include[[:space:]]*"[^"]+"' "$f" |
        sed -e 's/.*"\(.*\)"/\1/' |
        while IFS= read -r h; do
            case $h in daemon/io/*) continue ;; esac
            os=$(one_os_header "$h")
            [ -n "$os" ] && echo "layering: $f includes \"$h\", a header of $os's only"
        done
done | grep . && fail=1

# No file calls into a file that calls it back: for each part, an edge from
# a .c file to every other .c file whose header it includes; the edges must
# have an order (tsort finds a loop otherwise).
no_loops() { # the part, then its folders
    part=$1
    shift
    edges=$(for d in "$@"; do
        for f in "$d"/*.c; do
            [ -f "$f" ] || continue
            from=${f%.c}
            grep -oE '^[[:space:]]*#[[:space:]]*include[[:space:]]*"[^"]+\.h"' "$f" |
                sed -e 's/.*"\(.*\)\.h"/\1/' |
                while IFS= read -r to; do
                    [ "$to" = "$from" ] && continue
                    for d2 in "$@"; do
                        [ "$(dirname "$to")" = "$d2" ] && [ -f "$to.c" ] &&
                            echo "$from $to" && break
                    done
                done
        done
    done)
    loop=$(printf '%s\n' "$edges" | tsort 2>&1 >/dev/null)
    [ -n "$loop" ] && say "$part: files call each other in a circle: $(echo $loop)"
}
no_loops daemon daemon daemon/io daemon/core daemon/core/daemon daemon/core/requests daemon/core/requests/handlers daemon/core/clients daemon/backends daemon/state
no_loops libvram client/lib

[ $fail = 0 ] && echo "layering: OS code only in platform/, dependencies one way"
exit $fail
