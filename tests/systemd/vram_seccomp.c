/* SPDX-License-Identifier: Apache-2.0 */
/* vram-seccomp: runs a program under the system call filter of vramd.service
 * where no systemd applies it (a container, a GPU machine whose PID 1 is
 * not systemd), and names every call the filter stops.
 *
 *   vram-seccomp [--allow FILE] [--mode errno|log] [--mdwe] [--report FILE]
 *                -- PROGRAM [ARG...]
 *
 * FILE lists the calls let through, one a line (tests/systemd/vramd.syscalls,
 * the unit's SystemCallFilter= expanded by tests/systemd/syscall_list.sh);
 * names this libseccomp or this architecture does not know are skipped, as
 * systemd skips them. The filter is loaded with no_new_privs (the unit's
 * NoNewPrivileges=yes) just before PROGRAM is executed, as systemd loads it,
 * so the dynamic loader runs under it too, and PROGRAM keeps this process's
 * pid (a harness that started vramd-seccomp can signal and wait for it).
 *
 * --mode errno (the default) fails a call outside the list with EPERM, as
 * SystemCallErrorNumber=EPERM does (systemd 252 gives EPERM for calls it
 * does not know as well). --mode log lets it run: a run that names
 * everything the program would need in one go. --mdwe adds the rules of
 * MemoryDenyWriteExecute=yes as systemd 252 applies them (mmap writable and
 * executable, mprotect and pkey_mprotect to executable, shmat with SHM_EXEC).
 *
 * The names come from a supervisor: the filter's action for a call outside
 * the list is a user notification (SECCOMP_RET_USER_NOTIF, Linux 5.0; log
 * mode's "continue" 5.5), which a process of its own, forked before the
 * filter is loaded and outside it, receives: it writes a line naming the
 * call, its thread and its arguments the first time each call is seen,
 * answers EPERM (or lets it continue), and when the last process under the
 * filter has exited, a summary line with every call and its count. No root,
 * audit log, strace or signal handler in the program is needed, and a
 * thread with every signal blocked (drivers' threads) is covered alike.
 * Where the kernel has no user notification, errno mode falls back to a plain
 * EPERM filter, which names nothing, and says so.
 *
 * Lines go to --report FILE (appended), else to standard error; each starts
 * with "vram-seccomp:". Exit status: PROGRAM's (this process becomes it), 2
 * for a usage error, 1 when the filter cannot be made or loaded. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <seccomp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef SECCOMP_USER_NOTIF_FLAG_CONTINUE
#define SECCOMP_USER_NOTIF_FLAG_CONTINUE 1
#endif
#ifndef VRAM_SECCOMP_LIST
#define VRAM_SECCOMP_LIST "vramd.syscalls"
#endif

enum mode { MODE_ERRNO, MODE_LOG };

struct opts {
    const char *allow;
    const char *report;
    enum mode mode;
    bool mdwe;
    char **argv;
};

/* The report: one write per line, so lines from the supervisor and the
 * program's own output on a shared stderr do not interleave within a line. */
static int report_fd = 2;

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
    char line[1024];
    int n = snprintf(line, sizeof(line), "vram-seccomp: ");
    va_list ap;
    va_start(ap, fmt);
    n += vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
    va_end(ap);
    if (n > (int)sizeof(line) - 2)
        n = (int)sizeof(line) - 2;
    line[n++] = '\n';
    if (write(report_fd, line, (size_t)n) < 0) {
        /* nowhere else to say it */
    }
}

static int usage(void)
{
    fprintf(stderr, "usage: vram-seccomp [--allow FILE] [--mode errno|log] [--mdwe] "
            "[--report FILE] -- PROGRAM [ARG...]\n");
    return 2;
}

static int parse(int argc, char **argv, struct opts *o)
{
    *o = (struct opts){.allow = VRAM_SECCOMP_LIST, .mode = MODE_ERRNO};
    int i = 1;
    for (; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--")) {
            i++;
            break;
        }
        if (!strcmp(a, "--mdwe")) {
            o->mdwe = true;
        } else if (i + 1 < argc && !strcmp(a, "--allow")) {
            o->allow = argv[++i];
        } else if (i + 1 < argc && !strcmp(a, "--report")) {
            o->report = argv[++i];
        } else if (i + 1 < argc && !strcmp(a, "--mode")) {
            const char *m = argv[++i];
            if (!strcmp(m, "errno"))
                o->mode = MODE_ERRNO;
            else if (!strcmp(m, "log"))
                o->mode = MODE_LOG;
            else
                return -EINVAL;
        } else if (a[0] == '-') {
            return -EINVAL;
        } else {
            break;
        }
    }
    if (i >= argc)
        return -EINVAL;
    o->argv = argv + i;
    return 0;
}

