/* SPDX-License-Identifier: Apache-2.0 */
/* The mappers libvram has, by the daemon's backend name: the one place
 * that lists them. A new backend's chunks need a mapper file here and a
 * line below. */
#include <stdio.h>
#include <string.h>

#include "client/lib/client_record.h"
#include "client/lib/mappers.h"

static const struct vc_mapper *host_open(vram_client *c, char *why,
                                         size_t whylen)
{
    (void)c;
    (void)why;
    (void)whylen;
    return &vc_host_mapper;
}

static const struct {
    const char *backend;
    const struct vc_mapper *(*open)(vram_client *c, char *why, size_t whylen);
} mappers[] = {
    {"host", host_open},
    {"cuda", vc_cuda_mapper},
};

const struct vc_mapper *vc_mapper_open(vram_client *c, const char *backend,
                                       char *why, size_t whylen)
{
    for (size_t i = 0; i < sizeof(mappers) / sizeof(mappers[0]); i++)
        if (strcmp(mappers[i].backend, backend) == 0)
            return mappers[i].open(c, why, whylen);
    snprintf(why, whylen, "vramd's backend '%s' has no mapper in this libvram "
             "(it knows host and cuda): upgrade libvram", backend);
    return NULL;
}
