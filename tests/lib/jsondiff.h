/* jsondiff.h — field-by-field comparison of two JSON trees, for tests that hold an
 * answer or a request against a reference document (e.g. packaging/nomad/sandbox-job.json).
 *
 * Paths are written as the differences say them: Job.TaskGroups[0].Tasks[0].Config.image.
 */
#pragma once

#include <stddef.h>
#include <cjson/cJSON.h>

/* Compares want with got: every member of want must be in got with the same type and value,
 * and got must have no member want lacks. Values at the paths in skip (NULL-terminated,
 * may be NULL) only have to exist with the same type. Returns the number of differences;
 * the first ones are described in out, one per line. */
int json_diff(const cJSON *want, const cJSON *got, const char *const *skip, char *out, size_t outlen);
/* Reads a JSON file (NULL on failure). */
cJSON *json_load_file(const char *path);
