/* SPDX-License-Identifier: Apache-2.0 */
/* The Prometheus text exposition (format 0.0.4) of one status of vramd:
 * per device, per stage and per client series, the daemon's counters, and
 * the exporter's own vramd_up and scrape duration. vramctl metrics prints
 * it; vramctl metrics --listen serves it. */
#ifndef VRAM_TOOLS_METRICS_TEXT_H
#define VRAM_TOOLS_METRICS_TEXT_H

#include "client/tools/textbuf.h"
#include "gen/vram_msg.h"

/* The media type both answer with. */
#define TOOL_METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

/* Appends the exposition of st, read in scrape_seconds, to t. */
void tool_metrics_render(struct tool_text *t, const struct vw_rep_status *st,
                         double scrape_seconds);
/* Appends what is known when vramd could not be read: why, as a comment,
 * and vramd_up 0. */
void tool_metrics_render_down(struct tool_text *t, const char *why);

#endif
