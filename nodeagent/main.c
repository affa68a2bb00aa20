#include "log.h"
int main(void) { log_open("nodeagent", LOG_TARGET_AUTO); return 0; }
