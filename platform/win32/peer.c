/* peer.h on Windows: its uid and gid shape is POSIX's. Windows names users
 * by SIDs (identity.h), which the daemon's io layer maps onto the core's
 * numbers (daemon/io/peer_map.c); connections are identified there with
 * vp_identity_of_pipe, not with vp_peer_of. Account names do not resolve
 * to numbers: a configuration's access lists of names find nobody on
 * Windows (fail closed) until they are lists of SIDs. */
#include "peer.h"

#include <errno.h>

/* The number the io layer gives the daemon's own user (any user that is
 * neither SYSTEM nor an administrator gets none, and is refused). Not 0,
 * which is root's, who is always allowed. */
#define VP_WIN_SELF_UID 1u

int vp_peer_of(vp_handle c, struct vp_peer *out)
{
    (void)c;
    (void)out;
    return -ENOSYS; /* vp_identity_of_pipe */
}

int vp_peer_pin(vp_handle c, const struct vp_peer *p, vp_handle *pin,
                uint64_t *start_time)
{
    (void)c;
    (void)p;
    (void)pin;
    (void)start_time;
    return -ENOSYS; /* the pin comes with vp_identity_of_pipe */
}

uint32_t vp_self_uid(void)
{
    return VP_WIN_SELF_UID;
}

int vp_user_id(const char *name, uint32_t *uid)
{
    (void)name;
    (void)uid;
    return -ENOENT;
}

int vp_group_id(const char *name, uint32_t *gid)
{
    (void)name;
    (void)gid;
    return -ENOENT;
}
