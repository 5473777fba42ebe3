/* SPDX-License-Identifier: Apache-2.0 */
/* Table rows for the tools' output for people (vramctl, vram-replay). */
#ifndef VRAM_TOOLS_TABLE_H
#define VRAM_TOOLS_TABLE_H

/* One row, printed without the spaces that pad its last column. */
void tool_row(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
