/* secrets.h — POST, GET (list and one), PUT and DELETE /secrets[/{name}] (secrets.c). */
#pragma once

#include "http.h"

enum MHD_Result secrets_post(struct req *r);
enum MHD_Result secrets_list(struct req *r);
enum MHD_Result secrets_get(struct req *r);
enum MHD_Result secrets_put(struct req *r);
enum MHD_Result secrets_delete(struct req *r);
