/* main.c — thin entry point so tests can link the rest of nodeagent as a library. */
#include "nodeagent.h"
int main(int argc, char **argv) { return nodeagent_main(argc, argv); }
