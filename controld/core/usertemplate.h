/* usertemplate.h — templates users build (usertemplate.c): the API's handlers and what
 * sandbox create and the drivers ask of them. */
#pragma once

#include <stdbool.h>

#include "controld.h"
#include "http.h"

/* POST, GET (list and one) and DELETE /templates[/{name}]. */
enum MHD_Result utpl_post(struct req *r);
enum MHD_Result utpl_list(struct req *r);
enum MHD_Result utpl_get(struct req *r);
enum MHD_Result utpl_delete(struct req *r);


/* The VOLUMEs (docker_config_volumes) of an image in the snapshot registry (a user's template
 * or a snapshot: "<registry>/<repo>@<digest>" or ":<tag>"), read from its config there.
 * -EINVAL: not an image of that registry; registry_image_config's errors. */
int utpl_image_volumes(const struct config *cfg, const char *image, char ***ret);
