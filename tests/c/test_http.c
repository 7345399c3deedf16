/* tests/c/test_http.c: the metrics endpoint under hostile clients (issue 27), on loopback, bounded
 * in time (about 8 s).
 *
 * This process serves with its descriptor table exhausted (RLIMIT_NOFILE lowered, the table filled
 * with /dev/null), while a forked child, with a table of its own, plays the clients:
 *   1. one scrape while accept() fails with EMFILE and nothing can be freed: the server must back
 *      off, not spin (this process's CPU time over 1 s is measured), and answer once descriptors
 *      free up;
 *   2. a client trickling one byte every 1.5 s, 50 idle connections, and a scrape every 100 ms for
 *      4 s: every scrape answered (200 and the body) within 1 s;
 *   3. vl_http_close() with the trickler and the idle connections still open: within 1 s.
 * Before the fix (one blocking connection at a time, 2 s per recv) the first scrape of phase 2
 * waited behind the trickler, close() waited for it, and phase 1 spun at full CPU. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ext/telemetry/http.h"
#include "vl_test.h"

#define BODY "# TYPE v100_train_running gauge\nv100_train_running 1\n"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double cpu_s(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 + (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec * 1e-6;
}

static int connect_to(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_port = htons((uint16_t)port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, (struct sockaddr *)&a, sizeof a) < 0) {
    close(fd);
    return -1;
  }
  return fd;
}

/* One scrape with a deadline: the seconds until the whole answer came (200 with the body), or -1. */
static double scrape(int port, double limit) {
  double t0 = now_s();
  int fd = connect_to(port);
  if (fd < 0) return -1;
  const char *req = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
  if (send(fd, req, strlen(req), MSG_NOSIGNAL) != (ssize_t)strlen(req)) {
    close(fd);
    return -1;
  }
  char resp[2048];
  size_t n = 0;
  for (;;) {
    int left = (int)((t0 + limit - now_s()) * 1000);
    if (left <= 0) break;
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, left) <= 0) break;
    ssize_t r = recv(fd, resp + n, sizeof resp - 1 - n, 0);
    if (r <= 0) break;
    n += (size_t)r;
  }
  resp[n] = 0;
  close(fd);
  bool ok = strstr(resp, "HTTP/1.1 200 OK") == resp && strstr(resp, "\r\n\r\n" BODY);
  double dt = now_s() - t0;
  return ok && dt <= limit ? dt : -1;
}

/* ---- the child: the clients ---- */

static volatile int trickle_stop;
static int trickle_port;

/* One byte of a request every 1.5 s, reconnecting whenever the server drops it. */
static void *trickler(void *arg) {
  (void)arg;
  const char *req = "GET /metrics HTTP/1.1\r\nHost: trickle\r\n\r\n";
  int fd = -1;
  size_t i = 0;
  while (!trickle_stop) {
    if (fd < 0) fd = connect_to(trickle_port), i = 0;
    if (fd >= 0 && send(fd, req + i % strlen(req), 1, MSG_NOSIGNAL) != 1) close(fd), fd = -1;
    i++;
    for (int k = 0; k < 15 && !trickle_stop; k++) usleep(100000);
  }
  if (fd >= 0) close(fd);
  return NULL;
}

static void say(int fd, const char *msg) { (void)!write(fd, msg, strlen(msg)); }

static int child(int from_parent, int to_parent) {
  int port = 0;
  if (read(from_parent, &port, sizeof port) != sizeof port) return 2;
  char line[256];
  /* 1: a scrape while the server has no descriptor to accept it with */
  double t = scrape(port, 4.0);
  snprintf(line, sizeof line, "emfile_scrape %.3f\n", t);
  say(to_parent, line);
  char go;
  if (read(from_parent, &go, 1) != 1) return 2;
  /* 2: a trickler, 50 idle connections, scrapes */
  trickle_port = port;
  pthread_t th;
  pthread_create(&th, NULL, trickler, NULL);
  int idle[50], nidle = 0;
  for (int i = 0; i < 50; i++)
    if ((idle[nidle] = connect_to(port)) >= 0) nidle++;
  int ok = 0, bad = 0;
  double worst = 0, t_end = now_s() + 4.0;
  while (now_s() < t_end) {
    double dt = scrape(port, 1.0);
    if (dt < 0) bad++;
    else ok++, worst = dt > worst ? dt : worst;
    usleep(100000);
  }
  snprintf(line, sizeof line, "scrapes %d %d %.3f idle %d\n", ok, bad, worst, nidle);
  say(to_parent, line);
  /* 3: the parent closes the server with these still open */
  if (read(from_parent, &go, 1) != 1) return 2;
  trickle_stop = 1;
  pthread_join(th, NULL);
  for (int i = 0; i < nidle; i++) close(idle[i]);
  return 0;
}

/* ---- the parent: the server, with its table full ---- */

static int fillers[4096], nfill;

