/* ext/data/loader.c: the worker pool and batch ring of v100.data.ImageLoader (see loader.h).
 *
 * One mutex guards the shared state; workers copy what a sample needs under it and decode with it
 * released. The batch that a worker writes into belongs to the generation (`gen`) of its epoch:
 * starting a new epoch bumps gen, removes the queued work and waits for the samples in flight, so
 * no worker touches a buffer or the order of an abandoned epoch afterwards. */
#define _POSIX_C_SOURCE 200809L
#include "ext/data/loader.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "runtime/core/cuda.h"
#include "ext/data/image.h"
#include "ext/data/nvjpeg.h"
#include "runtime/core/context.h"

enum { SLOT_IDLE, SLOT_FILLING, SLOT_FULL, SLOT_OUT };

typedef struct slot {
  vl_tensor *x, *y;
  int64_t batch;
  int len, taken, done, state;
  /* vl_loader_next_to: `ev` (of cuda:ev_dev) was recorded after the async copy out of this
   * buffer; while copy_pending, no worker writes into it (one of them polls the event). */
  void *ev;
  int ev_dev;
  bool copy_pending, copy_waiting;
  /* decoder 'nvjpeg': per sample, the file's bytes (bytes[j], bcap[j] bytes) and its box. */
  vl_nvjpeg_item *items;
  uint8_t **bytes;
  size_t *bcap;
} slot;

typedef struct worker {
  struct vl_loader *l;
  pthread_t thread;
  bool started;
  vl_jpeg_decoder *dec;
  uint8_t *file, *pixels;
  size_t file_cap, pixels_cap;
} worker;

struct vl_loader {
  vl_folder *f;
  vl_loader_opts o;
  size_t sample_bytes;
  int nworkers;
  worker *w;
  slot *slots;
  pthread_mutex_t mu;
  pthread_cond_t work_cv, done_cv;
  bool stop;
  uint64_t gen;
  int64_t *order, norder;
  uint32_t epoch;
  int64_t nbatches, next_out, fill_next, assigned_upto, out_batch;
  int inflight;
  uint8_t *bad;              /* per dataset index: found unreadable */
  int64_t skipped;
  char **skip_msgs;
  vl_status err;
  char errmsg[1024];
  /* decoder 'nvjpeg', owning thread: the GPU decoder, the CPU fallback's decoder and buffers. */
  vl_nvjpeg *nj;
  int nj_dev;
  worker mw;
  bool *cpu;
  int64_t fallbacks;
};

/* ---- one sample ---- */

/* Decodes and transforms dataset sample idx into out (one sample's rows of the batch); with nv
 * (decoder 'nvjpeg'), only reads the file into *nvbuf and fills *nv (size, box, flip). */
static vl_status process(vl_loader *l, worker *w, int64_t idx, void *out, vl_nvjpeg_item *nv, uint8_t **nvbuf,
                         size_t *nvcap) {
  const vl_tf_opts *t = &l->o.tf;
  const char *path = l->f->paths[idx];
  size_t len = 0;
  uint8_t **buf = nv ? nvbuf : &w->file;
  VL_TRY(vl_read_file("decode_jpeg", path, buf, nv ? nvcap : &w->file_cap, &len));
  int W, H, stored;
  VL_TRY(vl_jpeg_header(w->dec, *buf, len, path, &W, &H, &stored));
  vl_box box = {0, 0, H, W};
  bool flip = false;
  int num = 1, denom = 1;
  if (t->kind == VL_TF_NONE) {
    if (W != t->size || H != t->size)
      return vl_fail(VL_EIO, "decode_jpeg: %s: the image is %dx%d but transform 'none' needs %dx%d (size)", path, H,
                     W, t->size, t->size);
  } else {
    if (t->kind == VL_TF_TRAIN) {
      vl_rrc_box(t->seed, l->epoch, (uint64_t)idx, H, W, t->scale, t->ratio, &box);
      flip = vl_flip_draw(t->seed, l->epoch, (uint64_t)idx, t->flip_p);
    } else {
      vl_center_crop_box(H, W, t->resize, t->size, &box);
    }
    /* Conservative (floor): the scaled box then has at least size pixels per side. */
    int bw = (int)box.w, bh = (int)box.h;
    vl_jpeg_pick_scale(bw > 0 ? bw : 1, bh > 0 ? bh : 1, t->size, t->size, &num, &denom);
  }
  if (nv) {
    /* nvJPEG decodes at full size: the box stays in full-size coordinates. */
    *nv = (vl_nvjpeg_item){.data = *buf, .len = len, .h = H, .w = W, .box = box, .flip = flip};
    return VL_OK;
  }
  int sw, sh;
  VL_TRY(vl_jpeg_decode(w->dec, w->file, len, path, t->channels, num, denom, &w->pixels, &w->pixels_cap, &sw, &sh));
  double fy = (double)sh / H, fx = (double)sw / W;
  vl_box sb = {box.y * fy, box.x * fx, box.h * fy, box.w * fx};
  return vl_resample(w->pixels, sh, sw, t->channels, &sb, t->size, t->size, flip, t->mean, t->std, t->dtype, t->nhwc,
                     out);
}

