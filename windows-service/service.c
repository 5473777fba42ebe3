/* SPDX-License-Identifier: Apache-2.0 */
/* The service's life under the SCM, and the same main in the foreground. */
#include "service.h"

#define WIN32_LEAN_AND_MEAN
#include <windows.h>

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "install.h"
#include "paths.h"
#include "wutil.h"

#define DEFAULT_NAME "vramd"
#define DEFAULT_HINT_MS 30000
/* How long the console handler holds a closing console (the system ends
 * the process after about 5 s) for main to finish. */
#define CONSOLE_CLOSE_WAIT_MS 4500

struct vram_service {
    const struct vram_service_cfg *cfg;
    const struct vram_service_ops *ops;
    bool scm;
    wchar_t name[257];
    SERVICE_STATUS_HANDLE sh;
    SRWLOCK lock; /* st, from main's thread and the handler's */
    SERVICE_STATUS st;
    atomic_bool stopping;
    HANDLE done; /* set when main returned (the console handler waits) */
    int rc;
    char log_path[MAX_PATH * 3];
};

/* The SCM calls ServiceMain and the console its handler without a
 * context: the one service of this process. */
static struct vram_service the;

static uint32_t hint(uint32_t ms)
{
    return ms ? ms : DEFAULT_HINT_MS;
}

/* Sets and reports the state. Pending states count checkpoints (the SCM
 * sees progress); the others take none. */
static void set_state(struct vram_service *s, DWORD state, uint32_t wait_hint_ms)
{
    AcquireSRWLockExclusive(&s->lock);
    bool pending = state == SERVICE_START_PENDING || state == SERVICE_STOP_PENDING;
    if (pending)
        s->st.dwCheckPoint = s->st.dwCurrentState == state ? s->st.dwCheckPoint + 1 : 1;
    else
        s->st.dwCheckPoint = 0;
    s->st.dwCurrentState = state;
    s->st.dwWaitHint = pending ? wait_hint_ms : 0;
    /* Controls only while running: none during start-up (the SCM refuses
     * them with ERROR_SERVICE_CANNOT_ACCEPT_CTRL) nor once stopping. */
    s->st.dwControlsAccepted =
        state == SERVICE_RUNNING
            ? SERVICE_ACCEPT_STOP | SERVICE_ACCEPT_SHUTDOWN |
                  (s->ops->reload ? SERVICE_ACCEPT_PARAMCHANGE : 0)
            : 0;
    if (s->scm && s->sh) {
        SetServiceStatus(s->sh, &s->st);
        /* The log keeps what the SCM was told while pending: it holds those
         * states only for moments, which a query may miss. */
        if (pending)
            fprintf(stderr, "vramd: service status %s, checkpoint %lu, wait hint %lu ms\n",
                    vram_service_state_name(state), (unsigned long)s->st.dwCheckPoint,
                    (unsigned long)s->st.dwWaitHint);
    }
    ReleaseSRWLockExclusive(&s->lock);
}

static void ask_stop(struct vram_service *s)
{
    if (atomic_exchange(&s->stopping, true))
        return;
    if (s->scm)
        set_state(s, SERVICE_STOP_PENDING, hint(s->cfg->stop_wait_hint_ms));
    s->ops->stop(s->ops->data);
}

static DWORD WINAPI handler(DWORD control, DWORD type, LPVOID event, LPVOID ctx)
{
    struct vram_service *s = ctx;
    switch (control) {
    case SERVICE_CONTROL_STOP:
    case SERVICE_CONTROL_SHUTDOWN:
        ask_stop(s);
        return NO_ERROR;
    case SERVICE_CONTROL_PARAMCHANGE:
        if (!s->ops->reload)
            return ERROR_CALL_NOT_IMPLEMENTED;
        s->ops->reload(s->ops->data);
        return NO_ERROR;
    case SERVICE_CONTROL_INTERROGATE:
        AcquireSRWLockExclusive(&s->lock);
        SetServiceStatus(s->sh, &s->st);
        ReleaseSRWLockExclusive(&s->lock);
        return NO_ERROR;
    default:
        return ERROR_CALL_NOT_IMPLEMENTED;
    }
}

/* The service-specific status a failed start reports when the log cannot
 * be opened: before main, so nothing else could say why. */
#define STATUS_NO_LOG 2

/* stderr to the data directory's vramd.log (paths.h says why a file). */
static int open_log(struct vram_service *s)
{
    char dir[MAX_PATH * 3], why[512];
    const char *d = s->cfg->data_dir;
    int e = 0;
    if (!d && (e = vram_service_data_dir(dir, sizeof(dir))) == 0)
        d = dir;
    if (e == 0 && (e = vram_service_prepare_dir(d, why, sizeof(why))) >= 0)
        e = vram_service_log_open(d, 0, s->log_path, sizeof(s->log_path), why,
                                  sizeof(why));
    return e < 0 ? e : 0;
}

