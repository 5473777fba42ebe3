/* SPDX-License-Identifier: Apache-2.0 */
/* vramctl top: a live full-screen view of vramd (devices, stages,
 * clients), refreshed in place on the terminal's alternate screen until q
 * or ^C, the terminal restored as it was. Where standard output is not a
 * terminal, one frame is printed (80 columns, or $COLUMNS) instead. */
#ifndef VRAM_TOOLS_TOP_H
#define VRAM_TOOLS_TOP_H

#include "client/include/vram.h"

/* Runs the view over c (taken over: closed when the view ends) for the
 * daemon on socket, fetching every interval_ms. Returns the exit status:
 * 0 when the user quit (or the one frame was printed), 1 when the
 * terminal could not be set up, exits.h's for a frame that could not be
 * fetched. */
int tool_top_run(vram_client *c, const char *socket, long interval_ms);

#endif
