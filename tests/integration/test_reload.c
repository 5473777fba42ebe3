/* SPDX-License-Identifier: Apache-2.0 */
/* SIGHUP rereads the configuration: new limits apply at once; a change that
 * needs a restart (a device's capacity) is refused, naming it, and nothing
 * changes; a file with errors changes nothing either. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "tests/integration/harness.h"

static void write_config(const struct daemon *d, const char *text)
{
    FILE *f = fopen(d->config, "w");
    REQUIRE(f, "rewrite config");
    fputs(text, f);
    fclose(f);
}

int main(void)
{
    const char *base = "{\"devices\": [{\"id\": 0, \"capacity\": \"1GiB\"}],"
                       " \"limits\": {\"chunks_per_client\": 64}}";
    struct daemon d;
    REQUIRE(daemon_start(&d, base, NULL) == 0, "start vramd");
    vram_client *c = connect_client(&d, "reload");
    uint32_t st, r;
    REQUIRE(vram_stage_register_adhoc(c, 0, 0, 1, &st) == 0, "stage");
    REQUIRE(vram_region_create(c, st, VRAM_REGION_FIXED, 512 * MIB, 1, &r) == 0, "region");
    CHECK(vram_region_grow(c, r, 100) == -EDQUOT, "over the quota of 64");
    CHECK(strstr(vram_client_last_error(c), "quota of 64") != NULL, "unclear: %s",
          vram_client_last_error(c));

    /* A larger quota, applied on SIGHUP. */
    write_config(&d, "{\"devices\": [{\"id\": 0, \"capacity\": \"1GiB\"}],"
                     " \"limits\": {\"chunks_per_client\": 200}}");
    kill(d.pid, SIGHUP);
    CHECK(daemon_log_wait(&d, "SIGHUP: reloaded", 2000), "no reload logged");
    CHECK(vram_region_grow(c, r, 100) == 0, "quota not raised: %s",
          vram_client_last_error(c));

    /* Capacities change at run time: down to what is in use... */
    write_config(&d, "{\"devices\": [{\"id\": 0, \"capacity\": \"512MiB\"}],"
                     " \"limits\": {\"chunks_per_client\": 200}}");
    kill(d.pid, SIGHUP);
    CHECK(daemon_log_wait(&d, "capacity 512 MiB (was 1024)", 2000),
          "the lower capacity was not applied");
    CHECK(wait_dev_value(&d, 0, "capacity_bytes", 512 * MIB, 1000), "capacity");
    /* ...but not beyond the device's size at start, nor under what is used
     * (100 chunks = 200 MiB here), and then nothing changes at all. */
    write_config(&d, "{\"devices\": [{\"id\": 0, \"capacity\": \"2GiB\"}],"
                     " \"limits\": {\"chunks_per_client\": 10}}");
    kill(d.pid, SIGHUP);
    CHECK(daemon_log_wait(&d, "at most 1024 MiB", 2000), "over the size not named");
    CHECK(daemon_log_wait(&d, "refused; nothing changed", 2000), "no refusal");
    write_config(&d, "{\"devices\": [{\"id\": 0, \"capacity\": \"128MiB\"}]}");
    kill(d.pid, SIGHUP);
    CHECK(daemon_log_wait(&d, "MiB are in use", 2000), "in-use refusal not named");
    write_config(&d, "{\"devices\": [{\"id\": 0, \"capacity\": \"512MiB\","
                     " \"chunk\": \"4MiB\"}]}");
    kill(d.pid, SIGHUP);
    CHECK(daemon_log_wait(&d, "changed its id, chunk or lending", 2000),
          "chunk change not named");
    CHECK(vram_region_grow(c, r, 50) == 0, "limits changed despite the refusals: %s",
          vram_client_last_error(c));
    cJSON *s = daemon_status(&d);
    CHECK_EQ_U(status_dev(s, 0, "capacity_bytes"), 512 * MIB);
    cJSON_Delete(s);

    /* Access lists reload at once. */
    write_config(&d, "{\"devices\": [{\"id\": 0, \"capacity\": \"512MiB\"}],"
                     " \"limits\": {\"chunks_per_client\": 200},"
                     " \"access\": {\"allow\": {\"uids\": [4242]}}}");
    kill(d.pid, SIGHUP);
    CHECK(daemon_log_wait(&d, "1+0 allowed", 2000), "access lists not reloaded");

    /* A broken file: errors logged with their keys, nothing changed. */
    write_config(&d, "{\"limits\": {\"chunks_per_client\": \"many\"}}");
    kill(d.pid, SIGHUP);
    CHECK(daemon_log_wait(&d, "limits.chunks_per_client", 2000), "error key not logged");
    CHECK(daemon_log_wait(&d, "has errors; nothing changed", 2000), "no refusal");
    vram_client_close(c);
    daemon_check_no_leaks(&d);
    daemon_stop(&d);
    return check_report("test_reload");
}
