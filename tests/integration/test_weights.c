/* SPDX-License-Identifier: Apache-2.0 */
/* Weight sets (R17, issue 31), on the host backend, with real processes:
 *  1. A writer opens a set, fills it and seals it; a second process opens
 *     it, maps the very same bytes at the same address, read-only; nothing
 *     more is charged for it.
 *  2. A write to a sealed mapping fails (SIGSEGV in a child), the writer's
 *     own included; and the write seal holds against write(2) too.
 *  3. Another key or size is refused with ESTALE naming the set; a bad
 *     name or key with EINVAL.
 *  4. A writer killed before sealing leaves nothing: the next opener
 *     writes a new set, of zeros.
 *  5. An open while another client writes waits for the seal, or fails at
 *     once with VRAM_WEIGHTS_NOWAIT.
 *  6. Sets nobody maps stay cached, and are evicted least recently used
 *     first when an engine's grant needs the room; a kept set is not.
 *  7. Another user may not open a set unless access.weights lists it; a
 *     non-admin may neither keep nor drop one; an admin drops a set only
 *     once nobody maps it.
 * Needs root (to become other users). */
#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/integration/harness.h"

/* 256 MiB in 2 MiB chunks, weights in 8 MiB allocations. */
static const char *config =
    "{\"devices\": [{\"id\": 0, \"capacity\": \"256MiB\"}],"
    " \"pool\": {\"prefill_chunks\": 4},"
    " \"weights\": {\"alloc\": \"8MiB\"},"
    " \"access\": {\"allow\": {\"gids\": [0, 65534]}, \"socket_group\": \"nogroup\","
    "            \"socket_mode\": \"0660\", \"weights\": {\"uids\": [20006]}}}";

static uint8_t key_a[VRAM_WEIGHTS_KEY_BYTES] = {1, 2, 3, 4};
static uint8_t key_b[VRAM_WEIGHTS_KEY_BYTES] = {9, 9, 9, 9};

static void become(uid_t uid)
{
    REQUIRE(setgroups(0, NULL) == 0 && setgid(65534) == 0 && setuid(uid) == 0,
            "become uid %u", (unsigned)uid);
}

/* A process that writes to p: its signal (0 when the write went through). */
static int write_signal(volatile char *p)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        /* The default action, whatever a sanitizer installed: the signal
         * itself is the answer. */
        struct sigaction sa = {.sa_handler = SIG_DFL};
        sigaction(SIGSEGV, &sa, NULL);
        sigaction(SIGBUS, &sa, NULL);
        p[0] = 1;
        _exit(0);
    }
    int st;
    waitpid(pid, &st, 0);
    return WIFSIGNALED(st) ? WTERMSIG(st) : 0;
}

static uint64_t dev0(const struct daemon *d, const char *key)
{
    cJSON *st = daemon_status(d);
    uint64_t v = status_dev(st, 0, key);
    cJSON_Delete(st);
    return v;
}

static uint64_t counter(const struct daemon *d, const char *key)
{
    cJSON *st = daemon_status(d);
    uint64_t v = json_u64(cJSON_GetObjectItem(st, "counters"), key);
    cJSON_Delete(st);
    return v;
}

/* The weight allocations this process holds as fds (memfds named
 * vramd-weights): how many, and how many took a write(2). */
static int write_through_fds(int *wrote)
{
    int n = 0;
    *wrote = 0;
    DIR *dir = opendir("/proc/self/fd");
    struct dirent *de;
    while (dir && (de = readdir(dir))) {
        char path[320], target[256];
        snprintf(path, sizeof(path), "/proc/self/fd/%s", de->d_name);
        ssize_t len = readlink(path, target, sizeof(target) - 1);
        if (len <= 0)
            continue;
        target[len] = 0;
        if (!strstr(target, "memfd:vramd-weights"))
            continue;
        n++;
        *wrote += pwrite(atoi(de->d_name), "x", 1, 0) == 1;
    }
    if (dir)
        closedir(dir);
    return n;
}

/* Opens set a (20 MiB) and checks what the writer wrote: the reader's
 * side of 1, in a process of its own. */
