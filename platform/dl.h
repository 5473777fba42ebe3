/* SPDX-License-Identifier: Apache-2.0 */
/* Loading a driver library at run time (libcuda.so.1, nvcuda.dll), so the
 * same binaries run where there is none and can say why. */
#ifndef VRAM_PLATFORM_DL_H
#define VRAM_PLATFORM_DL_H

/* NULL when the library cannot be loaded. */
void *vp_dl_open(const char *name);
void *vp_dl_sym(void *lib, const char *name);
void vp_dl_close(void *lib);

#endif
