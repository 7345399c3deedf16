/* ext/data/folder.h: torchvision's ImageFolder scan: <root>/<class>/<file>, classes are the
 * sub-directories of root in sorted (byte) order with 0-based labels in that order, files are the
 * entries of each class directory whose name ends with .jpg or .jpeg in any case (.JPEG in
 * ImageNet), sorted by name; samples are ordered by class, then file. Hidden entries (a leading
 * dot) are ignored. Only the class directory's own entries are taken (ImageNet has no deeper
 * levels). Errors (VL_EIO): root unreadable, no class directory, a class without images (as
 * torchvision refuses it). Shared read-only by a loader's worker threads; the refcount is only
 * touched by the thread that owns the loaders. */
#ifndef VL_FOLDER_H
#define VL_FOLDER_H

#include <stdint.h>

#include "runtime/core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct vl_folder {
  int refcount;
  char *root;
  int nclasses;
  char **classes;     /* class (directory) names */
  int64_t n;          /* samples */
  char **paths;       /* root/class/file */
  int32_t *labels;    /* 0-based class index of each sample */
} vl_folder;

vl_status vl_folder_scan(const char *root, vl_folder **out);
vl_folder *vl_folder_retain(vl_folder *f);
void vl_folder_release(vl_folder *f); /* NULL is fine */

#ifdef __cplusplus
}
#endif
#endif
