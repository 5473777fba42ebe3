/* SPDX-License-Identifier: Apache-2.0 */
/* Installing, removing and asking about the service through the SCM. */
#include "windows-service/install.h"

#define WIN32_LEAN_AND_MEAN
#include <windows.h>

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <wchar.h>

#include "platform/win32/scm_errno.h"
#include "platform/win32/wstr.h"

#define DEFAULT_NAME "vramd"
#define DEFAULT_DISPLAY "vramd GPU memory broker"
#define DEFAULT_DESCRIPTION                                                    \
    "Shares the GPUs' memory between inference engines: one broker owns "     \
    "every GPU's memory and every pipeline stage's budget."
#define DEFAULT_RESTART_MS 5000
#define RESTARTS 3
#define RESET_AFTER_S (24 * 3600)
#define WPATH_MAX (MAX_PATH * 4)
#define POLL_MS 100

static const char *or(const char *s, const char *def)
{
    return s ? s : def;
}

/* Appends arg, quoted as the C runtime's argument parser reads it back,
 * to line (of room characters, used so far *n). */
static int append_arg(wchar_t *line, size_t room, size_t *n, const wchar_t *arg)
{
    size_t k = *n;
#define PUT(c)                                                                 \
    do {                                                                       \
        if (k + 1 >= room)                                                     \
            return -ENAMETOOLONG;                                              \
        line[k++] = (c);                                                       \
    } while (0)
    if (k)
        PUT(L' ');
    bool plain = arg[0] && !wcspbrk(arg, L" \t\n\v\"");
    if (!plain)
        PUT(L'"');
    for (const wchar_t *s = arg;; s++) {
        size_t bs = 0;
        while (*s == L'\\') {
            bs++;
            s++;
        }
        if (!*s) {
            for (size_t i = 0; i < (plain ? bs : 2 * bs); i++)
                PUT(L'\\');
            break;
        }
        for (size_t i = 0; i < (*s == L'"' ? 2 * bs + 1 : bs); i++)
            PUT(L'\\');
        PUT(*s);
    }
    if (!plain)
        PUT(L'"');
#undef PUT
    line[k] = 0;
    *n = k;
    return 0;
}

static int append_utf8(wchar_t *line, size_t room, size_t *n, const char *arg)
{
    wchar_t w[WPATH_MAX];
    int e = vpw_wide(arg, w, WPATH_MAX);
    return e < 0 ? e : append_arg(line, room, n, w);
}

static int install(const struct vram_service_install_cfg *cfg, const wchar_t *name,
                   const wchar_t *display, wchar_t *desc, const wchar_t *line,
                   char *why, size_t whylen);

int vram_service_install(const struct vram_service_install_cfg *cfg, char *why,
                         size_t whylen)
{
    wchar_t name[257], display[257], exe[WPATH_MAX], desc[1024];
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
    if (vpw_wide(or(cfg->name, DEFAULT_NAME), name, 257) < 0 ||
        vpw_wide(or(shown, DEFAULT_DISPLAY), display, 257) < 0 ||
        vpw_wide(or(cfg->description, DEFAULT_DESCRIPTION), desc, 1024) < 0) {
        snprintf(why, whylen, "service name, display name or description: too "
                 "long or not UTF-8");
        return -EINVAL;
    }
    if (cfg->exe) {
        if (vpw_wide(cfg->exe, exe, WPATH_MAX) < 0) {
            snprintf(why, whylen, "program path %s: too long or not UTF-8", cfg->exe);
            return -EINVAL;
        }
    } else {
        DWORD n = GetModuleFileNameW(NULL, exe, WPATH_MAX);
        if (n == 0 || n >= WPATH_MAX) {
            snprintf(why, whylen, "cannot tell this program's path");
            return -ENAMETOOLONG;
        }
    }
    /* The command line: the program, always quoted (a path with a space
     * and no quotes is the classic unquoted-service-path hole), then the
     * arguments. */
    enum { LINE_MAX = 32768 }; /* what CreateProcess takes */
    size_t n = 0;
    int e = 0;
    size_t exelen = wcslen(exe);
    if (wcschr(exe, L'"')) {
        snprintf(why, whylen, "program path holds a quote");
        return -EINVAL;
    }
    wchar_t *line = malloc(LINE_MAX * sizeof(wchar_t));
    if (!line)
        return -ENOMEM;
    if (exelen + 3 >= LINE_MAX) {
        free(line);
        snprintf(why, whylen, "program path: too long");
        return -ENAMETOOLONG;
    }
    line[n++] = L'"';
    wmemcpy(line + n, exe, exelen);
    n += exelen;
    line[n++] = L'"';
    line[n] = 0;
    static char *const def_argv[] = {"--service", NULL};
    for (char *const *a = cfg->argv ? cfg->argv : def_argv; *a && e == 0; a++)
        e = append_utf8(line, LINE_MAX, &n, *a);
    if (e < 0) {
        snprintf(why, whylen, "the service's command line: too long or not UTF-8");
        free(line);
        return e;
    }
    e = install(cfg, name, display, desc, line, why, whylen);
    free(line);
    return e;
}