/* Remembers idx as unreadable with the current thread's message (its "decode_jpeg: " prefix dropped). */
static void mark_bad(vl_loader *l, int64_t idx) {
  const char *m = vl_errmsg();
  if (strncmp(m, "decode_jpeg: ", 13) == 0) m += 13;
  const char *path = l->f->paths[idx];
  size_t pl = strlen(path);
  char *msg = NULL;
  if (strncmp(m, path, pl) == 0 && strncmp(m + pl, ": ", 2) == 0) msg = strdup(m);
  else if ((msg = malloc(pl + strlen(m) + 3)) != NULL) sprintf(msg, "%s: %s", path, m);
  pthread_mutex_lock(&l->mu);
  if (!l->bad[idx]) {
    l->bad[idx] = 1;
    char **v = realloc(l->skip_msgs, sizeof(char *) * (size_t)(l->skipped + 1));
    if (v) {
      l->skip_msgs = v;
      v[l->skipped++] = msg;
      msg = NULL;
    }
  }
  pthread_mutex_unlock(&l->mu);
  free(msg);
}

static bool is_bad(vl_loader *l, int64_t idx) {
  pthread_mutex_lock(&l->mu);
  bool b = l->bad[idx];
  pthread_mutex_unlock(&l->mu);
  return b;
}

/* Shard position pos (0-based), or the next readable one after it. */
static vl_status do_sample(vl_loader *l, worker *w, int64_t pos, void *xout, int64_t *yout, vl_nvjpeg_item *nv,
                           uint8_t **nvbuf, size_t *nvcap) {
  for (int64_t a = 0; a < l->norder; a++) {
    int64_t idx = l->order[(pos + a) % l->norder];
    if (is_bad(l, idx)) continue;
    vl_status s = process(l, w, idx, xout, nv, nvbuf, nvcap);
    if (s == VL_OK) {
      *yout = l->f->labels[idx];
      return VL_OK;
    }
    if (s == VL_EOOM || s == VL_EINTERNAL) return s;
    mark_bad(l, idx);
  }
  return vl_fail(VL_EIO, "ImageLoader: no readable image in this shard of %lld samples (%s ...)",
                 (long long)l->norder, l->f->root);
}

/* With l->mu held: returns once the copy out of slot s (vl_loader_next_to) has completed. One
 * worker polls the event (a blocking cudaEventSynchronize would spin a core with the default
 * scheduling), the others of the slot wait on work_cv. */
