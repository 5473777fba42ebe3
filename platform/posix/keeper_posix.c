/* SPDX-License-Identifier: Apache-2.0 */
/* The keeper on POSIX: the service manager's fd store (keeper_fdstore.h,
 * each OS's own) or the holder (keeper_link.c), with the kept names here
 * (keeper_names.c). */
#include "platform/keeper.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "platform/posix/keeper_fdstore.h"
#include "platform/posix/keeper_link.h"
#include "platform/keeper_names.h"
#include "platform/posix/keeper_wire.h"
#include "platform/listener.h"
#include "platform/posix/passed.h"

struct vp_keeper {
    enum vp_keeper_kind kind;
    unsigned max;
    struct vpx_names names; /* what is kept (no values) */
    int notify;             /* the fd store's socket */
    /* The holder. */
    char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
    char prog[PATH_MAX];
    char prog_why[200]; /* why there is none, when prog is "" */
    struct vpx_link link;
    int64_t last_pid;
    unsigned discarded;
    char note[320];
};

const char *vp_keeper_kind_name(enum vp_keeper_kind kind)
{
    return kind == VP_KEEPER_FDSTORE ? "fd store"
           : kind == VP_KEEPER_HOLDER ? "holder"
                                      : "auto";
}

struct left {
    struct vp_keeper_entry *e;
    size_t n, cap;
};

static int left_add(struct left *l, const char *name, int fd)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 16;
        struct vp_keeper_entry *e = realloc(l->e, cap * sizeof(*e));
        if (!e)
            return -ENOMEM;
        l->e = e;
        l->cap = cap;
    }
    snprintf(l->e[l->n].name, sizeof(l->e[l->n].name), "%s", name);
    l->e[l->n].h.v = fd;
    l->n++;
    return 0;
}

void vp_keeper_entries_free(struct vp_keeper_entry *e, size_t n)
{
    if (!e)
        return;
    for (size_t i = 0; i < n; i++)
        vp_close(&e[i].h);
    free(e);
}

/* What was passed at start besides the listener's socket: under the fd
 * store, the handles an earlier vramd stored (a name that is not the
 * keeper's is removed from the store: nothing would ever take it back);
 * else nobody's, closed. The listener's fds stay for the listener. */
static int take_passed(struct vp_keeper *k, int n, struct left *l)
{
    char names[160] = "";
    size_t used = 0;
    /* What the store holds may exceed today's max: it is taken back all
     * the same (the store had room for it), and new puts wait for room. */
    k->names.max = UINT_MAX;
    for (size_t i = 0; i < (size_t)n; i++) {
        if (vpx_passed_fd(i) < 0 || vpx_passed_is_socket(i))
            continue;
        int fd = vpx_passed_take(i);
        const char *name = vpx_passed_name(i);
        if (k->kind == VP_KEEPER_FDSTORE) {
            int e = vpx_names_add(&k->names, name, 0);
            if (e == 0 && (e = left_add(l, name, fd)) == 0)
                continue;
            if (e == 0 || e == -ENOMEM) {
                k->names.max = k->max;
                close(fd);
                return -ENOMEM;
            }
            char w[8];
            if (e == -EINVAL && name[0])
                vpx_fdstore_remove(k->notify, name, w, sizeof(w));
        }
        close(fd);
        k->discarded++;
        if (used < sizeof(names))
            used += (size_t)snprintf(names + used, sizeof(names) - used, "%s%s",
                                     used ? ", " : "", name[0] ? name : "(no name)");
    }
    k->names.max = k->max;
    if (k->discarded) {
        size_t len = strlen(k->note);
        snprintf(k->note + len, sizeof(k->note) - len, "; %u passed fds "
                 "were not the keeper's, closed%s: %s", k->discarded,
                 k->kind == VP_KEEPER_FDSTORE ? " and removed from the store"
                                              : "", names);
    }
    return 0;
}

static int take_listed(void *arg, const char *name, int fd)
{
    return left_add(arg, name, fd) < 0 ? (close(fd), -ENOMEM) : 0;
}

static int sync_listed(void *arg, const char *name, int fd)
{
    struct vp_keeper *k = arg;
    close(fd);
    int e = vpx_names_add(&k->names, name, 0);
    return e == -EEXIST ? 0 : e;
}

