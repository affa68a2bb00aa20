/* terminal.h — the terminal WebSocket, its token and its page (terminal.c). */
#pragma once

#include <microhttpd.h>

#include "http.h"

enum MHD_Result terminal_get_pty(struct req *r);
enum MHD_Result terminal_post_token(struct req *r);
enum MHD_Result terminal_get_page(struct req *r);
enum MHD_Result terminal_get_asset(struct req *r);
