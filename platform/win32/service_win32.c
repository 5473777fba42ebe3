/* SPDX-License-Identifier: Apache-2.0 */
/* Living as a service on Windows, the parts platform/service.h names: the
 * SCM's side (readiness, stop, reload) is the entry's (entry_win32.c),
 * so there is no readiness message to send here, and no journal. */
#include "platform/service.h"

#define WIN32_LEAN_AND_MEAN
#include <windows.h>

#include <errno.h>
#include <io.h>
#include <stdio.h>

#include "platform/win32/wstr.h"

int vp_service_notify(const char *state)
{
    (void)state; /* the SCM hears through vp_entry_running (entry_win32.c) */
    return 0;
}

bool vp_stderr_is_journal(void)
{
    return false;
}

void vp_process_init(void)
{
    /* No SIGPIPE on Windows: a write to a closed pipe fails with
     * ERROR_NO_DATA. No error boxes from the system for a daemon that has
     * nobody to click them. */
    SetErrorMode(SEM_FAILCRITICALERRORS | SEM_NOGPFAULTERRORBOX);
}

bool vp_path_exists(const char *path)
{
    wchar_t w[MAX_PATH + 8];
    if (vpw_wide(path, w, MAX_PATH + 8) < 0)
        return false;
    return GetFileAttributesW(w) != INVALID_FILE_ATTRIBUTES;
}

bool vp_stdout_is_tty(void)
{
    return _isatty(_fileno(stdout)) != 0;
}

static void (*interrupt_fn)(int);

static BOOL WINAPI on_ctrl(DWORD type)
{
    if (!interrupt_fn)
        return FALSE;
    interrupt_fn(type == CTRL_BREAK_EVENT ? 21 /* SIGBREAK */ : 2 /* SIGINT */);
    return TRUE;
}

void vp_on_interrupt(void (*fn)(int))
{
    interrupt_fn = fn;
    SetConsoleCtrlHandler(on_ctrl, TRUE);
}