static int install(const struct vram_service_install_cfg *cfg, const wchar_t *name,
                   const wchar_t *display, wchar_t *desc, const wchar_t *line,
                   char *why, size_t whylen)
{
    int e;
    SC_HANDLE m = OpenSCManagerW(NULL, NULL, SC_MANAGER_CONNECT | SC_MANAGER_CREATE_SERVICE);
    if (!m) {
        DWORD err = GetLastError();
        snprintf(why, whylen, "cannot open the service manager: error %lu%s", err,
                 err == ERROR_ACCESS_DENIED ? " (run it as Administrator)" : "");
        return vpw_scm_errno(err);
    }
    /* LocalSystem: lpServiceStartName NULL. SERVICE_START: setting a
     * restart action takes it. */
    SC_HANDLE s = CreateServiceW(m, name, display,
                                 SERVICE_CHANGE_CONFIG | SERVICE_QUERY_CONFIG |
                                     SERVICE_START | DELETE,
                                 SERVICE_WIN32_OWN_PROCESS, SERVICE_AUTO_START,
                                 SERVICE_ERROR_NORMAL, line, NULL, NULL, NULL, NULL,
                                 NULL);
    if (!s) {
        DWORD err = GetLastError();
        e = vpw_scm_errno(err);
        snprintf(why, whylen, "cannot create service %s: %s", or(cfg->name, DEFAULT_NAME),
                 err == ERROR_DUPLICATE_SERVICE_NAME
                     ? "another service has its display name (give another "
                       "service name)"
                 : e == -EEXIST ? "it exists already (--uninstall-service first)"
                 : e == -EACCES ? "access denied (run it as Administrator)"
                                : "refused by the service manager");
        CloseServiceHandle(m);
        return e;
    }
    SC_ACTION acts[RESTARTS];
    for (int i = 0; i < RESTARTS; i++)
        acts[i] = (SC_ACTION){SC_ACTION_RESTART,
                              cfg->restart_delay_ms ? cfg->restart_delay_ms
                                                    : DEFAULT_RESTART_MS};
    SERVICE_FAILURE_ACTIONSW fa = {.dwResetPeriod = RESET_AFTER_S,
                                   .cActions = RESTARTS,
                                   .lpsaActions = acts};
    if (!ChangeServiceConfig2W(s, SERVICE_CONFIG_FAILURE_ACTIONS, &fa)) {
        DWORD err = GetLastError();
        /* A service that is not restarted is not what was asked for. */
        DeleteService(s);
        CloseServiceHandle(s);
        CloseServiceHandle(m);
        snprintf(why, whylen, "cannot set the service's failure actions: error %lu; "
                 "not installed", err);
        return vpw_scm_errno(err);
    }
    int rc = 0;
    why[0] = 0;
    SERVICE_DESCRIPTIONW d = {desc};
    if (!ChangeServiceConfig2W(s, SERVICE_CONFIG_DESCRIPTION, &d)) {
        snprintf(why, whylen, "the description was refused (error %lu)", GetLastError());
        rc = 1;
    }
    SERVICE_FAILURE_ACTIONS_FLAG flag = {TRUE};
    if (!ChangeServiceConfig2W(s, SERVICE_CONFIG_FAILURE_ACTIONS_FLAG, &flag)) {
        size_t used = strlen(why);
        snprintf(why + used, whylen - used, "%sthe failure-actions flag was refused "
                 "(error %lu): restarts follow crashes only, not a stop with an error",
                 used ? "; " : "", GetLastError());
        rc = 1;
    }
    CloseServiceHandle(s);
    CloseServiceHandle(m);
    if (rc == 0) {
        char c[WPATH_MAX];
        if (vpw_utf8(line, c, sizeof(c)) < 0)
            snprintf(c, sizeof(c), "?");
        snprintf(why, whylen, "installed service %s: %s", or(cfg->name, DEFAULT_NAME), c);
    }
    return rc;
}

static int open_service(const char *name, DWORD access, SC_HANDLE *m, SC_HANDLE *s)
{
    wchar_t w[257];
    if (vpw_wide(or(name, DEFAULT_NAME), w, 257) < 0)
        return -EINVAL;
    *m = OpenSCManagerW(NULL, NULL, SC_MANAGER_CONNECT);
    if (!*m)
        return vpw_scm_errno(GetLastError());
    *s = OpenServiceW(*m, w, access);
    if (!*s) {
        int e = vpw_scm_errno(GetLastError());
        CloseServiceHandle(*m);
        return e;
    }
    return 0;
}

static int query(SC_HANDLE s, struct vram_service_state *out)
{
    SERVICE_STATUS_PROCESS p;
    DWORD n;
    if (!QueryServiceStatusEx(s, SC_STATUS_PROCESS_INFO, (BYTE *)&p, sizeof(p), &n))
        return vpw_scm_errno(GetLastError());
    *out = (struct vram_service_state){
        .state = p.dwCurrentState,
        .pid = p.dwProcessId,
        .checkpoint = p.dwCheckPoint,
        .wait_hint_ms = p.dwWaitHint,
        .win32_exit = p.dwWin32ExitCode,
        .service_exit = p.dwServiceSpecificExitCode,
        .controls = p.dwControlsAccepted,
    };
    return 0;
}

