/* ext/telemetry/fake.c: the synthetic device of telemetry.h (vl_tm_fake_open), for tests of
 * the sampler and of everything above it on machines without a GPU. Its series are functions of
 * the read count alone, so a run's aggregates are the same on every machine and at every speed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ext/telemetry/telemetry.h"

typedef struct fake_dev {
  long k;        /* reads so far */
  double energy; /* J: the counter at the last read */
} fake_dev;

typedef struct fake {
  vl_tm_fake_config cfg;
  fake_dev *dev;
} fake;

static double power_at(const vl_tm_fake_config *c, int d, long k) {
  return c->base_w + 10.0 * d + c->step_w * (double)(k % c->period);
}

static vl_status fake_read(void *ud, int d, vl_tm_sample *out) {
  fake *f = ud;
  const vl_tm_fake_config *c = &f->cfg;
  fake_dev *fd = &f->dev[d];
  long k = fd->k++;
  double p = power_at(c, d, k);
  /* The counter grows by the trapezoid of the power between this read and the previous one: the
   * energy of power drawn as a straight line between the two, which the sampler's trapezoids
   * over these samples reproduce exactly. */
  if (k == 0) fd->energy = c->energy0_j;
  else fd->energy += 0.5 * (power_at(c, d, k - 1) + p) * c->dt;
  memset(out, 0, sizeof *out);
  out->t = (double)k * c->dt;
  out->v[VL_TM_POWER] = p;
  out->v[VL_TM_ENERGY] = fd->energy;
  out->v[VL_TM_TEMP] = 40.0 + p / 10.0;
  out->v[VL_TM_SM_CLOCK] = 1980.0 - (double)(k % c->period);
  out->v[VL_TM_MEM_CLOCK] = 2619.0;
  out->v[VL_TM_UTIL_GPU] = p / 5.0 < 100.0 ? p / 5.0 : 100.0;
  out->v[VL_TM_UTIL_MEM] = p / 10.0;
  out->v[VL_TM_MEM_USED] = (double)(1u << 30) + (double)k * (1 << 20);
  out->v[VL_TM_THROTTLE] = k % c->period == c->period - 1 ? 4.0 : 0.0;
  out->valid = (1u << VL_TM_NFIELDS) - 1;
  if (!c->energy_counter) out->valid &= ~(1u << VL_TM_ENERGY);
  return VL_OK;
}

static vl_status fake_info(void *ud, int d, vl_tm_device_info *out) {
  fake *f = ud;
  memset(out, 0, sizeof *out);
  out->index = d;
  snprintf(out->name, sizeof out->name, "v100lua fake GPU");
  snprintf(out->uuid, sizeof out->uuid, "GPU-fake-%04d", d);
  snprintf(out->pci_bus_id, sizeof out->pci_bus_id, "00000000:%02X:00.0", d + 1);
  out->power_limit_w = 700;
  out->app_sm_clock_mhz = 1980;
  out->app_mem_clock_mhz = 2619;
  out->mem_total_bytes = 144.0 * (1u << 30);
  out->power_source = "fake";
  out->energy_counter = f->cfg.energy_counter;
  return VL_OK;
}

static void fake_close(void *ud) {
  fake *f = ud;
  if (!f) return;
  free(f->dev);
  free(f);
}

vl_status vl_tm_fake_open(const vl_tm_fake_config *cfg, vl_tm_source *out) {
  if (!cfg || cfg->ndevices < 1 || cfg->ndevices > 64)
    return vl_fail(VL_EINVAL, "telemetry: the fake source takes 1 to 64 devices, got %d", cfg ? cfg->ndevices : 0);
  if (!(cfg->dt > 0)) return vl_fail(VL_EINVAL, "telemetry: the fake source's dt must be > 0, got %g", cfg->dt);
  if (cfg->period < 1) return vl_fail(VL_EINVAL, "telemetry: the fake source's period must be >= 1, got %d", cfg->period);
  fake *f = calloc(1, sizeof *f);
  if (f) f->dev = calloc((size_t)cfg->ndevices, sizeof *f->dev);
  if (!f || !f->dev) {
    fake_close(f);
    return vl_fail(VL_EOOM, "telemetry: out of host memory");
  }
  f->cfg = *cfg;
  memset(out, 0, sizeof *out);
  out->ud = f;
  out->ndevices = cfg->ndevices;
  out->name = "fake";
  out->info = fake_info;
  out->read = fake_read;
  out->close = fake_close;
  return VL_OK;
}
