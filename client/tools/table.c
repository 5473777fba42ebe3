/* SPDX-License-Identifier: Apache-2.0 */
/* Table rows: printf-formatted, padded columns, no trailing spaces (a row
 * compared or piped must not end in padding). */
#include "client/tools/table.h"

#include <stdarg.h>
#include <stdio.h>

void tool_row(const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    size_t len = (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1;
    while (len && line[len - 1] == ' ')
        len--;
    printf("%.*s\n", (int)len, line);
}
