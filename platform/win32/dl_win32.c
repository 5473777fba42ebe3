/* SPDX-License-Identifier: Apache-2.0 */
/* Run-time loading on Windows (nvcuda.dll, nvml.dll). A bare name is looked
 * for in System32 only, where the driver installs its DLLs: the default
 * search order would also try the program's and the current directory,
 * where anyone who can write there could plant a DLL of that name. A name
 * with a directory is loaded from there. */
#include "platform/dl.h"

#define WIN32_LEAN_AND_MEAN
#include <windows.h>

#include <stdbool.h>
#include <stddef.h>
#include <string.h>

#include "platform/win32/wstr.h"

void *vp_dl_open(const char *name)
{
    if (!name || !*name)
        return NULL;
    wchar_t w[MAX_PATH];
    if (vpw_wide(name, w, MAX_PATH) < 0)
        return NULL;
    bool bare = !strchr(name, '\\') && !strchr(name, '/');
    HMODULE m = LoadLibraryExW(w, NULL, bare ? LOAD_LIBRARY_SEARCH_SYSTEM32
                                             : LOAD_WITH_ALTERED_SEARCH_PATH);
    return (void *)m;
}

void *vp_dl_sym(void *lib, const char *name)
{
    if (!lib)
        return NULL;
    FARPROC p = GetProcAddress((HMODULE)lib, name);
    /* dlsym's contract: a function's address as a data pointer. */
    void *v;
    memcpy(&v, &p, sizeof(v));
    return v;
}

void vp_dl_close(void *lib)
{
    if (lib)
        FreeLibrary((HMODULE)lib);
}
