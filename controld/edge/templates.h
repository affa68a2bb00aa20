/* templates.h — POST, GET (list and one) and DELETE /templates[/{name}] (templates.c). */
#pragma once

#include "http.h"

enum MHD_Result templates_post(struct req *r);
enum MHD_Result templates_list(struct req *r);
enum MHD_Result templates_get(struct req *r);
enum MHD_Result templates_delete(struct req *r);