static vl_status wait_copy(vl_loader *l, slot *s) {
  while (s->copy_pending) {
    if (s->copy_waiting) {
      pthread_cond_wait(&l->work_cv, &l->mu);
      continue;
    }
    s->copy_waiting = true;
    void *ev = s->ev;
    int dev = s->ev_dev;
    pthread_mutex_unlock(&l->mu);
    bool done = false;
    vl_status st;
    struct timespec pause = {0, 50 * 1000};
    while ((st = vl_event_query(dev, ev, &done)) == VL_OK && !done) nanosleep(&pause, NULL);
    pthread_mutex_lock(&l->mu);
    s->copy_waiting = false;
    s->copy_pending = false;
    pthread_cond_broadcast(&l->work_cv);
    if (st != VL_OK) return vl_fail_prefix(st, "ImageLoader: waiting for the copy of a batch to the device: ");
  }
  return VL_OK;
}

static void *worker_main(void *arg) {
  worker *w = arg;
  vl_loader *l = w->l;
  pthread_mutex_lock(&l->mu);
  for (;;) {
    while (!l->stop && !(l->err == VL_OK && l->fill_next < l->assigned_upto)) pthread_cond_wait(&l->work_cv, &l->mu);
    if (l->stop) break;
    int64_t b = l->fill_next;
    slot *s = &l->slots[b % l->o.prefetch];
    int j = s->taken++;
    if (s->taken == s->len) l->fill_next++;
    uint64_t gen = l->gen;
    char *xout = (char *)vl_tensor_data(s->x) + (size_t)j * l->sample_bytes;
    int64_t *yout = (int64_t *)vl_tensor_data(s->y) + j;
    int64_t pos = b * l->o.batch_size + j;
    l->inflight++;
    vl_status st = wait_copy(l, s);
    pthread_mutex_unlock(&l->mu);
    if (st == VL_OK) {
      if (l->o.decoder == VL_DECODER_NVJPEG) st = do_sample(l, w, pos, NULL, yout, &s->items[j], &s->bytes[j], &s->bcap[j]);
      else st = do_sample(l, w, pos, xout, yout, NULL, NULL, NULL);
    }
    pthread_mutex_lock(&l->mu);
    l->inflight--;
    if (gen == l->gen) {
      if (st != VL_OK && l->err == VL_OK) {
        l->err = st;
        snprintf(l->errmsg, sizeof l->errmsg, "%s", vl_errmsg());
        pthread_cond_broadcast(&l->done_cv);
      }
      if (++s->done == s->len) {
        s->state = SLOT_FULL;
        pthread_cond_broadcast(&l->done_cv);
      }
    }
    if (l->inflight == 0) pthread_cond_broadcast(&l->done_cv);
  }
  pthread_mutex_unlock(&l->mu);
  return NULL;
}

/* ---- the ring (owning thread) ---- */

static vl_status alloc_slot(vl_loader *l, slot *s) {
  const vl_tf_opts *t = &l->o.tf;
  int64_t B = l->o.batch_size, S = t->size, C = t->channels;
  int64_t xs[4] = {B, C, S, S}, xh[4] = {B, S, S, C}, ys[1] = {B};
  vl_tensor *x = NULL, *y = NULL;
  vl_status st;
  if (l->o.pinned) {
    st = vl_tensor_empty_pinned(4, t->nhwc ? xh : xs, t->dtype, &x);
    if (st == VL_OK) st = vl_tensor_empty_pinned(1, ys, VL_I64, &y);
  } else {
    st = vl_tensor_empty(4, t->nhwc ? xh : xs, t->dtype, vl_cpu_device(), &x);
    if (st == VL_OK) st = vl_tensor_empty(1, ys, VL_I64, vl_cpu_device(), &y);
  }
  if (st != VL_OK) {
    vl_tensor_release(x);
    return vl_fail_prefix(st, "ImageLoader: batch buffer: ");
  }
  s->x = x;
  s->y = y;
  if (l->o.decoder == VL_DECODER_NVJPEG && !s->items) {
    s->items = calloc((size_t)B, sizeof *s->items);
    s->bytes = calloc((size_t)B, sizeof *s->bytes);
    s->bcap = calloc((size_t)B, sizeof *s->bcap);
    if (!s->items || !s->bytes || !s->bcap) return vl_fail(VL_EOOM, "ImageLoader: out of host memory for a batch of %lld", (long long)B);
  }
  return VL_OK;
}

