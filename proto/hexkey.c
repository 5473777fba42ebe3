/* SPDX-License-Identifier: Apache-2.0 */
#include "proto/hexkey.h"

#include <errno.h>
#include <string.h>

static int digit(char c)
{
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

int vw_hex_decode(const char *hex, uint8_t *out, size_t n)
{
    if (!hex || strlen(hex) != 2 * n)
        return -EINVAL;
    for (size_t i = 0; i < 2 * n; i++)
        if (digit(hex[i]) < 0)
            return -EINVAL;
    for (size_t i = 0; i < n; i++)
        out[i] = (uint8_t)(digit(hex[2 * i]) << 4 | digit(hex[2 * i + 1]));
    return 0;
}

void vw_hex_encode(const uint8_t *in, size_t n, char *out)
{
    static const char d[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = d[in[i] >> 4];
        out[2 * i + 1] = d[in[i] & 15];
    }
    out[2 * n] = '\0';
}