/* ---- the filter ----------------------------------------------------------- */

/* The calls whose rules --mdwe writes itself. */
static bool mdwe_call(int nr)
{
    return nr == SCMP_SYS(mmap) || nr == SCMP_SYS(mprotect) ||
           nr == SCMP_SYS(pkey_mprotect) || nr == SCMP_SYS(shmat);
}

/* Adds the allow list in path (less the calls --mdwe rules on, where it is
 * on: those are marked in mdwe_listed instead); *n_out is the count of
 * calls the list lets through. */
static int add_allow_list(scmp_filter_ctx ctx, const struct opts *o,
                          bool mdwe_listed[4], int *n_out)
{
    FILE *f = fopen(o->allow, "re");
    if (!f)
        return -errno;
    static const char *const mdwe_names[4] = {"mmap", "mprotect", "pkey_mprotect",
                                              "shmat"};
    char line[128];
    int n = 0, e = 0;
    while (fgets(line, sizeof(line), f)) {
        line[strcspn(line, " \t\r\n#")] = '\0';
        if (!line[0])
            continue;
        int nr = seccomp_syscall_resolve_name(line);
        if (nr == __NR_SCMP_ERROR || nr < 0)
            continue; /* unknown here, or not a call of this architecture */
        n++;
        if (o->mdwe && mdwe_call(nr)) {
            for (int i = 0; i < 4; i++)
                mdwe_listed[i] |= !strcmp(line, mdwe_names[i]);
            continue;
        }
        e = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, nr, 0);
        if (e < 0) {
            say("%s: %s", line, strerror(-e));
            break;
        }
    }
    fclose(f);
    if (e < 0)
        return e;
    *n_out = n;
    return 0;
}

/* MemoryDenyWriteExecute=yes as systemd 252's seccomp rules have it: mmap
 * goes through while its protection is not writable or not executable,
 * mprotect and pkey_mprotect while it is not executable, shmat without
 * SHM_EXEC; otherwise the filter's default action meets them (where the list
 * lets them through at all). */
static int add_mdwe(scmp_filter_ctx ctx, const bool listed[4])
{
    int e = 0;
    if (listed[0] &&
        ((e = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(mmap), 1,
                               SCMP_A2(SCMP_CMP_MASKED_EQ, PROT_WRITE, 0))) < 0 ||
         (e = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(mmap), 1,
                               SCMP_A2(SCMP_CMP_MASKED_EQ, PROT_EXEC, 0))) < 0))
        return e;
    if (listed[1] && (e = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(mprotect), 1,
                                           SCMP_A2(SCMP_CMP_MASKED_EQ, PROT_EXEC, 0))) < 0)
        return e;
    if (listed[2] &&
        (e = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(pkey_mprotect), 1,
                              SCMP_A2(SCMP_CMP_MASKED_EQ, PROT_EXEC, 0))) < 0)
        return e;
    if (listed[3] && (e = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(shmat), 1,
                                           SCMP_A2(SCMP_CMP_MASKED_EQ, SHM_EXEC, 0))) < 0)
        return e;
    return 0;
}

/* The filter: the list (and --mdwe's rules) let through, anything else meets
 * def: a user notification, or EPERM where there is none. */
static int make_filter(const struct opts *o, uint32_t def, scmp_filter_ctx *out)
{
    scmp_filter_ctx ctx = seccomp_init(def);
    if (!ctx)
        return -ENOMEM;
    bool listed[4] = {false, false, false, false};
    int n = 0;
    /* SystemCallArchitectures=native: another ABI's calls fail too. */
    int e = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_ERRNO(EPERM));
    if (e < 0)
        goto fail;
    e = add_allow_list(ctx, o, listed, &n);
    if (e < 0) {
        say("%s: %s", o->allow, strerror(-e));
        goto fail;
    }
    if (o->mdwe && (e = add_mdwe(ctx, listed)) < 0) {
        say("the MemoryDenyWriteExecute rules: %s", strerror(-e));
        goto fail;
    }
    say("%d calls let through (%s)%s; the rest %s", n, o->allow,
        o->mdwe ? ", less writable and executable memory" : "",
        def == SCMP_ACT_NOTIFY ? (o->mode == MODE_LOG ? "run, named" : "fail with EPERM, named")
                               : "fail with EPERM, unnamed (no user notification here)");
    *out = ctx;
    return 0;
