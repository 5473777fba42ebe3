/* Where a Windows integration test works: its own program's directory
 * (vramd.exe and the tools are beside it) and a run directory of its own
 * under the temporary folder, with vramd's log in it. Include after
 * <windows.h> and check.h. */
#ifndef VRAM_TEST_RUN_DIR_H
#define VRAM_TEST_RUN_DIR_H

static inline void wt_run_dir(const wchar_t *prefix, wchar_t dir[MAX_PATH],
                              wchar_t tmp[MAX_PATH], wchar_t log_path[MAX_PATH])
{
    DWORD n = GetModuleFileNameW(NULL, dir, MAX_PATH);
    REQUIRE(n > 0 && n < MAX_PATH, "GetModuleFileNameW: %lu", GetLastError());
    wchar_t *slash = wcsrchr(dir, L'\\');
    REQUIRE(slash != NULL, "no directory in the program's path");
    *slash = 0;
    wchar_t base[MAX_PATH];
    REQUIRE(GetTempPathW(MAX_PATH, base) > 0, "GetTempPathW: %lu", GetLastError());
    _snwprintf(tmp, MAX_PATH, L"%ls%ls-%lu", base, prefix, GetCurrentProcessId());
    REQUIRE(CreateDirectoryW(tmp, NULL) || GetLastError() == ERROR_ALREADY_EXISTS,
            "CreateDirectoryW: %lu", GetLastError());
    _snwprintf(log_path, MAX_PATH, L"%ls\\vramd.log", tmp);
}

#endif
