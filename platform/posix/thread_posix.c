/* SPDX-License-Identifier: Apache-2.0 */
/* Threads and recursive mutexes on POSIX threads. */
#include "platform/thread.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>

struct vp_thread {
    pthread_t t;
    void (*fn)(void *);
    void *arg;
};

struct vp_mutex {
    pthread_mutex_t m;
};

static void *trampoline(void *p)
{
    struct vp_thread *t = p;
    t->fn(t->arg);
    return NULL;
}

int vp_thread_start(vp_thread **out, void (*fn)(void *), void *arg)
{
    struct vp_thread *t = malloc(sizeof(*t));
    if (!t)
        return -ENOMEM;
    t->fn = fn;
    t->arg = arg;
    /* The engine's signal handlers run on its own threads, not ours. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int e = pthread_create(&t->t, NULL, trampoline, t);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (e) {
        free(t);
        return -e;
    }
    *out = t;
    return 0;
}

void vp_thread_join(vp_thread *t)
{
    if (!t)
        return;
    pthread_join(t->t, NULL);
    free(t);
}

int vp_mutex_new(vp_mutex **out)
{
    struct vp_mutex *m = malloc(sizeof(*m));
    if (!m)
        return -ENOMEM;
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE);
    int e = pthread_mutex_init(&m->m, &a);
    pthread_mutexattr_destroy(&a);
    if (e) {
        free(m);
        return -e;
    }
    *out = m;
    return 0;
}

void vp_mutex_lock(vp_mutex *m)
{
    pthread_mutex_lock(&m->m);
}

void vp_mutex_unlock(vp_mutex *m)
{
    pthread_mutex_unlock(&m->m);
}

void vp_mutex_free(vp_mutex *m)
{
    if (!m)
        return;
    pthread_mutex_destroy(&m->m);
    free(m);
}
