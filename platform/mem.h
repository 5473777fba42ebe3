/* SPDX-License-Identifier: Apache-2.0 */
/* Memory: shareable memory objects (host chunks: a sealed memfd on Linux,
 * a page-file-backed section on Windows), and address space a client
 * reserves once and maps chunks into at fixed addresses. */
#ifndef VRAM_PLATFORM_MEM_H
#define VRAM_PLATFORM_MEM_H

#include <stddef.h>
#include <stdint.h>

#include "platform/handle.h"

/* A new zero-filled memory object of bytes that nobody can resize. */
int vp_mem_create(uint64_t bytes, const char *name, vp_handle *out);
/* A new zero-filled memory object of bytes that nobody can resize, and
 * that can be made read-only for everyone later (vp_mem_seal_write): a
 * weight set's allocation. */
int vp_mem_create_sealable(uint64_t bytes, const char *name, vp_handle *out);
/* From now on nobody can write h's memory, through any mapping or handle
 * (Linux: F_SEAL_WRITE); -EBUSY while a writable mapping of it exists in
 * any process. Windows has no such seal: there a read-only section is one
 * whose handle carries map-read access only (the push's), and this only
 * checks h. */
int vp_mem_seal_write(vp_handle h);
/* What identifies the object in a process's mappings (an inode on Linux);
 * 0 when unknown. */
uint64_t vp_mem_id(vp_handle h);

/* Gives the heap's free memory back to the system (after a peer whose
 * queues held megabytes is gone). */
void vp_heap_trim(void);

/* The system's page size. */
uint64_t vp_page_size(void);

/* Reserves [base, base + size) exactly, inaccessible (-EADDRINUSE when any
 * of it is taken in this process). */
int vp_vm_reserve(uint64_t base, uint64_t size, char *why, size_t whylen);
void vp_vm_release(uint64_t base, uint64_t size);
/* Maps bytes of memory object h at addr, inside a reservation, readable and
 * writable, replacing what was there. */
int vp_vm_map(vp_handle h, uint64_t addr, uint64_t bytes, char *why,
              size_t whylen);
/* The same, readable only: a sealed object's mapping can never be made
 * writable. */
int vp_vm_map_ro(vp_handle h, uint64_t addr, uint64_t bytes, char *why,
                 size_t whylen);
/* What is mapped in [addr, addr + bytes) now is not inherited by a child
 * this process forks (Linux: MADV_DONTFORK; nothing to do on Windows, which
 * does not fork): a forked worker must not keep a weight set's writable
 * mapping past its seal, nor find the set's range taken when it opens the
 * set itself. */
int vp_vm_dontfork(uint64_t addr, uint64_t bytes);
/* Puts the reservation back over [addr, addr + bytes), so the range is
 * never left for another mapping to take. */
int vp_vm_unmap(uint64_t addr, uint64_t bytes);

#endif
