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