static int reader(const struct daemon *d, void *arg)
{
    uint64_t want_base = *(uint64_t *)arg;
    vram_client *c = connect_client(d, "reader");
    struct vram_weights_info w;
    int e = vram_weights_open(c, "model/a", 0, 20 * MIB, key_a, 0, &w);
    CHECK(e == 0, "reader's open: %s", vram_client_last_error(c));
    if (e)
        return 1;
    CHECK(!w.writer && w.sealed, "the reader got writer %u sealed %u", w.writer,
          w.sealed);
    CHECK(w.base == want_base, "another address: 0x%llx, not 0x%llx",
          (unsigned long long)w.base, (unsigned long long)want_base);
    CHECK(check_pattern((void *)(uintptr_t)w.base, 20 * MIB, 77),
          "the reader does not see the writer's bytes");
    CHECK(write_signal((volatile char *)(uintptr_t)w.base) == SIGSEGV,
          "a write to a sealed mapping went through");
    /* Nor through the handles themselves (the write seal): its own three,
     * and the writer's, which this process inherited. */
    int wrote = 0;
    CHECK(write_through_fds(&wrote) >= 3, "the reader holds no set's fds");
    CHECK(wrote == 0, "%d writes through a sealed set's fds went through", wrote);
    CHECK(check_pattern((void *)(uintptr_t)w.base, 20 * MIB, 77),
          "the bytes changed");
    /* Two readers, one copy. */
    CHECK_EQ_U(dev0(d, "weights_bytes"), 24 * MIB);
    vram_client_close(c);
    return check_failures ? 1 : 0;
}

/* Opens set b as its writer, writes half of it and waits to be killed. */
static int dying_writer(const struct daemon *d, void *arg)
{
    struct rendezvous *rv = arg;
    vram_client *c = connect_client(d, "dying-writer");
    struct vram_weights_info w;
    REQUIRE(vram_weights_open(c, "model/b", 0, 16 * MIB, key_a, 0, &w) == 0 &&
                w.writer,
            "dying writer's open: %s", vram_client_last_error(c));
    memset((void *)(uintptr_t)w.base, 0x5a, 8 * MIB);
    rv_send(rv->to_parent[1], w.id);
    pause();
    return 0;
}

/* Opens set c while the parent writes it. */
static int waiter(const struct daemon *d, void *arg)
{
    struct rendezvous *rv = arg;
    vram_client *c = connect_client(d, "waiter");
    struct vram_weights_info w;
    int e = vram_weights_open(c, "model/c", 0, 8 * MIB, key_a,
                              VRAM_WEIGHTS_NOWAIT, &w);
    CHECK(e == -EAGAIN && strstr(vram_client_last_error(c), "being written"),
          "NOWAIT while it is written: %d %s", e, vram_client_last_error(c));
    rv_send(rv->to_parent[1], 1);
    e = vram_weights_open(c, "model/c", 0, 8 * MIB, key_a, 0, &w);
    CHECK(e == 0 && w.sealed && !w.writer, "the waiting open: %d %s", e,
          vram_client_last_error(c));
    CHECK(e || check_pattern((void *)(uintptr_t)w.base, 8 * MIB, 3),
          "the waiter does not see what was sealed");
    vram_client_close(c);
    return check_failures ? 1 : 0;
}

/* Another user: refused set a; allowed when access.weights lists it. */
static int other_user(const struct daemon *d, void *arg)
{
    uid_t uid = (uid_t)(uintptr_t)arg;
    become(uid);
    vram_client *c = connect_client(d, "other-user");
    struct vram_weights_info w;
    int e = vram_weights_open(c, "model/a", 0, 20 * MIB, key_a, 0, &w);
    if (uid == 20006) {
        CHECK(e == 0 && w.sealed, "a listed user's open: %d %s", e,
              vram_client_last_error(c));
        CHECK(e || check_pattern((void *)(uintptr_t)w.base, 20 * MIB, 77),
              "the listed user does not see the bytes");
    } else {
        CHECK(e == -EACCES && strstr(vram_client_last_error(c), "access.weights"),
              "another user's open: %d %s", e, vram_client_last_error(c));
        e = vram_weights_open(c, "mine", 0, 2 * MIB, key_b, VRAM_WEIGHTS_KEEP, &w);
        CHECK(e == -EPERM, "a non-admin kept a set: %d", e);
        CHECK(vram_admin_weights_drop(c, "model/a") == -EPERM,
              "a non-admin dropped a set");
    }
    vram_client_close(c);
    return check_failures ? 1 : 0;
}

