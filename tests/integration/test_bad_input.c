/* SPDX-License-Identifier: Apache-2.0 */
/* Every bad input gets a clear error or a disconnect with a logged reason,
 * loses nothing, and leaves the daemon serving everyone else. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "proto/frame.h"
#include "tests/integration/harness.h"
#include "proto/message.h"

/* Sends a frame with explicit header fields (to lie on purpose). */
static void raw_frame(int fd, uint16_t version, const char *json,
                      uint32_t len_claim, uint16_t nfds_claim, const int *fds,
                      int nfds)
{
    struct vw_frame_header h = {.magic = VW_FRAME_MAGIC, .version = version,
                                  .payload_len = len_claim, .nfds = nfds_claim};
    uint8_t hdr[VW_FRAME_HEADER_SIZE];
    vw_frame_header_encode(&h, hdr);
    struct iovec iov[2] = {{hdr, sizeof(hdr)},
                           {(void *)json, json ? strlen(json) : 0}};
    char ctl[CMSG_SPACE(sizeof(int) * 8)];
    struct msghdr m = {.msg_iov = iov, .msg_iovlen = json ? 2 : 1};
    if (nfds) {
        memset(ctl, 0, sizeof(ctl));
        m.msg_control = ctl;
        m.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
        struct cmsghdr *c = CMSG_FIRSTHDR(&m);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
        memcpy(CMSG_DATA(c), fds, sizeof(int) * (size_t)nfds);
    }
    CHECK(sendmsg(fd, &m, MSG_NOSIGNAL) > 0, "sendmsg");
}

static bool closed_by_peer(int fd, int ms)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    for (int t = 0; t < ms; t += 50) {
        if (poll(&p, 1, 50) > 0) {
            char c;
            ssize_t n = recv(fd, &c, 1, MSG_DONTWAIT);
            if (n == 0)
                return true;
            if (n < 0 && errno == ECONNRESET)
                return true;
        }
    }
    return false;
}

static void expect_error(int fd, const char *code, const char *needle,
                         const char *what);

/* One frame in with its header's version (NULL on EOF or after ms). */
static cJSON *recv_versioned(int fd, int ms, uint16_t *version)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, ms) <= 0)
        return NULL;
    uint8_t hdr[VW_FRAME_HEADER_SIZE];
    if (recv(fd, hdr, sizeof(hdr), MSG_WAITALL) != sizeof(hdr))
        return NULL;
    struct vw_frame_header h;
    char why[128];
    if (vw_frame_header_decode(hdr, &h, why, sizeof(why)) < 0)
        return NULL;
    char *buf = calloc(1, h.payload_len + 1);
    if (recv(fd, buf, h.payload_len, MSG_WAITALL) != (ssize_t)h.payload_len) {
        free(buf);
        return NULL;
    }
    cJSON *j = cJSON_Parse(buf);
    free(buf);
    *version = h.version;
    return j;
}

static void send_versioned(int fd, uint16_t version, const char *json)
{
    raw_frame(fd, version, json, (uint32_t)strlen(json), 0, NULL, 0);
}

/* A hello offering [lo, hi] in a frame of version 1; the version agreed,
 * checked in the reply's body and header (0 when refused). */
static unsigned agree(const struct daemon *d, int *fdp, const char *hello)
{
    int fd = raw_connect(d);
    send_versioned(fd, 1, hello);
    uint16_t hv = 0;
    cJSON *r = recv_versioned(fd, 2000, &hv);
    unsigned v = 0;
    if (r && cJSON_IsTrue(cJSON_GetObjectItem(r, "ok"))) {
        v = (unsigned)cJSON_GetNumberValue(cJSON_GetObjectItem(r, "version"));
        CHECK(hv == v, "%s: the reply's header says %u, its body %u", hello, hv, v);
    }
    cJSON_Delete(r);
    *fdp = fd;
    return v;
}

/* The status of a connection that speaks version, in a frame of it. */
static cJSON *status_at(int fd, uint16_t version)
{
    send_versioned(fd, version, "{\"type\":\"status\",\"id\":9}");
    uint16_t hv = 0;
    cJSON *r = recv_versioned(fd, 2000, &hv);
    CHECK(r && hv == version, "status at version %u: header %u", version, hv);
    return r;
}

