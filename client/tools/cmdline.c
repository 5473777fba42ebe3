/* SPDX-License-Identifier: Apache-2.0 */
/* Not getopt: it stops at the first word with "+" (so options after the
 * command were once refused or read by hand, each differently) and
 * permutes argv without it, where a size's unit ("12 GiB") or a weight
 * set's name after "--" must stay words in their place. */
#include "client/tools/cmdline.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

static const struct {
    const char *name; /* "--socket" */
    char letter;      /* 's' for -s, 0 for none */
    bool takes;       /* a value: "--socket PATH", "--socket=PATH", "-sPATH" */
} opts[TOOL_OPT_N] = {
    [TOOL_OPT_SOCKET] = {"--socket", 's', true},
    [TOOL_OPT_TIMEOUT] = {"--timeout", 't', true},
    [TOOL_OPT_JSON] = {"--json", 0, false},
    [TOOL_OPT_NO_LEGEND] = {"--no-legend", 0, false},
    [TOOL_OPT_INTERVAL] = {"--interval", 0, true},
    [TOOL_OPT_COUNT] = {"--count", 0, true},
    [TOOL_OPT_LISTEN] = {"--listen", 0, true},
    [TOOL_OPT_HELP] = {"--help", 'h', false},
    [TOOL_OPT_VERSION] = {"--version", 'V', false},
};

/* What a value looks like, for "--socket needs PATH". */
static const char *const value_names[TOOL_OPT_N] = {
    [TOOL_OPT_SOCKET] = "PATH",   [TOOL_OPT_TIMEOUT] = "MS",
    [TOOL_OPT_INTERVAL] = "MS",   [TOOL_OPT_COUNT] = "N",
    [TOOL_OPT_LISTEN] = "ADDR:PORT",
};

const char *tool_opt_name(enum tool_opt o)
{
    return o < TOOL_OPT_N ? opts[o].name : "?";
}

/* The option arg spells, and where its value is: *inline_value after "="
 * or a letter's rest, else NULL (the next word). -1 when it is none. */
static int which(const char *arg, const char **inline_value)
{
    *inline_value = NULL;
    for (int o = 0; o < TOOL_OPT_N; o++) {
        size_t n = strlen(opts[o].name);
        if (strncmp(arg, opts[o].name, n) == 0 &&
            (arg[n] == '\0' || (arg[n] == '=' && opts[o].takes))) {
            if (arg[n] == '=')
                *inline_value = arg + n + 1;
            return o;
        }
        if (opts[o].letter && arg[0] == '-' && arg[1] == opts[o].letter &&
            (arg[2] == '\0' || opts[o].takes)) {
            if (arg[2])
                *inline_value = arg + 2;
            return o;
        }
    }
    return -1;
}

int tool_cmdline_parse(int argc, char *const *argv, struct tool_cmdline *out,
                       char *why, size_t why_len)
{
    struct tool_cmdline c = {0};
    char problem[256] = "";
    bool words_only = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!words_only && strcmp(a, "--") == 0) {
            words_only = true;
            continue;
        }
        if (words_only || a[0] != '-' || a[1] == '\0') {
            if (c.nwords < TOOL_CMDLINE_WORDS)
                c.words[c.nwords] = a;
            else if (!problem[0])
                snprintf(problem, sizeof(problem), "too many arguments ('%s')", a);
            c.nwords++;
            continue;
        }
        const char *v;
        int o = which(a, &v);
        if (o < 0) {
            if (!problem[0])
                snprintf(problem, sizeof(problem), "unknown option '%s'", a);
            continue;
        }
        if (opts[o].takes && !v) {
            if (i + 1 >= argc) {
                if (!problem[0])
                    snprintf(problem, sizeof(problem), "%s needs a value (%s)",
                             opts[o].name, value_names[o]);
                continue;
            }
            v = argv[++i];
        }
        c.value[o] = v ? v : "";
    }
    if (problem[0]) {
        /* Named after the command where there is one, to send the reader
         * to that command's --help. */
        char cmd[64] = "";
        if (c.nwords > 0) {
            bool two = c.nwords > 1 && strcmp(c.words[0], "weights") == 0 &&
                       strcmp(c.words[1], "drop") == 0;
            snprintf(cmd, sizeof(cmd), " %.40s%s", c.words[0], two ? " drop" : "");
        }
        snprintf(why, why_len, "vramctl%s: %s (vramctl%s --help)", cmd, problem, cmd);
        return -EINVAL;
    }
    *out = c;
    return 0;
}