fail:
    seccomp_release(ctx);
    return e;
}

/* ---- the supervisor --------------------------------------------------------- */

#define MAX_SEEN 512

struct seen {
    int nr;
    uint32_t arch;
    bool mdwe; /* stopped by --mdwe's rules, not by the list */
    unsigned long count;
};

static void prot_text(uint64_t prot, char *buf, size_t len)
{
    snprintf(buf, len, "%s%s%s%s", prot & PROT_READ ? "R" : "", prot & PROT_WRITE ? "W" : "",
             prot & PROT_EXEC ? "X" : "", prot & ~(uint64_t)7 ? "+" : "");
    if (!buf[0])
        snprintf(buf, len, "none");
}

/* Whether call nr with these arguments is one --mdwe's rules stopped (the
 * list lets it through otherwise). */
static bool mdwe_stop(const struct opts *o, const struct seccomp_data *d)
{
    if (!o->mdwe)
        return false;
    if (d->nr == SCMP_SYS(mmap))
        return (d->args[2] & (PROT_WRITE | PROT_EXEC)) == (PROT_WRITE | PROT_EXEC);
    if (d->nr == SCMP_SYS(mprotect) || d->nr == SCMP_SYS(pkey_mprotect))
        return (d->args[2] & PROT_EXEC) != 0;
    if (d->nr == SCMP_SYS(shmat))
        return (d->args[2] & SHM_EXEC) != 0;
    return false;
}

static void note(const struct opts *o, struct seen *seen, int *nseen,
                 const struct seccomp_notif *req)
{
    const struct seccomp_data *d = &req->data;
    bool mdwe = mdwe_stop(o, d);
    for (int i = 0; i < *nseen; i++)
        if (seen[i].nr == d->nr && seen[i].arch == d->arch && seen[i].mdwe == mdwe) {
            seen[i].count++;
            return;
        }
    if (*nseen < MAX_SEEN)
        seen[(*nseen)++] = (struct seen){.nr = d->nr, .arch = d->arch, .mdwe = mdwe,
                                         .count = 1};
    char *name = seccomp_syscall_resolve_num_arch(d->arch, d->nr);
    char comm[64] = "?", path[64], prot[16] = "";
    snprintf(path, sizeof(path), "/proc/%u/comm", req->pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        ssize_t k = read(fd, comm, sizeof(comm) - 1);
        comm[k > 0 ? k : 0] = '\0';
        comm[strcspn(comm, "\n")] = '\0';
        close(fd);
    }
    if (mdwe)
        prot_text(d->args[2], prot, sizeof(prot));
    say("%s %s (%d) in thread %u (%s): args %#llx %#llx %#llx%s%s%s",
        o->mode == MODE_LOG ? "would be denied:" : "denied:", name ? name : "?", d->nr,
        req->pid, comm, (unsigned long long)d->args[0], (unsigned long long)d->args[1],
        (unsigned long long)d->args[2], mdwe ? " (MemoryDenyWriteExecute: prot " : "",
        mdwe ? prot : "", mdwe ? ")" : "");
    free(name);
}

static void summary(const struct opts *o, const struct seen *seen, int nseen)
{
    char line[900];
    size_t n = 0;
    line[0] = '\0';
    for (int i = 0; i < nseen && n < sizeof(line) - 64; i++) {
        char *name = seccomp_syscall_resolve_num_arch(seen[i].arch, seen[i].nr);
        n += (size_t)snprintf(line + n, sizeof(line) - n, "%s%s%s %lu", i ? ", " : "",
                              name ? name : "?", seen[i].mdwe ? " (W^X)" : "", seen[i].count);
        free(name);
    }
    say("done: %d call%s %s%s%s", nseen, nseen == 1 ? "" : "s",
        o->mode == MODE_LOG ? "would be denied" : "denied", nseen ? ": " : "", line);
}

/* Receives the listener on sock, then answers every notification until no
 * process is left under the filter. */
