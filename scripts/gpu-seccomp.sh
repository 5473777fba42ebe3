#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# vramd on the cuda backend under vramd.service's system call filter, on a
# GPU machine whose PID 1 is not systemd: vram-seccomp (tests/systemd/
# vram_seccomp.c) applies tests/systemd/vramd.syscalls to every vramd that
# tests/gpu/test_gpu starts (VRAMD_BIN is a wrapper), in three passes:
#   log        calls outside the list run, and MemoryDenyWriteExecute's
#              rules too: names everything the CUDA driver would need
#   errno      the unit as it is: outside the list, EPERM; and in a network
#              namespace of its own (PrivateNetwork=yes) where unshare can
#              make one
#   errno-mdwe the unit with MemoryDenyWriteExecute=yes
# Each pass first starts one vramd --backend cuda on its own (vramctl
# status), then runs test_gpu (GPU_TESTS=NAME runs one test). Each report
# names every call the filter stopped, once per vramd, with its thread;
# $OUT/gpu-seccomp.txt sums them up. Exit status 0 when the unit's pass
# (errno) passed with no call denied.
#
#   sh scripts/gpu.sh --prepare      # on Debian 12 with libseccomp-dev
#   sh scripts/gpu-seccomp.sh        # on the GPU machine
#   VRAM_GPU_BUILD=DIR sh scripts/gpu-seccomp.sh
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
b=${VRAM_GPU_BUILD:-$root/build-gpu}
out=${OUT:-$root/gpu-out}
mkdir -p "$out"
wrap=$b/tests/vram-seccomp
for f in "$b/vramd" "$b/vramctl" "$b/tests/test_gpu" "$wrap"; do
    [ -x "$f" ] || { echo "gpu-seccomp: no $f (sh scripts/gpu.sh --prepare, with libseccomp-dev)"; exit 1; }
done
export LD_LIBRARY_PATH="$b/lib:$b:${LD_LIBRARY_PATH:-}"
export VRAMCTL_BIN="$b/vramctl" VRAM_SOURCE_DIR="$root"
export NCCL_NVLS_ENABLE=0
sum=$out/gpu-seccomp.txt
{
    echo "gpu-seccomp: $(uname -sr), $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)"
    echo "list: tests/systemd/vramd.syscalls ($(grep -vc '^#' "$root/tests/systemd/vramd.syscalls") names)"
} >"$sum"
private=
if unshare --net true 2>/dev/null; then
    private="unshare --net --"
    echo "the errno passes run vramd in a network namespace of its own (unshare --net)" >>"$sum"
fi
list=$root/tests/systemd/vramd.syscalls
rc=0
for pass in log errno errno-mdwe; do
    case $pass in
    log) args="--mode log --mdwe" net= ;;
    errno) args="" net=$private ;;
    errno-mdwe) args="--mdwe" net=$private ;;
    esac
    r=$out/$pass.report
    : >"$r"
    # What test_gpu executes as vramd: vramd under the filter, same pid.
    cat >"$out/vramd-$pass" <<EOF
#!/bin/sh
exec $net "$wrap" --allow "$list" $args --report "$r" -- "$b/vramd" "\$@"
EOF
    chmod +x "$out/vramd-$pass"
    log=$out/$pass.test_gpu.log
    {
        echo "== $pass: vramd --backend cuda under ${net:+$net }vram-seccomp $args"
        "$out/vramd-$pass" --backend cuda --socket "$out/probe.sock" --log-level info &
        vp=$!
        i=0
        until "$b/vramctl" --socket "$out/probe.sock" status >/dev/null 2>&1; do
            i=$((i + 1)); [ $i -lt 300 ] || { echo "vramd did not answer"; break; }
            kill -0 $vp 2>/dev/null || { echo "vramd exited"; break; }
            sleep 0.1
        done
        "$b/vramctl" --socket "$out/probe.sock" status
        kill $vp 2>/dev/null; wait $vp
        echo "vramd exited with $?"
        echo "== $pass: test_gpu ${GPU_TESTS:-} with VRAMD_BIN=$out/vramd-$pass"
        VRAMD_BIN="$out/vramd-$pass" timeout 300 "$b/tests/test_gpu" ${GPU_TESTS:-}
        echo "test_gpu exited with $?"
    } >"$log" 2>&1
    t=$(tail -n 2 "$log" | head -n 1)
    sleep 1 # the supervisors' last summaries
    n=$(grep -c 'calls let through' "$r")
    {
        echo "== $pass (${net:+$net }vram-seccomp $args): $n vramd runs under the filter; test_gpu: $t; $(tail -n 1 "$log")"
        # Each call once, with the threads that made it.
        awk '/^vram-seccomp: (would be )?denied: / {
            sub(/^vram-seccomp: (would be )?denied: /, "")
            name = $1
            w = match($0, /prot [A-Z+]*\)$/) ? " (W^X: " substr($0, RSTART, RLENGTH - 1) ")" : ""
            match($0, / in thread [0-9]+ \(/)
            rest = substr($0, RSTART + RLENGTH)
            print name w " by " substr(rest, 1, index(rest, "): args") - 1)
        }' "$r" |
            sort | uniq -c | sed 's/^/  /'
        grep 'done:' "$r" | sed 's/^vram-seccomp: //' | sort | uniq -c | sed 's/^/  /'
    } >>"$sum"
    if [ $pass = errno ]; then
        grep -q 'test_gpu exited with 0' "$log" || rc=1
        grep -q 'vram-seccomp: denied' "$r" && rc=1
    fi
done
rm -f "$out"/vramd-log "$out"/vramd-errno "$out"/vramd-errno-mdwe
cat "$sum"
exit $rc
