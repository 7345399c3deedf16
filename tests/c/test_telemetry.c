/* tests/c/test_telemetry.c: the telemetry sampler without a GPU: a scripted source (a table of
 * samples, fields missing here and there) checks the aggregation step by step; the synthetic
 * device checks energy from the counter against power x time, windows, the thread and the
 * errors; NVML is opened to check that it is either there or unavailable with a reason; the
 * HTTP endpoint is scraped over a loopback socket; NVTX scopes stay balanced. */
#define _POSIX_C_SOURCE 200809L
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ext/telemetry/http.h"
#include "ext/telemetry/telemetry.h"
#include "runtime/trace/nvtx.h"
#include "vl_test.h"

#define ALL ((1u << VL_TM_NFIELDS) - 1)
#define BIT(f) (1u << (f))

/* ---- a scripted source: device d returns rows[k] on its k-th read ---- */

typedef struct script {
  const vl_tm_sample *rows;
  int nrows, k, fail_at, closed;
} script;

static vl_status script_read(void *ud, int d, vl_tm_sample *out) {
  script *s = ud;
  if (s->k == s->fail_at) {
    s->k++;
    return vl_fail(VL_EIO, "scripted read %d fails", s->k - 1);
  }
  if (s->k >= s->nrows) return vl_fail(VL_EIO, "script exhausted");
  *out = s->rows[s->k++];
  return VL_OK;
}

static vl_status script_info(void *ud, int d, vl_tm_device_info *out) {
  memset(out, 0, sizeof *out);
  out->index = d;
  snprintf(out->name, sizeof out->name, "scripted");
  return VL_OK;
}

static void script_close(void *ud) { ((script *)ud)->closed++; }

static vl_tm_source script_source(script *s) {
  vl_tm_source src = {.ud = s, .ndevices = 1, .name = "script", .info = script_info, .read = script_read,
                      .close = script_close};
  return src;
}

static vl_tm_sample row(double t, double p, double e, uint32_t valid) {
  vl_tm_sample r;
  memset(&r, 0, sizeof r);
  r.t = t;
  r.valid = valid;
  r.v[VL_TM_POWER] = p;
  r.v[VL_TM_ENERGY] = e;
  r.v[VL_TM_TEMP] = 50 + t;
  r.v[VL_TM_SM_CLOCK] = 1000 + 100 * t;
  r.v[VL_TM_THROTTLE] = t == 2 ? 4 : t == 3 ? 64 : 0;
  return r;
}

static bool near(double a, double b, double tol) { return fabs(a - b) <= tol * (1 + fabs(b)); }