static void negotiation(const struct daemon *d)
{
    int fd;
    /* A client of release 0.1.0: version 1 alone. */
    unsigned v = agree(d, &fd, "{\"type\":\"hello\",\"id\":1,\"version\":1}");
    CHECK(v == 1, "a version 1 hello agreed on %u", v);
    cJSON *st = status_at(fd, 1);
    /* What came with version 2 is not sent to it. */
    CHECK(st && cJSON_IsTrue(cJSON_GetObjectItem(st, "ok")) &&
              !cJSON_GetObjectItem(st, "schema"),
          "a version 1 connection's status carries the schema of version 2");
    cJSON_Delete(st);
    /* A frame of another version than the agreed one: refused, closed. */
    send_versioned(fd, 2, "{\"type\":\"ping\",\"id\":3}");
    expect_error(fd, "EPROTONOSUPPORT",
                 "a frame of protocol version 2 on a connection that speaks version 1",
                 "a version 2 frame on a version 1 connection");
    CHECK(closed_by_peer(fd, 2000), "wrong frame version: not disconnected");
    close(fd);

    /* This libvram's range: the newest. */
    v = agree(d, &fd, "{\"type\":\"hello\",\"id\":1,\"version\":2,\"min_version\":1}");
    CHECK(v == 2, "a [1, 2] hello agreed on %u", v);
    st = status_at(fd, 2);
    CHECK(st && cJSON_GetNumberValue(cJSON_GetObjectItem(st, "schema")) >= 1,
          "a version 2 connection's status has no schema");
    cJSON_Delete(st);
    send_versioned(fd, 1, "{\"type\":\"ping\",\"id\":3}");
    expect_error(fd, "EPROTONOSUPPORT", "version 1 on a connection that speaks version 2",
                 "a version 1 frame on a version 2 connection");
    close(fd);

    /* A newer client: the newest this vramd speaks. */
    v = agree(d, &fd, "{\"type\":\"hello\",\"id\":1,\"version\":9,\"min_version\":1}");
    CHECK(v == 2, "a [1, 9] hello agreed on %u", v);
    close(fd);
    v = agree(d, &fd, "{\"type\":\"hello\",\"id\":1,\"version\":9,\"min_version\":2}");
    CHECK(v == 2, "a [2, 9] hello agreed on %u", v);
    close(fd);
}

static void expect_error(int fd, const char *code, const char *needle,
                         const char *what)
{
    cJSON *r = raw_recv(fd, 2000);
    CHECK(r != NULL, "%s: no reply", what);
    if (!r)
        return;
    const char *err = cJSON_GetStringValue(cJSON_GetObjectItem(r, "error"));
    const char *msg = cJSON_GetStringValue(cJSON_GetObjectItem(r, "message"));
    CHECK(cJSON_IsFalse(cJSON_GetObjectItem(r, "ok")), "%s: not refused", what);
    CHECK(err && strcmp(err, code) == 0, "%s: error %s, expected %s", what,
          err ? err : "(none)", code);
    CHECK(msg && strstr(msg, needle), "%s: message '%s' lacks '%s'", what,
          msg ? msg : "(none)", needle);
    cJSON_Delete(r);
}

static int hello(int fd)
{
    raw_send(fd, "{\"type\":\"hello\",\"id\":1,\"version\":1,\"name\":\"raw\"}");
    cJSON *r = raw_recv(fd, 2000);
    int ok = r && cJSON_IsTrue(cJSON_GetObjectItem(r, "ok"));
    cJSON_Delete(r);
    return ok;
}

