/* SPDX-License-Identifier: Apache-2.0 */
/* libFuzzer harness for everything that reads bytes from a peer: the frame
 * header, the codec (fed directly, in pieces, in both handle modes), the
 * wire over a real socketpair (one receive per call, and receives until the
 * socket is empty), JSON parsing, and the catalogue's validation of requests
 * and events.
 * Build with -DVRAM_FUZZ=ON (clang); run: fuzz_wire -max_total_time=60. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "proto/frame.h"
#include "proto/message.h"
#include "proto/codec.h"
#include "proto/wire.h"

static int on_frame(void *ud, struct vw_codec_frame *f)
{
    (void)ud;
    cJSON *msg = cJSON_ParseWithLength(f->payload, f->len);
    char why[256];
    if (msg) {
        vw_msg_validate_request(msg, why, sizeof(why));
        vw_msg_validate_event(msg, why, sizeof(why));
        size_t len;
        char *again = vw_json_print(msg, &len);
        free(again);
        cJSON_Delete(msg);
    }
    return 0;
}

static void through_wire(const uint8_t *data, size_t size, bool greedy)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
        return;
    fcntl(sv[1], F_SETFL, O_NONBLOCK);
    size_t off = 0;
    /* Feed in pieces, so frames straddle receives. */
    struct vw_wire w;
    vw_wire_init(&w, (vp_handle){sv[0]});
    w.max_recvs = greedy ? 1 : 0;
    char why[256];
    while (off < size) {
        size_t piece = size - off < 4096 ? size - off : 4096;
        ssize_t n = write(sv[1], data + off, piece);
        if (n <= 0)
            break;
        off += (size_t)n;
        if (vw_wire_read(&w, on_frame, NULL, why, sizeof(why)) < 0)
            break;
    }
    close(sv[1]);
    for (int i = 0; i < 4; i++)
        if (vw_wire_read(&w, on_frame, NULL, why, sizeof(why)) != 0)
            break;
    vw_wire_fini(&w);
    close(sv[0]);
}

/* The codec alone: bytes pushed in pieces of varying size (the first byte
 * chooses them), every frame taken out. */
static void through_codec(const uint8_t *data, size_t size, bool inline_handles)
{
    struct vw_codec c;
    vw_codec_init(&c, inline_handles);
    size_t step = size ? (size_t)(data[0] % 61) + 1 : 1;
    char why[256];
    for (size_t off = 0; off < size; off += step) {
        size_t n = size - off < step ? size - off : step;
        if (vw_codec_rx_bytes(&c, data + off, n) < 0)
            break;
        struct vw_codec_frame *f;
        int r;
        while ((r = vw_codec_next(&c, &f, why, sizeof(why))) > 0) {
            /* Inline handles are only values here: never close them. */
            for (int i = 0; i < f->nhandles; i++)
                f->handles[i] = VP_NONE;
            on_frame(NULL, f);
        }
        if (r < 0)
            break;
    }
    vw_codec_fini(&c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size >= VW_FRAME_HEADER_SIZE) {
        struct vw_frame_header h;
        char why[128];
        vw_frame_header_decode(data, &h, why, sizeof(why));
    }
    through_codec(data, size, false);
    through_codec(data, size, true);
    through_wire(data, size, false);
    through_wire(data, size, true);
    return 0;
}
