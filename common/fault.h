/* fault.h — named crash points for the crash-matrix tests.
 *
 * fault_point("name") kills this process with SIGKILL, as a power cut would, when the
 * environment variable PADDOCK_FAULT names that point; otherwise it does nothing. Only an
 * operator sets the environment of a daemon, so this gives a tenant nothing; the tests set
 * it to stop controld between two steps that must survive a crash together. */
#pragma once

void fault_point(const char *name);