static bool held_elsewhere(const vl_tensor *t) { return t && (t->refcount > 1 || t->storage->refcount > 1); }

/* Gives slot i batch b (b == assigned_upto); a buffer the caller still holds is left to it. */
static vl_status assign(vl_loader *l, int i, int64_t b) {
  slot *s = &l->slots[i];
  if (held_elsewhere(s->x) || held_elsewhere(s->y)) {
    vl_tensor_release(s->x);
    vl_tensor_release(s->y);
    s->x = s->y = NULL;
  }
  if (!s->x) VL_TRY(alloc_slot(l, s));
  int64_t left = l->norder - b * l->o.batch_size;
  pthread_mutex_lock(&l->mu);
  s->batch = b;
  s->len = (int)(left < l->o.batch_size ? left : l->o.batch_size);
  s->taken = s->done = 0;
  s->state = SLOT_FILLING;
  l->assigned_upto = b + 1;
  pthread_cond_broadcast(&l->work_cv);
  pthread_mutex_unlock(&l->mu);
  return VL_OK;
}

static void cancel(vl_loader *l) {
  pthread_mutex_lock(&l->mu);
  l->gen++;
  l->fill_next = l->assigned_upto = 0;
  while (l->inflight > 0) pthread_cond_wait(&l->done_cv, &l->mu);
  for (int i = 0; i < l->o.prefetch; i++) l->slots[i].state = SLOT_IDLE;
  l->err = VL_OK;
  pthread_mutex_unlock(&l->mu);
  l->nbatches = l->next_out = 0;
  l->out_batch = -1;
}

static vl_status check_opts(const vl_loader_opts *o) {
  const vl_tf_opts *t = &o->tf;
  if (o->batch_size < 1) return vl_fail(VL_EINVAL, "ImageLoader: batch_size must be >= 1, got %d", o->batch_size);
  if (o->workers < 0 || o->workers > VL_LOADER_MAX_WORKERS)
    return vl_fail(VL_EINVAL, "ImageLoader: workers must be in 1..%d, got %d", VL_LOADER_MAX_WORKERS, o->workers);
  if (o->prefetch < 1) return vl_fail(VL_EINVAL, "ImageLoader: prefetch must be >= 1, got %d", o->prefetch);
  if (t->kind != VL_TF_NONE && t->kind != VL_TF_TRAIN && t->kind != VL_TF_VAL)
    return vl_fail(VL_EINVAL, "ImageLoader: unknown transform %d", (int)t->kind);
  if (t->size < 1 || t->size > 16384) return vl_fail(VL_EINVAL, "ImageLoader: size must be in 1..16384, got %d", t->size);
  if (t->kind == VL_TF_VAL && (t->resize < t->size || t->resize > 65535))
    return vl_fail(VL_EINVAL, "ImageLoader: resize (%d) must be at least size (%d) for transform 'val'", t->resize,
                   t->size);
  if (t->channels != 1 && t->channels != 3)
    return vl_fail(VL_EINVAL, "ImageLoader: channels must be 1 or 3, got %d", t->channels);
  if (o->decoder != VL_DECODER_CPU && o->decoder != VL_DECODER_NVJPEG)
    return vl_fail(VL_EINVAL, "ImageLoader: unknown decoder %d", o->decoder);
  if (o->decoder == VL_DECODER_NVJPEG && !vl_have_nvjpeg())
    return vl_fail(VL_EUNSUPPORTED, "ImageLoader: decoder 'nvjpeg': v100lua was built without nvJPEG");
  if (o->decoder == VL_DECODER_NVJPEG && !o->pinned)
    return vl_fail(VL_EINVAL, "ImageLoader: decoder 'nvjpeg' needs a CUDA device (pinned batch buffers)");
  if (t->dtype != VL_F32 && t->dtype != VL_F16 && t->dtype != VL_BF16)
    return vl_fail(VL_EINVAL, "ImageLoader: dtype must be f32, f16 or bf16, got %s", vl_dtype_name(t->dtype));
  for (int c = 0; c < t->channels; c++)
    if (!(t->std[c] > 0)) return vl_fail(VL_EINVAL, "ImageLoader: std[%d] must be > 0, got %g", c + 1, t->std[c]);
  if (t->kind == VL_TF_TRAIN &&
      !(t->scale[0] > 0 && t->scale[0] <= t->scale[1] && t->ratio[0] > 0 && t->ratio[0] <= t->ratio[1]))
    return vl_fail(VL_EINVAL, "ImageLoader: scale (%g, %g) and ratio (%g, %g) must be positive, low <= high",
                   t->scale[0], t->scale[1], t->ratio[0], t->ratio[1]);
  return VL_OK;
}