static void supervise(const struct opts *o, int sock)
{
    char cbuf[CMSG_SPACE(sizeof(int))];
    char byte;
    struct iovec iov = {.iov_base = &byte, .iov_len = 1};
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
                       .msg_controllen = sizeof(cbuf)};
    if (recvmsg(sock, &m, 0) <= 0 || !CMSG_FIRSTHDR(&m))
        _exit(0); /* no filter came (it failed to load: the parent says why) */
    int fd;
    memcpy(&fd, CMSG_DATA(CMSG_FIRSTHDR(&m)), sizeof(fd));
    close(sock);
    struct seccomp_notif *req = NULL;
    struct seccomp_notif_resp *resp = NULL;
    if (seccomp_notify_alloc(&req, &resp) < 0) {
        say("cannot allocate notifications");
        _exit(1);
    }
    static struct seen seen[MAX_SEEN];
    int nseen = 0;
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, -1) < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        if (p.revents & POLLIN) {
            memset(req, 0, sizeof(*req));
            if (seccomp_notify_receive(fd, req) < 0)
                continue; /* the caller was interrupted or died meanwhile */
            note(o, seen, &nseen, req);
            memset(resp, 0, sizeof(*resp));
            resp->id = req->id;
            if (o->mode == MODE_LOG)
                resp->flags = SECCOMP_USER_NOTIF_FLAG_CONTINUE;
            else
                resp->error = -EPERM;
            seccomp_notify_respond(fd, resp); /* fails only if the caller is gone */
            continue;
        }
        if (p.revents & (POLLHUP | POLLERR | POLLNVAL))
            break; /* every process under the filter has exited */
    }
    summary(o, seen, nseen);
    seccomp_notify_free(req, resp);
    _exit(0);
}

/* The supervisor, forked twice so that it is no child of PROGRAM (which
 * would see an unknown child exit) and in a session of its own (a signal to
 * the program's process group leaves it to answer the rest). */
static int start_supervisor(const struct opts *o, int *sock_out)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
        return -errno;
    pid_t mid = fork();
    if (mid < 0) {
        int e = -errno;
        close(sv[0]);
        close(sv[1]);
        return e;
    }
    if (mid == 0) {
        close(sv[0]);
        if (fork() == 0) {
            setsid();
            signal(SIGINT, SIG_IGN);
            signal(SIGTERM, SIG_IGN);
            supervise(o, sv[1]);
        }
        _exit(0);
    }
    close(sv[1]);
    int st;
    while (waitpid(mid, &st, 0) < 0 && errno == EINTR) {
    }
    *sock_out = sv[0];
    return 0;
}

static int send_fd(int sock, int fd)
{
    char cbuf[CMSG_SPACE(sizeof(int))];
    memset(cbuf, 0, sizeof(cbuf));
    char byte = 0;
    struct iovec iov = {.iov_base = &byte, .iov_len = 1};
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
                       .msg_controllen = sizeof(cbuf)};
    struct cmsghdr *c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &fd, sizeof(fd));
    return sendmsg(sock, &m, 0) < 0 ? -errno : 0;
}

int main(int argc, char **argv)
{
    struct opts o;
    if (parse(argc, argv, &o) < 0)
        return usage();
    if (o.report) {
        report_fd = open(o.report, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (report_fd < 0) {
            fprintf(stderr, "vram-seccomp: %s: %s\n", o.report, strerror(errno));
            return 1;
        }
    }
    /* User notification: API level 5 (Linux 5.0); log mode's "continue"
     * needs Linux 5.5, which a kernel that lacks it answers with EINVAL at
     * the first call outside the list (named all the same). */
    bool notify = seccomp_api_get() >= 5;
    if (!notify && o.mode == MODE_LOG) {
        say("log mode needs seccomp user notification (Linux 5.0, libseccomp 2.5)");
        return 1;
    }
    scmp_filter_ctx ctx;
    int e = make_filter(&o, notify ? SCMP_ACT_NOTIFY : SCMP_ACT_ERRNO(EPERM), &ctx);
    if (e < 0)
        return 1;
    int sock = -1;
    if (notify && (e = start_supervisor(&o, &sock)) < 0) {
        say("cannot start the supervisor: %s", strerror(-e));
        return 1;
    }
    e = seccomp_load(ctx);
    if (e < 0) {
        say("cannot load the filter: %s", strerror(-e));
        return 1;
    }
    /* From here on only calls of the list: sendmsg, close, execve. */
    if (notify) {
        int fd = seccomp_notify_fd(ctx);
        if (fd < 0 || (e = send_fd(sock, fd)) < 0) {
            say("cannot hand the listener over: %s", strerror(fd < 0 ? -fd : -e));
            return 1;
        }
        close(fd);
        close(sock);
    }
    seccomp_release(ctx);
    if (o.report)
        close(report_fd);
    execvp(o.argv[0], o.argv);
    fprintf(stderr, "vram-seccomp: %s: %s\n", o.argv[0], strerror(errno));
    return 127;
}