static int open_holder(struct vp_keeper *k, const struct vp_keeper_cfg *cfg,
                       struct left *l, char *why, size_t whylen)
{
    if (!cfg->socket_path || !cfg->socket_path[0]) {
        snprintf(why, whylen, "the keeper needs vramd's socket path");
        return -EINVAL;
    }
    if ((size_t)snprintf(k->path, sizeof(k->path), "%s%s", cfg->socket_path,
                         VPX_KEEPER_SUFFIX) >= sizeof(k->path)) {
        snprintf(why, whylen, "the keeper's socket %s%s is longer than %zu "
                 "bytes", cfg->socket_path, VPX_KEEPER_SUFFIX,
                 sizeof(k->path) - 1);
        return -ENAMETOOLONG;
    }
    int e = vp_listen_check_dir(k->path, why, whylen);
    if (e < 0)
        return e;
    if (vpx_link_holder_path(cfg->holder_path, k->prog, sizeof(k->prog),
                             k->prog_why, sizeof(k->prog_why)) < 0)
        k->prog[0] = '\0'; /* said at the first put that needs it */
    e = vpx_link_connect(&k->link, k->path, why, whylen);
    if (e < 0)
        return e;
    if (e == 1)
        return 0; /* no holder: nothing was kept */
    k->last_pid = k->link.pid;
    if (k->link.max && k->link.max < k->max)
        k->max = k->link.max;
    size_t count = 0;
    k->names.max = UINT_MAX; /* as in take_passed */
    e = vpx_link_list(&k->link, take_listed, l, &count, why, whylen);
    for (size_t i = 0; e == 0 && i < l->n; i++) {
        e = vpx_names_add(&k->names, l->e[i].name, 0);
        if (e < 0)
            snprintf(why, whylen, "the holder listed %s twice or out of "
                     "rule", l->e[i].name);
    }
    k->names.max = k->max;
    return e;
}

int vp_keeper_open(const struct vp_keeper_cfg *cfg, struct vp_keeper **out,
                   struct vp_keeper_entry **left, size_t *nleft, char *why,
                   size_t whylen)
{
    int n = vpx_passed_load(why, whylen);
    if (n < 0)
        return n;
    struct vp_keeper *k = calloc(1, sizeof(*k));
    if (!k) {
        snprintf(why, whylen, "out of memory");
        return -ENOMEM;
    }
    k->notify = -1;
    k->link.fd = -1;
    k->max = cfg->max ? cfg->max : VP_KEEPER_DEFAULT_MAX;
    unsigned store_max = 0;
    char not_store[240]; /* why not, or where store_max comes from */
    bool store = vpx_fdstore_usable(&store_max, not_store, sizeof(not_store));
    int e = 0;
    struct left l = {0};
    if (cfg->kind == VP_KEEPER_FDSTORE && !store) {
        snprintf(why, whylen, "the fd store cannot be used: %s", not_store);
        e = -ENOTSUP;
        goto fail;
    }
    k->kind = cfg->kind == VP_KEEPER_HOLDER || !store ? VP_KEEPER_HOLDER
                                                       : VP_KEEPER_FDSTORE;
    if (k->kind == VP_KEEPER_FDSTORE) {
        if (store_max < k->max)
            k->max = store_max;
        snprintf(k->note, sizeof(k->note), "the service manager's fd store "
                 "(%s)", not_store);
        if ((k->notify = vpx_fdstore_socket(why, whylen)) < 0) {
            e = -EMFILE;
            goto fail;
        }
    } else {
        snprintf(k->note, sizeof(k->note), "the holder: %s",
                 cfg->kind == VP_KEEPER_HOLDER ? "as configured" : not_store);
    }
    vpx_names_init(&k->names, k->max);
    if (k->kind == VP_KEEPER_HOLDER && (e = open_holder(k, cfg, &l, why, whylen)) < 0)
        goto fail;
    if (n > 0 && (e = take_passed(k, n, &l)) < 0) {
        snprintf(why, whylen, "out of memory for what was kept");
        goto fail;
    }
    *out = k;
    *left = l.e;
    *nleft = l.n;
    return 0;
fail:
    vp_keeper_entries_free(l.e, l.n);
    vp_keeper_close(k);
    return e;
}

/* Every handle the holder kept went with it. */
static int holder_lost(struct vp_keeper *k, char *why, size_t whylen)
{
    size_t len = strlen(why);
    snprintf(why + len, whylen > len ? whylen - len : 0, "; the %zu handles "
             "it kept are lost", k->names.n);
    vpx_names_clear(&k->names, NULL);
    return -EPIPE;
}

/* A connected holder, started if none runs. */
static int linked(struct vp_keeper *k, char *why, size_t whylen)
{
    if (k->link.fd >= 0)
        return 0;
    int e = vpx_link_connect(&k->link, k->path, why, whylen);
    if (e < 0)
        return e;
    if (e == 1 && k->names.n) {
        snprintf(why, whylen, "the holder (pid %lld) is gone",
                 (long long)k->last_pid);
        return holder_lost(k, why, whylen);
    }
    if (e == 1) {
        if (!k->prog[0]) {
            snprintf(why, whylen, "%s", k->prog_why);
            return -ENOENT;
        }
        if ((e = vpx_link_spawn(k->prog, k->path, k->max, why, whylen)) < 0)
            return e;
        if ((e = vpx_link_connect(&k->link, k->path, why, whylen)) < 0)
            return e;
        if (e == 1) {
            snprintf(why, whylen, "the holder started but does not answer at "
                     "%s", k->path);
            return -EIO;
        }
    } else {
        /* The same holder again, after a call that got no answer: what it
         * keeps is what it says. */
        size_t count;
        vpx_names_clear(&k->names, NULL);
        k->names.max = UINT_MAX;
        e = vpx_link_list(&k->link, sync_listed, k, &count, why, whylen);
        k->names.max = k->max;
        if (e < 0)
            return e;
    }
    k->last_pid = k->link.pid;
    if (k->link.max && k->link.max < k->max)
        k->max = k->names.max = k->link.max;
    return 0;
}

