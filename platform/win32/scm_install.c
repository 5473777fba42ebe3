/* SPDX-License-Identifier: Apache-2.0 */
/* The service control manager's calls for windows-service/. */
#include "platform/win32/scm_install.h"

#define WIN32_LEAN_AND_MEAN
#include <windows.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <wchar.h>

#include "platform/win32/scm_errno.h"
#include "platform/win32/wstr.h"

_Static_assert(VPW_SERVICE_STOPPED == SERVICE_STOPPED, "SCM state");
_Static_assert(VPW_SERVICE_START_PENDING == SERVICE_START_PENDING, "SCM state");
_Static_assert(VPW_SERVICE_STOP_PENDING == SERVICE_STOP_PENDING, "SCM state");
_Static_assert(VPW_SERVICE_RUNNING == SERVICE_RUNNING, "SCM state");
_Static_assert(VPW_SERVICE_CONTINUE_PENDING == SERVICE_CONTINUE_PENDING, "SCM state");
_Static_assert(VPW_SERVICE_PAUSE_PENDING == SERVICE_PAUSE_PENDING, "SCM state");
_Static_assert(VPW_SERVICE_PAUSED == SERVICE_PAUSED, "SCM state");
_Static_assert(VPW_SERVICE_CONTROL_STOP == SERVICE_CONTROL_STOP, "SCM control");
_Static_assert(VPW_SERVICE_CONTROL_INTERROGATE == SERVICE_CONTROL_INTERROGATE,
               "SCM control");
_Static_assert(VPW_SERVICE_CONTROL_PARAMCHANGE == SERVICE_CONTROL_PARAMCHANGE,
               "SCM control");

enum { NAME_MAX_W = 257, DESC_MAX_W = 1024, LINE_MAX_W = 32768 /* CreateProcess' */ };
#define MAX_RESTARTS 8

/* The wide strings of an install, in one allocation. */
struct wide_service {
    wchar_t name[NAME_MAX_W], display[NAME_MAX_W], desc[DESC_MAX_W];
    wchar_t line[LINE_MAX_W];
};

static int create(const struct vpw_scm_service *svc, const struct wide_service *w,
                  struct vpw_scm_outcome *out)
{
    SC_HANDLE m = OpenSCManagerW(NULL, NULL, SC_MANAGER_CONNECT | SC_MANAGER_CREATE_SERVICE);
    if (!m) {
        out->step = VPW_SCM_MANAGER;
        out->error = GetLastError();
        return vpw_scm_errno(out->error);
    }
    /* LocalSystem: lpServiceStartName NULL. SERVICE_START: setting a
     * restart action takes it. */
    SC_HANDLE s = CreateServiceW(m, w->name, w->display,
                                 SERVICE_CHANGE_CONFIG | SERVICE_QUERY_CONFIG |
                                     SERVICE_START | DELETE,
                                 SERVICE_WIN32_OWN_PROCESS, SERVICE_AUTO_START,
                                 SERVICE_ERROR_NORMAL, w->line, NULL, NULL, NULL, NULL,
                                 NULL);
    if (!s) {
        out->step = VPW_SCM_CREATE;
        out->error = GetLastError();
        out->display_taken = out->error == ERROR_DUPLICATE_SERVICE_NAME;
        CloseServiceHandle(m);
        return vpw_scm_errno(out->error);
    }
    SC_ACTION acts[MAX_RESTARTS];
    uint32_t n = svc->restarts < MAX_RESTARTS ? svc->restarts : MAX_RESTARTS;
    for (uint32_t i = 0; i < n; i++)
        acts[i] = (SC_ACTION){SC_ACTION_RESTART, svc->restart_delay_ms};
    SERVICE_FAILURE_ACTIONSW fa = {.dwResetPeriod = svc->reset_after_s,
                                   .cActions = n,
                                   .lpsaActions = acts};
    if (!ChangeServiceConfig2W(s, SERVICE_CONFIG_FAILURE_ACTIONS, &fa)) {
        out->step = VPW_SCM_RESTARTS;
        out->error = GetLastError();
        /* A service that is not restarted is not what was asked for. */
        DeleteService(s);
        CloseServiceHandle(s);
        CloseServiceHandle(m);
        return vpw_scm_errno(out->error);
    }
    SERVICE_DESCRIPTIONW d = {(wchar_t *)w->desc};
    if (!ChangeServiceConfig2W(s, SERVICE_CONFIG_DESCRIPTION, &d))
        out->description_error = GetLastError();
    SERVICE_FAILURE_ACTIONS_FLAG flag = {TRUE};
    if (!ChangeServiceConfig2W(s, SERVICE_CONFIG_FAILURE_ACTIONS_FLAG, &flag))
        out->flag_error = GetLastError();
    CloseServiceHandle(s);
    CloseServiceHandle(m);
    return 0;
}

