/* SPDX-License-Identifier: Apache-2.0 */
/* The optional event thread (event_thread.c). */
#ifndef VRAM_CLIENT_EVENT_THREAD_H
#define VRAM_CLIENT_EVENT_THREAD_H

#include "client/include/vram.h"

/* Ends it (the connection receives no more after). */
void vc_thread_stop(vram_client *c);

#endif
