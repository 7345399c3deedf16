/* runtime/telemetry/http.c: the scrape endpoint of http.h. */
#define _POSIX_C_SOURCE 200809L
#include "runtime/telemetry/http.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#define REQ_MAX 8192

struct vl_http_server {
  int fd;              /* listening socket */
  int wake[2];         /* a pipe: a byte in it stops the thread */
  int port;
  char path[256], ctype[128];
  pthread_t thread;
  pthread_mutex_t mu;  /* body and requests */
  char *body;
  size_t len;
  uint64_t requests;
};

static void send_all(int fd, const char *p, size_t n) {
  while (n > 0) {
    ssize_t w = send(fd, p, n, MSG_NOSIGNAL); /* a client gone is not a SIGPIPE */
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    p += w, n -= (size_t)w;
  }
}

static void respond(int fd, const char *status, const char *ctype, const char *body, size_t len, bool head) {
  char hdr[512];
  int h = snprintf(hdr, sizeof hdr,
                   "HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\nConnection: close\r\n"
                   "Cache-Control: no-store\r\n\r\n",
                   status, ctype, len);
  send_all(fd, hdr, (size_t)h);
  if (!head && len) send_all(fd, body, len);
}

/* Reads the request head (up to the blank line, REQ_MAX bytes, the socket's 2 s timeout) and
 * answers it. Bodies of requests are not read: only GET and HEAD are served. */
static void serve_one(vl_http_server *srv, int fd) {
  char req[REQ_MAX + 1];
  size_t n = 0;
  while (n < REQ_MAX) {
    ssize_t r = recv(fd, req + n, REQ_MAX - n, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    n += (size_t)r;
    req[n] = 0;
    if (strstr(req, "\r\n\r\n") || strstr(req, "\n\n")) break;
  }
  req[n] = 0;
  char method[16] = "", target[1024] = "";
  if (sscanf(req, "%15s %1023s", method, target) != 2) {
    respond(fd, "400 Bad Request", "text/plain", "bad request\n", 12, false);
    return;
  }
  bool head = !strcmp(method, "HEAD");
  if (strcmp(method, "GET") && !head) {
    respond(fd, "405 Method Not Allowed", "text/plain", "only GET and HEAD\n", 18, false);
    return;
  }
  char *q = strchr(target, '?'); /* a query string (Prometheus adds none; curl users might) */
  if (q) *q = 0;
  if (strcmp(target, srv->path)) {
    char msg[320];
    int m = snprintf(msg, sizeof msg, "not found; the metrics are at %s\n", srv->path);
    respond(fd, "404 Not Found", "text/plain", msg, (size_t)m, head);
    return;
  }
  /* A copy, so the lock is not held while a slow client takes the answer. */
  pthread_mutex_lock(&srv->mu);
  size_t len = srv->len;
  char *copy = len ? malloc(len) : NULL;
  if (copy) memcpy(copy, srv->body, len);
  pthread_mutex_unlock(&srv->mu);
  if (len && !copy) {
    respond(fd, "503 Service Unavailable", "text/plain", "out of memory\n", 14, head);
    return;
  }
  respond(fd, "200 OK", srv->ctype, copy, len, head);
  free(copy);
}

static void *thread_main(void *arg) {
  vl_http_server *srv = arg;
  for (;;) {
    struct pollfd p[2] = {{.fd = srv->fd, .events = POLLIN}, {.fd = srv->wake[0], .events = POLLIN}};
    int r = poll(p, 2, -1);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 || p[1].revents) break;
    if (!(p[0].revents & POLLIN)) continue;
    int c = accept(srv->fd, NULL, NULL);
    if (c < 0) continue; /* the client went away between poll and accept, or EMFILE: try again */
    struct timeval tv = {.tv_sec = 2, .tv_usec = 0};
    setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(c, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    serve_one(srv, c);
    pthread_mutex_lock(&srv->mu); /* counted before the close the client waits for */
    srv->requests++;
    pthread_mutex_unlock(&srv->mu);
    close(c);
  }
  return NULL;
}

static vl_status open_socket(const char *addr, int port, int *fd_out, int *port_out) {
  char ps[16];
  snprintf(ps, sizeof ps, "%d", port);
  struct addrinfo hints, *ai = NULL;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICHOST | AI_NUMERICSERV;
  int gr = getaddrinfo(addr, ps, &hints, &ai);
  if (gr) return vl_fail(VL_EINVAL, "prometheus: the address \"%s\" is not a numeric IPv4 or IPv6 address: %s", addr, gai_strerror(gr));
  int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
  if (fd < 0) {
    freeaddrinfo(ai);
    return vl_fail(VL_EIO, "prometheus: socket: %s", strerror(errno));
  }
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, 16) < 0) {
    int e = errno;
    freeaddrinfo(ai);
    close(fd);
    return vl_fail(VL_EIO, "prometheus: cannot listen on %s port %d: %s", addr, port, strerror(e));
  }
  freeaddrinfo(ai);
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  int bound = port;
  if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0) {
    if (ss.ss_family == AF_INET) bound = ntohs(((struct sockaddr_in *)&ss)->sin_port);
    else if (ss.ss_family == AF_INET6) bound = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
  }
  *fd_out = fd;
  *port_out = bound;
  return VL_OK;
}