vl_status vl_loader_create(vl_folder *f, const vl_loader_opts *o, vl_loader **out) {
  VL_TRY(check_opts(o));
  vl_loader *l = calloc(1, sizeof *l);
  if (!l) return vl_fail(VL_EOOM, "ImageLoader: out of host memory");
  l->o = *o;
  if (l->o.workers == 0) {
    /* The cores shared among the ranks of this node (one loader per rank), at most 16 each. */
    int n = vl_cores_per_rank();
    l->o.workers = n > 16 ? 16 : n;
  }
  l->sample_bytes = (size_t)o->tf.channels * o->tf.size * o->tf.size * vl_dtype_size(o->tf.dtype);
  l->out_batch = -1;
  l->slots = calloc((size_t)o->prefetch, sizeof(slot));
  l->w = calloc((size_t)l->o.workers, sizeof(worker));
  l->bad = calloc((size_t)(f->n > 0 ? f->n : 1), 1);
  vl_status s = VL_OK;
  if (!l->slots || !l->w || !l->bad) s = vl_fail(VL_EOOM, "ImageLoader: out of host memory");
  pthread_mutex_init(&l->mu, NULL);
  pthread_cond_init(&l->work_cv, NULL);
  pthread_cond_init(&l->done_cv, NULL);
  l->f = vl_folder_retain(f);
  for (int i = 0; s == VL_OK && i < o->prefetch; i++) s = alloc_slot(l, &l->slots[i]);
  for (int i = 0; s == VL_OK && i < l->o.workers; i++) {
    worker *w = &l->w[i];
    w->l = l;
    s = vl_jpeg_decoder_new(&w->dec);
    if (s == VL_OK) {
      if (pthread_create(&w->thread, NULL, worker_main, w) != 0)
        s = vl_fail(VL_EINTERNAL, "ImageLoader: could not start worker thread %d of %d", i + 1, l->o.workers);
      else w->started = true;
    }
  }
  l->nworkers = l->o.workers;
  if (s != VL_OK) {
    vl_loader_close(l);
    return s;
  }
  *out = l;
  return VL_OK;
}

int vl_loader_workers(const vl_loader *l) { return l->nworkers; }

int64_t vl_loader_batches(const vl_loader *l, int64_t n) {
  int64_t B = l->o.batch_size;
  return l->o.drop_last ? n / B : (n + B - 1) / B;
}

vl_status vl_loader_epoch(vl_loader *l, const int64_t *order, int64_t n, uint32_t epoch, int64_t start) {
  for (int64_t i = 0; i < n; i++)
    if (order[i] < 0 || order[i] >= l->f->n)
      return vl_fail(VL_EINVAL, "ImageLoader: epoch order holds index %lld at %lld, outside 0..%lld", (long long)order[i],
                     (long long)i + 1, (long long)l->f->n - 1);
  int64_t nb = vl_loader_batches(l, n);
  if (start < 0 || start > nb)
    return vl_fail(VL_EINVAL, "ImageLoader: start batch %lld is outside 0..%lld", (long long)start, (long long)nb);
  int64_t *copy = malloc(sizeof(int64_t) * (size_t)(n > 0 ? n : 1));
  if (!copy) return vl_fail(VL_EOOM, "ImageLoader: out of host memory for an order of %lld", (long long)n);
  memcpy(copy, order, sizeof(int64_t) * (size_t)n);
  cancel(l);
  free(l->order);
  l->order = copy;
  l->norder = n;
  l->epoch = epoch;
  l->nbatches = nb;
  l->next_out = start;
  pthread_mutex_lock(&l->mu);
  l->fill_next = l->assigned_upto = start;
  pthread_mutex_unlock(&l->mu);
  for (int64_t b = start; b < nb && b < start + l->o.prefetch; b++) VL_TRY(assign(l, (int)(b % l->o.prefetch), b));
  return VL_OK;
}

