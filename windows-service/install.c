/* SPDX-License-Identifier: Apache-2.0 */
/* Installing, removing and asking about the service: what to install and
 * what to say; the service manager's calls are platform/win32/'s
 * (scm_install.h). */
#include "windows-service/install.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "platform/clock.h"
#include "platform/proc.h"

#define DEFAULT_NAME "vramd"
#define DEFAULT_DISPLAY "vramd GPU memory broker"
#define DEFAULT_DESCRIPTION                                                    \
    "Shares the GPUs' memory between inference engines: one broker owns "     \
    "every GPU's memory and every pipeline stage's budget."
#define DEFAULT_RESTART_MS 5000
#define RESTARTS 3
#define RESET_AFTER_S (24 * 3600)
#define PATH_MAX_U8 4096
#define POLL_MS 100
/* What CreateProcess takes, in UTF-16 characters: never more UTF-8 bytes
 * than this fit in fewer characters (the platform checks the characters). */
#define LINE_MAX_U8 (32768 * 3)

static const char *or(const char *s, const char *def)
{
    return s ? s : def;
}

/* Appends arg, quoted as the C runtime's argument parser reads it back,
 * to line (of room bytes, used so far *n). UTF-8 as it is: the characters
 * quoting looks at are ASCII, which no multi-byte sequence holds. */
static int append_arg(char *line, size_t room, size_t *n, const char *arg)
{
    size_t k = *n;
#define PUT(c)                                                                 \
    do {                                                                       \
        if (k + 1 >= room)                                                     \
            return -ENAMETOOLONG;                                              \
        line[k++] = (c);                                                       \
    } while (0)
    if (k)
        PUT(' ');
    bool plain = arg[0] && !strpbrk(arg, " \t\n\v\"");
    if (!plain)
        PUT('"');
    for (const char *s = arg;; s++) {
        size_t bs = 0;
        while (*s == '\\') {
            bs++;
            s++;
        }
        if (!*s) {
            for (size_t i = 0; i < (plain ? bs : 2 * bs); i++)
                PUT('\\');
            break;
        }
        for (size_t i = 0; i < (*s == '"' ? 2 * bs + 1 : bs); i++)
            PUT('\\');
        PUT(*s);
    }
    if (!plain)
        PUT('"');
#undef PUT
    line[k] = 0;
    *n = k;
    return 0;
}

/* The command line: the program, always quoted (a path with a space and
 * no quotes is the classic unquoted-service-path hole), then the
 * arguments. */
static int command_line(const char *exe, char *const *argv, char *line, size_t room,
                        char *why, size_t whylen)
{
    size_t exelen = strlen(exe);
    if (strchr(exe, '"')) {
        snprintf(why, whylen, "program path holds a quote");
        return -EINVAL;
    }
    if (exelen + 3 >= room) {
        snprintf(why, whylen, "program path: too long");
        return -ENAMETOOLONG;
    }
    size_t n = 0;
    line[n++] = '"';
    memcpy(line + n, exe, exelen);
    n += exelen;
    line[n++] = '"';
    line[n] = 0;
    static char *const def_argv[] = {"--service", NULL};
    int e = 0;
    for (char *const *a = argv ? argv : def_argv; *a && e == 0; a++)
        e = append_arg(line, room, &n, *a);
    if (e < 0)
        snprintf(why, whylen, "the service's command line: too long");
    return e;
}

static int install(const struct vram_service_install_cfg *cfg, const char *display,
                   const char *line, char *why, size_t whylen)
{
    const char *name = or(cfg->name, DEFAULT_NAME);
    struct vpw_scm_service svc = {
        .name = name,
        .display = display,
        .description = or(cfg->description, DEFAULT_DESCRIPTION),
        .command_line = line,
        .restarts = RESTARTS,
        .restart_delay_ms = cfg->restart_delay_ms ? cfg->restart_delay_ms
                                                  : DEFAULT_RESTART_MS,
        .reset_after_s = RESET_AFTER_S,
    };
    struct vpw_scm_outcome o;
    int e = vpw_scm_install(&svc, &o);
    if (e < 0) {
        switch (o.step) {
        case VPW_SCM_TEXT:
            snprintf(why, whylen, "service name, display name, description or "
                     "command line: too long or not UTF-8");
            break;
        case VPW_SCM_MANAGER:
            snprintf(why, whylen, "cannot open the service manager: error %lu%s", o.error,
                     e == -EACCES ? " (run it as Administrator)" : "");
            break;
        case VPW_SCM_CREATE:
            snprintf(why, whylen, "cannot create service %s: %s", name,
                     o.display_taken
                         ? "another service has its display name (give another "
                           "service name)"
                     : e == -EEXIST ? "it exists already (--uninstall-service first)"
                     : e == -EACCES ? "access denied (run it as Administrator)"
                                    : "refused by the service manager");
            break;
        case VPW_SCM_RESTARTS:
            snprintf(why, whylen, "cannot set the service's failure actions: error %lu; "
                     "not installed", o.error);
            break;
        }
        return e;
    }
    int rc = 0;
    why[0] = 0;
    if (o.description_error) {
        snprintf(why, whylen, "the description was refused (error %lu)",
                 o.description_error);
        rc = 1;
    }
    if (o.flag_error) {
        size_t used = strlen(why);
        snprintf(why + used, whylen - used, "%sthe failure-actions flag was refused "
                 "(error %lu): restarts follow crashes only, not a stop with an error",
                 used ? "; " : "", o.flag_error);
        rc = 1;
    }
    if (rc == 0)
        snprintf(why, whylen, "installed service %s: %s", name, line);
    return rc;
}

