/* SPDX-License-Identifier: Apache-2.0 */
/* A stage whose policy is on_missed_recall "kill": a client that holds its
 * pool loans past the recall deadline is killed (through its pidfd), its
 * chunks come back once it is gone, and the waiting reserve completes. */
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "tests/integration/harness.h"

static const char *config =
    "{\"devices\": [{\"id\": 0, \"capacity\": \"256MiB\", \"lend_unreserved\": true}],"
    " \"pool\": {\"prefill_chunks\": 0},"
    " \"stages\": ["
    "  {\"id\": 0, \"device\": 0, \"first_layer\": 0, \"last_layer\": 15,"
    "   \"kv_lanes\": [256], \"expert_slot\": \"2MiB\","
    "   \"loan\": {\"recall_deadline_ms\": 300, \"hold_ms\": 5000,"
    "             \"on_missed_recall\": \"kill\"}},"
    "  {\"id\": 1, \"device\": 0, \"first_layer\": 16, \"last_layer\": 31,"
    "   \"kv_lanes\": [256], \"expert_slot\": \"2MiB\","
    "   \"loan\": {\"recall_deadline_ms\": 300, \"hold_ms\": 5000}}]}";

static int hog(const struct daemon *d, void *p)
{
    struct rendezvous *rv = p;
    vram_client *c = connect_client(d, "hog");
    REQUIRE(vram_stage_register(c, 0, 0, NULL) == 0, "register");
    REQUIRE(vram_expert_request(c, 0, 0) == 0, "loans");
    rv_send(rv->to_parent[1], 1);
    pause(); /* never reads its socket: the recall goes unanswered */
    return 0;
}

int main(void)
{
    struct daemon d;
    REQUIRE(daemon_start(&d, config, NULL) == 0, "start vramd");
    struct rendezvous rv;
    rv_init(&rv);
    pid_t a = spawn(hog, &d, &rv);
    REQUIRE(rv_recv(rv.to_parent[0]) == 1, "hog ready");
    /* All but stage 1's initial window (2 chunks), kept for its
     * registration. */
    cJSON *st = daemon_status(&d);
    CHECK_EQ_U(status_dev(st, 0, "free_bytes"), 2 * 2 * MIB);
    cJSON_Delete(st);

    vram_client *b = connect_client(&d, "waiter");
    REQUIRE(vram_stage_register(b, 1, 0, NULL) == 0, "register B: %s",
            vram_client_last_error(b));
    struct vram_kv_result r;
    int e = vram_kv_reserve(b, 1, 100000, 1000, VRAM_KV_HOLD, &r);
    CHECK(e == 0, "B's reserve: %s", vram_client_last_error(b));
    CHECK_EQ_U(r.kv_mapped_bytes, 13 * 2 * MIB);
    CHECK(wait_child(a) == 128 + SIGKILL, "the hog was not killed");
    CHECK(daemon_log_contains(&d, "SIGKILL sent"), "the kill was not logged");
    vram_client_close(b);
    daemon_check_no_leaks(&d);
    daemon_stop(&d);
    return check_report("test_recall_kill");
}