int main(void)
{
    struct daemon d;
    REQUIRE(daemon_start(&d, NULL, NULL) == 0, "start vramd");

    /* A well-behaved client holding memory throughout. */
    vram_client *good = connect_client(&d, "good");
    uint32_t stage, region;
    REQUIRE(vram_stage_register_adhoc(good, 0, 0, 31, &stage) == 0, "register");
    REQUIRE(vram_region_create(good, stage, VRAM_REGION_KV, 32 * MIB, 1, &region) == 0,
            "create");
    REQUIRE(vram_region_grow(good, region, 4) == 0, "grow");
    fill_pattern(vram_region_slot(good, region, 0, 3), 2 * MIB, 4242);

    int fd;
    /* 1. Garbage bytes: wrong magic → disconnect with a logged reason. */
    fd = raw_connect(&d);
    CHECK(write(fd, "GARBAGE GARBAGE GARBAGE!", 24) == 24, "write");
    CHECK(closed_by_peer(fd, 2000), "garbage: not disconnected");
    CHECK(daemon_log_wait(&d, "bad frame magic", 2000), "garbage: no log line");
    close(fd);

    /* 2. A frame whose payload is not JSON → disconnect. */
    fd = raw_connect(&d);
    raw_send(fd, "this is not json");
    CHECK(closed_by_peer(fd, 2000), "non-JSON: not disconnected");
    CHECK(daemon_log_wait(&d, "not a JSON object", 2000), "non-JSON: no log");
    close(fd);

    /* 3. Payload length over the limit → disconnect. */
    fd = raw_connect(&d);
    raw_frame(fd, 1, NULL, VW_MAX_PAYLOAD + 1, 0, NULL, 0);
    CHECK(closed_by_peer(fd, 2000), "oversized: not disconnected");
    CHECK(daemon_log_wait(&d, "exceeds the limit", 2000), "oversized: no log");
    close(fd);

    /* 4. A protocol version this vramd does not serve in the header →
     * clear error, then close. */
    fd = raw_connect(&d);
    raw_frame(fd, 3, "{\"type\":\"hello\",\"id\":1,\"version\":3}", 35, 0, NULL, 0);
    expect_error(fd, "EPROTONOSUPPORT", "client 3, vramd 1 to 2", "header version");
    CHECK(closed_by_peer(fd, 2000), "version: not disconnected");
    close(fd);

    /* 5. Hellos with no version in common. */
    fd = raw_connect(&d);
    raw_send(fd, "{\"type\":\"hello\",\"id\":1,\"version\":7}");
    expect_error(fd, "EPROTONOSUPPORT", "client 7 to 7, vramd 1 to 2", "hello version");
    close(fd);
    fd = raw_connect(&d);
    raw_send(fd, "{\"type\":\"hello\",\"id\":1,\"version\":9,\"min_version\":3}");
    expect_error(fd, "EPROTONOSUPPORT", "client 3 to 9, vramd 1 to 2", "hello range");
    close(fd);
    fd = raw_connect(&d);
    raw_send(fd, "{\"type\":\"hello\",\"id\":1,\"version\":1,\"min_version\":2}");
    expect_error(fd, "EPROTONOSUPPORT", "client 2 to 1", "an empty range");
    close(fd);

    /* 5b. Negotiation: the newest version both speak, carried by every
     * frame's header from the hello's reply on. */
    negotiation(&d);

    /* 6. Requests before hello, unknown types, wrong types: errors, and the
     * connection stays usable. */
    fd = raw_connect(&d);
    raw_send(fd, "{\"type\":\"status\",\"id\":5}");
    expect_error(fd, "EPROTO", "hello first", "before hello");
    /* Hello is checked before the request is: a malformed one before hello
     * hears "hello first", not what is wrong with its fields. */
    raw_send(fd, "{\"type\":\"region_grow\",\"id\":5,\"chunks\":\"many\"}");
    expect_error(fd, "EPROTO", "hello first", "malformed before hello");
    CHECK(hello(fd), "hello after an error");
    /* A second hello is refused and changes nothing: not the name, not the
     * role. */
    raw_send(fd, "{\"type\":\"hello\",\"id\":2,\"version\":1,\"name\":\"other\","
                 "\"role\":\"ctl\"}");
    expect_error(fd, "EPROTO", "already", "second hello");
    raw_send(fd, "{\"type\":\"status\",\"id\":3}");
    {
        cJSON *st = raw_recv(fd, 2000);
        const cJSON *cl;
        int raw_named = 0, other_named = 0;
        cJSON_ArrayForEach(cl, cJSON_GetObjectItem(st, "clients")) {
            const char *nm = cJSON_GetStringValue(cJSON_GetObjectItem(cl, "name"));
            const char *role = cJSON_GetStringValue(cJSON_GetObjectItem(cl, "role"));
            raw_named += nm && strcmp(nm, "raw") == 0 && role &&
                         strcmp(role, "engine") == 0;
            other_named += nm && strcmp(nm, "other") == 0;
        }
        CHECK(raw_named == 1 && other_named == 0,
              "a second hello changed the client (raw engines %d, 'other' %d)",
              raw_named, other_named);
        cJSON_Delete(st);
    }
    raw_send(fd, "{\"type\":\"frobnicate\",\"id\":6}");
    expect_error(fd, "ENOSYS", "frobnicate", "unknown type");
    raw_send(fd, "{\"type\":\"region_grow\",\"id\":7,\"region\":1,\"chunks\":\"many\"}");
    expect_error(fd, "EINVAL", "chunks", "wrong field type");
    raw_send(fd, "{\"type\":\"region_grow\",\"id\":8,\"region\":1}");
    expect_error(fd, "EINVAL", "chunks", "missing field");
    raw_send(fd, "{\"type\":\"region_grow\",\"id\":9,\"region\":1e300,\"chunks\":1}");
    expect_error(fd, "EINVAL", "region_grow.region: must be a u32", "huge number");
    raw_send(fd, "{\"type\":\"region_grow\",\"id\":10,\"region\":1,\"chunks\":-1e300}");
    expect_error(fd, "EINVAL", "region_grow.chunks", "huge negative number");
    raw_send(fd, "{\"type\":\"region_grow\",\"id\":11,\"region\":1.5,\"chunks\":1}");
    expect_error(fd, "EINVAL", "region_grow.region", "fraction");
    raw_send(fd, "{\"type\":\"status\"}");
    expect_error(fd, "EINVAL", "id", "no id");
    raw_send(fd, "[1,2,3]");
    CHECK(closed_by_peer(fd, 2000), "array payload: not disconnected");
    close(fd);

    /* 7. Foreign requests: chunks not held, regions not ours, limits. */
    fd = raw_connect(&d);
    CHECK(hello(fd), "hello");
    raw_send(fd, "{\"type\":\"chunk_release\",\"id\":2,\"chunks\":[0,1,2]}");
    expect_error(fd, "ENOENT", "not held by you", "release of others' chunks");
    raw_send(fd, "{\"type\":\"region_grow\",\"id\":3,\"region\":1,\"chunks\":1}");
    expect_error(fd, "ENOENT", "not yours", "grow of another's region");
    raw_send(fd, "{\"type\":\"stage_register\",\"id\":4,\"device\":9,"
                 "\"first_layer\":0,\"last_layer\":1}");
    expect_error(fd, "ENODEV", "no device 9", "unknown device");
    raw_send(fd, "{\"type\":\"stage_register\",\"id\":5,\"device\":0,"
                 "\"first_layer\":0,\"last_layer\":1}");
    cJSON *r = raw_recv(fd, 2000);
    uint64_t st_id = json_u64(cJSON_GetObjectItem(r, "stage"), "id");
    cJSON_Delete(r);
    char msg[256];
    snprintf(msg, sizeof(msg), "{\"type\":\"region_create\",\"id\":6,\"stage\":%llu,"
             "\"kind\":\"kv\",\"bytes\":%llu}", (unsigned long long)st_id,
             (unsigned long long)(64 * GIB));
    raw_send(fd, msg);
    expect_error(fd, "E2BIG", "capacity", "region larger than the device");
    snprintf(msg, sizeof(msg), "{\"type\":\"region_create\",\"id\":7,\"stage\":%llu,"
             "\"kind\":\"cache\",\"bytes\":1}", (unsigned long long)st_id);
    raw_send(fd, msg);
    expect_error(fd, "EINVAL", "kind", "unknown region kind");
    raw_send(fd, "{\"type\":\"reply\",\"id\":99,\"ok\":true}");
    expect_error(fd, "ENOSYS", "reply", "a reply sent to the daemon");

    /* 8. Unsolicited fds on a request: refused, and closed by the daemon. */
    int before = daemon_fd_count(&d);
    int fds[3];
    for (int i = 0; i < 3; i++)
        fds[i] = memfd_create("junk", MFD_CLOEXEC);
    raw_frame(fd, 1, "{\"type\":\"status\",\"id\":8}", 24, 3, fds, 3);
    expect_error(fd, "EINVAL", "unsolicited", "fds on a request");
    CHECK(daemon_fd_count(&d) == before, "daemon kept unsolicited fds (%d -> %d)",
          before, daemon_fd_count(&d));
    /* 9. An fd count that lies: disconnect, fds closed. */
    raw_frame(fd, 1, "{\"type\":\"status\",\"id\":9}", 24, 2, fds, 1);
    CHECK(closed_by_peer(fd, 2000), "fd count mismatch: not disconnected");
    CHECK(daemon_log_wait(&d, "announces 2 fds but 1 arrived", 2000),
          "fd count mismatch: no log line");
    close(fd);
    for (int i = 0; i < 3; i++)
        close(fds[i]);

    /* 10. A truncated header, then the peer vanishes. */
    fd = raw_connect(&d);
    CHECK(write(fd, "VRMD", 4) == 4, "write");
    close(fd);
    CHECK(daemon_log_wait(&d, "mid-frame", 2000), "truncated: no log line");

    /* The good client was not disturbed. */
    CHECK(check_pattern(vram_region_slot(good, region, 0, 3), 2 * MIB, 4242),
          "good client's data changed");
    CHECK(vram_region_grow(good, region, 2) == 0, "good client grow: %s",
          vram_client_last_error(good));
    cJSON *st = daemon_status(&d);
    CHECK_EQ_U(status_dev(st, 0, "granted_bytes"), 6 * 2 * MIB);
    CHECK(json_u64(cJSON_GetObjectItem(st, "counters"), "protocol_errors") >= 5,
          "protocol errors not counted");
    cJSON_Delete(st);
    vram_client_close(good);
    daemon_check_no_leaks(&d);
    daemon_stop(&d);
    return check_report("test_bad_input");
}