/* Gives back the slot handed out last (refilled with batch out + prefetch), then waits for the
 * next batch: *sp = its slot, or NULL after the last one. */
static vl_status take(vl_loader *l, slot **sp) {
  *sp = NULL;
  if (l->out_batch >= 0) {
    int64_t b = l->out_batch + l->o.prefetch;
    int i = (int)(l->out_batch % l->o.prefetch);
    l->out_batch = -1;
    if (b < l->nbatches) VL_TRY(assign(l, i, b));
    else l->slots[i].state = SLOT_IDLE;
  }
  if (l->next_out >= l->nbatches) return VL_OK;
  slot *s = &l->slots[l->next_out % l->o.prefetch];
  pthread_mutex_lock(&l->mu);
  while (s->state != SLOT_FULL && l->err == VL_OK) pthread_cond_wait(&l->done_cv, &l->mu);
  if (l->err != VL_OK) {
    vl_status e = l->err;
    char msg[sizeof l->errmsg];
    memcpy(msg, l->errmsg, sizeof msg);
    pthread_mutex_unlock(&l->mu);
    return vl_fail(e, "%s", msg);
  }
  s->state = SLOT_OUT;
  pthread_mutex_unlock(&l->mu);
  *sp = s;
  return VL_OK;
}

vl_status vl_loader_next(vl_loader *l, vl_tensor **x, vl_tensor **y) {
  if (l->o.decoder == VL_DECODER_NVJPEG)
    return vl_fail(VL_EINVAL, "ImageLoader: decoder 'nvjpeg' hands batches out on the GPU only (next_to)");
  slot *s;
  VL_TRY(take(l, &s));
  if (!s) {
    *x = *y = NULL;
    return VL_OK;
  }
  int len = s->len;
  vl_tensor *xo = NULL, *yo = NULL;
  if (len == l->o.batch_size) {
    xo = vl_tensor_retain(s->x);
    yo = vl_tensor_retain(s->y);
  } else {
    VL_TRY(vl_narrow(s->x, 0, 0, len, &xo));
    vl_status st = vl_narrow(s->y, 0, 0, len, &yo);
    if (st != VL_OK) {
      vl_tensor_release(xo);
      return st;
    }
  }
  l->out_batch = l->next_out++;
  *x = xo;
  *y = yo;
  return VL_OK;
}

/* decoder 'nvjpeg': the slot's images decoded and cropped into xo on the current stream; the
 * ones nvJPEG does not take go through the CPU path here (into the slot's pinned rows, then
 * copied over their rows of xo, after the kernel in stream order). */
