/* SPDX-License-Identifier: Apache-2.0 */
/* Where vramd keeps its files on Windows: %ProgramData%\vramd, holding the
 * configuration (vramd.json) and the log (vramd.log, and vramd.log.1 from
 * the run before the last rotation).
 *
 * The log is a file, not the Event Log: vramd logs lines at the rate the
 * Linux daemon gives the journal (per client, per recall), and the Event
 * Log is for rare events an administrator acts on, each of which needs a
 * message resource registered in the registry to be read; a file keeps
 * the lines exactly as on Linux, can be tailed and copied into a bug
 * report, and is tested under wine (whose Event Log stores nothing). A
 * service that fails to start or dies is still in the System log: the SCM
 * writes those events itself (7000, 7024, 7031, 7034). */
#ifndef VRAM_WIN32_SERVICE_DIRS_H
#define VRAM_WIN32_SERVICE_DIRS_H

#include <stddef.h>

/* %ProgramData%\vramd (SHGetKnownFolderPath(FOLDERID_ProgramData), else
 * the ProgramData environment variable): 0, -ENOENT, -ENAMETOOLONG. */
int vpw_svc_data_dir(char *buf, size_t len);
/* dir\vramd.json (dir NULL: the data directory). */
int vpw_svc_config_path(const char *dir, char *buf, size_t len);

/* Makes sure dir exists and is vramd's: created with a protected DACL
 * (SYSTEM and Administrators full control, Users read), or, when it exists,
 * a real directory (no junction or link, where a user could point it
 * elsewhere) owned by SYSTEM, Administrators or this process's user (any
 * user may create folders in %ProgramData%: one made in advance by another
 * user is refused, -EPERM). 0, 1 when it was created, or a negative errno
 * with why. */
int vpw_svc_prepare_dir(const char *dir, char *why, size_t whylen);

/* Redirects this process's stderr (the C runtime's stream, descriptor 2
 * and the Win32 standard error handle) to dir\vramd.log, appended to, in
 * text mode (CRLF line ends, as Windows' tools expect); a log over
 * max_bytes (0: 16 MiB) becomes vramd.log.1 first. path_out (pathlen
 * bytes) names the file. 0 or a negative errno with why. */
int vpw_svc_log_open(const char *dir, unsigned long max_bytes,
                          char *path_out, size_t pathlen, char *why,
                          size_t whylen);

#endif
