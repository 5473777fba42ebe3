/* SPDX-License-Identifier: Apache-2.0 */
/* Typed messages: the runtime behind the structs that vram_msggen makes from
 * proto/messages.json (vram_msg.h in the build tree).
 *
 * Each message and type has a descriptor: its fields, their kinds, offsets
 * and limits. One encoder writes any of them as JSON text, one decoder reads
 * any of them from parsed JSON, checking every field against the catalogue:
 * required fields present, kinds right, numbers whole and in range before
 * they are converted, strings and arrays within their limits, handles named
 * by index among the frame's. So no field name or type is written twice in
 * the project, and a reply cannot drift from the catalogue.
 *
 * Layout rules the generated structs follow (and this code relies on):
 *  - u32, u64, i64, bool, handle, object fields are values; an optional one
 *    has `bool has_<name>` (set when present);
 *  - a string is `const char *`, NULL when absent;
 *  - an array is `struct { T *v; size_t n; }`, empty when absent. */
#ifndef VW_PROTO_MSG_H
#define VW_PROTO_MSG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "proto/arena.h"
#include "proto/codec.h"
#include "platform/handle.h"
#include "proto/json.h"

enum vw_kind {
    VW_K_U32,
    VW_K_U64,
    VW_K_I64,
    VW_K_BOOL,
    VW_K_STRING,
    VW_K_HANDLE,
    VW_K_OBJECT,
    VW_K_ARRAY,
};

struct vw_tdesc;

struct vw_fdesc {
    const char *name;
    const char *doc;
    uint8_t kind;
    uint8_t item; /* arrays: the kind of their items */
    bool required;
    uint32_t max; /* strings: bytes; arrays: items; 0: only the frame's */
    uint32_t off;
    uint32_t has_off; /* optional scalars and objects; UINT32_MAX: none */
    const struct vw_tdesc *type; /* objects, and arrays of objects */
    uint16_t since; /* the protocol version that added it (0: the first) */
};

struct vw_tdesc {
    const char *name;
    const char *doc;
    uint32_t size;
    bool tuple; /* written as a JSON array of its fields in order */
    const struct vw_fdesc *fields;
    uint32_t nfields;
};

/* A request with its reply, or an event (rep NULL). */
struct vw_mdesc {
    const char *name;
    const char *doc;
    const struct vw_tdesc *req;
    const struct vw_tdesc *rep;
    uint16_t since; /* the protocol version that added it (0: the first) */
};

/* An error code of the catalogue: since the version that added it, and the
 * older code a peer of an earlier version is told instead (NULL for the
 * first version's codes). */
struct vw_errdesc {
    const char *name;
    const char *doc;
    uint16_t since;
    const char *fallback;
};
/* Every error code, ending with a NULL name (made by vram_msggen). */
extern const struct vw_errdesc vw_errdescs[];

/* Whether what was added in since is part of version (0: the newest, all
 * of it). */
static inline bool vw_since_in(uint16_t since, unsigned version)
{
    return version == 0 || since <= version;
}
/* The name of err as a peer speaking version is told it: a code newer
 * than version goes as its fallback. */
const char *vw_error_name_at(int err, unsigned version);

/* Arrays of scalars, as the generated structs hold them. */
struct vw_u32s { uint32_t *v; size_t n; };
struct vw_u64s { uint64_t *v; size_t n; };
struct vw_i64s { int64_t *v; size_t n; };
struct vw_bools { bool *v; size_t n; };
struct vw_strs { const char **v; size_t n; };
struct vw_handles { vp_handle *v; size_t n; };

/* A field of t by name, or NULL. */
const struct vw_fdesc *vw_field(const struct vw_tdesc *t, const char *name);

/* ---- decoding ---- */

struct vw_dec {
    struct vw_arena *arena; /* arrays and strings of the result */
    struct vw_codec_frame *frame; /* handles are taken from it (NULL: a
                                       handle field is refused) */
    bool partial; /* the message's own required fields may be absent (a
                     reply's first frames); its items and objects are whole */
    unsigned version; /* the connection's protocol version: fields added
                         after it are ignored, as unknown ones (0: newest) */
    char why[256];
};

