/* SPDX-License-Identifier: Apache-2.0 */
/* platform/win32/'s threads, recursive locks and run-time loading
 * (thread_win32.c, dl_win32.c), which libvram's event thread and its CUDA driver
 * loader stand on. */
#include "tests/win/wintest.h"

#include "platform/dl.h"
#include "platform/thread.h"

#define THREADS 4
#define ROUNDS 10000

struct shared {
    vp_mutex *m;
    long counter;
    int depth_seen;
};

static void add(void *p)
{
    struct shared *s = p;
    for (int i = 0; i < ROUNDS; i++) {
        /* Taken twice, as a callback calling back into libvram does. */
        vp_mutex_lock(s->m);
        vp_mutex_lock(s->m);
        long v = s->counter;
        if (i % 512 == 0)
            Sleep(0); /* let another thread try to get in between */
        s->counter = v + 1;
        vp_mutex_unlock(s->m);
        vp_mutex_unlock(s->m);
    }
}

static void set_flag(void *p)
{
    *(volatile LONG *)p = (LONG)GetCurrentThreadId();
}

static void test_threads(void)
{
    volatile LONG ran = 0;
    vp_thread *t = NULL;
    MUST(vp_thread_start(&t, set_flag, (void *)&ran) == 0 && t, "start");
    vp_thread_join(t);
    CHECK(ran != 0 && ran != (LONG)GetCurrentThreadId(),
          "fn ran on thread %ld (this is %lu)", (long)ran, GetCurrentThreadId());
    vp_thread_join(NULL); /* NULL-tolerant */

    struct shared s = {0};
    MUST(vp_mutex_new(&s.m) == 0 && s.m, "mutex");
    vp_thread *ts[THREADS];
    for (int i = 0; i < THREADS; i++)
        MUST(vp_thread_start(&ts[i], add, &s) == 0, "start %d", i);
    for (int i = 0; i < THREADS; i++)
        vp_thread_join(ts[i]);
    CHECK(s.counter == (long)THREADS * ROUNDS, "counter %ld, expected %ld", s.counter,
          (long)THREADS * ROUNDS);
    vp_mutex_free(s.m);
    vp_mutex_free(NULL); /* NULL-tolerant */
}

static void test_dl(void)
{
    void *k = vp_dl_open("kernel32.dll");
    CHECK(k != NULL, "kernel32.dll from System32");
    DWORD (*pid)(void) = NULL;
    void *sym = vp_dl_sym(k, "GetCurrentProcessId");
    memcpy(&pid, &sym, sizeof(pid));
    CHECK(pid && pid() == GetCurrentProcessId(), "GetCurrentProcessId by name");
    CHECK(vp_dl_sym(k, "vp_no_such_function") == NULL, "a missing symbol");
    CHECK(vp_dl_sym(NULL, "GetCurrentProcessId") == NULL, "a NULL library");
    vp_dl_close(k);
    vp_dl_close(NULL); /* NULL-tolerant */
    CHECK(vp_dl_open("") == NULL && vp_dl_open(NULL) == NULL, "no name");

    /* A bare name is looked for in System32 only: libvram.dll beside this
     * program is not taken for it, but is loaded by its path. */
    void *planted = vp_dl_open("libvram.dll");
    CHECK(planted == NULL, "a bare name loaded the DLL beside the program");
    vp_dl_close(planted);
    char path[MAX_PATH * 3];
    beside_me("libvram.dll", path, sizeof(path));
    void *v = vp_dl_open(path);
    CHECK(v != NULL, "%s by its path", path);
    CHECK(vp_dl_sym(v, "vram_strerror") != NULL, "vram_strerror in %s", path);
    vp_dl_close(v);

    /* No NVIDIA driver under wine: the loader's "no driver" path. */
    void *cuda = vp_dl_open("nvcuda.dll");
    if (under_wine())
        CHECK(cuda == NULL, "nvcuda.dll loaded under wine");
    vp_dl_close(cuda);
}

int main(void)
{
    test_threads();
    test_dl();
    return win_report("test_win_thread");
}
