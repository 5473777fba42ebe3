/* SPDX-License-Identifier: Apache-2.0 */
/* Win32 error codes (GetLastError) as the negative errno values the
 * platform interface returns. */
#ifndef VRAM_WIN32_WINERR_H
#define VRAM_WIN32_WINERR_H

/* -EIO for a code with no closer errno. */
int vpw_errno(unsigned long err);
/* The same for GetLastError(). */
int vpw_last_errno(void);

#endif
