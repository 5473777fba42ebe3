/* SPDX-License-Identifier: Apache-2.0 */
/* The platform layer: the only code of vramd that talks to the operating
 * system. platform/posix/ with platform/linux/ implements it for Linux;
 * platform/win32/ for Windows. Each topic has its own small header; this
 * one includes them all. */
#ifndef VRAM_PLATFORM_H
#define VRAM_PLATFORM_H

#include "platform/clock.h"
#include "platform/conn.h"
#include "platform/dl.h"
#include "platform/handle.h"
#include "platform/keeper.h"
#include "platform/listener.h"
#include "platform/lock.h"
#include "platform/mapfile.h"
#include "platform/mem.h"
#include "platform/peer.h"
#include "platform/proc.h"
#include "platform/service.h"
#include "platform/thread.h"

#endif
