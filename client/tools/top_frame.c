/* SPDX-License-Identifier: Apache-2.0 */
/* vramctl top's frame. Every line is clipped to one column less than the
 * terminal's width: a line that fills the last column leaves the cursor
 * waiting to wrap, and "erase to the end of line" there would erase that
 * column. Text from peers (client names) is escaped as every view of
 * vramctl escapes it (control characters and bytes that are not UTF-8 as
 * \xNN, proto/text.h), so a name cannot send escapes to the terminal; a
 * character beyond ASCII is then shown as one '?', so that every column
 * counts one cell. */
#include "client/tools/top_frame.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/text.h"
#include "proto/units.h"

const char tool_top_glyphs[7] = {'#', '=', 'w', '+', '!', 'x', '.'};

static const char *const seg_name[7] = {"fixed", "KV", "weights", "loaned",
                                        "recalling", "quarantined", "free"};
/* SGR colours: blue, green, magenta, cyan, yellow, red, and dim for free. */
static const char *const seg_color[7] = {"34;1", "32;1", "35", "36;1", "33;1",
                                         "31;1", "2"};
/* Where the weights segment is: a device without weight sets has none. */
enum { SEG_WEIGHTS = 2, SEGS = 7 };

/* One line being written: its visible width is counted, escapes not. pos
 * is the column the text has reached, used the cells shown: the figures
 * scrolled sideways skip their first skip columns. */
struct line {
    struct tool_text *t;
    const struct tool_top_view *v;
    int used, max, pos, skip;
};

static void line_begin(struct line *l, struct tool_text *t,
                       const struct tool_top_view *v)
{
    l->t = t;
    l->v = v;
    l->used = 0;
    l->pos = 0;
    l->skip = v->shown ? v->shown->hscroll : 0;
    l->max = v->cols > 1 ? v->cols - 1 : 1;
}

/* Visible text, escaped; what does not fit is dropped. */
static void put(struct line *l, const char *s)
{
    char buf[VW_TEXT_ESCAPED(512)];
    size_t n = vw_text_escape(buf, sizeof(buf), s);
    const unsigned char *p = (const unsigned char *)buf;
    for (size_t i = 0; i < n; l->pos++) {
        size_t k = vw_utf8_len(p + i, n - i);
        char ch = k == 1 ? (char)p[i] : '?';
        if (l->pos >= l->skip && l->used < l->max) {
            tool_text_raw(l->t, &ch, 1);
            l->used++;
        }
        i += k ? k : 1;
    }
}