int main(void)
{
    REQUIRE(geteuid() == 0, "this test needs root to become other users");
    struct daemon d;
    REQUIRE(daemon_start(&d, config, NULL) == 0, "start vramd");
    chmod(d.dir, 0755);

    /* ---- 1. writer, seal, a second opener ---- */
    vram_client *wc = connect_client(&d, "writer");
    struct vram_weights_info w;
    REQUIRE(vram_weights_open(wc, "model/a", 0, 20 * MIB, key_a, 0, &w) == 0,
            "open: %s", vram_client_last_error(wc));
    CHECK(w.writer && !w.sealed, "the first opener is not the writer");
    /* 20 MiB in allocations of 8: 3 of them, 24 MiB charged. */
    CHECK_EQ_U(w.allocs, 3);
    CHECK_EQ_U(w.alloc_bytes, 8 * MIB);
    CHECK_EQ_U(w.base % GIB, 0);
    CHECK_EQ_U(dev0(&d, "weights_bytes"), 24 * MIB);
    CHECK_EQ_U(dev0(&d, "free_bytes"), 232 * MIB);
    fill_pattern((void *)(uintptr_t)w.base, 20 * MIB, 77);
    struct vram_weights_info again;
    CHECK(vram_weights_open(wc, "model/a", 0, 20 * MIB, key_a, 0, &again) == 0 &&
              again.id == w.id && again.writer,
          "the writer's second open");
    CHECK(vram_weights_seal(wc, w.id) == 0, "seal: %s", vram_client_last_error(wc));
    CHECK(vram_weights_seal(wc, w.id) == -EALREADY, "sealed twice");
    struct vram_weights_info now;
    CHECK(vram_weights_info(wc, w.id, &now) == 0 && now.sealed && !now.writer,
          "the writer's view after the seal");
    /* ---- 2. the writer's own mapping is read-only now ---- */
    CHECK(write_signal((volatile char *)(uintptr_t)w.base) == SIGSEGV,
          "the writer's write after its seal went through");
    CHECK(check_pattern((void *)(uintptr_t)w.base, 20 * MIB, 77),
          "the seal changed the bytes");
    uint64_t hits = counter(&d, "weights_hits");
    CHECK(wait_child(spawn(reader, &d, &w.base)) == 0, "the reader");
    CHECK_EQ_U(counter(&d, "weights_hits"), hits + 1);

    /* ---- 3. another layout, bad requests ---- */
    struct vram_weights_info x;
    int e = vram_weights_open(wc, "model/a", 0, 20 * MIB, key_b, 0, &x);
    CHECK(e == -ESTALE && strstr(vram_client_last_error(wc), "20 MiB on device 0"),
          "another key: %d %s", e, vram_client_last_error(wc));
    e = vram_weights_open(wc, "model/a", 0, 22 * MIB, key_a, 0, &x);
    CHECK(e == -ESTALE, "another size: %d", e);
    CHECK(vram_weights_open(wc, "has space", 0, MIB, key_a, 0, &x) == -EINVAL,
          "a name with a space");
    CHECK(vram_weights_open(wc, "", 0, MIB, key_a, 0, &x) == -EINVAL, "no name");
    CHECK(vram_weights_open(wc, "big", 0, GIB, key_a, 0, &x) == -E2BIG ||
              vram_weights_open(wc, "big", 0, GIB, key_a, 0, &x) == -ENOSPC,
          "a set larger than the device");
    CHECK(vram_weights_open(wc, "model/x", 7, MIB, key_a, 0, &x) == -ENODEV,
          "no device 7");
    CHECK(vram_weights_close(wc, 999) == -ENOENT, "closing a set not open");

    /* ---- 4. a writer killed before sealing ---- */
    struct rendezvous rv;
    rv_init(&rv);
    pid_t dw = spawn(dying_writer, &d, &rv);
    uint64_t bid = rv_recv(rv.to_parent[0]);
    CHECK_EQ_U(dev0(&d, "weights_bytes"), (24 + 16) * MIB);
    kill(dw, SIGKILL);
    wait_child(dw);
    CHECK(wait_dev_value(&d, 0, "weights_bytes", 24 * MIB, 5000),
          "the killed writer's set is still charged");
    REQUIRE(vram_weights_open(wc, "model/b", 0, 16 * MIB, key_a, 0, &x) == 0,
            "open b: %s", vram_client_last_error(wc));
    CHECK(x.writer && x.id != bid, "the next opener does not write a new set");
    bool zero = true;
    for (uint64_t i = 0; i < 16 * MIB; i += 4096)
        zero &= ((volatile char *)(uintptr_t)x.base)[i] == 0;
    CHECK(zero, "the new set holds the dead writer's bytes");
    CHECK(vram_weights_close(wc, x.id) == 0, "close b unsealed");
    CHECK_EQ_U(dev0(&d, "weights_bytes"), 24 * MIB);

    /* ---- 5. an open waits for the writer's seal ---- */
    struct vram_weights_info cw;
    REQUIRE(vram_weights_open(wc, "model/c", 0, 8 * MIB, key_a, 0, &cw) == 0,
            "open c: %s", vram_client_last_error(wc));
    fill_pattern((void *)(uintptr_t)cw.base, 8 * MIB, 3);
    struct rendezvous wr;
    rv_init(&wr);
    pid_t wp = spawn(waiter, &d, &wr);
    rv_recv(wr.to_parent[0]);
    CHECK(daemon_log_wait(&d, "open of weight set 'model/c' waits", 5000),
          "the second open does not wait");
    CHECK(vram_weights_seal(wc, cw.id) == 0, "seal c");
    CHECK(wait_child(wp) == 0, "the waiter");

    /* ---- 6. cached sets, eviction, a kept set ---- */
    CHECK(vram_weights_close(wc, w.id) == 0 && vram_weights_close(wc, cw.id) == 0,
          "close a and c");
    CHECK_EQ_U(dev0(&d, "weights_cached_bytes"), 32 * MIB);
    struct vram_weights_info k;
    REQUIRE(vram_weights_open(wc, "model/kept", 0, 8 * MIB, key_a,
                              VRAM_WEIGHTS_KEEP, &k) == 0,
            "open a kept set: %s", vram_client_last_error(wc));
    CHECK(vram_weights_seal(wc, k.id) == 0 && vram_weights_close(wc, k.id) == 0,
          "seal and close the kept set");
    /* 256 - 40 MiB of sets = 216 MiB free: a grant of 108 chunks fits; 4
     * more need room: the least recently used cached set (a, closed first)
     * goes, c and the kept one stay. */
    uint32_t st, rg;
    REQUIRE(vram_stage_register_adhoc(wc, 0, 0, 1, &st) == 0, "stage");
    REQUIRE(vram_region_create(wc, st, VRAM_REGION_FIXED, 256 * MIB, 1, &rg) == 0,
            "region: %s", vram_client_last_error(wc));
    uint64_t ev = counter(&d, "weights_evictions");
    CHECK(vram_region_grow(wc, rg, 108) == 0, "a grant that fits: %s",
          vram_client_last_error(wc));
    CHECK_EQ_U(counter(&d, "weights_evictions"), ev);
    CHECK(vram_region_grow(wc, rg, 4) == 0, "a grant that needs room: %s",
          vram_client_last_error(wc));
    CHECK_EQ_U(counter(&d, "weights_evictions"), ev + 1);
    CHECK_EQ_U(dev0(&d, "weights_bytes"), 16 * MIB); /* c and the kept one */
    /* What a's eviction left over serves the next grant; then c goes; the
     * kept one never. */
    CHECK(vram_region_grow(wc, rg, 8) == 0, "a grant of what is left: %s",
          vram_client_last_error(wc));
    CHECK_EQ_U(counter(&d, "weights_evictions"), ev + 1);
    CHECK(vram_region_grow(wc, rg, 4) == 0, "the next grant: %s",
          vram_client_last_error(wc));
    CHECK_EQ_U(counter(&d, "weights_evictions"), ev + 2);
    CHECK_EQ_U(dev0(&d, "weights_bytes"), 8 * MIB);
    CHECK(vram_region_grow(wc, rg, 4) == -ENOSPC, "the kept set was evicted");
    CHECK_EQ_U(dev0(&d, "weights_bytes"), 8 * MIB);
    CHECK(vram_region_release(wc, rg) == 0, "release the region");

    /* ---- 7. other users, admins ---- */
    REQUIRE(vram_weights_open(wc, "model/a", 0, 20 * MIB, key_a, 0, &w) == 0 &&
                w.writer,
            "write a again: %s", vram_client_last_error(wc));
    fill_pattern((void *)(uintptr_t)w.base, 20 * MIB, 77);
    CHECK(vram_weights_seal(wc, w.id) == 0, "seal a again");
    CHECK(wait_child(spawn(other_user, &d, (void *)(uintptr_t)20005)) == 0,
          "an unlisted user");
    CHECK(wait_child(spawn(other_user, &d, (void *)(uintptr_t)20006)) == 0,
          "a listed user");
    CHECK(vram_admin_weights_drop(wc, "model/a") == -EBUSY, "dropped while mapped");
    CHECK(strstr(vram_client_last_error(wc), "mapped by 1 client") != NULL,
          "the refusal does not say who maps it: %s", vram_client_last_error(wc));
    CHECK(vram_weights_close(wc, w.id) == 0, "close a");
    CHECK(vram_admin_weights_drop(wc, "model/a") == 0, "drop a: %s",
          vram_client_last_error(wc));
    CHECK(vram_admin_weights_drop(wc, "model/kept") == 0, "drop the kept set");
    CHECK(vram_admin_weights_drop(wc, "model/a") == -ENOENT, "dropped twice");
    CHECK(vram_admin_weights_drop(wc, NULL) == -EINVAL &&
              strcmp(vram_client_last_error(wc), "no name") == 0,
          "a NULL name: %s", vram_client_last_error(wc));
    CHECK_EQ_U(dev0(&d, "weights_bytes"), 0);
    vram_client_close(wc);
    CHECK(wait_dev_value(&d, 0, "free_bytes", 256 * MIB, 3000),
          "memory did not come back");
    daemon_check_no_leaks(&d);
    daemon_stop(&d);
    return check_report("test_weights");
}