static vl_status gpu_decode(vl_loader *l, slot *s, vl_device dev, vl_tensor *xo) {
  const int B = l->o.batch_size;
  if (l->nj && l->nj_dev != dev.index) {
    vl_nvjpeg_destroy(l->nj);
    l->nj = NULL;
  }
  if (!l->nj) {
    VL_TRY(vl_nvjpeg_create(dev.index, B, l->o.tf.channels, &l->nj));
    l->nj_dev = dev.index;
  }
  if (!l->cpu && !(l->cpu = calloc((size_t)B, sizeof *l->cpu)))
    return vl_fail(VL_EOOM, "ImageLoader: out of host memory");
  VL_TRY(vl_nvjpeg_decode(l->nj, s->len, s->items, &l->o.tf, vl_tensor_data(xo), NULL, l->cpu));
  for (int j = 0; j < s->len; j++) {
    if (!l->cpu[j]) continue;
    if (!l->mw.dec) VL_TRY(vl_jpeg_decoder_new(&l->mw.dec));
    char *row = (char *)vl_tensor_data(s->x) + (size_t)j * l->sample_bytes;
    int64_t *lab = (int64_t *)vl_tensor_data(s->y) + j;
    VL_TRY(do_sample(l, &l->mw, s->batch * B + j, row, lab, NULL, NULL, NULL));
    VL_TRY(vl_memcpy((char *)vl_tensor_data(xo) + (size_t)j * l->sample_bytes, dev, row, vl_cpu_device(),
                     l->sample_bytes, NULL, false));
    l->fallbacks++;
  }
  return VL_OK;
}

int64_t vl_loader_cpu_fallbacks(const vl_loader *l) { return l->fallbacks; }

const char *vl_loader_nvjpeg_backend(const vl_loader *l) { return l->nj ? vl_nvjpeg_backend(l->nj) : "none"; }

/* The slot's event on cuda:dev (created on first use, remade for another device). */
static vl_status slot_event(slot *s, int dev) {
  if (s->ev && s->ev_dev == dev) return VL_OK;
  if (s->ev) {
    /* Only reached between copies of different devices: the old copy must be over first. */
    VL_TRY(vl_event_synchronize(s->ev_dev, s->ev));
    VL_TRY(vl_event_destroy(s->ev_dev, s->ev));
    s->ev = NULL;
  }
  VL_TRY(vl_event_create(dev, false, &s->ev));
  s->ev_dev = dev;
  return VL_OK;
}

vl_status vl_loader_next_to(vl_loader *l, vl_device dev, vl_tensor **x, vl_tensor **y) {
  if (dev.type == VL_CUDA && !l->o.pinned)
    return vl_fail(VL_EINVAL, "ImageLoader: next_to(cuda:%d) needs a loader with pinned buffers", dev.index);
  if (dev.type != VL_CUDA && l->o.decoder == VL_DECODER_NVJPEG)
    return vl_fail(VL_EINVAL, "ImageLoader: decoder 'nvjpeg' hands batches out on the GPU only, not on %s",
                   dev.type == VL_CPU ? "cpu" : "this device");
  slot *s;
  VL_TRY(take(l, &s));
  if (!s) {
    *x = *y = NULL;
    return VL_OK;
  }
  /* The batch is handed out now; the buffer stays in the ring (out_batch) until the next call,
   * as for vl_loader_next, so an error below leaves the loader consistent. */
  l->out_batch = l->next_out++;
  int len = s->len;
  int64_t xs[4];
  for (int d = 0; d < 4; d++) xs[d] = s->x->size[d];
  xs[0] = len;
  int64_t ys[1] = {len};
  vl_tensor *xo = NULL, *yo = NULL;
  vl_status st = vl_tensor_empty(4, xs, s->x->dtype, dev, &xo);
  if (st == VL_OK) st = vl_tensor_empty(1, ys, VL_I64, dev, &yo);
  /* The first len rows of a batch buffer are contiguous (row = sample, NCHW or NHWC alike). */
  size_t xb = (size_t)len * l->sample_bytes, yb = (size_t)len * sizeof(int64_t);
  if (dev.type != VL_CUDA) {
    if (st == VL_OK) {
      memcpy(vl_tensor_data(xo), vl_tensor_data(s->x), xb);
      memcpy(vl_tensor_data(yo), vl_tensor_data(s->y), yb);
    }
  } else {
    /* Asynchronous on the current stream: whatever uses the batch is queued behind the copy. */
    if (st == VL_OK) st = slot_event(s, dev.index);
    if (st == VL_OK && l->o.decoder == VL_DECODER_NVJPEG) st = gpu_decode(l, s, dev, xo);
    else if (st == VL_OK) st = vl_memcpy(vl_tensor_data(xo), dev, vl_tensor_data(s->x), vl_cpu_device(), xb, NULL, false);
    if (st == VL_OK) st = vl_memcpy(vl_tensor_data(yo), dev, vl_tensor_data(s->y), vl_cpu_device(), yb, NULL, false);
    if (st == VL_OK) st = vl_event_record(dev.index, s->ev, NULL);
    if (st == VL_OK) {
      pthread_mutex_lock(&l->mu);
      s->copy_pending = true;
      pthread_mutex_unlock(&l->mu);
    } else if (s->ev) {
      /* A copy may be queued without its event: wait for the stream before the buffer is reused. */
      vl_status keep = st;
      void *stream = NULL;
      if (vl_cuda_current_stream(dev.index, &stream) == VL_OK) (void)vl_stream_synchronize(dev.index, stream);
      st = keep;
    }
  }
  if (st != VL_OK) {
    vl_tensor_release(xo);
    vl_tensor_release(yo);
    return vl_fail_prefix(st, "ImageLoader: next_to: ");
  }
  /* The slot can be refilled at once: its workers wait for the event first. */
  int64_t b = l->out_batch + l->o.prefetch;
  int i = (int)(l->out_batch % l->o.prefetch);
  l->out_batch = -1;
  if (b < l->nbatches) st = assign(l, i, b);
  else l->slots[i].state = SLOT_IDLE;
  if (st != VL_OK) {
    vl_tensor_release(xo);
    vl_tensor_release(yo);
    return st;
  }
  *x = xo;
  *y = yo;
  return VL_OK;
}