int vpw_scm_install(const struct vpw_scm_service *svc, struct vpw_scm_outcome *out)
{
    *out = (struct vpw_scm_outcome){.step = VPW_SCM_TEXT};
    struct wide_service *w = malloc(sizeof(*w));
    if (!w)
        return -ENOMEM;
    int e = vpw_wide(svc->name, w->name, NAME_MAX_W);
    if (e == 0)
        e = vpw_wide(svc->display, w->display, NAME_MAX_W);
    if (e == 0)
        e = vpw_wide(svc->description, w->desc, DESC_MAX_W);
    if (e == 0)
        e = vpw_wide(svc->command_line, w->line, LINE_MAX_W);
    if (e == 0)
        e = create(svc, w, out);
    else
        e = -EINVAL;
    free(w);
    return e;
}

static int open_service(const char *name, DWORD access, SC_HANDLE *m, SC_HANDLE *s)
{
    wchar_t w[NAME_MAX_W];
    if (vpw_wide(name, w, NAME_MAX_W) < 0)
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

static void close_service(SC_HANDLE m, SC_HANDLE s)
{
    CloseServiceHandle(s);
    CloseServiceHandle(m);
}

int vpw_scm_query(const char *name, struct vpw_scm_status *out)
{
    SC_HANDLE m, s;
    int e = open_service(name, SERVICE_QUERY_STATUS, &m, &s);
    if (e < 0)
        return e;
    SERVICE_STATUS_PROCESS p;
    DWORD n;
    if (!QueryServiceStatusEx(s, SC_STATUS_PROCESS_INFO, (BYTE *)&p, sizeof(p), &n)) {
        e = vpw_scm_errno(GetLastError());
    } else {
        *out = (struct vpw_scm_status){
            .state = p.dwCurrentState,
            .pid = p.dwProcessId,
            .checkpoint = p.dwCheckPoint,
            .wait_hint_ms = p.dwWaitHint,
            .win32_exit = p.dwWin32ExitCode,
            .service_exit = p.dwServiceSpecificExitCode,
            .controls = p.dwControlsAccepted,
        };
    }
    close_service(m, s);
    return e;
}

int vpw_scm_start(const char *name)
{
    SC_HANDLE m, s;
    int e = open_service(name, SERVICE_START, &m, &s);
    if (e < 0)
        return e;
    if (!StartServiceW(s, 0, NULL))
        e = vpw_scm_errno(GetLastError());
    close_service(m, s);
    return e;
}

int vpw_scm_control(const char *name, uint32_t control)
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
    close_service(m, s);
    return e;
}

int vpw_scm_delete(const char *name, unsigned long *error)
{
    SC_HANDLE m, s;
    int e = open_service(name, DELETE, &m, &s);
    if (e < 0)
        return e;
    if (!DeleteService(s)) {
        DWORD err = GetLastError();
        if (err != ERROR_SERVICE_MARKED_FOR_DELETE) {
            *error = err;
            e = vpw_scm_errno(err);
        }
    }
    close_service(m, s);
    return e;
}