vl_status vl_http_serve(const char *addr, int port, const char *path, const char *content_type, vl_http_server **out) {
  if (port < 0 || port > 65535) return vl_fail(VL_EINVAL, "prometheus: port %d is not in 0..65535", port);
  if (!path || path[0] != '/' || strlen(path) >= 256)
    return vl_fail(VL_EINVAL, "prometheus: the path must start with / (and be shorter than 256 bytes)");
  if (!content_type || strlen(content_type) >= 128) return vl_fail(VL_EINVAL, "prometheus: bad content type");
  vl_http_server *srv = calloc(1, sizeof *srv);
  if (!srv) return vl_fail(VL_EOOM, "prometheus: out of host memory");
  srv->fd = srv->wake[0] = srv->wake[1] = -1;
  snprintf(srv->path, sizeof srv->path, "%s", path);
  snprintf(srv->ctype, sizeof srv->ctype, "%s", content_type);
  vl_status s = open_socket(addr ? addr : "127.0.0.1", port, &srv->fd, &srv->port);
  if (s == VL_OK && pipe(srv->wake) < 0) s = vl_fail(VL_EIO, "prometheus: pipe: %s", strerror(errno));
  if (s == VL_OK) {
    fcntl(srv->wake[0], F_SETFD, FD_CLOEXEC);
    fcntl(srv->wake[1], F_SETFD, FD_CLOEXEC);
    int rc = pthread_mutex_init(&srv->mu, NULL);
    if (!rc) {
      rc = pthread_create(&srv->thread, NULL, thread_main, srv);
      if (rc) pthread_mutex_destroy(&srv->mu);
    }
    if (rc) s = vl_fail(VL_EINTERNAL, "prometheus: cannot start the server thread: %s", strerror(rc));
  }
  if (s != VL_OK) {
    if (srv->fd >= 0) close(srv->fd);
    if (srv->wake[0] >= 0) close(srv->wake[0]), close(srv->wake[1]);
    free(srv);
    return s;
  }
  *out = srv;
  return VL_OK;
}

int vl_http_port(const vl_http_server *srv) { return srv->port; }

vl_status vl_http_set_body(vl_http_server *srv, const char *body, size_t len) {
  char *copy = malloc(len ? len : 1);
  if (!copy) return vl_fail(VL_EOOM, "prometheus: out of host memory for %zu bytes of metrics", len);
  memcpy(copy, body, len);
  pthread_mutex_lock(&srv->mu);
  char *old = srv->body;
  srv->body = copy;
  srv->len = len;
  pthread_mutex_unlock(&srv->mu);
  free(old);
  return VL_OK;
}

uint64_t vl_http_requests(vl_http_server *srv) {
  pthread_mutex_lock(&srv->mu);
  uint64_t n = srv->requests;
  pthread_mutex_unlock(&srv->mu);
  return n;
}

void vl_http_close(vl_http_server *srv) {
  if (!srv) return;
  ssize_t w;
  do w = write(srv->wake[1], "x", 1);
  while (w < 0 && errno == EINTR);
  pthread_join(srv->thread, NULL);
  close(srv->fd);
  close(srv->wake[0]);
  close(srv->wake[1]);
  pthread_mutex_destroy(&srv->mu);
  free(srv->body);
  free(srv);
}