static void test_scripted_aggregation(void) {
  /* t 0..5; power 100, 200, 200, 100, (missing), 300; the counter in J with a reload at t=5. */
  vl_tm_sample rows[] = {
      row(0, 100, 1000, ALL),
      row(1, 200, 1150, ALL),
      row(2, 200, 1350, ALL),
      row(3, 100, 1500, ALL),
      row(4, 0, 1600, ALL & ~BIT(VL_TM_POWER)),
      row(5, 300, 10, ALL), /* the counter went back: a driver reload */
      row(5, 300, 20, ALL), /* no time passed: no interval */
  };
  script sc = {.rows = rows, .nrows = 7, .fail_at = -1};
  vl_tm_source src = script_source(&sc);
  vl_telemetry *tm = NULL;
  CHECK_OK(vl_telemetry_new(&src, NULL, 0, &tm));
  if (!tm) return;
  CHECK(vl_telemetry_ndevices(tm) == 1);
  vl_tm_sample latest;
  CHECK_ERR(vl_telemetry_latest(tm, 0, &latest), VL_EINVAL, "no sample yet");
  for (int i = 0; i < 4; i++) CHECK_OK(vl_telemetry_sample(tm));
  vl_tm_stats w;
  CHECK_OK(vl_telemetry_window(tm, 0, true, &w)); /* a window of t 0..3, then a new one from t=3 */
  CHECK(w.samples == 4 && w.t_first == 0 && w.t_last == 3);
  CHECK(near(w.integral[VL_TM_ENERGY], 500, 1e-12), "window energy %g", w.integral[VL_TM_ENERGY]);
  CHECK(near(w.integral[VL_TM_POWER], 150 + 200 + 150, 1e-12), "window power x time %g", w.integral[VL_TM_POWER]);
  for (int i = 0; i < 3; i++) CHECK_OK(vl_telemetry_sample(tm));
  vl_tm_stats st;
  CHECK_OK(vl_telemetry_totals(tm, 0, &st));
  CHECK(st.samples == 7, "%llu samples", (unsigned long long)st.samples);
  CHECK(st.t_first == 0 && st.t_last == 5);
  /* Energy: 150 + 200 + 150 + 100 (t 3..4); nothing for the reload, nothing for dt = 0 */
  CHECK(near(st.integral[VL_TM_ENERGY], 600, 1e-12), "energy %g", st.integral[VL_TM_ENERGY]);
  CHECK(near(st.covered[VL_TM_ENERGY], 4, 1e-12), "energy covered %g", st.covered[VL_TM_ENERGY]);
  /* Power x time: the trapezoids of t 0..3 only (t=4 has no power, so 3..4 and 4..5 are out) */
  CHECK(near(st.integral[VL_TM_POWER], 500, 1e-12), "power x time %g", st.integral[VL_TM_POWER]);
  CHECK(near(st.covered[VL_TM_POWER], 3, 1e-12));
  CHECK(st.min[VL_TM_POWER] == 100 && st.max[VL_TM_POWER] == 300);
  /* Temperature 50 + t over t 0..5: the mean 52.5 */
  CHECK(near(st.integral[VL_TM_TEMP] / st.covered[VL_TM_TEMP], 52.5, 1e-12));
  CHECK(st.throttle_any == (4 | 64), "throttle 0x%llx", (unsigned long long)st.throttle_any);
  CHECK(st.covered[VL_TM_THROTTLE] == 0); /* reason bits are ORed, not integrated */
  /* The window after the reset starts at t=3: 3..4 energy 100, then nothing */
  CHECK_OK(vl_telemetry_window(tm, 0, false, &w));
  CHECK(w.samples == 4 && w.t_first == 3 && w.t_last == 5, "window %llu samples from %g", (unsigned long long)w.samples,
        w.t_first);
  CHECK(near(w.integral[VL_TM_ENERGY], 100, 1e-12));
  CHECK(w.integral[VL_TM_POWER] == 0 && w.covered[VL_TM_POWER] == 0);
  CHECK(w.throttle_any == 64); /* t=2's reason was before the window */
  CHECK_OK(vl_telemetry_latest(tm, 0, &latest));
  CHECK(latest.t == 5 && latest.v[VL_TM_ENERGY] == 20);
  /* An exhausted script: the read fails, counted, and sample fails with its reason */
  CHECK_ERR(vl_telemetry_sample(tm), VL_EIO, "script exhausted");
  char msg[256];
  CHECK(vl_telemetry_errors(tm, msg, sizeof msg) == 1 && strstr(msg, "exhausted"));
  vl_tm_device_info info;
  CHECK_OK(vl_telemetry_info(tm, 0, &info));
  CHECK(!strcmp(info.name, "scripted"));
  CHECK_ERR(vl_telemetry_info(tm, 1, &info), VL_EINVAL, "out of range");
  vl_telemetry_free(tm);
  CHECK(sc.closed == 1);
}

