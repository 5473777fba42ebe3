/* SPDX-License-Identifier: Apache-2.0 */
/* vramctl top's keys without a terminal: the decoder (characters, xterm's
 * CSI and SS3 sequences with and without modifiers, the ones libuv's
 * Windows console sends, a sequence cut short, a lone Escape) and what
 * each key does to the view's control (help, sort, delay prompt, pause,
 * scrolling, quit). test_top.sh drives the same keys through tmux. */
#include <limits.h>
#include <string.h>

#include "tests/check.h"
#include "client/tools/top_control.h"
#include "client/tools/top_keys.h"

static struct tool_key one(const char *s, size_t *used)
{
    struct tool_key k = {.kind = TOOL_KEY_OTHER, .ch = 'Z'};
    *used = tool_key_decode(s, strlen(s), false, &k);
    return k;
}

static void test_decode(void)
{
    static const struct {
        const char *bytes;
        enum tool_key_kind kind;
        size_t used;
    } t[] = {
        {"q", TOOL_KEY_CHAR, 1},          {"\r", TOOL_KEY_ENTER, 1},
        {"\n", TOOL_KEY_ENTER, 1},        {"\x7f", TOOL_KEY_BACKSPACE, 1},
        {"\b", TOOL_KEY_BACKSPACE, 1},    {"\x03", TOOL_KEY_CHAR, 1},
        {"\033[A", TOOL_KEY_UP, 3},       {"\033[B", TOOL_KEY_DOWN, 3},
        {"\033[C", TOOL_KEY_RIGHT, 3},    {"\033[D", TOOL_KEY_LEFT, 3},
        {"\033OA", TOOL_KEY_UP, 3},       {"\033OD", TOOL_KEY_LEFT, 3},
        {"\033[H", TOOL_KEY_HOME, 3},     {"\033[F", TOOL_KEY_END, 3},
        {"\033OH", TOOL_KEY_HOME, 3},     {"\033OF", TOOL_KEY_END, 3},
        {"\033[1~", TOOL_KEY_HOME, 4},    {"\033[4~", TOOL_KEY_END, 4},
        {"\033[7~", TOOL_KEY_HOME, 4},    {"\033[8~", TOOL_KEY_END, 4},
        {"\033[5~", TOOL_KEY_PGUP, 4},    {"\033[6~", TOOL_KEY_PGDN, 4},
        {"\033[1;5A", TOOL_KEY_UP, 6},    {"\033[5;2~", TOOL_KEY_PGUP, 6},
        {"\033[15~", TOOL_KEY_OTHER, 5},  {"\033[200~", TOOL_KEY_OTHER, 6},
        {"\033x", TOOL_KEY_OTHER, 2},     {"\033\033[A", TOOL_KEY_ESC, 1},
        {"\033[Aq", TOOL_KEY_UP, 3},
    };
    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
        size_t used;
        struct tool_key k = one(t[i].bytes, &used);
        CHECK(used == t[i].used && k.kind == t[i].kind,
              "case %zu: %zu bytes, kind %d (want %zu, %d)", i, used, (int)k.kind,
              t[i].used, (int)t[i].kind);
    }
    size_t used;
    struct tool_key k = one("s", &used);
    CHECK(k.ch == 's', "the character: '%c'", k.ch);
    /* The beginning of a sequence waits for the rest (nothing written)... */
    static const char *const part[] = {"\033", "\033[", "\033[1", "\033[1;5", "\033O"};
    for (size_t i = 0; i < sizeof(part) / sizeof(part[0]); i++) {
        k = (struct tool_key){.kind = TOOL_KEY_CHAR, .ch = 'Z'};
        used = tool_key_decode(part[i], strlen(part[i]), false, &k);
        CHECK(used == 0 && k.ch == 'Z', "part %zu: %zu bytes taken", i, used);
    }
    /* ...and once no more came, is a key: Escape alone, or one taken whole. */
    used = tool_key_decode("\033", 1, true, &k);
    CHECK(used == 1 && k.kind == TOOL_KEY_ESC, "a lone ESC: %zu %d", used, (int)k.kind);
    used = tool_key_decode("\033[1;5", 5, true, &k);
    CHECK(used == 5 && k.kind == TOOL_KEY_OTHER, "a sequence cut short: %zu %d",
          used, (int)k.kind);
    CHECK(tool_key_decode("", 0, true, &k) == 0, "no bytes");
}

static int press(struct tool_top_control *c, enum tool_key_kind kind, char ch)
{
    struct tool_key k = {.kind = kind, .ch = ch};
    return tool_top_control_key(c, &k);
}

static int type(struct tool_top_control *c, char ch)
{
    return press(c, TOOL_KEY_CHAR, ch);
}

