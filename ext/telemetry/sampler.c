/* ext/telemetry/sampler.c: the sampler of telemetry.h: the aggregation of samples, and the
 * thread that takes them every interval. One mutex serialises the source's reads and the
 * aggregates, so a read from the main thread (vl_telemetry_sample before an epoch's figures) and
 * the thread's never interleave, and samples reach the aggregates in time order. */
#define _POSIX_C_SOURCE 200809L
#include "ext/telemetry/telemetry.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *const field_names[] = {"power_w", "energy_j", "temp_c", "sm_clock_mhz", "mem_clock_mhz",
                                          "util_gpu_pct", "util_mem_pct", "mem_used_bytes", "throttle_reasons"};
VL_TABLE_SIZE(field_names, VL_TM_NFIELDS);

const char *vl_tm_field_name(int f) { return f >= 0 && f < VL_TM_NFIELDS ? field_names[f] : NULL; }

void vl_tm_stats_reset(vl_tm_stats *st) { memset(st, 0, sizeof *st); }

void vl_tm_stats_add(vl_tm_stats *st, const vl_tm_sample *prev, const vl_tm_sample *cur) {
  if (st->samples == 0) st->t_first = cur->t;
  st->samples++;
  st->t_last = cur->t;
  for (int f = 0; f < VL_TM_NFIELDS; f++) {
    if (!(cur->valid >> f & 1)) continue;
    double v = cur->v[f];
    if (!(st->seen >> f & 1)) {
      st->min[f] = st->max[f] = v;
      st->seen |= 1u << f;
    } else {
      if (v < st->min[f]) st->min[f] = v;
      if (v > st->max[f]) st->max[f] = v;
    }
  }
  double th = cur->v[VL_TM_THROTTLE];
  if ((cur->valid >> VL_TM_THROTTLE & 1) && th >= 0 && th < 18446744073709551616.0) st->throttle_any |= (uint64_t)th;
  if (!prev) return;
  double dt = cur->t - prev->t;
  if (!(dt > 0)) return; /* a clock that did not move (or went back) gives no interval */
  uint32_t both = prev->valid & cur->valid;
  for (int f = 0; f < VL_TM_NFIELDS; f++) {
    if (!(both >> f & 1) || f == VL_TM_THROTTLE) continue;
    if (f == VL_TM_ENERGY) {
      double de = cur->v[f] - prev->v[f];
      if (de < 0) continue; /* the counter went back: the driver was reloaded */
      st->integral[f] += de;
    } else {
      st->integral[f] += 0.5 * (prev->v[f] + cur->v[f]) * dt;
    }
    st->covered[f] += dt;
  }
}

typedef struct tm_dev {
  int index;            /* the source's */
  bool have;            /* latest is set */
  vl_tm_sample latest;
  vl_tm_stats totals, window;
} tm_dev;

struct vl_telemetry {
  vl_tm_source src;
  tm_dev *dev;
  int ndev;
  pthread_mutex_t mu;
  pthread_cond_t cv;    /* on CLOCK_MONOTONIC: wakes the thread to stop */
  pthread_t thread;
  bool running, stop;
  double interval;
  uint64_t errors;
  char last_error[256];
};

