/* SPDX-License-Identifier: Apache-2.0 */
/* Key decoding. A CSI sequence is ESC '[', parameter bytes (0x30-0x3f),
 * intermediate bytes (0x20-0x2f) and a final byte (0x40-0x7e), so any
 * sequence is taken whole, known or not, and none leaks its tail as
 * characters ("[A" typed by an arrow). Modifiers ("ESC [ 1 ; 5 A", ^Up)
 * give the plain key. */
#include "client/tools/top_keys.h"

/* The key a final byte names (A B C D H F), or of "ESC [ n ~". */
static enum tool_key_kind by_final(char f)
{
    switch (f) {
    case 'A': return TOOL_KEY_UP;
    case 'B': return TOOL_KEY_DOWN;
    case 'C': return TOOL_KEY_RIGHT;
    case 'D': return TOOL_KEY_LEFT;
    case 'H': return TOOL_KEY_HOME;
    case 'F': return TOOL_KEY_END;
    default: return TOOL_KEY_OTHER;
    }
}

static enum tool_key_kind by_number(int n)
{
    switch (n) {
    case 1: case 7: return TOOL_KEY_HOME; /* xterm's and rxvt's */
    case 4: case 8: return TOOL_KEY_END;
    case 5: return TOOL_KEY_PGUP;
    case 6: return TOOL_KEY_PGDN;
    default: return TOOL_KEY_OTHER;
    }
}

size_t tool_key_decode(const char *buf, size_t n, bool final, struct tool_key *out)
{
    if (n == 0)
        return 0;
    const unsigned char *b = (const unsigned char *)buf;
    struct tool_key k = {.kind = TOOL_KEY_CHAR, .ch = buf[0]};
    size_t used = 1;
    if (b[0] == '\r' || b[0] == '\n') {
        k.kind = TOOL_KEY_ENTER;
    } else if (b[0] == 0x7f || b[0] == 0x08) {
        k.kind = TOOL_KEY_BACKSPACE;
    } else if (b[0] == 0x1b) {
        if (n == 1) {
            if (!final)
                return 0;
            k.kind = TOOL_KEY_ESC;
        } else if (b[1] == '[') {
            size_t i = 2;
            int num = 0;
            bool first_param = true;
            while (i < n && b[i] >= 0x30 && b[i] <= 0x3f) {
                if (b[i] == ';')
                    first_param = false;
                else if (first_param && b[i] >= '0' && b[i] <= '9' && num < 1000)
                    num = num * 10 + (b[i] - '0');
                i++;
            }
            while (i < n && b[i] >= 0x20 && b[i] <= 0x2f)
                i++;
            if (i >= n) {
                if (!final)
                    return 0;
                k.kind = TOOL_KEY_OTHER; /* cut short: taken as one key */
                used = n;
            } else if (b[i] >= 0x40 && b[i] <= 0x7e) {
                k.kind = b[i] == '~' ? by_number(num) : by_final((char)b[i]);
                used = i + 1;
            } else {
                k.kind = TOOL_KEY_OTHER; /* not a CSI after all: ESC [ */
                used = 2;
            }
        } else if (b[1] == 'O') {
            if (n == 2 && !final)
                return 0;
            k.kind = n > 2 ? by_final((char)b[2]) : TOOL_KEY_OTHER;
            used = n > 2 ? 3 : 2;
        } else if (b[1] == 0x1b) {
            k.kind = TOOL_KEY_ESC; /* Esc pressed twice: the first one */
        } else {
            k.kind = TOOL_KEY_OTHER; /* Alt and a key */
            used = 2;
        }
    }
    *out = k;
    return used;
}
