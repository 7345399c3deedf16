/* tests/fuzz/fuzz_shard.c: the pretraining-shard reader (ext/text/shard.c) on arbitrary
 * bytes: open (header, sizes, both checksums), then gather the first, a middle and the last
 * sample. The checksums make random inputs fail early; the seeds are valid shards whose
 * checksums the fuzzer must keep, so most of the work is in the header checks. */
#include "fuzz_common.h"
#include "ext/text/shard.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char path[64];
  int fd = vl_fuzz_file(data, size, path, sizeof path);
  if (fd < 0) return 0;
  vl_shard_set *s = NULL;
  const char *paths[1] = {path};
  if (vl_shard_set_open(paths, 1, &s) == VL_OK) {
    const vl_shard_info *in = vl_shard_set_info(s);
    if (in->n_samples > 0 && in->seq_len <= 4096 && in->max_predictions <= 4096) {
      size_t L = in->seq_len, P = in->max_predictions;
      int64_t *ids = calloc(3 * L, sizeof *ids), *tt = calloc(3 * L, sizeof *tt), *am = calloc(3 * L, sizeof *am);
      int64_t *lab = calloc(3 * L, sizeof *lab), *nsp = calloc(3, sizeof *nsp);
      int64_t *mp = calloc(3 * P + 1, sizeof *mp), *mi = calloc(3 * P + 1, sizeof *mi);
      float *mw = calloc(3 * P + 1, sizeof *mw);
      int64_t idx[3] = {0, (int64_t)(in->n_samples / 2), (int64_t)in->n_samples - 1};
      vl_shard_batch b = {ids, tt, am, lab, nsp, mp, mi, mw};
      if (ids && tt && am && lab && nsp && mp && mi && mw) (void)vl_shard_set_gather(s, idx, 3, &b);
      free(ids), free(tt), free(am), free(lab), free(nsp), free(mp), free(mi), free(mw);
    }
    vl_shard_set_close(s);
  }
  close(fd);
  return 0;
}