vl_status vl_telemetry_new(vl_tm_source *src, const int *devs, int ndev, vl_telemetry **out) {
  vl_status s = VL_OK;
  if (!src || !src->read || !src->info) return vl_fail(VL_EINVAL, "telemetry: the source has no read or info function");
  int n = devs ? ndev : src->ndevices;
  vl_telemetry *tm = NULL;
  if (n <= 0) {
    s = vl_fail(VL_EINVAL, "telemetry: no device to sample (the %s source has %d)", src->name ? src->name : "?",
                src->ndevices);
    goto fail;
  }
  for (int i = 0; devs && i < n; i++) {
    if (devs[i] < 0 || devs[i] >= src->ndevices) {
      s = vl_fail(VL_EINVAL, "telemetry: device %d is not one of the %s source's %d (0..%d)", devs[i],
                  src->name ? src->name : "?", src->ndevices, src->ndevices - 1);
      goto fail;
    }
  }
  tm = calloc(1, sizeof *tm);
  if (tm) tm->dev = calloc((size_t)n, sizeof *tm->dev);
  if (!tm || !tm->dev) {
    s = vl_fail(VL_EOOM, "telemetry: out of host memory");
    goto fail;
  }
  pthread_condattr_t ca;
  int rc = pthread_condattr_init(&ca);
  if (!rc) rc = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  if (!rc) rc = pthread_cond_init(&tm->cv, &ca);
  pthread_condattr_destroy(&ca);
  if (!rc) {
    rc = pthread_mutex_init(&tm->mu, NULL);
    if (rc) pthread_cond_destroy(&tm->cv);
  }
  if (rc) {
    s = vl_fail(VL_EINTERNAL, "telemetry: cannot make the sampler's lock: %s", strerror(rc));
    goto fail;
  }
  tm->src = *src;
  tm->ndev = n;
  for (int i = 0; i < n; i++) tm->dev[i].index = devs ? devs[i] : i;
  *out = tm;
  return VL_OK;
fail:
  if (tm) free(tm->dev);
  free(tm);
  if (src->close) src->close(src->ud);
  return s;
}

/* With mu held. */
static vl_status sample_locked(vl_telemetry *tm) {
  int ok = 0;
  vl_status last = VL_OK;
  for (int i = 0; i < tm->ndev; i++) {
    tm_dev *d = &tm->dev[i];
    vl_tm_sample smp;
    memset(&smp, 0, sizeof smp);
    vl_status s = tm->src.read(tm->src.ud, d->index, &smp);
    if (s != VL_OK) {
      tm->errors++;
      snprintf(tm->last_error, sizeof tm->last_error, "%s", vl_errmsg());
      last = s;
      continue;
    }
    const vl_tm_sample *prev = d->have ? &d->latest : NULL;
    vl_tm_stats_add(&d->totals, prev, &smp);
    vl_tm_stats_add(&d->window, prev, &smp);
    d->latest = smp;
    d->have = true;
    ok++;
  }
  if (ok == 0 && tm->ndev > 0) return vl_fail(last, "%s", tm->last_error);
  return VL_OK;
}

vl_status vl_telemetry_sample(vl_telemetry *tm) {
  pthread_mutex_lock(&tm->mu);
  vl_status s = sample_locked(tm);
  pthread_mutex_unlock(&tm->mu);
  return s;
}

static void deadline_after(struct timespec *ts, double s) {
  clock_gettime(CLOCK_MONOTONIC, ts);
  double whole = floor(s);
  ts->tv_sec += (time_t)whole;
  ts->tv_nsec += (long)((s - whole) * 1e9);
  if (ts->tv_nsec >= 1000000000L) {
    ts->tv_sec++;
    ts->tv_nsec -= 1000000000L;
  }
}

/* Sampling instants are interval apart from the start (a slow read shortens the next sleep, it
 * does not shift every later sample). */
static void *thread_main(void *arg) {
  vl_telemetry *tm = arg;
  pthread_mutex_lock(&tm->mu);
  struct timespec next;
  clock_gettime(CLOCK_MONOTONIC, &next);
  while (!tm->stop) {
    double whole = floor(tm->interval);
    next.tv_sec += (time_t)whole;
    next.tv_nsec += (long)((tm->interval - whole) * 1e9);
    if (next.tv_nsec >= 1000000000L) {
      next.tv_sec++;
      next.tv_nsec -= 1000000000L;
    }
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (now.tv_sec > next.tv_sec || (now.tv_sec == next.tv_sec && now.tv_nsec > next.tv_nsec))
      deadline_after(&next, 0); /* fell behind (a stopped process): start again from now */
    while (!tm->stop) {
      int rc = pthread_cond_timedwait(&tm->cv, &tm->mu, &next);
      if (rc == ETIMEDOUT) break;
    }
    if (!tm->stop) (void)sample_locked(tm); /* failures are counted; the thread keeps going */
  }
  pthread_mutex_unlock(&tm->mu);
  return NULL;
}