static void test_control(void)
{
    struct tool_top_control c;
    tool_top_control_init(&c, 1000);
    CHECK(c.interval_ms == 1000 && !c.paused && !c.help && c.sort == TOOL_TOP_SORT_HELD,
          "init");
    CHECK(type(&c, 'q') == TOOL_TOP_QUIT && type(&c, 'Q') == TOOL_TOP_QUIT &&
              type(&c, 3) == TOOL_TOP_QUIT, "q, Q, ^C");
    CHECK(type(&c, 'x') == 0, "a key that means nothing redraws nothing");
    /* Help: h or ?; any key closes it and does nothing else; q still quits. */
    CHECK(type(&c, 'h') == TOOL_TOP_REDRAW && c.help, "h");
    CHECK(type(&c, 's') == TOOL_TOP_REDRAW && !c.help && c.sort == TOOL_TOP_SORT_HELD,
          "a key closing the help sorted");
    CHECK(type(&c, '?') && c.help && press(&c, TOOL_KEY_ESC, 0) && !c.help, "? Esc");
    type(&c, 'h');
    CHECK(type(&c, 'q') == TOOL_TOP_QUIT, "q in the help");
    c.help = false;
    /* Sort: s goes round the columns, S reverses, a new column is not. */
    const char *seen[TOOL_TOP_SORT_N];
    for (int i = 0; i < TOOL_TOP_SORT_N; i++) {
        seen[i] = tool_top_sort_name(c.sort);
        type(&c, 's');
    }
    CHECK(c.sort == TOOL_TOP_SORT_HELD && strcmp(seen[0], "held") == 0 &&
              strcmp(seen[2], "name") == 0 && strcmp(seen[5], "state") == 0,
          "s goes round: %s %s %s", seen[0], seen[2], seen[5]);
    type(&c, 'S');
    CHECK(c.reverse, "S");
    type(&c, 's');
    CHECK(!c.reverse && c.sort == TOOL_TOP_SORT_QUARANTINED, "s after S");
    /* Pause: p stops, p again resumes with a fetch at once. */
    CHECK(type(&c, 'p') == TOOL_TOP_REDRAW && c.paused, "p");
    CHECK(type(&c, 'p') == (TOOL_TOP_REDRAW | TOOL_TOP_FETCH) && !c.paused, "p again");
    /* The delay: digits, Backspace, Enter; a bad one refused; Esc cancels;
     * every other key goes to the prompt (q is a letter there), ^C quits. */
    CHECK(type(&c, 'd') == TOOL_TOP_REDRAW && c.prompting, "d");
    type(&c, '2');
    type(&c, '5');
    type(&c, 'q');
    type(&c, '9');
    press(&c, TOOL_KEY_BACKSPACE, 0);
    type(&c, '0');
    CHECK(strcmp(c.typed, "250") == 0 && c.prompting, "typed '%s'", c.typed);
    CHECK(press(&c, TOOL_KEY_ENTER, 0) == (TOOL_TOP_REDRAW | TOOL_TOP_RETIME) &&
              c.interval_ms == 250 && !c.prompting && strstr(c.note, "every 250 ms"),
          "Enter: %ld '%s'", c.interval_ms, c.note);
    type(&c, 'x');
    CHECK(c.note[0] == '\0', "the note stays past the next key");
    type(&c, 'd');
    type(&c, '0');
    CHECK(press(&c, TOOL_KEY_ENTER, 0) == TOOL_TOP_REDRAW && c.interval_ms == 250 &&
              strstr(c.note, "1 to 3600000"), "delay 0: %ld '%s'", c.interval_ms, c.note);
    type(&c, 'd');
    for (int i = 0; i < 20; i++)
        type(&c, '9');
    CHECK(strlen(c.typed) < sizeof(c.typed), "the prompt overflowed");
    CHECK(press(&c, TOOL_KEY_ENTER, 0) == TOOL_TOP_REDRAW && c.interval_ms == 250,
          "an 11-digit delay: %ld", c.interval_ms);
    type(&c, 'd');
    type(&c, '7');
    CHECK(press(&c, TOOL_KEY_ESC, 0) == TOOL_TOP_REDRAW && !c.prompting &&
              c.interval_ms == 250, "Esc at the prompt");
    type(&c, 'd');
    CHECK(press(&c, TOOL_KEY_ENTER, 0) == TOOL_TOP_REDRAW && c.interval_ms == 250,
          "Enter with nothing typed");
    type(&c, 'd');
    CHECK(type(&c, 3) == TOOL_TOP_QUIT, "^C at the prompt");
    c.prompting = false;
    /* Scrolling: lines, pages (one line kept), the ends; never below 0. */
    c.page = 10;
    press(&c, TOOL_KEY_UP, 0);
    CHECK(c.scroll == 0, "Up at the top: %d", c.scroll);
    press(&c, TOOL_KEY_DOWN, 0);
    type(&c, 'j');
    CHECK(c.scroll == 2, "Down, j: %d", c.scroll);
    type(&c, 'k');
    press(&c, TOOL_KEY_PGDN, 0);
    CHECK(c.scroll == 10, "PgDn: %d", c.scroll);
    press(&c, TOOL_KEY_PGUP, 0);
    press(&c, TOOL_KEY_PGUP, 0);
    CHECK(c.scroll == 0, "PgUp: %d", c.scroll);
    press(&c, TOOL_KEY_END, 0);
    CHECK(c.scroll >= INT_MAX / 4, "End: %d (the frame clamps it)", c.scroll);
    press(&c, TOOL_KEY_DOWN, 0);
    CHECK(c.scroll > 0, "Down after End wrapped: %d", c.scroll);
    press(&c, TOOL_KEY_HOME, 0);
    CHECK(c.scroll == 0, "Home");
    press(&c, TOOL_KEY_RIGHT, 0);
    press(&c, TOOL_KEY_RIGHT, 0);
    CHECK(c.hscroll == 16, "Right: %d", c.hscroll);
    press(&c, TOOL_KEY_LEFT, 0);
    press(&c, TOOL_KEY_LEFT, 0);
    press(&c, TOOL_KEY_LEFT, 0);
    CHECK(c.hscroll == 0, "Left: %d", c.hscroll);
    CHECK(press(&c, TOOL_KEY_OTHER, 0) == 0, "an unknown key");
    int lines = 0;
    for (int i = 0; tool_top_help[i]; i++)
        lines++;
    CHECK(lines >= 10 && strcmp(tool_top_help[0], "Keys") == 0, "the help: %d lines",
          lines);
}

int main(void)
{
    test_decode();
    test_control();
    return check_report("test_top_keys");
}
