/* SPDX-License-Identifier: Apache-2.0 */
/* Where a Windows integration test works: its own program's directory
 * (vramd.exe and the tools are beside it) and a run directory of its own
 * under the temporary folder, with vramd's log in it, named with a random
 * suffix (unique.h: wine's pids repeat, and a directory left by an earlier
 * run, with its files, must never be this run's). The run directory is
 * removed when the test exits with no failed check; a failed run keeps it,
 * logs and all. Include after <windows.h> and check.h. */
#ifndef VRAM_TEST_RUN_DIR_H
#define VRAM_TEST_RUN_DIR_H

#include <stdlib.h>

#include "tests/win/unique.h"

/* Removes directory d and everything under it (what cannot be removed, a
 * file still open, stays). */
static inline void wt_remove_tree(const wchar_t *d)
{
    wchar_t pat[MAX_PATH];
    _snwprintf(pat, MAX_PATH, L"%ls\\*", d);
    pat[MAX_PATH - 1] = 0;
    WIN32_FIND_DATAW fd;
    HANDLE fh = FindFirstFileW(pat, &fd);
    if (fh != INVALID_HANDLE_VALUE) {
        do {
            if (wcscmp(fd.cFileName, L".") == 0 || wcscmp(fd.cFileName, L"..") == 0)
                continue;
            wchar_t p[MAX_PATH];
            _snwprintf(p, MAX_PATH, L"%ls\\%ls", d, fd.cFileName);
            p[MAX_PATH - 1] = 0;
            if (fd.dwFileAttributes & FILE_ATTRIBUTE_REPARSE_POINT) {
                if (!RemoveDirectoryW(p)) /* the link, not its target */
                    DeleteFileW(p);
            } else if (fd.dwFileAttributes & FILE_ATTRIBUTE_DIRECTORY)
                wt_remove_tree(p);
            else
                DeleteFileW(p);
        } while (FindNextFileW(fh, &fd));
        FindClose(fh);
    }
    RemoveDirectoryW(d);
}

static wchar_t wt_run_dir_made[MAX_PATH];

static inline void wt_run_dir_cleanup(void)
{
    if (!check_failures && wt_run_dir_made[0])
        wt_remove_tree(wt_run_dir_made);
}

static inline void wt_run_dir(const wchar_t *prefix, wchar_t dir[MAX_PATH],
                              wchar_t tmp[MAX_PATH], wchar_t log_path[MAX_PATH])
{
    DWORD n = GetModuleFileNameW(NULL, dir, MAX_PATH);
    REQUIRE(n > 0 && n < MAX_PATH, "GetModuleFileNameW: %lu", GetLastError());
    wchar_t *slash = wcsrchr(dir, L'\\');
    REQUIRE(slash != NULL, "no directory in the program's path");
    *slash = 0;
    wchar_t base[MAX_PATH], name[128];
    REQUIRE(GetTempPathW(MAX_PATH, base) > 0, "GetTempPathW: %lu", GetLastError());
    wt_unique_w(name, 128, prefix);
    _snwprintf(tmp, MAX_PATH, L"%ls%ls", base, name);
    tmp[MAX_PATH - 1] = 0;
    /* New, never found: an existing directory of that name is not ours. */
    REQUIRE(CreateDirectoryW(tmp, NULL), "CreateDirectoryW %ls: %lu", tmp,
            GetLastError());
    if (!wt_run_dir_made[0]) {
        wcscpy(wt_run_dir_made, tmp);
        atexit(wt_run_dir_cleanup);
    }
    _snwprintf(log_path, MAX_PATH, L"%ls\\vramd.log", tmp);
    log_path[MAX_PATH - 1] = 0;
}

#endif