static void test_fake_energy(void) {
  vl_tm_fake_config cfg = {.ndevices = 2, .dt = 0.05, .base_w = 250, .step_w = 7, .energy0_j = 3.6e6, .period = 9,
                           .energy_counter = true};
  vl_tm_source src;
  CHECK_OK(vl_tm_fake_open(&cfg, &src));
  int devs[] = {1};
  vl_telemetry *tm = NULL;
  CHECK_OK(vl_telemetry_new(&src, devs, 1, &tm)); /* only the fake's device 1 */
  if (!tm) return;
  const int N = 1000;
  for (int i = 0; i < N; i++) CHECK_OK(vl_telemetry_sample(tm));
  vl_tm_stats st;
  CHECK_OK(vl_telemetry_totals(tm, 0, &st));
  CHECK(st.samples == (uint64_t)N);
  double T = (N - 1) * cfg.dt;
  CHECK(near(st.t_last - st.t_first, T, 1e-12));
  CHECK(near(st.covered[VL_TM_POWER], T, 1e-9));
  /* The counter is the exact integral of the power between reads: both figures agree. */
  double ec = st.integral[VL_TM_ENERGY], ep = st.integral[VL_TM_POWER];
  CHECK(near(ec, ep, 1e-9), "counter %.9g J, power x time %.9g J", ec, ep);
  /* And both equal the sawtooth's integral computed here: device 1 draws base + 10 + step*(k%9). */
  double ref = 0;
  for (int k = 1; k < N; k++) {
    double p0 = 260 + 7.0 * ((k - 1) % 9), p1 = 260 + 7.0 * (k % 9);
    ref += 0.5 * (p0 + p1) * cfg.dt;
  }
  CHECK(near(ec, ref, 1e-9), "counter %.9g J, reference %.9g J", ec, ref);
  CHECK(st.min[VL_TM_POWER] == 260 && st.max[VL_TM_POWER] == 260 + 7 * 8);
  CHECK(st.throttle_any == 4);
  vl_tm_device_info info;
  CHECK_OK(vl_telemetry_info(tm, 0, &info));
  CHECK(info.index == 1 && info.energy_counter && info.power_limit_w == 700);
  vl_telemetry_free(tm);

  /* Without the counter: no energy integral, power x time still there */
  cfg.energy_counter = false;
  CHECK_OK(vl_tm_fake_open(&cfg, &src));
  CHECK_OK(vl_telemetry_new(&src, NULL, 0, &tm));
  if (!tm) return;
  CHECK(vl_telemetry_ndevices(tm) == 2);
  for (int i = 0; i < 10; i++) CHECK_OK(vl_telemetry_sample(tm));
  CHECK_OK(vl_telemetry_totals(tm, 1, &st));
  CHECK(!(st.seen & BIT(VL_TM_ENERGY)) && st.covered[VL_TM_ENERGY] == 0 && st.integral[VL_TM_POWER] > 0);
  vl_telemetry_free(tm);
}

static void test_thread_and_errors(void) {
  vl_tm_fake_config cfg = {.ndevices = 1, .dt = 0.1, .base_w = 100, .step_w = 1, .period = 5, .energy_counter = true};
  vl_tm_source src;
  CHECK_OK(vl_tm_fake_open(&cfg, &src));
  vl_telemetry *tm = NULL;
  CHECK_OK(vl_telemetry_new(&src, NULL, 0, &tm));
  if (!tm) return;
  CHECK_ERR(vl_telemetry_start(tm, 0.0001), VL_EINVAL, "interval");
  CHECK_ERR(vl_telemetry_start(tm, NAN), VL_EINVAL, "interval");
  CHECK_OK(vl_telemetry_start(tm, 0.002));
  CHECK(vl_telemetry_running(tm) && vl_telemetry_interval(tm) == 0.002);
  CHECK_ERR(vl_telemetry_start(tm, 0.002), VL_EINVAL, "already running");
  struct timespec ts = {0, 60 * 1000 * 1000};
  nanosleep(&ts, NULL);
  CHECK_OK(vl_telemetry_sample(tm)); /* from this thread while the sampler's runs */
  vl_telemetry_stop(tm);
  CHECK(!vl_telemetry_running(tm));
  vl_tm_stats a, b;
  CHECK_OK(vl_telemetry_totals(tm, 0, &a));
  CHECK(a.samples >= 5, "only %llu samples in 60 ms at 2 ms", (unsigned long long)a.samples);
  nanosleep(&ts, NULL);
  CHECK_OK(vl_telemetry_totals(tm, 0, &b));
  CHECK(b.samples == a.samples); /* stopped means stopped */
  /* Samples came in order: the fake's time advanced by dt each, so the covered time is exact. */
  CHECK(near(a.covered[VL_TM_POWER], (double)(a.samples - 1) * 0.1, 1e-9));
  CHECK(near(a.integral[VL_TM_ENERGY], a.integral[VL_TM_POWER], 1e-9));
  vl_telemetry_stop(tm); /* twice: a no-op */
  CHECK_OK(vl_telemetry_start(tm, 0.5)); /* restartable; freed while running */
  vl_telemetry_free(tm);

  CHECK_OK(vl_tm_fake_open(&cfg, &src));
  int bad[] = {3};
  CHECK_ERR(vl_telemetry_new(&src, bad, 1, &tm), VL_EINVAL, "device 3 is not one of");
  cfg.dt = 0;
  CHECK_ERR(vl_tm_fake_open(&cfg, &src), VL_EINVAL, "dt");
}

