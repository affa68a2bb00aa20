/* userimage.c — see userimage.h. */
#include <errno.h>
#include <string.h>

#include "cleanup.h"
#include "controld.h"
#include "docker.h"
#include "json.h"
#include "registry.h"
#include "strutil.h"
#include "userimage.h"

bool userimage_is(const struct config *cfg, const char *image) {
        size_t n = cfg->snap_registry ? strlen(cfg->snap_registry) : 0, m = cfg->utpl_repository ? strlen(cfg->utpl_repository) : 0;
        return n && m && image && !strncmp(image, cfg->snap_registry, n) && image[n] == '/' &&
               !strncmp(image + n + 1, cfg->utpl_repository, m) && image[n + 1 + m] == '/';
}

int userimage_volumes(const struct config *cfg, const char *image, char ***ret) {
        size_t n = cfg->snap_registry ? strlen(cfg->snap_registry) : 0;
        if (!n || !image || strncmp(image, cfg->snap_registry, n) || image[n] != '/')
                return -EINVAL;
        const char *path = image + n + 1, *slash = strrchr(path, '/'), *at = strchr(path, '@');
        const char *sep = at ? at : strrchr(slash ? slash : path, ':');
        if (!sep)
                return -EINVAL;
        _cleanup_free_ char *repo = xstrndup(path, (size_t) (sep - path));
        struct registry reg = config_snapshot_registry(cfg);
        _cleanup_(cJSON_Deletep) cJSON *img = NULL;
        int r = registry_image_config(&reg, repo, sep + 1, &img);
        if (r < 0)
                return r;
        return docker_config_volumes(cJSON_GetObjectItemCaseSensitive(img, "config"), ret);
}