int vram_service_install(const struct vram_service_install_cfg *cfg, char *why,
                         size_t whylen)
{
    /* Display names are unique too: a second instance under its own name
     * gets its name in its display name, or the SCM refuses it as a
     * duplicate. */
    char own_display[300];
    const char *shown = cfg->display_name;
    if (!shown && cfg->name && strcmp(cfg->name, DEFAULT_NAME) != 0) {
        snprintf(own_display, sizeof(own_display), "%s (%s)", DEFAULT_DISPLAY,
                 cfg->name);
        shown = own_display;
    }
    char self[PATH_MAX_U8];
    const char *exe = cfg->exe;
    if (!exe) {
        if (vp_self_exe(self, sizeof(self)) < 0) {
            snprintf(why, whylen, "cannot tell this program's path");
            return -ENAMETOOLONG;
        }
        exe = self;
    }
    char *line = malloc(LINE_MAX_U8);
    if (!line)
        return -ENOMEM;
    int e = command_line(exe, cfg->argv, line, LINE_MAX_U8, why, whylen);
    if (e == 0)
        e = install(cfg, or(shown, DEFAULT_DISPLAY), line, why, whylen);
    free(line);
    return e;
}

static bool is_stopped(const char *name)
{
    struct vpw_scm_status st;
    return vpw_scm_query(name, &st) == 0 && st.state == VPW_SERVICE_STOPPED;
}

int vram_service_uninstall(const char *name, uint32_t timeout_ms, char *why,
                           size_t whylen)
{
    name = or(name, DEFAULT_NAME);
    struct vpw_scm_status st;
    int e = vpw_scm_query(name, &st);
    if (e < 0) {
        snprintf(why, whylen, "cannot open service %s: %s", name,
                 e == -ENOENT ? "there is none" : strerror(-e));
        return e;
    }
    bool stopped = st.state == VPW_SERVICE_STOPPED;
    if (!stopped) {
        vpw_scm_control(name, VPW_SERVICE_CONTROL_STOP);
        for (uint32_t waited = 0; waited <= timeout_ms; waited += POLL_MS) {
            if (is_stopped(name)) {
                stopped = true;
                break;
            }
            vp_sleep_ms(POLL_MS);
        }
    }
    unsigned long err = 0;
    e = vpw_scm_delete(name, &err);
    if (e < 0) {
        snprintf(why, whylen, "cannot delete service %s: error %lu", name, err);
        return e;
    }
    /* Deleting marks it: the SCM drops the entry once no handle to it is
     * open and its process is gone, which may come after STOPPED, and
     * until then the name cannot be installed again. Waited for, as long
     * as the stop may take. */
    bool gone = false;
    for (uint32_t waited = 0;; waited += POLL_MS) {
        if (vpw_scm_query(name, &st) == -ENOENT) {
            gone = true;
            break;
        }
        if (waited >= timeout_ms)
            break;
        vp_sleep_ms(POLL_MS);
    }
    if (!stopped) {
        snprintf(why, whylen, "service %s did not stop within %u ms; it is removed "
                 "once it stops", name, (unsigned)timeout_ms);
        return -ETIMEDOUT;
    }
    if (gone)
        snprintf(why, whylen, "removed service %s", name);
    else
        snprintf(why, whylen, "removed service %s (the service manager drops it once "
                 "the last handle to it is closed)", name);
    return 0;
}

int vram_service_query(const char *name, struct vpw_scm_status *out)
{
    return vpw_scm_query(or(name, DEFAULT_NAME), out);
}

int vram_service_start(const char *name)
{
    return vpw_scm_start(or(name, DEFAULT_NAME));
}

int vram_service_control(const char *name, uint32_t control)
{
    return vpw_scm_control(or(name, DEFAULT_NAME), control);
}

const char *vram_service_state_name(uint32_t state)
{
    switch (state) {
    case VPW_SERVICE_STOPPED:
        return "STOPPED";
    case VPW_SERVICE_START_PENDING:
        return "START_PENDING";
    case VPW_SERVICE_STOP_PENDING:
        return "STOP_PENDING";
    case VPW_SERVICE_RUNNING:
        return "RUNNING";
    case VPW_SERVICE_CONTINUE_PENDING:
        return "CONTINUE_PENDING";
    case VPW_SERVICE_PAUSE_PENDING:
        return "PAUSE_PENDING";
    case VPW_SERVICE_PAUSED:
        return "PAUSED";
    default:
        return "?";
    }
}