static void putf(struct line *l, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void putf(struct line *l, const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    put(l, buf);
}

static void color(struct line *l, const char *sgr)
{
    if (l->v->ansi && l->v->color)
        tool_text_printf(l->t, "\033[%sm", sgr ? sgr : "0");
}

static void line_end(struct line *l)
{
    if (l->v->shown && l->pos > l->v->shown->widest)
        l->v->shown->widest = l->pos;
    color(l, NULL);
    tool_text_str(l->t, l->v->ansi ? "\033[K\r\n" : "\n");
}

static void blank(struct tool_text *t, const struct tool_top_view *v)
{
    struct line l;
    line_begin(&l, t, v);
    line_end(&l);
}

static const char *sz(uint64_t b, char *buf)
{
    return vw_size_format(b, buf, 32);
}

/* width cells shared among n values in proportion (largest remainders),
 * each value above 0 getting at least one cell while there are cells. */
static void cells(const uint64_t *v, int n, int width, int *out)
{
    long double total = 0;
    for (int i = 0; i < n; i++)
        total += (long double)v[i];
    int given = 0;
    long double rem[8] = {0};
    for (int i = 0; i < n; i++) {
        long double exact = total > 0 ? (long double)v[i] * width / total : 0;
        out[i] = (int)exact;
        rem[i] = exact - out[i];
        if (v[i] && out[i] == 0 && given < width) {
            out[i] = 1; /* visible, however small */
            rem[i] = -1;
        }
        given += out[i];
    }
    while (given > width) { /* the minimums overdrew: take from the largest */
        int big = 0;
        for (int i = 1; i < n; i++)
            if (out[i] > out[big])
                big = i;
        out[big]--;
        given--;
    }
    while (given < width && total > 0) {
        int best = -1;
        for (int i = 0; i < n; i++)
            if (v[i] && (best < 0 || rem[i] > rem[best]))
                best = i;
        if (best < 0)
            break;
        out[best]++;
        rem[best] = -2;
        given++;
    }
    if (given < width) /* nothing at all: the last segment (free) */
        out[n - 1] += width - given;
}

/* "[####====....]" of n segments with their glyphs and colours. */
static void bar(struct line *l, const uint64_t *v, int n, const char *glyphs,
                const char *const *colors, int width)
{
    int c[8];
    cells(v, n, width, c);
    put(l, "[");
    for (int i = 0; i < n; i++) {
        if (!c[i])
            continue;
        color(l, colors[i]);
        char run[512];
        int k = c[i] < (int)sizeof(run) - 1 ? c[i] : (int)sizeof(run) - 1;
        memset(run, glyphs[i], (size_t)k);
        run[k] = '\0';
        put(l, run);
        color(l, NULL);
    }
    put(l, "]");
}

/* Items ("# fixed 8 GiB") set on as few lines as the width allows. */
static void flow(struct tool_text *t, const struct tool_top_view *v,
                 const char *indent, char items[][64], const char *const *colors,
                 int n)
{
    struct line l;
    line_begin(&l, t, v);
    put(&l, indent);
    bool first = true;
    for (int i = 0; i < n; i++) {
        int need = (int)strlen(items[i]) + (first ? 0 : 2);
        if (!first && l.pos + need > l.max) {
            line_end(&l);
            line_begin(&l, t, v);
            put(&l, indent);
            first = true;
        }
        if (!first)
            put(&l, "  ");
        color(&l, colors ? colors[i] : NULL);
        put(&l, items[i]);
        color(&l, NULL);
        first = false;
    }
    line_end(&l);
}

static int bar_width(const struct tool_top_view *v, int taken, int lo, int hi)
{
    int w = (v->cols - 1) - taken;
    return w < lo ? lo : w > hi ? hi : w;
}

static void uptime(char *buf, size_t len, uint64_t ms)
{
    uint64_t s = ms / 1000;
    if (s < 3600)
        snprintf(buf, len, "%um%02us", (unsigned)(s / 60), (unsigned)(s % 60));
    else if (s < 86400)
        snprintf(buf, len, "%uh%02um", (unsigned)(s / 3600), (unsigned)(s / 60 % 60));
    else
        snprintf(buf, len, "%ud%02uh", (unsigned)(s / 86400),
                 (unsigned)(s / 3600 % 24));
}

static void header(struct tool_text *t, const struct vw_rep_status *st,
                   const struct tool_top_view *v)
{
    const struct tool_top_control *c = v->ctl;
    struct line l;
    line_begin(&l, t, v);
    color(&l, "1");
    put(&l, "vramctl top");
    color(&l, NULL);
    if (st) {
        char up[32];
        uptime(up, sizeof(up), st->daemon.uptime_ms);
        putf(&l, "  vramd %s (%s) on %s, up %s", st->daemon.version ? st->daemon.version : "?",
             st->backend ? st->backend : "?", v->socket, up);
    } else {
        putf(&l, "  vramd on %s", v->socket);
    }
    putf(&l, "  %s", v->clock ? v->clock : "");
    if (v->ansi && c && c->paused)
        put(&l, ", paused (p resumes); h help, q quits");
    else if (v->ansi)
        putf(&l, ", every %ld ms; h help, q quits", v->interval_ms);
    line_end(&l);
    /* vramd stopped answering: said above the last figures, which stay. */
    if (v->down_since) {
        line_begin(&l, t, v);
        color(&l, "41;97;1");
        putf(&l, " vramd not answering since %s ", v->down_since);
        color(&l, NULL);
        if (st && v->clock)
            putf(&l, "  the figures below are from %s", v->clock);
        line_end(&l);
    }
    if (v->error) {
        line_begin(&l, t, v);
        color(&l, "31;1");
        putf(&l, "%s%s", v->error,
             st && !v->down_since ? " (the figures below are older)" : "");
        color(&l, NULL);
        line_end(&l);
    }
    if (c && c->prompting) {
        line_begin(&l, t, v);
        color(&l, "7");
        putf(&l, "delay in ms (now %ld; Enter sets it, Esc cancels): %s_",
             c->interval_ms, c->typed);
        color(&l, NULL);
        line_end(&l);
    } else if (c && c->note[0]) {
        line_begin(&l, t, v);
        put(&l, c->note);
        line_end(&l);
    }
    blank(t, v);
}

static void devices(struct tool_text *t, const struct vw_rep_status *st,
                    const struct tool_top_view *v)
{
    for (size_t i = 0; i < st->devices.n; i++) {
        const struct vw_t_device *d = &st->devices.v[i];
        char a[32], b[32];
        struct line l;
        if (i)
            blank(t, v);
        line_begin(&l, t, v);
        color(&l, "1");
        putf(&l, "DEVICE %u", d->id);
        color(&l, NULL);
        putf(&l, "  %s  capacity %s in %s chunks", d->name && d->name[0] ? d->name : "-",
             sz(d->capacity_bytes, a), sz(d->chunk_bytes, b));
        line_end(&l);
        uint64_t all[SEGS] = {d->fixed_bytes, d->kv_bytes,
                              d->has_weights_bytes ? d->weights_bytes : 0,
                              d->loaned_bytes, d->recalling_bytes,
                              d->quarantined_bytes, 0};
        uint64_t used = 0;
        for (int k = 0; k < SEGS - 1; k++)
            used += all[k];
        /* Free is what the pool has left; the bar spans the capacity. */
        all[SEGS - 1] = d->capacity_bytes > used ? d->capacity_bytes - used : 0;
        /* The segments shown: weights only where the device holds sets. */
        uint64_t seg[SEGS];
        char glyph[SEGS], items[SEGS][64];
        const char *colors[SEGS];
        int n = 0;
        for (int k = 0; k < SEGS; k++) {
            if (k == SEG_WEIGHTS && !all[k])
                continue;
            char s[32], cached[48] = "";
            if (k == SEG_WEIGHTS && d->has_weights_cached_bytes)
                snprintf(cached, sizeof(cached), " (%s cached)",
                         sz(d->weights_cached_bytes, s));
            seg[n] = all[k];
            glyph[n] = tool_top_glyphs[k];
            colors[n] = seg_color[k];
            snprintf(items[n], sizeof(items[n]), "%c %s %s%s", tool_top_glyphs[k],
                     seg_name[k], sz(k == SEGS - 1 ? d->free_bytes : all[k], s),
                     cached);
            n++;
        }
        line_begin(&l, t, v);
        put(&l, "  ");
        bar(&l, seg, n, glyph, colors, bar_width(v, 4, 10, 200));
        line_end(&l);
        flow(t, v, "  ", items, colors, n);
    }
}

static const char *client_name(const struct vw_rep_status *st, uint32_t id)
{
    for (size_t i = 0; i < st->clients.n; i++)
        if (st->clients.v[i].id == id)
            return st->clients.v[i].name && st->clients.v[i].name[0]
                       ? st->clients.v[i].name : "-";
    return "-";
}

static void stages(struct tool_text *t, const struct vw_rep_status *st,
                   const struct tool_top_view *v)
{
    static const char *const kv_color[3] = {"32;1", "32", "2"};
    static const char *const ex_color[2] = {"36;1", "2"};
    for (size_t i = 0; i < st->stages.n; i++) {
        const struct vw_t_stage *s = &st->stages.v[i];
        char a[32], b[32], c[32];
        struct line l;
        blank(t, v);
        line_begin(&l, t, v);
        color(&l, "1");
        putf(&l, "STAGE %u", s->id);
        color(&l, NULL);
        putf(&l, "  device %u  layers %u-%u", s->device, s->first_layer, s->last_layer);
        if (s->has_owner)
            putf(&l, "  owner client %u (%s)", s->owner, client_name(st, s->owner));
        else
            put(&l, "  no owner");
        line_end(&l);
        /* A sleeping stage's KV and experts below read 0: a line of its
         * own (the header is clipped first on a narrow terminal) says why,
         * and where its bytes are (R18). */
        if (s->has_asleep && s->asleep) {
            line_begin(&l, t, v);
            put(&l, "  ");
            color(&l, "33;1");
            put(&l, "asleep");
            color(&l, NULL);
            putf(&l, "  %s kept in host memory by its owner, until the wake",
                 sz(s->has_host_bytes ? s->host_bytes : 0, a));
            line_end(&l);
        }
        int w = bar_width(v, 2 + 8 + 2 + 50, 10, 64);
        /* KV: what the request needs, what is mapped beyond it, and the
         * rest of the window. */
        uint64_t need = s->kv_needed_bytes < s->kv_mapped_bytes ? s->kv_needed_bytes
                                                                 : s->kv_mapped_bytes;
        uint64_t kv[3] = {need, s->kv_mapped_bytes - need,
                          s->kv_max_bytes > s->kv_mapped_bytes
                              ? s->kv_max_bytes - s->kv_mapped_bytes : 0};
        line_begin(&l, t, v);
        put(&l, "  KV      ");
        bar(&l, kv, 3, "=-.", kv_color, w);
        putf(&l, "  %s/%s mapped, needs %s", sz(s->kv_mapped_bytes, a),
             sz(s->kv_max_bytes, b), sz(s->kv_needed_bytes, c));
        line_end(&l);
        line_begin(&l, t, v);
        put(&l, "  experts ");
        if (s->has_expert_slots && s->expert_slots) {
            uint64_t ex[2] = {s->expert_slots_backed,
                              s->expert_slots > s->expert_slots_backed
                                  ? s->expert_slots - s->expert_slots_backed : 0};
            bar(&l, ex, 2, "+.", ex_color, w);
            putf(&l, "  %u/%u slots, %s loaned, %u recalling",
                 s->expert_slots_backed, s->expert_slots,
                 sz(s->expert_loaned_bytes, a), s->recalls_pending);
        } else {
            putf(&l, "%u slots, %s loaned, %u recalling", s->expert_slots_backed,
                 sz(s->expert_loaned_bytes, a), s->recalls_pending);
        }
        line_end(&l);
    }
}

/* Clients by what they hold, most first (or by the column s chose);
 * control clients that hold nothing (vramctl itself) are left out. Ties
 * go by id, so rows do not swap between frames. */
static int by_id(const struct vw_t_client *a, const struct vw_t_client *b)
{
    return a->id < b->id ? -1 : a->id > b->id;
}

static int by_held(const void *x, const void *y)
{
    const struct vw_t_client *a = *(const struct vw_t_client *const *)x;
    const struct vw_t_client *b = *(const struct vw_t_client *const *)y;
    uint64_t ha = a->held_bytes + a->quarantined_bytes;
    uint64_t hb = b->held_bytes + b->quarantined_bytes;
    if (ha != hb)
        return ha < hb ? 1 : -1;
    return by_id(a, b);
}

static int by_quarantined(const void *x, const void *y)
{
    const struct vw_t_client *a = *(const struct vw_t_client *const *)x;
    const struct vw_t_client *b = *(const struct vw_t_client *const *)y;
    if (a->quarantined_bytes != b->quarantined_bytes)
        return a->quarantined_bytes < b->quarantined_bytes ? 1 : -1;
    return by_held(x, y);
}

static int by_text(const char *a, const char *b)
{
    return strcmp(a ? a : "", b ? b : "");
}

static int by_name(const void *x, const void *y)
{
    const struct vw_t_client *a = *(const struct vw_t_client *const *)x;
    const struct vw_t_client *b = *(const struct vw_t_client *const *)y;
    int r = by_text(a->name, b->name);
    return r ? r : by_id(a, b);
}

static int by_pid(const void *x, const void *y)
{
    const struct vw_t_client *a = *(const struct vw_t_client *const *)x;
    const struct vw_t_client *b = *(const struct vw_t_client *const *)y;
    if (a->pid != b->pid)
        return a->pid < b->pid ? -1 : 1;
    return by_id(a, b);
}

static int by_client(const void *x, const void *y)
{
    return by_id(*(const struct vw_t_client *const *)x,
                 *(const struct vw_t_client *const *)y);
}

static int by_state(const void *x, const void *y)
{
    const struct vw_t_client *a = *(const struct vw_t_client *const *)x;
    const struct vw_t_client *b = *(const struct vw_t_client *const *)y;
    int r = by_text(a->state, b->state);
    return r ? r : by_id(a, b);
}

static int (*const sorts[TOOL_TOP_SORT_N])(const void *, const void *) = {
    [TOOL_TOP_SORT_HELD] = by_held,     [TOOL_TOP_SORT_QUARANTINED] = by_quarantined,
    [TOOL_TOP_SORT_NAME] = by_name,     [TOOL_TOP_SORT_PID] = by_pid,
    [TOOL_TOP_SORT_CLIENT] = by_client, [TOOL_TOP_SORT_STATE] = by_state,
};

static void clients(struct tool_text *t, const struct vw_rep_status *st,
                    const struct tool_top_view *v)
{
    size_t n = 0;
    const struct vw_t_client **list = calloc(st->clients.n + 1, sizeof(*list));
    if (!list) {
        t->oom = true;
        return;
    }
    uint64_t capacity = 0;
    for (size_t i = 0; i < st->devices.n; i++)
        capacity += st->devices.v[i].capacity_bytes;
    for (size_t i = 0; i < st->clients.n; i++) {
        const struct vw_t_client *c = &st->clients.v[i];
        bool ctl = c->role && strcmp(c->role, "ctl") == 0;
        if (!ctl || c->held_bytes || c->quarantined_bytes)
            list[n++] = c;
    }
    enum tool_top_sort sort = v->ctl && v->ctl->sort < TOOL_TOP_SORT_N
                                  ? v->ctl->sort : TOOL_TOP_SORT_HELD;
    bool reverse = v->ctl && v->ctl->reverse;
    qsort(list, n, sizeof(*list), sorts[sort]);
    if (reverse)
        for (size_t i = 0; i < n / 2; i++) {
            const struct vw_t_client *x = list[i];
            list[i] = list[n - 1 - i];
            list[n - 1 - i] = x;
        }
    struct line l;
    blank(t, v);
    if (v->ctl) { /* a live view: the order, which s changes */
        bool most = sort == TOOL_TOP_SORT_HELD || sort == TOOL_TOP_SORT_QUARANTINED;
        line_begin(&l, t, v);
        putf(&l, "clients by %s%s (s: another column, S: reverse)",
             tool_top_sort_name(sort),
             most ? (reverse ? ", least first" : ", most first")
                  : (reverse ? ", reversed" : ""));
        line_end(&l);
    }
    line_begin(&l, t, v);
    color(&l, "1");
    put(&l, "CLIENT NAME                 PID      STATE        HELD       QUARANTINED STAGES");
    if (l.max - 86 >= 14 && capacity) {
        while (l.pos < 86)
            put(&l, " ");
        put(&l, "SHARE OF ALL CAPACITY");
    }
    color(&l, NULL);
    line_end(&l);
    static const char *const held_color[2] = {"35;1", "2"};
    for (size_t i = 0; i < n; i++) {
        const struct vw_t_client *c = list[i];
        char a[32], b[32], stg[40] = "";
        for (size_t k = 0; k < c->stages.n; k++) {
            size_t len = strlen(stg);
            snprintf(stg + len, sizeof(stg) - len, "%s%u", k ? "," : "", c->stages.v[k]);
        }
        char name[VW_TEXT_ESCAPED(64)];
        line_begin(&l, t, v);
        putf(&l, "%-6u %-20s %-8lld %-12s %-10s %-11s %s", c->id,
             tool_peer_cell(c->name, "-", 20, name, sizeof(name)), (long long)c->pid,
             c->state && c->state[0] ? c->state : "-", sz(c->held_bytes, a),
             sz(c->quarantined_bytes, b), stg[0] ? stg : "-");
        /* Its share of every device's capacity, where there is room. */
        if (l.max - 86 >= 14 && capacity) {
            while (l.pos < 86)
                put(&l, " ");
            uint64_t h[2] = {c->held_bytes + c->quarantined_bytes, 0};
            h[1] = capacity > h[0] ? capacity - h[0] : 0;
            bar(&l, h, 2, "|.", held_color, bar_width(v, l.pos + 2, 10, 30));
        }
        line_end(&l);
    }
    if (n == 0) {
        line_begin(&l, t, v);
        put(&l, "(no engine connected)");
        line_end(&l);
    }
    free(list);
}

/* How many lines t holds from offset from on. */
static int count_lines(const struct tool_text *t, size_t from)
{
    int n = 0;
    for (size_t i = from; i < t->len; i++)
        n += t->p[i] == '\n';
    return n;
}

/* Where line k of t begins (t->len past the last). */
static size_t line_at(const struct tool_text *t, int k)
{
    size_t i = 0;
    for (; i < t->len && k > 0; i++)
        if (t->p[i] == '\n')
            k--;
    return i;
}

static void help(struct tool_text *t, const struct tool_top_view *v)
{
    for (int i = 0; tool_top_help[i]; i++) {
        struct line l;
        line_begin(&l, t, v);
        if (i == 0)
            color(&l, "1");
        put(&l, tool_top_help[i]);
        line_end(&l);
    }
}

/* The figures (or the help), as lines, scrolled sideways by hscroll. */
static void body(struct tool_text *t, const struct vw_rep_status *st,
                 const struct tool_top_view *v)
{
    if (v->ctl && v->ctl->help)
        help(t, v);
    else if (st) {
        devices(t, st, v);
        stages(t, st, v);
        clients(t, st, v);
    }
}

void tool_top_frame(struct tool_text *t, const struct vw_rep_status *st,
                    const struct tool_top_view *v)
{
    size_t start = t->len;
    /* The header stays in place; the figures scroll under it. */
    struct tool_top_view hv = *v;
    hv.shown = NULL;
    header(t, st, &hv);
    int head = count_lines(t, start);
    struct tool_top_shown shown = {.hscroll = v->ctl ? v->ctl->hscroll : 0};
    struct tool_top_view bv = *v;
    bv.shown = &shown;
    struct tool_text b = {0};
    body(&b, st, &bv);
    /* Sideways no further than the widest line shows its end. */
    int most = shown.widest - (v->cols > 1 ? v->cols - 1 : 1);
    if (shown.hscroll > (most > 0 ? most : 0)) {
        shown.hscroll = most > 0 ? most : 0;
        shown.widest = 0;
        tool_text_free(&b);
        b = (struct tool_text){0};
        body(&b, st, &bv);
    }
    if (b.oom)
        t->oom = true;
    shown.lines = count_lines(&b, 0);
    int room = v->rows > 0 ? v->rows - head : shown.lines;
    bool cut = shown.lines > room;
    shown.page = cut ? (room > 2 ? room - 1 : 1) : shown.lines;
    int top = v->ctl ? v->ctl->scroll : 0;
    int last = shown.lines - shown.page;
    shown.scroll = !cut ? 0 : top < 0 ? 0 : top > last ? last : top;
    size_t from = line_at(&b, shown.scroll), to = line_at(&b, shown.scroll + shown.page);
    if (b.p && to > from)
        tool_text_raw(t, b.p + from, to - from);
    tool_text_free(&b);
    if (cut) {
        struct line l;
        line_begin(&l, t, &hv);
        color(&l, "7");
        if (v->ctl)
            putf(&l, "(lines %d-%d of %d: Up, Down, PgUp, PgDn scroll; h help)",
                 shown.scroll + 1, shown.scroll + shown.page, shown.lines);
        else
            putf(&l, "(%d more lines: a taller window shows them)",
                 shown.lines - shown.page);
        line_end(&l);
    }
    /* The last line of a live frame ends without a line feed, so a frame
     * as tall as the terminal does not scroll it. */
    if (v->ansi && !t->oom && t->len >= start + 2 && t->p[t->len - 1] == '\n') {
        t->len -= 2;
        t->p[t->len] = '\0';
    }
    if (v->shown)
        *v->shown = shown;
}
