/* SPDX-License-Identifier: Apache-2.0 */
/* The daemon's entry on Windows: its life under the Service Control
 * Manager, the same main in a console, the entry's options, and handing
 * --install-service and --uninstall-service to the service program's
 * installer (entry.h). */
#include "platform/entry.h"

#define WIN32_LEAN_AND_MEAN
#include <windows.h>

#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h> /* its SIGHUP, which libuv raises when the console closes */

#include "platform/win32/scm_errno.h"
#include "platform/service.h"
#include "platform/win32/service_dirs.h"
#include "platform/win32/wstr.h"

#define DEFAULT_NAME "vramd"
#define DEFAULT_HINT_MS 30000
/* How long the console handler holds a closing console (the system ends
 * the process after about 5 s) for main to finish. */
#define CONSOLE_CLOSE_WAIT_MS 4500

struct vp_entry {
    const struct vp_entry_cfg *cfg;
    const struct vp_entry_ops *ops;
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
static struct vp_entry the;

static uint32_t hint(uint32_t ms)
{
    return ms ? ms : DEFAULT_HINT_MS;
}

/* Sets and reports the state. Pending states count checkpoints (the SCM
 * sees progress); the others take none. */
static void set_state(struct vp_entry *s, DWORD state, uint32_t wait_hint_ms)
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
                    state == SERVICE_START_PENDING ? "START_PENDING" : "STOP_PENDING",
                    (unsigned long)s->st.dwCheckPoint,
                    (unsigned long)s->st.dwWaitHint);
    }
    ReleaseSRWLockExclusive(&s->lock);
}

static void ask_stop(struct vp_entry *s)
{
    if (atomic_exchange(&s->stopping, true))
        return;
    if (s->scm)
        set_state(s, SERVICE_STOP_PENDING, hint(s->cfg->stop_wait_hint_ms));
    s->ops->stop(s->ops->data);
}

