/* SPDX-License-Identifier: Apache-2.0 */
/* Run-time loading on POSIX. */
#include "platform/dl.h"

#include <dlfcn.h>
#include <stddef.h>

void *vp_dl_open(const char *name)
{
    return dlopen(name, RTLD_NOW | RTLD_LOCAL);
}

void *vp_dl_sym(void *lib, const char *name)
{
    return lib ? dlsym(lib, name) : NULL;
}

void vp_dl_close(void *lib)
{
    if (lib)
        dlclose(lib);
}