/* Reads obj as t into out (t->size bytes, written in full). Returns 0, or
 * -EINVAL with d->why naming the field ("kv_reserve.stage: must be a u32
 * (a whole number from 0 to 4294967295)"), or -ENOMEM. Handles named by the
 * message move from the frame into out; on failure none was taken. */
int vw_decode(const struct vw_tdesc *t, const cJSON *obj, void *out,
                struct vw_dec *d);
/* Closes the handles a decoded value holds (of t), e.g. when refusing it. */
void vw_close_handles(const struct vw_tdesc *t, void *obj);

/* What one reply may be at most, over all its frames: the bytes its frames
 * carry, and the memory they decode to, each. A daemon's status of 65,536
 * clients takes about 16 MiB on the wire. */
#define VW_MAX_REPLY_BYTES (64u << 20)

/* A reply in several frames (more: true), each decoded into part and
 * merged into acc. Arrays concatenate, except the one named skip (NULL:
 * none), which acc takes from part; an item of an array of objects whose
 * first field is a u32 "id" equal to the previous item's continues that
 * item (its arrays concatenate): one stage's regions may come over several
 * frames. Other fields are part's where present. Arrays are made in a,
 * growing geometrically, so a reply of n items costs O(n) however many
 * frames carry it (part's strings and nested arrays are shared, so part's
 * arena must live as long). The catalogue's maximum of an array holds for
 * the whole reply, as if it had come in one frame. */
struct vw_mnode;
struct vw_merge {
    const struct vw_tdesc *t;
    void *acc;
    const char *skip;
    struct vw_arena *a;
    struct vw_mnode *room; /* the room of each array made so far */
    char why[256];
};

/* Starts a merge into acc (of t; zeroed here). */
void vw_merge_begin(struct vw_merge *m, const struct vw_tdesc *t,
                      void *acc, const char *skip, struct vw_arena *a);
/* Merges the next frame's part. 0; -E2BIG with m->why naming the array
 * ("status.stages[0].regions: 4097 items over the reply's frames, at most
 * 4096") when an array of the whole passes its maximum; -ENOMEM. acc is
 * incomplete after a failure. */
int vw_merge_add(struct vw_merge *m, const void *part);

/* ---- encoding ---- */

struct vw_enc {
    struct vw_jw *w;
    vp_handle *hs; /* handles the frame will carry, in order; the encoder */
    int nh, max;   /* moves each handle field's value here */
    unsigned version; /* the connection's protocol version: fields added
                         after it are not written (0: the newest) */
};

/* Writes the fields of in (of t) that are present, each preceded by a
 * comma unless *first (then cleared); only, when not NULL, names the one
 * field to write. -E2BIG when more handles than e->max would be named. */
int vw_encode_fields(struct vw_enc *e, const struct vw_tdesc *t,
                       const void *in, const char *only, bool *first);
/* {fields} as an object (or a tuple's array). */
int vw_encode_object(struct vw_enc *e, const struct vw_tdesc *t,
                       const void *in);

/* ---- envelopes ---- */

enum vw_msg_kind { VW_MSG_REQUEST, VW_MSG_REPLY, VW_MSG_EVENT };

struct vw_envelope {
    int kind;         /* enum vw_msg_kind */
    const char *type; /* the request's or event's name */
    bool has_id;
    uint64_t id;
    bool ok, more;
    const char *error, *message; /* failed replies */
};

/* Reads the envelope of a message: a request ({type, id}), a reply
 * ({type: reply, id, ok, more?, error?, message?}) or an event ({type:
 * event, event}). -EINVAL with why for anything else. */
int vw_envelope_read(const cJSON *o, struct vw_envelope *env, char *why,
                       size_t whylen);

/* Writes a request: {"type":name,"id":id,...fields}. */
int vw_encode_request(struct vw_enc *e, const struct vw_mdesc *m,
                        uint64_t id, const void *fields);
/* Writes a reply: ok (err 0) or failed (err < 0, with message); more when
 * further frames follow; fields (of m->rep, may be NULL) restricted to only
 * when not NULL. */
int vw_encode_reply(struct vw_enc *e, const struct vw_mdesc *m,
                      uint64_t id, int err, const char *message, bool more,
                      const void *fields, const char *only);
/* Writes an event: {"type":"event","event":name,...fields}. */
int vw_encode_event(struct vw_enc *e, const struct vw_mdesc *m,
                      const void *fields);

#endif
