/* SPDX-License-Identifier: Apache-2.0 */
/* Threads and locks, for the library's event thread (an engine that asks
 * libvram to answer recalls on its own). */
#ifndef VRAM_PLATFORM_THREAD_H
#define VRAM_PLATFORM_THREAD_H

typedef struct vp_thread vp_thread;
typedef struct vp_mutex vp_mutex;

/* Starts fn(arg) on a new thread: 0 and *out, or a negative errno. */
int vp_thread_start(vp_thread **out, void (*fn)(void *), void *arg);
/* Waits for the thread to end and frees it. NULL-tolerant. */
void vp_thread_join(vp_thread *t);

/* A recursive mutex: the thread holding it may take it again (a callback
 * that calls back into the library). */
int vp_mutex_new(vp_mutex **out);
void vp_mutex_lock(vp_mutex *m);
void vp_mutex_unlock(vp_mutex *m);
void vp_mutex_free(vp_mutex *m); /* NULL-tolerant */

#endif
