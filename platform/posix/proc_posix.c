/* SPDX-License-Identifier: Apache-2.0 */
/* Processes on POSIX: signals, fork and exec, waiting for a child. Pinning
 * a process, its start time, this program's path and who holds a memory
 * object are each OS's own (platform/linux/proc_linux.c). */
#include "platform/proc.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

int64_t vp_self_pid(void)
{
    return (int64_t)getpid();
}

void vp_proc_kill_self(void)
{
    raise(SIGKILL);
    _exit(137);
}

int vp_spawn(const char *path, char *const argv[], int64_t *pid_out)
{
    pid_t pid = fork();
    if (pid < 0)
        return -errno;
    if (pid == 0) {
        execv(path, argv);
        _exit(127);
    }
    *pid_out = pid;
    return 0;
}

int vp_spawn_piped(const char *path, char *const argv[], int64_t *pid_out,
                   FILE **to_child, FILE **from_child)
{
    int in[2], out[2];
    if (pipe2(in, O_CLOEXEC) < 0)
        return -errno;
    if (pipe2(out, O_CLOEXEC) < 0) {
        int e = -errno;
        close(in[0]);
        close(in[1]);
        return e;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        int e = -errno;
        close(in[0]);
        close(in[1]);
        close(out[0]);
        close(out[1]);
        return e;
    }
    if (pid == 0) {
        dup2(in[0], 0);
        dup2(out[1], 1);
        execv(path, argv);
        _exit(127);
    }
    close(in[0]);
    close(out[1]);
    *to_child = fdopen(in[1], "w");
    *from_child = fdopen(out[0], "r");
    *pid_out = pid;
    return 0;
}

int vp_wait_child(int64_t pid, int *status)
{
    int st;
    pid_t r;
    do {
        r = waitpid((pid_t)pid, &st, 0);
    } while (r < 0 && errno == EINTR);
    if (r < 0)
        return -errno;
    *status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    return 0;
}
