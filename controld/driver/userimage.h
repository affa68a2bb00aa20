/* userimage.h — what a driver needs to know of images in the snapshot registry: whether an
 * image is a template a user built (it is pulled with the registry's credentials, and
 * pulled again when the node lost it), and the VOLUMEs its config declares. Pure config and
 * registry reads: no store, no sandbox. */
#pragma once

#include <stdbool.h>

struct config;

/* Whether image is one of the templates users built (in the registry, pulled on first use). */
bool userimage_is(const struct config *cfg, const char *image);
/* The VOLUMEs (docker_config_volumes) of an image in the snapshot registry (a user's template
 * or a snapshot: "<registry>/<repo>@<digest>" or ":<tag>"), read from its config there.
 * -EINVAL: not an image of that registry; registry_image_config's errors. */
int userimage_volumes(const struct config *cfg, const char *image, char ***ret);
