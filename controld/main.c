/* main.c — thin entry point so tests can link the rest of controld as a library. */
int controld_main(int argc, char **argv);
int main(int argc, char **argv) { return controld_main(argc, argv); }
