/* SPDX-License-Identifier: Apache-2.0 */
/* Untyped JSON next to the typed messages (msg.h): field readers for JSON
 * that is not a protocol message (vram-replay's scenario files), a check of
 * a parsed request or event against the catalogue, and queueing a hand-built
 * cJSON message (tests that speak the protocol wrongly on purpose).
 * The daemon and libvram speak only through msg.h and vram_msg.h.
 */
#ifndef VW_PROTO_MESSAGE_H
#define VW_PROTO_MESSAGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "proto/wire.h"

/* Checks a request: a known type, and every required field present with its
 * type. Returns 0, -ENOSYS (unknown type) or -EINVAL, with why set. */
int vw_msg_validate_request(const cJSON *msg, char *why, size_t whylen);
/* Same for an event, used by the client library. */
int vw_msg_validate_event(const cJSON *msg, char *why, size_t whylen);

#include "proto/errnames.h"
#include "proto/json.h"

/* Serialises msg and queues it with handles (taken, see vw_codec_tx). */
int vw_msg_queue(struct vw_wire *w, const cJSON *msg, vp_handle *hs,
                   int n);

/* Field readers. Each returns 0 and writes *out only when the field is
 * present with the right type; -ENOENT when absent; -EINVAL otherwise. */
int vw_json_u64(const cJSON *obj, const char *key, uint64_t *out);
int vw_json_bool(const cJSON *obj, const char *key, bool *out);
const char *vw_json_str(const cJSON *obj, const char *key);
/* v is a whole number from 0 to max (at most 2^53), checked before it is
 * converted: no cast of an out-of-range double ever happens. */
bool vw_json_uint(const cJSON *v, uint64_t max, uint64_t *out);
#define VW_JSON_MAX_UINT 9007199254740992ull /* 2^53 */

/* Adds an unsigned integer; vw_json_print writes it exactly below 2^53
 * (JSON numbers are doubles): bytes, ids and addresses all fit. */
cJSON *vw_json_add_u64(cJSON *obj, const char *key, uint64_t v);

#endif
