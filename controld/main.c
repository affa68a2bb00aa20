#include "log.h"
int main(void) { log_open("controld", LOG_TARGET_AUTO); return 0; }