int64_t vl_loader_skipped(vl_loader *l) {
  pthread_mutex_lock(&l->mu);
  int64_t n = l->skipped;
  pthread_mutex_unlock(&l->mu);
  return n;
}

bool vl_loader_skip_message(vl_loader *l, int64_t i, char *buf, size_t n) {
  pthread_mutex_lock(&l->mu);
  bool ok = i >= 0 && i < l->skipped;
  if (ok) snprintf(buf, n, "%s", l->skip_msgs[i] ? l->skip_msgs[i] : "(out of memory for the message)");
  pthread_mutex_unlock(&l->mu);
  return ok;
}

void vl_loader_close(vl_loader *l) {
  if (!l) return;
  pthread_mutex_lock(&l->mu);
  l->stop = true;
  pthread_cond_broadcast(&l->work_cv);
  pthread_mutex_unlock(&l->mu);
  for (int i = 0; l->w && i < l->o.workers; i++) {
    worker *w = &l->w[i];
    if (w->started) pthread_join(w->thread, NULL);
    vl_jpeg_decoder_free(w->dec);
    free(w->file);
    free(w->pixels);
  }
  vl_nvjpeg_destroy(l->nj);
  vl_jpeg_decoder_free(l->mw.dec);
  free(l->mw.file);
  free(l->mw.pixels);
  free(l->cpu);
  for (int i = 0; l->slots && i < l->o.prefetch; i++) {
    slot *s = &l->slots[i];
    /* A copy still reading the pinned buffer must end before the pool may hand it out again. */
    if (s->ev) {
      if (s->copy_pending) (void)vl_event_synchronize(s->ev_dev, s->ev);
      (void)vl_event_destroy(s->ev_dev, s->ev);
    }
    vl_tensor_release(l->slots[i].x);
    vl_tensor_release(l->slots[i].y);
    for (int j = 0; s->bytes && j < l->o.batch_size; j++) free(s->bytes[j]);
    free(s->items);
    free(s->bytes);
    free(s->bcap);
  }
  for (int64_t i = 0; i < l->skipped; i++) free(l->skip_msgs[i]);
  free(l->skip_msgs);
  pthread_mutex_destroy(&l->mu);
  pthread_cond_destroy(&l->work_cv);
  pthread_cond_destroy(&l->done_cv);
  vl_folder_release(l->f);
  free(l->order);
  free(l->bad);
  free(l->slots);
  free(l->w);
  free(l);
}