vl_status vl_telemetry_start(vl_telemetry *tm, double interval_s) {
  if (!(interval_s >= 0.001) || interval_s > 86400)
    return vl_fail(VL_EINVAL, "telemetry: the interval must be between 0.001 and 86400 seconds, got %g", interval_s);
  if (tm->running) return vl_fail(VL_EINVAL, "telemetry: the sampler is already running");
  tm->interval = interval_s;
  tm->stop = false;
  int rc = pthread_create(&tm->thread, NULL, thread_main, tm);
  if (rc) return vl_fail(VL_EINTERNAL, "telemetry: cannot start the sampling thread: %s", strerror(rc));
  tm->running = true;
  return VL_OK;
}

void vl_telemetry_stop(vl_telemetry *tm) {
  if (!tm || !tm->running) return;
  pthread_mutex_lock(&tm->mu);
  tm->stop = true;
  pthread_cond_signal(&tm->cv);
  pthread_mutex_unlock(&tm->mu);
  pthread_join(tm->thread, NULL);
  tm->running = false;
}

bool vl_telemetry_running(const vl_telemetry *tm) { return tm->running; }
double vl_telemetry_interval(const vl_telemetry *tm) { return tm->running ? tm->interval : 0; }
int vl_telemetry_ndevices(const vl_telemetry *tm) { return tm->ndev; }
const char *vl_telemetry_source_name(const vl_telemetry *tm) { return tm->src.name ? tm->src.name : "?"; }

static vl_status check_index(const vl_telemetry *tm, int i) {
  if (i < 0 || i >= tm->ndev)
    return vl_fail(VL_EINVAL, "telemetry: device %d out of range (the sampler has %d, 0..%d)", i, tm->ndev, tm->ndev - 1);
  return VL_OK;
}

vl_status vl_telemetry_info(vl_telemetry *tm, int i, vl_tm_device_info *out) {
  VL_TRY(check_index(tm, i));
  vl_tm_device_info info;
  memset(&info, 0, sizeof info);
  pthread_mutex_lock(&tm->mu);
  vl_status s = tm->src.info(tm->src.ud, tm->dev[i].index, &info);
  pthread_mutex_unlock(&tm->mu);
  if (s == VL_OK) *out = info;
  return s;
}

vl_status vl_telemetry_latest(vl_telemetry *tm, int i, vl_tm_sample *out) {
  VL_TRY(check_index(tm, i));
  pthread_mutex_lock(&tm->mu);
  bool have = tm->dev[i].have;
  if (have) *out = tm->dev[i].latest;
  pthread_mutex_unlock(&tm->mu);
  if (!have) return vl_fail(VL_EINVAL, "telemetry: device %d has no sample yet", i);
  return VL_OK;
}

vl_status vl_telemetry_totals(vl_telemetry *tm, int i, vl_tm_stats *out) {
  VL_TRY(check_index(tm, i));
  pthread_mutex_lock(&tm->mu);
  *out = tm->dev[i].totals;
  pthread_mutex_unlock(&tm->mu);
  return VL_OK;
}

vl_status vl_telemetry_window(vl_telemetry *tm, int i, bool reset, vl_tm_stats *out) {
  VL_TRY(check_index(tm, i));
  pthread_mutex_lock(&tm->mu);
  tm_dev *d = &tm->dev[i];
  if (out) *out = d->window;
  if (reset) {
    vl_tm_stats_reset(&d->window);
    if (d->have) vl_tm_stats_add(&d->window, NULL, &d->latest);
  }
  pthread_mutex_unlock(&tm->mu);
  return VL_OK;
}

uint64_t vl_telemetry_errors(vl_telemetry *tm, char *msg, int msg_len) {
  pthread_mutex_lock(&tm->mu);
  uint64_t n = tm->errors;
  if (msg && msg_len > 0) snprintf(msg, (size_t)msg_len, "%s", tm->last_error);
  pthread_mutex_unlock(&tm->mu);
  return n;
}

void vl_telemetry_free(vl_telemetry *tm) {
  if (!tm) return;
  vl_telemetry_stop(tm);
  if (tm->src.close) tm->src.close(tm->src.ud);
  pthread_cond_destroy(&tm->cv);
  pthread_mutex_destroy(&tm->mu);
  free(tm->dev);
  free(tm);
}
