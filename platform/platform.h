/* SPDX-License-Identifier: Apache-2.0 */
/* The platform layer: the only code of vramd that talks to the operating
 * system. platform/posix/ with platform/linux/ implements it for Linux;
 * platform/win32/ for Windows. Each topic has its own small header; this
 * one includes them all. */
#ifndef VRAM_PLATFORM_H
#define VRAM_PLATFORM_H

#include "clock.h"
#include "conn.h"
#include "dl.h"
#include "handle.h"
#include "keeper.h"
#include "listener.h"
#include "lock.h"
#include "mapfile.h"
#include "mem.h"
#include "peer.h"
#include "proc.h"
#include "service.h"
#include "thread.h"

#endif