static void test_nvml(void) {
  vl_tm_source src;
  vl_status s = vl_tm_nvml_open(&src);
  if (s == VL_OK) {
    /* A machine with a driver: every device readable or failing with a reason. */
    printf("NVML: %d device(s)\n", src.ndevices);
    vl_telemetry *tm = NULL;
    CHECK_OK(vl_telemetry_new(&src, NULL, 0, &tm));
    if (tm) {
      vl_status r = vl_telemetry_sample(tm);
      CHECK(r == VL_OK || strlen(vl_errmsg()) > 0);
      vl_telemetry_free(tm);
    }
  } else {
    printf("NVML unavailable (expected without a driver): %s\n", vl_errmsg());
    CHECK(s == VL_EUNSUPPORTED, "status %s", vl_status_name(s));
    CHECK(strstr(vl_errmsg(), "NVML is unavailable") != NULL, "message: %s", vl_errmsg());
  }
}

/* ---- HTTP ---- */

static int http_get(int port, const char *req, char *resp, size_t cap) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_port = htons((uint16_t)port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, (struct sockaddr *)&a, sizeof a) < 0) {
    close(fd);
    return -1;
  }
  (void)!write(fd, req, strlen(req));
  size_t n = 0;
  ssize_t r;
  while (n + 1 < cap && (r = read(fd, resp + n, cap - 1 - n)) > 0) n += (size_t)r;
  resp[n] = 0;
  close(fd);
  return (int)n;
}