static void fill_table(void) {
  int fd;
  while (nfill < (int)VL_COUNTOF(fillers) && (fd = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0) fillers[nfill++] = fd;
}

static void free_fillers(int n) {
  while (n-- > 0 && nfill > 0) close(fillers[--nfill]);
}

static bool read_line(int fd, char *buf, size_t cap, double limit) {
  size_t n = 0;
  double t0 = now_s();
  while (n + 1 < cap) {
    int left = (int)((t0 + limit - now_s()) * 1000);
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (left <= 0 || poll(&p, 1, left) <= 0) break;
    if (read(fd, buf + n, 1) != 1) break;
    if (buf[n++] == '\n') break;
  }
  buf[n] = 0;
  return n > 0 && buf[n - 1] == '\n';
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  int down[2], up[2];
  CHECK(pipe(down) == 0 && pipe(up) == 0);
  pid_t pid = fork();
  if (pid == 0) {
    close(down[1]);
    close(up[0]);
    _exit(child(down[0], up[1]));
  }
  close(down[0]);
  close(up[1]);

  struct rlimit rl;
  getrlimit(RLIMIT_NOFILE, &rl);
  rlim_t old = rl.rlim_cur;
  rl.rlim_cur = 256;
  CHECK(setrlimit(RLIMIT_NOFILE, &rl) == 0);
  /* Exactly the descriptors the server needs to start (socket, wake pipe), and none spare: not
   * even its reserve descriptor, so the first connection finds EMFILE with nothing to give back. */
  fill_table();
  CHECK(nfill > 3, "%d fillers", nfill);
  free_fillers(3);
  vl_http_server *srv = NULL;
  CHECK_OK(vl_http_serve("127.0.0.1", 0, "/metrics", "text/plain; version=0.0.4", &srv));
  if (!srv) return vl_test_finish();
  fill_table();
  CHECK_OK(vl_http_set_body(srv, BODY, strlen(BODY)));
  CHECK(vl_http_loopback(srv) && !strcmp(vl_http_addr(srv), "127.0.0.1"), "%s", vl_http_addr(srv));
  int port = vl_http_port(srv);

  /* 1: EMFILE with nothing to free: measure the CPU the server burns meanwhile */
  CHECK(write(down[1], &port, sizeof port) == sizeof port);
  usleep(200000);
  double c0 = cpu_s(), w0 = now_s();
  usleep(1000000);
  double cpu = cpu_s() - c0, wall = now_s() - w0;
  vl_http_stats st;
  vl_http_get_stats(srv, &st);
  printf("EMFILE, nothing to free: %.3f s CPU in %.3f s, %llu accept errors\n", cpu, wall,
         (unsigned long long)st.accept_errors);
  CHECK(cpu < 0.25 * wall, "the accept loop spins: %.3f s CPU in %.3f s", cpu, wall);
  CHECK(st.accept_errors >= 1 && st.accept_errors < 40, "%llu accept errors: backs off", (unsigned long long)st.accept_errors);
  free_fillers(2); /* one for the waiting scrape, one for the reserve after it */
  char line[256];
  CHECK(read_line(up[0], line, sizeof line, 5.0), "the child's first report");
  double t1 = -1;
  CHECK(sscanf(line, "emfile_scrape %lf", &t1) == 1 && t1 > 0, "the scrape waiting on EMFILE was answered: %s", line);

  /* 2: trickler, 50 idle connections and scrapes, the table still full but for the two */
  CHECK(write(down[1], "g", 1) == 1);
  CHECK(read_line(up[0], line, sizeof line, 15.0), "the child's second report");
  int ok = 0, bad = 0, nidle = 0;
  double worst = 0;
  CHECK(sscanf(line, "scrapes %d %d %lf idle %d", &ok, &bad, &worst, &nidle) == 4, "%s", line);
  vl_http_get_stats(srv, &st);
  printf("trickler + %d idle connections, fd table full: %d scrapes answered, %d not, slowest %.3f s; "
         "%llu requests, %llu dropped, %llu accept errors\n", nidle, ok, bad, worst, (unsigned long long)st.requests,
         (unsigned long long)st.dropped, (unsigned long long)st.accept_errors);
  CHECK(nidle == 50, "%d idle connections", nidle);
  CHECK(ok >= 20 && bad == 0, "%d answered, %d not within 1 s", ok, bad);
  CHECK(worst < 1.0, "slowest scrape %.3f s", worst);
  CHECK(st.dropped >= 1, "idle connections were dropped to make room");

  /* 3: close with the trickler and idle clients connected */
  double t0 = now_s();
  vl_http_close(srv);
  double tc = now_s() - t0;
  printf("close with clients connected: %.3f s\n", tc);
  CHECK(tc < 1.0, "close took %.3f s", tc);
  CHECK(write(down[1], "c", 1) == 1);
  int status = 0;
  waitpid(pid, &status, 0);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d", status);
  free_fillers(nfill);
  rl.rlim_cur = old;
  setrlimit(RLIMIT_NOFILE, &rl);
  return vl_test_finish();
}
