/* The service manager's readiness protocol (sd_notify), spoken directly:
 * a datagram to $NOTIFY_SOCKET. Nothing happens when it is unset. */
#ifndef VRAMD_NOTIFY_H
#define VRAMD_NOTIFY_H

/* Sends state ("READY=1\nSTATUS=..."); returns 0, or a negative errno. */
int vd_notify(const char *state);

#endif
