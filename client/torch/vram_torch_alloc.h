/* SPDX-License-Identifier: Apache-2.0 */
/* The PyTorch allocator over vramd (vram_torch_alloc.c): the two entry
 * points torch.cuda.memory.CUDAPluggableAllocator loads, and what a test
 * or an engine may ask of it. */
#ifndef VRAM_TORCH_ALLOC_H
#define VRAM_TORCH_ALLOC_H

#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__)
#define VRAM_TORCH_API __attribute__((visibility("default")))
#else
#define VRAM_TORCH_API
/* This thread's allocations come from tag's region from now on (NULL or ""
 * the untagged one). backup: its bytes are kept across a sleep (copied to
 * pinned host memory), else discarded; fixed at a tag's first use (-EINVAL
 * when it differs later). -ENAMETOOLONG past 31 bytes, -E2BIG past 15 tags. */
VRAM_TORCH_API int vram_torch_set_tag(const char *tag, int backup);
/* This thread's tag ("" untagged). */
VRAM_TORCH_API const char *vram_torch_get_tag(void);
/* Gives the GPU memory of every region of tag back to vramd, at the same
 * addresses kept (vram_stage_sleep); its allocations fail meanwhile, and
 * nothing may touch its tensors. -ENOENT no such tag, -EALREADY asleep. */
VRAM_TORCH_API int vram_torch_sleep(const char *tag);
/* Takes it again and copies the kept bytes back (vram_stage_wake): tensors
 * and graphs over it work again. -EALREADY awake; vram_stage_wake's errors
 * (the tag then sleeps on). */
VRAM_TORCH_API int vram_torch_wake(const char *tag);

#endif

/* PyTorch's allocate and free (size in bytes, device the GPU ordinal,
 * stream a cudaStream_t, unused: blocks are not stream-ordered here). NULL
 * when it cannot (then vram_torch_last_error says why). */
VRAM_TORCH_API void *vram_torch_malloc(ptrdiff_t size, int device, void *stream);
VRAM_TORCH_API void vram_torch_free(void *ptr, ptrdiff_t size, int device,
                                    void *stream);
/* Why the last allocation failed. */
VRAM_TORCH_API const char *vram_torch_last_error(void);
/* Gives the free chunks at the end of each device's region back to vramd;
 * the bytes given back. */
VRAM_TORCH_API long long vram_torch_trim(void);
/* A device's region of this thread's tag: 0 with its base and mapped
 * bytes, or -ENOENT before the first allocation there. */
VRAM_TORCH_API int vram_torch_region(int device, uint64_t *base,
                                     uint64_t *mapped);

/* This thread's allocations come from tag's region from now on (NULL or ""
 * the untagged one). backup: its bytes are kept across a sleep (copied to
 * pinned host memory), else discarded; fixed at a tag's first use (-EINVAL
 * when it differs later). -ENAMETOOLONG past 31 bytes, -E2BIG past 15 tags. */
VRAM_TORCH_API int vram_torch_set_tag(const char *tag, int backup);
/* This thread's tag ("" untagged). */
VRAM_TORCH_API const char *vram_torch_get_tag(void);
/* Gives the GPU memory of every region of tag back to vramd, at the same
 * addresses kept (vram_stage_sleep); its allocations fail meanwhile, and
 * nothing may touch its tensors. -ENOENT no such tag, -EALREADY asleep. */
VRAM_TORCH_API int vram_torch_sleep(const char *tag);
/* Takes it again and copies the kept bytes back (vram_stage_wake): tensors
 * and graphs over it work again. -EALREADY awake; vram_stage_wake's errors
 * (the tag then sleeps on). */
VRAM_TORCH_API int vram_torch_wake(const char *tag);

#endif
