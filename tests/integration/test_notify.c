/* SPDX-License-Identifier: Apache-2.0 */
/* vramd tells the service manager it is ready (READY=1 with a STATUS) once it
 * serves, and that it is stopping on SIGTERM (sd_notify protocol). */
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "tests/integration/harness.h"

static bool wait_for(int fd, const char *needle, char *buf, size_t len)
{
    for (int i = 0; i < 50; i++) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 100) <= 0)
            continue;
        ssize_t n = recv(fd, buf, len - 1, 0);
        if (n <= 0)
            continue;
        buf[n] = 0;
        if (strstr(buf, needle))
            return true;
    }
    return false;
}

int main(void)
{
    char dir[] = "/tmp/vramd-notify-XXXXXX";
    REQUIRE(mkdtemp(dir), "mkdtemp");
    char path[128];
    snprintf(path, sizeof(path), "%s/notify", dir);
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    memcpy(sa.sun_path, path, strlen(path) + 1);
    REQUIRE(bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0, "bind");
    setenv("NOTIFY_SOCKET", path, 1);

    struct daemon d;
    REQUIRE(daemon_start(&d, NULL, NULL) == 0, "start vramd");
    unsetenv("NOTIFY_SOCKET");
    char buf[512];
    CHECK(wait_for(fd, "READY=1", buf, sizeof(buf)), "no READY=1");
    CHECK(strstr(buf, "STATUS=serving 2 devices") != NULL, "no STATUS: %s", buf);
    CHECK(strstr(buf, d.sock) != NULL, "STATUS does not name the socket: %s", buf);
    daemon_stop(&d);
    CHECK(wait_for(fd, "STOPPING=1", buf, sizeof(buf)), "no STOPPING=1");
    close(fd);
    unlink(path);
    rmdir(dir);
    return check_report("test_notify");
}
