/* SPDX-License-Identifier: Apache-2.0 */
/* The state layer's answer to the protocol layer (events.c): the port the
 * client's record points to from its connection on. */
#ifndef VRAM_CLIENT_EVENTS_H
#define VRAM_CLIENT_EVENTS_H

#include "client/lib/protocol.h"

extern const struct vc_proto_port vc_state_port;

#endif