static int link_result(struct vp_keeper *k, int e, char *why, size_t whylen)
{
    return e == -EPIPE ? holder_lost(k, why, whylen) : e;
}

int vp_keeper_put(struct vp_keeper *k, const char *name, vp_handle h,
                  char *why, size_t whylen)
{
    struct stat st;
    if (!vp_keeper_name_ok(name)) {
        snprintf(why, whylen, "%.80s: %s", name ? name : "(null)",
                 vpx_names_refusal(-EINVAL));
        return -EINVAL;
    }
    if (h.v < 0 || fstat((int)h.v, &st) < 0) {
        snprintf(why, whylen, "%s: not an open handle", name);
        return -EBADF;
    }
    if (S_ISSOCK(st.st_mode)) {
        /* The listener takes the passed sockets: a kept one would be
         * mistaken for it at the next start. */
        snprintf(why, whylen, "%s: the keeper keeps memory, not sockets", name);
        return -EINVAL;
    }
    if (vpx_names_find(&k->names, name, NULL)) {
        snprintf(why, whylen, "%s: %s", name, vpx_names_refusal(-EEXIST));
        return -EEXIST;
    }
    if (k->names.n >= k->max ||
        k->names.bytes + strlen(name) + 1 > VP_KEEPER_NAMES_BYTES) {
        snprintf(why, whylen, "%s: the keeper is full (%zu of %u handles, "
                 "%zu of %d bytes of names)", name, k->names.n, k->max,
                 k->names.bytes, VP_KEEPER_NAMES_BYTES);
        return -ENOSPC;
    }
    int e;
    if (k->kind == VP_KEEPER_FDSTORE) {
        e = vpx_fdstore_put(k->notify, name, (int)h.v, why, whylen);
    } else {
        if ((e = linked(k, why, whylen)) < 0)
            return e;
        e = link_result(k, vpx_link_put(&k->link, name, (int)h.v, why, whylen),
                        why, whylen);
    }
    if (e < 0)
        return e;
    if ((e = vpx_names_add(&k->names, name, 0)) < 0) {
        /* Out of memory with the handle kept: the name would be lost. */
        char w[8];
        if (k->kind == VP_KEEPER_FDSTORE)
            vpx_fdstore_remove(k->notify, name, w, sizeof(w));
        else
            vpx_link_remove(&k->link, name, w, sizeof(w));
        snprintf(why, whylen, "%s: out of memory", name);
    }
    return e;
}

int vp_keeper_remove(struct vp_keeper *k, const char *name, char *why,
                     size_t whylen)
{
    if (!vpx_names_find(&k->names, name, NULL)) {
        snprintf(why, whylen, "%.80s is not kept", name ? name : "(null)");
        return -ENOENT;
    }
    int e;
    if (k->kind == VP_KEEPER_FDSTORE) {
        e = vpx_fdstore_remove(k->notify, name, why, whylen);
    } else {
        if ((e = linked(k, why, whylen)) < 0)
            return e;
        if (!vpx_names_find(&k->names, name, NULL)) /* listed again */
            return 0;
        e = link_result(k, vpx_link_remove(&k->link, name, why, whylen), why,
                        whylen);
        if (e == -ENOENT)
            e = 0; /* gone already: the end wanted */
    }
    if (e == 0)
        vpx_names_del(&k->names, name, NULL);
    /* Kept nothing now: let the holder go (it exits once it keeps nothing
     * and no vramd is connected); the next put starts one. */
    if (e == 0 && k->kind != VP_KEEPER_FDSTORE && !k->names.n)
        vpx_link_close(&k->link);
    return e;
}

bool vp_keeper_has(const struct vp_keeper *k, const char *name)
{
    return vpx_names_find(&k->names, name, NULL);
}

void vp_keeper_info(const struct vp_keeper *k, struct vp_keeper_info *out)
{
    memset(out, 0, sizeof(*out));
    out->kind = k->kind;
    out->max = k->max;
    out->held = (unsigned)k->names.n;
    out->holder_pid = k->link.fd >= 0 ? k->link.pid : 0;
    out->discarded = k->discarded;
    snprintf(out->note, sizeof(out->note), "%s", k->note);
}

void vp_keeper_close(struct vp_keeper *k)
{
    if (!k)
        return;
    vpx_link_close(&k->link);
    if (k->notify >= 0)
        close(k->notify);
    vpx_names_fini(&k->names);
    free(k);
}
