/* SPDX-License-Identifier: Apache-2.0 */
/* vramctl's exit statuses: what each means, in one table that --help and
 * every command's --help print (man/vramctl.1's EXIT STATUS says the same),
 * and which status a libvram error gives. */
#ifndef VRAM_TOOLS_EXITS_H
#define VRAM_TOOLS_EXITS_H

#include <stdio.h>

enum tool_exit {
    TOOL_EXIT_OK = 0,
    TOOL_EXIT_FAILED = 1,      /* vramd refused or failed the request */
    TOOL_EXIT_USAGE = 2,       /* the command line is wrong */
    TOOL_EXIT_NO_DAEMON = 3,   /* no vramd answers at the socket */
    TOOL_EXIT_NOT_ALLOWED = 4, /* permissions, access.allow, access.admin */
    TOOL_EXIT_PROTOCOL = 5,    /* no protocol version in common, ENOSYS */
};

/* The status for a failed vram_client_connect (e < 0). */
enum tool_exit tool_exit_connect(int e);
/* The status for a request that failed with e (< 0) once connected: a
 * code vramd answered with means what it says there, so -ENOENT is a
 * refusal (1) here, no missing daemon. */
enum tool_exit tool_exit_request(int e);
/* "Exit status:" and one line per status, as --help prints it. */
void tool_exit_table(FILE *f);

#endif