static DWORD WINAPI handler(DWORD control, DWORD type, LPVOID event, LPVOID ctx)
{
    struct vp_entry *s = ctx;
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

/* stderr to the run directory's vramd.log (service_dirs.h says why a
 * file). */
static int open_log(struct vp_entry *s)
{
    char dir[MAX_PATH * 3], why[512];
    const char *d = s->cfg->data_dir;
    int e = 0;
    if (!d && (e = vpw_svc_data_dir(dir, sizeof(dir))) == 0)
        d = dir;
    if (e == 0 && (e = vpw_svc_prepare_dir(d, why, sizeof(why))) >= 0)
        e = vpw_svc_log_open(d, 0, s->log_path, sizeof(s->log_path), why,
                                  sizeof(why));
    return e < 0 ? e : 0;
}

static void WINAPI service_main(DWORD argc, LPWSTR *argv)
{
    struct vp_entry *s = &the;
    s->sh = RegisterServiceCtrlHandlerExW(s->name, handler, s);
    if (!s->sh) {
        s->rc = vpw_scm_errno(GetLastError());
        return;
    }
    s->st.dwServiceType = SERVICE_WIN32_OWN_PROCESS;
    set_state(s, SERVICE_START_PENDING, hint(s->cfg->start_wait_hint_ms));
    int rc = open_log(s) < 0 ? STATUS_NO_LOG : 0;
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

static int setup(struct vp_entry *s, const struct vp_entry_cfg *cfg,
                 const struct vp_entry_ops *ops, bool scm)
{
    memset(s, 0, sizeof(*s));
    s->cfg = cfg;
    s->ops = ops;
    s->scm = scm;
    InitializeSRWLock(&s->lock);
    atomic_init(&s->stopping, false);
    return vpw_wide(cfg->name ? cfg->name : DEFAULT_NAME, s->name, 257);
}

/* Connects to the SCM and runs main on the service's thread; returns once
 * the service stopped: main's status, -ESRCH when this process was not
 * started by the SCM (ERROR_FAILED_SERVICE_CONTROLLER_CONNECT, 1063), or
 * another negative errno. */
static int run_service(const struct vp_entry_cfg *cfg,
                       const struct vp_entry_ops *ops)
{
    struct vp_entry *s = &the;
    int e = setup(s, cfg, ops, true);
    if (e < 0)
        return e;
    SERVICE_TABLE_ENTRYW table[] = {{s->name, service_main}, {NULL, NULL}};
    /* Blocks until the service stopped; the handler runs on this thread. */
    if (!StartServiceCtrlDispatcherW(table))
        return vpw_scm_errno(GetLastError());
    return s->rc;
}

static BOOL WINAPI console_handler(DWORD event)
{
    struct vp_entry *s = &the;
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

/* main in the foreground: Ctrl-C, closing the console, log-off and
 * shutdown stop; Ctrl-Break reloads (a console has no SIGHUP; with no
 * reload callback, Ctrl-Break stops too). */
static int run_console(const struct vp_entry_cfg *cfg,
                       const struct vp_entry_ops *ops)
{
    struct vp_entry *s = &the;
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

static const struct {
    const char *opt;
    enum vp_entry_mode mode;
} modes[] = {
    {"--service", VP_ENTRY_SERVICE},
    {"--console", VP_ENTRY_CONSOLE},
    {"--install-service", VP_ENTRY_INSTALL},
    {"--uninstall-service", VP_ENTRY_UNINSTALL},
};

/* The service's command line on install: the options vp_entry_mode saw,
 * less the mode, its own options included (the service needs its name and
 * run directory back). */
static char **install_args;
static int install_argc;

/* Whether argv[*i] is option (long, or short when not NULL) with a value:
 * "--run-dir DIR", "--run-dir=DIR", "-r DIR", "-rDIR". *val is set, *i
 * moved past what was used; -1 when the value is missing. */
static int take(int argc, char **argv, int *i, const char *lng, const char *shrt,
                const char **val)
{
    const char *a = argv[*i];
    size_t n = strlen(lng);
    if (strcmp(a, lng) == 0 || (shrt && strcmp(a, shrt) == 0)) {
        if (*i + 1 >= argc)
            return -1;
        *val = argv[++*i];
        return 1;
    }
    if (strncmp(a, lng, n) == 0 && a[n] == '=') {
        *val = a + n + 1;
        return 1;
    }
    if (shrt && strncmp(a, shrt, 2) == 0 && a[2]) {
        *val = a + 2;
        return 1;
    }
    return 0;
}

enum vp_entry_mode vp_entry_mode(int *argc, char **argv,
                                 struct vp_entry_cfg *cfg, char *why,
                                 size_t whylen)
{
    enum vp_entry_mode found = VP_ENTRY_FOREGROUND;
    if (whylen)
        why[0] = 0;
    /* First the mode, out of argv. */
    int out = 1;
    for (int i = 1; i < *argc; i++) {
        enum vp_entry_mode m = VP_ENTRY_FOREGROUND;
        for (size_t k = 0; k < sizeof(modes) / sizeof(modes[0]); k++)
            if (strcmp(argv[i], modes[k].opt) == 0)
                m = modes[k].mode;
        if (m == VP_ENTRY_FOREGROUND) {
            argv[out++] = argv[i];
            continue;
        }
        found = found == VP_ENTRY_FOREGROUND ? m : VP_ENTRY_CONFLICT;
    }
    argv[out] = NULL;
    *argc = out;
    free(install_args);
    install_args = calloc((size_t)out + 1, sizeof(*install_args));
    if (install_args) {
        memcpy(install_args, argv, (size_t)out * sizeof(*argv));
        install_argc = out;
    }
    /* Then the entry's own options, out of what the program parses. */
    out = 1;
    for (int i = 1; i < *argc; i++) {
        const char *v = NULL;
        int r = take(*argc, argv, &i, "--run-dir", "-r", &v);
        if (r > 0)
            cfg->data_dir = v;
        else if (r == 0 && (r = take(*argc, argv, &i, "--service-name", NULL, &v)) > 0)
            cfg->name = v;
        if (r < 0) {
            snprintf(why, whylen, "%s needs a value", argv[i]);
            return VP_ENTRY_BAD;
        }
        if (r == 0)
            argv[out++] = argv[i];
    }
    argv[out] = NULL;
    *argc = out;
    if (found == VP_ENTRY_CONFLICT)
        snprintf(why, whylen, "--service, --console, --install-service and "
                 "--uninstall-service exclude each other");
    return found;
}

const char *vp_entry_usage(void)
{
    return "  -r, --run-dir DIR      where the state file, the lock and the\n"
           "                         service's log go (default\n"
           "                         %ProgramData%\\vramd)\n"
           "\nAs a Windows service (one of these; the other options go into\n"
           "the service's command line on install):\n"
           "      --install-service  install (LocalSystem, automatic start,\n"
           "                         restarted on failure); needs an\n"
           "                         administrator\n"
           "      --uninstall-service  stop and remove\n"
           "      --service          what the service manager runs (the log\n"
           "                         goes to RUN-DIR\\vramd.log)\n"
           "      --console          run in the foreground (the default):\n"
           "                         Ctrl-C stops, Ctrl-Break reloads\n"
           "      --service-name NAME  the service's name (default vramd)\n";
}

const char *vp_entry_default_config(void)
{
    return "%ProgramData%\\vramd\\vramd.json";
}

static int install(const struct vp_entry_cfg *cfg, const struct vp_entry_ops *ops,
                   int argc, char **argv, char *why, size_t whylen)
{
    if (!ops->installer) {
        snprintf(why, whylen, "--install-service: this program cannot install "
                 "itself");
        return -ENOSYS;
    }
    if (install_args) {
        argc = install_argc;
        argv = install_args;
    }
    /* --service, and the options this command line had. */
    char **args = calloc((size_t)argc + 1, sizeof(*args));
    if (!args)
        return -ENOMEM;
    args[0] = "--service";
    for (int i = 1; i < argc; i++)
        args[i] = argv[i];
    int rc = ops->installer->install(cfg->name ? cfg->name : DEFAULT_NAME, args,
                                     why, whylen);
    free(args);
    return rc;
}

int vp_entry_exec(enum vp_entry_mode mode, int argc, char **argv,
                  const struct vp_entry_cfg *cfg, const struct vp_entry_ops *ops,
                  char *why, size_t whylen)
{
    why[0] = 0;
    switch (mode) {
    case VP_ENTRY_SERVICE: {
        int rc = run_service(cfg, ops);
        if (rc == -ESRCH)
            snprintf(why, whylen, "--service: this process was not started by "
                     "the service manager (run it with --console in a terminal)");
        else if (rc < 0)
            snprintf(why, whylen, "--service: cannot reach the service manager: %s",
                     strerror(-rc));
        return rc;
    }
    case VP_ENTRY_FOREGROUND:
    case VP_ENTRY_CONSOLE:
        /* Without a mode option the program runs as with --console: the
         * same main, with Ctrl-C and Ctrl-Break handled the same way. */
        return run_console(cfg, ops);
    case VP_ENTRY_INSTALL:
        return install(cfg, ops, argc, argv, why, whylen);
    case VP_ENTRY_UNINSTALL:
        if (!ops->installer) {
            snprintf(why, whylen, "--uninstall-service: this program cannot "
                     "uninstall itself");
            return -ENOSYS;
        }
        return ops->installer->uninstall(cfg->name ? cfg->name : DEFAULT_NAME,
                                         hint(cfg->stop_wait_hint_ms), why,
                                         whylen);
    case VP_ENTRY_CONFLICT:
        snprintf(why, whylen, "--service, --console, --install-service and "
                 "--uninstall-service exclude each other");
        return -EINVAL;
    default:
        snprintf(why, whylen, "unknown mode %d", (int)mode);
        return -EINVAL;
    }
}

void vp_entry_starting(struct vp_entry *e, uint32_t wait_hint_ms)
{
    if (e->scm)
        set_state(e, SERVICE_START_PENDING, hint(wait_hint_ms));
}

void vp_entry_running(struct vp_entry *e, const char *status)
{
    (void)status; /* the SCM has no words for it; the log has them */
    /* A stop asked for meanwhile stays asked for. */
    if (e->scm && !atomic_load(&e->stopping))
        set_state(e, SERVICE_RUNNING, 0);
}

void vp_entry_stopping(struct vp_entry *e, const char *status)
{
    (void)status;
    atomic_store(&e->stopping, true);
    if (e->scm)
        set_state(e, SERVICE_STOP_PENDING, hint(e->cfg->stop_wait_hint_ms));
}

bool vp_entry_under_manager(const struct vp_entry *e)
{
    return e->scm;
}

const char *vp_entry_log_path(const struct vp_entry *e)
{
    return e->log_path;
}

void vp_entry_signals(struct vp_entry_signals *out)
{
    /* A console has no SIGHUP to reload with: Ctrl-Break reloads, and
     * libuv's SIGHUP is the console closing, which stops. */
    *out = (struct vp_entry_signals){.stop = SIGHUP, .interrupt = SIGINT,
                                     .reload = SIGBREAK,
                                     .stop_name = "console closed"};
}

int vp_entry_files(const struct vp_entry_cfg *cfg, const char *endpoint,
                   struct vp_entry_files *out, char *why, size_t whylen)
{
    char config[1024], data_dir[1024];
    why[0] = 0;
    /* %ProgramData%\vramd\vramd.json, when it exists. */
    out->config[0] = 0;
    if (vpw_svc_config_path(NULL, config, sizeof(config)) == 0 &&
        vp_path_exists(config))
        snprintf(out->config, sizeof(out->config), "%s", config);
    /* The state file and the lock: in the run directory, named after the
     * pipe (\\.\pipe\NAME: DIR\NAME.state, DIR\NAME.lock). */
    const char *run_dir = cfg->data_dir;
    if (!run_dir) {
        if (vpw_svc_data_dir(data_dir, sizeof(data_dir)) < 0) {
            snprintf(why, whylen, "no %%ProgramData%%: give --run-dir");
            return -EINVAL;
        }
        run_dir = data_dir;
    }
    /* The run directory holds the state file, whose word decides what
     * engines get back after a restart, so it must be vramd's: a real
     * directory owned by SYSTEM, Administrators or vramd's user
     * (service_dirs.h). As a service it was made so before main. In a
     * console it is checked here, and made only when --run-dir named it:
     * the default one is the service's to make (if another user made it
     * first, the service would refuse it). */
    if (!cfg->data_dir && !vp_path_exists(run_dir)) {
        snprintf(why, whylen, "%s does not exist: installing the service makes "
                 "it, or give --run-dir", run_dir);
        return -ENOENT;
    }
    char dir_why[512];
    int e = vpw_svc_prepare_dir(run_dir, dir_why, sizeof(dir_why));
    if (e < 0) {
        snprintf(why, whylen, "run directory: %s", dir_why);
        return e;
    }
    const char *leaf = strrchr(endpoint, '\\');
    int n = snprintf(out->state_base, sizeof(out->state_base), "%s\\%s", run_dir,
                     leaf && leaf[1] ? leaf + 1 : "vramd");
    if (n < 0 || (size_t)n >= sizeof(out->state_base)) {
        snprintf(why, whylen, "run directory %s: too long", run_dir);
        return -ENAMETOOLONG;
    }
    return 0;
}