static void WINAPI service_main(DWORD argc, LPWSTR *argv)
{
    struct vram_service *s = &the;
    s->sh = RegisterServiceCtrlHandlerExW(s->name, handler, s);
    if (!s->sh) {
        s->rc = svc_errno(GetLastError());
        return;
    }
    s->st.dwServiceType = SERVICE_WIN32_OWN_PROCESS;
    set_state(s, SERVICE_START_PENDING, hint(s->cfg->start_wait_hint_ms));
    int rc = s->cfg->log_to_file && open_log(s) < 0 ? STATUS_NO_LOG : 0;
    if (rc == 0)
        rc = s->ops->main(s, s->ops->data);
    s->rc = rc;
    AcquireSRWLockExclusive(&s->lock);
    s->st.dwWin32ExitCode = rc == 0 ? NO_ERROR : ERROR_SERVICE_SPECIFIC_ERROR;
    s->st.dwServiceSpecificExitCode = rc < 0 ? (DWORD)-rc : (DWORD)rc;
    ReleaseSRWLockExclusive(&s->lock);
    /* Last: once STOPPED is reported, the SCM may end the process. */
    set_state(s, SERVICE_STOPPED, 0);
}

static int setup(struct vram_service *s, const struct vram_service_cfg *cfg,
                 const struct vram_service_ops *ops, bool scm)
{
    memset(s, 0, sizeof(*s));
    s->cfg = cfg;
    s->ops = ops;
    s->scm = scm;
    InitializeSRWLock(&s->lock);
    atomic_init(&s->stopping, false);
    return svc_wide(cfg->name ? cfg->name : DEFAULT_NAME, s->name, 257);
}

int vram_service_run(const struct vram_service_cfg *cfg,
                     const struct vram_service_ops *ops)
{
    struct vram_service *s = &the;
    int e = setup(s, cfg, ops, true);
    if (e < 0)
        return e;
    SERVICE_TABLE_ENTRYW table[] = {{s->name, service_main}, {NULL, NULL}};
    /* Blocks until the service stopped; the handler runs on this thread. */
    if (!StartServiceCtrlDispatcherW(table))
        return svc_errno(GetLastError());
    return s->rc;
}

static BOOL WINAPI console_handler(DWORD event)
{
    struct vram_service *s = &the;
    switch (event) {
    case CTRL_BREAK_EVENT:
        if (s->ops->reload) {
            s->ops->reload(s->ops->data);
            return TRUE;
        }
        ask_stop(s);
        return TRUE;
    case CTRL_C_EVENT:
        ask_stop(s);
        return TRUE;
    case CTRL_CLOSE_EVENT:
    case CTRL_LOGOFF_EVENT:
    case CTRL_SHUTDOWN_EVENT:
        /* The process ends when this returns: give main the time the
         * system allows. */
        ask_stop(s);
        WaitForSingleObject(s->done, CONSOLE_CLOSE_WAIT_MS);
        return TRUE;
    default:
        return FALSE;
    }
}

int vram_service_console(const struct vram_service_cfg *cfg,
                         const struct vram_service_ops *ops)
{
    struct vram_service *s = &the;
    int e = setup(s, cfg, ops, false);
    if (e < 0)
        return e;
    s->done = CreateEventW(NULL, TRUE, FALSE, NULL);
    SetConsoleCtrlHandler(console_handler, TRUE);
    s->rc = ops->main(s, ops->data);
    if (s->done)
        SetEvent(s->done);
    SetConsoleCtrlHandler(console_handler, FALSE);
    /* done stays open: a handler that started before the line above may
     * still wait on it (one event for the process's one console run). */
    return s->rc;
}

void vram_service_starting(struct vram_service *svc, uint32_t wait_hint_ms)
{
    if (svc->scm)
        set_state(svc, SERVICE_START_PENDING, hint(wait_hint_ms));
}

void vram_service_running(struct vram_service *svc)
{
    /* A stop asked for meanwhile stays asked for. */
    if (svc->scm && !atomic_load(&svc->stopping))
        set_state(svc, SERVICE_RUNNING, 0);
}

void vram_service_stopping(struct vram_service *svc, uint32_t wait_hint_ms)
{
    atomic_store(&svc->stopping, true);
    if (svc->scm)
        set_state(svc, SERVICE_STOP_PENDING, hint(wait_hint_ms));
}

bool vram_service_under_scm(const struct vram_service *svc)
{
    return svc->scm;
}

const char *vram_service_log_path(const struct vram_service *svc)
{
    return svc->log_path;
}
