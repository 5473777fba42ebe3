/* SPDX-License-Identifier: Apache-2.0 */
/* vramctl's command line, read in one pass: every option may come before
 * the command, after it or between its arguments (until "--"); the other
 * words are kept in order. Which options and how many words a command
 * takes is vramctl's to check. */
#ifndef VRAM_TOOLS_CMDLINE_H
#define VRAM_TOOLS_CMDLINE_H

#include <stddef.h>

enum tool_opt {
    TOOL_OPT_SOCKET,    /* -s, --socket PATH */
    TOOL_OPT_TIMEOUT,   /* -t, --timeout MS */
    TOOL_OPT_JSON,      /* --json */
    TOOL_OPT_NO_LEGEND, /* --no-legend */
    TOOL_OPT_INTERVAL,  /* --interval MS */
    TOOL_OPT_COUNT,     /* --count N */
    TOOL_OPT_LISTEN,    /* --listen ADDR:PORT */
    TOOL_OPT_HELP,      /* -h, --help */
    TOOL_OPT_VERSION,   /* -V, --version */
    TOOL_OPT_N,
};

#define TOOL_CMDLINE_WORDS 8

struct tool_cmdline {
    /* The last value given ("" for an option without one), NULL where the
     * option was not given. */
    const char *value[TOOL_OPT_N];
    /* The command and its arguments. */
    const char *words[TOOL_CMDLINE_WORDS];
    int nwords;
};

/* Reads argv[1..argc). 0, or -EINVAL (an unknown option, one without its
 * value, too many words) with the line to print in why: "vramctl status:
 * unknown option '--bogus' (vramctl status --help)". *out is written on
 * success only. */
int tool_cmdline_parse(int argc, char *const *argv, struct tool_cmdline *out,
                       char *why, size_t why_len);
/* The option's long name: "--json". */
const char *tool_opt_name(enum tool_opt o);

#endif