static void test_http(void) {
  vl_http_server *srv = NULL;
  CHECK_ERR(vl_http_serve("127.0.0.1", 70000, "/metrics", "text/plain", &srv), VL_EINVAL, "port");
  CHECK_ERR(vl_http_serve("localhost", 0, "/metrics", "text/plain", &srv), VL_EINVAL, "numeric");
  CHECK_ERR(vl_http_serve("127.0.0.1", 0, "metrics", "text/plain", &srv), VL_EINVAL, "path");
  CHECK_OK(vl_http_serve("127.0.0.1", 0, "/metrics", "text/plain; version=0.0.4", &srv));
  if (!srv) return;
  int port = vl_http_port(srv);
  CHECK(port > 0);
  char resp[4096];
  CHECK(http_get(port, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", resp, sizeof resp) > 0);
  CHECK(strstr(resp, "HTTP/1.1 200 OK") == resp && strstr(resp, "Content-Length: 0\r\n"), "%s", resp);
  const char *body = "# TYPE a gauge\na 1\n";
  CHECK_OK(vl_http_set_body(srv, body, strlen(body)));
  CHECK(http_get(port, "GET /metrics?x=1 HTTP/1.0\r\n\r\n", resp, sizeof resp) > 0);
  CHECK(strstr(resp, "text/plain; version=0.0.4") && strstr(resp, "\r\n\r\n# TYPE a gauge\na 1\n"), "%s", resp);
  CHECK(http_get(port, "HEAD /metrics HTTP/1.1\r\n\r\n", resp, sizeof resp) > 0);
  CHECK(strstr(resp, "Content-Length: 19") && !strstr(resp, "a 1"), "%s", resp);
  CHECK(http_get(port, "GET /other HTTP/1.1\r\n\r\n", resp, sizeof resp) > 0);
  CHECK(strstr(resp, "404 Not Found") && strstr(resp, "/metrics"), "%s", resp);
  CHECK(http_get(port, "POST /metrics HTTP/1.1\r\n\r\n", resp, sizeof resp) > 0);
  CHECK(strstr(resp, "405") != NULL, "%s", resp);
  CHECK(http_get(port, "garbage\r\n\r\n", resp, sizeof resp) > 0);
  CHECK(strstr(resp, "400") != NULL, "%s", resp);
  CHECK(vl_http_requests(srv) == 6, "%llu requests", (unsigned long long)vl_http_requests(srv));
  vl_http_close(srv);
  vl_http_close(NULL);
  /* The port is free again */
  CHECK(http_get(port, "GET /metrics HTTP/1.1\r\n\r\n", resp, sizeof resp) < 0);
}

/* ---- NVTX: balanced ranges whether or not a tool is there ---- */

typedef struct vl_nvtx_scope scope_t;

static void test_nvtx(void) {
  vl_nvtx_stats st;
  vl_nvtx_push("off"); /* off: nothing */
  CHECK(vl_nvtx_scope_enter("off") == 0);
  vl_nvtx_get_stats(&st);
  CHECK(st.pushes == 0 && st.depth == 0);
  vl_nvtx_enable(true);
  CHECK(vl_nvtx_enabled());
  int t1 = vl_nvtx_scope_enter("model: Net");
  int t2 = vl_nvtx_scope_enter("fc1: Linear");
  CHECK(t1 == 2 && t2 == 2);
  const scope_t *fc1 = vl_nvtx_current_scope();
  vl_nvtx_scope_leave(t2);
  int t3 = vl_nvtx_scope_enter("fc2: Linear");
  const scope_t *fc2 = vl_nvtx_current_scope();
  vl_nvtx_scope_leave(t3);
  const scope_t *model = vl_nvtx_current_scope();
  vl_nvtx_scope_leave(t1);
  CHECK(vl_nvtx_current_scope() == NULL && fc1 && fc2 && model && fc1 != fc2);
  /* the same call path interns to the same scope */
  t1 = vl_nvtx_scope_enter("model: Net");
  t2 = vl_nvtx_scope_enter("fc1: Linear");
  CHECK(vl_nvtx_current_scope() == fc1);
  vl_nvtx_scope_leave(t2);
  vl_nvtx_scope_leave(t1);
  vl_nvtx_get_stats(&st);
  CHECK(st.scopes == 3 && st.pushes == 5 && st.pops == 5 && st.depth == 0, "scopes %d pushes %llu pops %llu depth %d",
        st.scopes, (unsigned long long)st.pushes, (unsigned long long)st.pops, st.depth);
  /* backward: fc2's node, fc1's two nodes, a node outside every module */
  vl_nvtx_bw bw;
  memset(&bw, 0, sizeof bw);
  vl_nvtx_bw_node(&bw, fc2, "AddmmBackward");
  CHECK(bw.depth == 2); /* model backward > fc2 backward */
  vl_nvtx_bw_node_done(&bw);
  vl_nvtx_bw_node(&bw, fc1, "AddmmBackward");
  CHECK(bw.depth == 2 && bw.open[1] == fc1);
  vl_nvtx_bw_node(&bw, fc1, "ReluBackward"); /* no done before: closed by the next */
  vl_nvtx_bw_node(&bw, NULL, "AccumulateGrad");
  CHECK(bw.depth == 0);
  vl_nvtx_bw_end(&bw);
  vl_nvtx_get_stats(&st);
  /* ranges: model bw, fc2 bw, node, fc1 bw, node, node, node = 7 more */
  CHECK(st.pushes == 12 && st.pops == 12 && st.depth == 0, "pushes %llu pops %llu depth %d",
        (unsigned long long)st.pushes, (unsigned long long)st.pops, st.depth);
  /* turned off with a range open: the pop still closes it */
  vl_nvtx_push("open");
  vl_nvtx_enable(false);
  vl_nvtx_pop();
  vl_nvtx_pop(); /* one too many: ignored */
  vl_nvtx_get_stats(&st);
  CHECK(st.depth == 0 && st.pushes == st.pops);
  CHECK(vl_nvtx_current_scope() == NULL);
}

int main(void) {
  vl_test_init();
  test_scripted_aggregation();
  test_fake_energy();
  test_thread_and_errors();
  test_nvml();
  test_http();
  test_nvtx();
  return vl_test_finish();
}