int vram_service_uninstall(const char *name, uint32_t timeout_ms, char *why,
                           size_t whylen)
{
    SC_HANDLE m, s;
    int e = open_service(name, SERVICE_STOP | SERVICE_QUERY_STATUS | DELETE, &m, &s);
    if (e < 0) {
        snprintf(why, whylen, "cannot open service %s: %s", or(name, DEFAULT_NAME),
                 e == -ENOENT ? "there is none" : strerror(-e));
        return e;
    }
    struct vram_service_state st = {0};
    bool stopped = query(s, &st) == 0 && st.state == SERVICE_STOPPED;
    if (!stopped) {
        SERVICE_STATUS ss;
        ControlService(s, SERVICE_CONTROL_STOP, &ss);
        for (uint32_t waited = 0; waited <= timeout_ms; waited += POLL_MS) {
            if (query(s, &st) == 0 && st.state == SERVICE_STOPPED) {
                stopped = true;
                break;
            }
            Sleep(POLL_MS);
        }
    }
    BOOL deleted = DeleteService(s);
    DWORD err = GetLastError();
    CloseServiceHandle(s);
    if (!deleted && err != ERROR_SERVICE_MARKED_FOR_DELETE) {
        CloseServiceHandle(m);
        snprintf(why, whylen, "cannot delete service %s: error %lu", or(name, DEFAULT_NAME),
                 err);
        return vpw_scm_errno(err);
    }
    /* Deleting marks it: the SCM drops the entry once no handle to it is
     * open and its process is gone, which may come after STOPPED, and
     * until then the name cannot be installed again. Waited for, as long
     * as the stop may take. */
    wchar_t w[257];
    bool gone = false;
    for (uint32_t waited = 0; vpw_wide(or(name, DEFAULT_NAME), w, 257) == 0; waited += POLL_MS) {
        SC_HANDLE x = OpenServiceW(m, w, SERVICE_QUERY_STATUS);
        if (!x && GetLastError() == ERROR_SERVICE_DOES_NOT_EXIST) {
            gone = true;
            break;
        }
        if (x)
            CloseServiceHandle(x);
        if (waited >= timeout_ms)
            break;
        Sleep(POLL_MS);
    }
    CloseServiceHandle(m);
    if (!stopped) {
        snprintf(why, whylen, "service %s did not stop within %u ms; it is removed "
                 "once it stops", or(name, DEFAULT_NAME), (unsigned)timeout_ms);
        return -ETIMEDOUT;
    }
    if (gone)
        snprintf(why, whylen, "removed service %s", or(name, DEFAULT_NAME));
    else
        snprintf(why, whylen, "removed service %s (the service manager drops it once "
                 "the last handle to it is closed)", or(name, DEFAULT_NAME));
    return 0;
}

int vram_service_query(const char *name, struct vram_service_state *out)
{
    SC_HANDLE m, s;
    int e = open_service(name, SERVICE_QUERY_STATUS, &m, &s);
    if (e < 0)
        return e;
    e = query(s, out);
    CloseServiceHandle(s);
    CloseServiceHandle(m);
    return e;
}

int vram_service_start(const char *name)
{
    SC_HANDLE m, s;
    int e = open_service(name, SERVICE_START, &m, &s);
    if (e < 0)
        return e;
    if (!StartServiceW(s, 0, NULL))
        e = vpw_scm_errno(GetLastError());
    CloseServiceHandle(s);
    CloseServiceHandle(m);
    return e;
}

int vram_service_control(const char *name, uint32_t control)
{
    DWORD access = control == SERVICE_CONTROL_STOP ? SERVICE_STOP
                   : control == SERVICE_CONTROL_INTERROGATE
                       ? SERVICE_INTERROGATE
                   : control == SERVICE_CONTROL_PARAMCHANGE ? SERVICE_PAUSE_CONTINUE
                                                            : SERVICE_USER_DEFINED_CONTROL;
    SC_HANDLE m, s;
    int e = open_service(name, access, &m, &s);
    if (e < 0)
        return e;
    SERVICE_STATUS ss;
    if (!ControlService(s, control, &ss))
        e = vpw_scm_errno(GetLastError());
    CloseServiceHandle(s);
    CloseServiceHandle(m);
    return e;
}

const char *vram_service_state_name(uint32_t state)
{
    switch (state) {
    case SERVICE_STOPPED:
        return "STOPPED";
    case SERVICE_START_PENDING:
        return "START_PENDING";
    case SERVICE_STOP_PENDING:
        return "STOP_PENDING";
    case SERVICE_RUNNING:
        return "RUNNING";
    case SERVICE_CONTINUE_PENDING:
        return "CONTINUE_PENDING";
    case SERVICE_PAUSE_PENDING:
        return "PAUSE_PENDING";
    case SERVICE_PAUSED:
        return "PAUSED";
    default:
        return "?";
    }
}
