/* ext/telemetry/http.c: the scrape endpoint of http.h.
 *
 * One thread multiplexes the listening socket and up to VL_HTTP_MAX_CONN non-blocking client
 * connections with poll(), so no client can hold another's scrape (issue 27: one trickling client
 * used to hold the single blocking connection for up to REQ_MAX x 2 s, and close() joined the
 * thread behind it). Each connection has deadlines of its own, counted from its accept and not
 * reset by the bytes that arrive: the request head within VL_HTTP_READ_MS, the answer taken within
 * VL_HTTP_WRITE_MS more. The poll timeout is the nearest deadline, so expiry needs no traffic.
 *
 * Running out of descriptors (EMFILE/ENFILE on accept) used to spin: the pending connection keeps
 * the listening socket readable. Now, in order: the oldest connection still sending its request
 * is dropped to make room; else a reserve descriptor (held open on /dev/null for this) is closed
 * and its slot takes the connection; else the listening socket is left out of poll for
 * VL_HTTP_BACKOFF_MS. The same "drop the oldest unfinished request" (older than VL_HTTP_GRACE_MS) makes room when every slot is
 * taken, so idle connections cannot keep a scraper out. close() writes to a pipe the thread polls:
 * it never waits on a client. */
#define _GNU_SOURCE /* accept4 */
#include "ext/telemetry/http.h"

#include <arpa/inet.h>
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
#include <time.h>
#include <unistd.h>

#define REQ_MAX 8192

typedef struct conn {
  int fd;             /* -1: a free slot */
  bool reserve;       /* accepted into the reserve descriptor's slot: reopen it after the close */
  int64_t born_ms;    /* accept time: the oldest unfinished request is dropped first */
  int64_t deadline_ms;
  char *req;          /* REQ_MAX + 1 bytes while reading */
  size_t got;
  char *out;          /* the answer while writing (NULL: still reading) */
  size_t out_len, out_off;
} conn;

struct vl_http_server {
  int fd;              /* listening socket */
  int wake[2];         /* a pipe: a byte in it stops the thread */
  int reserve;         /* /dev/null, closed to make room for one connection under EMFILE; -1: in use */
  int port;
  char path[256], ctype[128], addr[64];
  bool loopback;
  pthread_t thread;
  pthread_mutex_t mu;  /* body and the counters */
  char *body;
  size_t len;
  uint64_t requests, dropped, accept_errors;
  conn conns[VL_HTTP_MAX_CONN];
  int64_t backoff_until_ms; /* the listening socket is not polled before this */
};

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void count(vl_http_server *srv, uint64_t *field) {
  pthread_mutex_lock(&srv->mu);
  (*field)++;
  pthread_mutex_unlock(&srv->mu);
}

static void reopen_reserve(vl_http_server *srv) {
  if (srv->reserve < 0) srv->reserve = open("/dev/null", O_RDONLY | O_CLOEXEC);
}

static void conn_close(vl_http_server *srv, conn *c) {
  if (c->fd < 0) return;
  close(c->fd);
  free(c->req);
  free(c->out);
  bool reserve = c->reserve;
  memset(c, 0, sizeof *c);
  c->fd = -1;
  if (reserve) reopen_reserve(srv);
}

/* The answer, header and body in one buffer, to be sent as the socket takes it. */
static void respond(vl_http_server *srv, conn *c, const char *status, const char *ctype, const char *body, size_t len,
                    bool head) {
  char hdr[512];
  int h = snprintf(hdr, sizeof hdr,
                   "HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\nConnection: close\r\n"
                   "Cache-Control: no-store\r\n\r\n",
                   status, ctype, len);
  size_t n = (size_t)h + (head ? 0 : len);
  char *out = malloc(n ? n : 1);
  if (!out) { /* nothing can be said: drop the connection */
    conn_close(srv, c);
    return;
  }
  memcpy(out, hdr, (size_t)h);
  if (!head && len) memcpy(out + h, body, len);
  free(c->req);
  c->req = NULL;
  c->out = out;
  c->out_len = n;
  c->out_off = 0;
  c->deadline_ms = now_ms() + VL_HTTP_WRITE_MS;
}

/* The request head is complete (or the client stopped sending): parse it, queue the answer. Bodies
 * of requests are not read: only GET and HEAD are served. */
static void answer(vl_http_server *srv, conn *c) {
  char *req = c->req;
  req[c->got] = 0;
  char method[16] = "", target[1024] = "";
  if (sscanf(req, "%15s %1023s", method, target) != 2) {
    respond(srv, c, "400 Bad Request", "text/plain", "bad request\n", 12, false);
    return;
  }
  bool head = !strcmp(method, "HEAD");
  if (strcmp(method, "GET") && !head) {
    respond(srv, c, "405 Method Not Allowed", "text/plain", "only GET and HEAD\n", 18, false);
    return;
  }
  char *q = strchr(target, '?'); /* a query string (Prometheus adds none; curl users might) */
  if (q) *q = 0;
  if (strcmp(target, srv->path)) {
    char msg[320];
    int m = snprintf(msg, sizeof msg, "not found; the metrics are at %s\n", srv->path);
    respond(srv, c, "404 Not Found", "text/plain", msg, (size_t)m, head);
    return;
  }
  /* Copied under the lock into the connection's own buffer: set_body never waits for a client. */
  pthread_mutex_lock(&srv->mu);
  respond(srv, c, "200 OK", srv->ctype, srv->body, srv->len, head);
  pthread_mutex_unlock(&srv->mu);
}

static bool head_complete(const conn *c) {
  return strstr(c->req, "\r\n\r\n") || strstr(c->req, "\n\n");
}

static void on_writable(vl_http_server *srv, conn *c);

static void on_readable(vl_http_server *srv, conn *c) {
  for (;;) {
    ssize_t r = recv(c->fd, c->req + c->got, REQ_MAX - c->got, MSG_DONTWAIT);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (r < 0 || (r == 0 && c->got == 0)) { /* reset, or closed without a byte */
      conn_close(srv, c);
      return;
    }
    if (r == 0) break; /* the client stopped sending: answer what came */
    c->got += (size_t)r;
    c->req[c->got] = 0;
    if (head_complete(c) || c->got == REQ_MAX) break;
  }
  answer(srv, c);
  if (c->fd >= 0 && c->out) on_writable(srv, c); /* most answers fit the socket buffer at once */
}

static void on_writable(vl_http_server *srv, conn *c) {
  while (c->out_off < c->out_len) {
    ssize_t w = send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (w <= 0) break; /* the client went away */
    c->out_off += (size_t)w;
  }
  count(srv, &srv->requests); /* before the close the client waits for */
  conn_close(srv, c);
}

/* The connection still sending its request that came first (the trickler, the idle one): the one
 * to drop when room is needed. A connection younger than VL_HTTP_GRACE_MS is spared: a scraper
 * accepted an instant before its request arrived would otherwise be the one dropped once the
 * older ones are gone. NULL when none qualifies. */
static conn *oldest_reading(vl_http_server *srv, int64_t now) {
  conn *best = NULL;
  for (int i = 0; i < VL_HTTP_MAX_CONN; i++) {
    conn *c = &srv->conns[i];
    if (c->fd >= 0 && !c->out && now - c->born_ms >= VL_HTTP_GRACE_MS && (!best || c->born_ms < best->born_ms)) best = c;
  }
  return best;
}

static bool drop_oldest(vl_http_server *srv) {
  conn *c = oldest_reading(srv, now_ms());
  if (!c) return false;
  conn_close(srv, c);
  count(srv, &srv->dropped);
  return true;
}

static conn *free_slot(vl_http_server *srv) {
  for (int i = 0; i < VL_HTTP_MAX_CONN; i++)
    if (srv->conns[i].fd < 0) return &srv->conns[i];
  return NULL;
}

static void add_conn(vl_http_server *srv, conn *slot, int fd, bool reserve) {
  slot->req = malloc(REQ_MAX + 1);
  if (!slot->req) {
    close(fd);
    if (reserve) reopen_reserve(srv);
    return;
  }
  slot->fd = fd;
  slot->reserve = reserve;
  slot->born_ms = now_ms();
  slot->deadline_ms = slot->born_ms + VL_HTTP_READ_MS;
  slot->got = 0;
  slot->req[0] = 0;
  on_readable(srv, slot); /* a scraper's request is usually there already */
}

/* Takes every pending connection, making room as the header comment says. */
static void accept_all(vl_http_server *srv) {
  for (int guard = 0; guard < 4 * VL_HTTP_MAX_CONN; guard++) {
    conn *slot = free_slot(srv);
    if (!slot) {
      if (!drop_oldest(srv)) return; /* every slot is being answered: poll leaves the socket out */
      slot = free_slot(srv);
    }
    int fd = accept4(srv->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) {
      add_conn(srv, slot, fd, false);
      continue;
    }
    int e = errno;
    if (e == EAGAIN || e == EWOULDBLOCK) return;
    if (e == EINTR || e == ECONNABORTED || e == EPROTO) continue; /* that client went away */
    count(srv, &srv->accept_errors);
    if (e == EMFILE || e == ENFILE) {
      if (drop_oldest(srv)) continue; /* its descriptor is free now */
      if (srv->reserve >= 0) {
        close(srv->reserve);
        srv->reserve = -1;
        fd = accept4(srv->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd >= 0) {
          add_conn(srv, slot, fd, true);
          continue;
        }
        reopen_reserve(srv);
      }
    }
    /* Out of descriptors with nothing to give back, or another error: try again later, not at
     * once (the pending connection keeps the socket readable, so retrying now would spin): when
     * the youngest connection may be dropped, at the latest after VL_HTTP_BACKOFF_MS. */
    int64_t now = now_ms(), until = now + VL_HTTP_BACKOFF_MS;
    for (int i = 0; i < VL_HTTP_MAX_CONN; i++) {
      conn *c = &srv->conns[i];
      if (c->fd >= 0 && !c->out && c->born_ms + VL_HTTP_GRACE_MS < until) until = c->born_ms + VL_HTTP_GRACE_MS;
    }
    srv->backoff_until_ms = until > now ? until : now + 1;
    return;
  }
}

static void *thread_main(void *arg) {
  vl_http_server *srv = arg;
  struct pollfd p[2 + VL_HTTP_MAX_CONN];
  conn *who[2 + VL_HTTP_MAX_CONN];
  for (;;) {
    int64_t now = now_ms(), next = -1;
    int n = 0;
    p[n++] = (struct pollfd){.fd = srv->wake[0], .events = POLLIN};
    bool room = free_slot(srv) || oldest_reading(srv, now);
    int listen_at = -1;
    if (srv->backoff_until_ms > now) {
      next = srv->backoff_until_ms;
    } else if (room) {
      listen_at = n;
      p[n++] = (struct pollfd){.fd = srv->fd, .events = POLLIN};
    }
    for (int i = 0; i < VL_HTTP_MAX_CONN; i++) {
      conn *c = &srv->conns[i];
      if (c->fd < 0) continue;
      if (c->deadline_ms <= now) { /* too slow to send its request or to take the answer */
        if (!c->out) count(srv, &srv->dropped);
        conn_close(srv, c);
        continue;
      }
      int64_t wake = c->deadline_ms;
      if (!room && !c->out && c->born_ms + VL_HTTP_GRACE_MS < wake) wake = c->born_ms + VL_HTTP_GRACE_MS; /* droppable then */
      if (next < 0 || wake < next) next = wake;
      who[n] = c;
      p[n++] = (struct pollfd){.fd = c->fd, .events = c->out ? POLLOUT : POLLIN};
    }
    if (!room && next < 0) next = now + VL_HTTP_BACKOFF_MS; /* cannot happen; never sleep forever */
    int timeout = next < 0 ? -1 : (int)(next > now ? next - now : 0);
    int r = poll(p, (nfds_t)n, timeout);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 || p[0].revents) break;
    for (int i = 1; i < n; i++) {
      if (!p[i].revents || i == listen_at) continue;
      conn *c = who[i];
      if (c->fd != p[i].fd) continue; /* dropped to make room earlier in this round */
      if (c->out) on_writable(srv, c);
      else on_readable(srv, c);
    }
    if (listen_at >= 0 && (p[listen_at].revents & POLLIN)) accept_all(srv);
  }
  for (int i = 0; i < VL_HTTP_MAX_CONN; i++) conn_close(srv, &srv->conns[i]);
  return NULL;
}

static void describe_addr(const struct sockaddr_storage *ss, socklen_t sl, char *addr, size_t cap, bool *loopback) {
  char host[NI_MAXHOST] = "?";
  if (getnameinfo((const struct sockaddr *)ss, sl, host, sizeof host, NULL, 0, NI_NUMERICHOST) != 0)
    snprintf(host, sizeof host, "?");
  snprintf(addr, cap, "%s", host);
  *loopback = false;
  if (ss->ss_family == AF_INET) {
    uint32_t a = ntohl(((const struct sockaddr_in *)ss)->sin_addr.s_addr);
    *loopback = (a >> 24) == 127;
  } else if (ss->ss_family == AF_INET6) {
    const struct in6_addr *a = &((const struct sockaddr_in6 *)ss)->sin6_addr;
    *loopback = IN6_IS_ADDR_LOOPBACK(a) ||
                (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
  }
}

static vl_status open_socket(vl_http_server *srv, const char *addr, int port) {
  char ps[16];
  snprintf(ps, sizeof ps, "%d", port);
  struct addrinfo hints, *ai = NULL;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICHOST | AI_NUMERICSERV;
  int gr = getaddrinfo(addr, ps, &hints, &ai);
  if (gr) return vl_fail(VL_EINVAL, "prometheus: the address \"%s\" is not a numeric IPv4 or IPv6 address: %s", addr, gai_strerror(gr));
  int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
  if (fd < 0) {
    freeaddrinfo(ai);
    return vl_fail(VL_EIO, "prometheus: socket: %s", strerror(errno));
  }
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  /* A backlog above the connection limit: a burst of connections waits in the kernel, not refused. */
  if (bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, 128) < 0) {
    int e = errno;
    freeaddrinfo(ai);
    close(fd);
    return vl_fail(VL_EIO, "prometheus: cannot listen on %s port %d: %s", addr, port, strerror(e));
  }
  freeaddrinfo(ai);
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  srv->port = port;
  snprintf(srv->addr, sizeof srv->addr, "%s", addr);
  if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0) {
    if (ss.ss_family == AF_INET) srv->port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
    else if (ss.ss_family == AF_INET6) srv->port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    describe_addr(&ss, sl, srv->addr, sizeof srv->addr, &srv->loopback);
  }
  srv->fd = fd;
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
  for (int i = 0; i < VL_HTTP_MAX_CONN; i++) srv->conns[i].fd = -1;
  snprintf(srv->path, sizeof srv->path, "%s", path);
  snprintf(srv->ctype, sizeof srv->ctype, "%s", content_type);
  vl_status s = open_socket(srv, addr ? addr : "127.0.0.1", port);
  if (s == VL_OK && pipe(srv->wake) < 0) s = vl_fail(VL_EIO, "prometheus: pipe: %s", strerror(errno));
  srv->reserve = open("/dev/null", O_RDONLY | O_CLOEXEC); /* -1 is fine: no reserve until one frees */
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
    if (srv->reserve >= 0) close(srv->reserve);
    free(srv);
    return s;
  }
  *out = srv;
  return VL_OK;
}

int vl_http_port(const vl_http_server *srv) { return srv->port; }
const char *vl_http_addr(const vl_http_server *srv) { return srv->addr; }
bool vl_http_loopback(const vl_http_server *srv) { return srv->loopback; }

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

void vl_http_get_stats(vl_http_server *srv, vl_http_stats *st) {
  pthread_mutex_lock(&srv->mu);
  st->requests = srv->requests;
  st->dropped = srv->dropped;
  st->accept_errors = srv->accept_errors;
  pthread_mutex_unlock(&srv->mu);
}

uint64_t vl_http_requests(vl_http_server *srv) {
  vl_http_stats st;
  vl_http_get_stats(srv, &st);
  return st.requests;
}

void vl_http_close(vl_http_server *srv) {
  if (!srv) return;
  ssize_t w;
  do w = write(srv->wake[1], "x", 1);
  while (w < 0 && errno == EINTR);
  /* The thread only ever blocks in poll(), which the byte ends: this join does not wait on a client. */
  pthread_join(srv->thread, NULL);
  close(srv->fd);
  close(srv->wake[0]);
  close(srv->wake[1]);
  if (srv->reserve >= 0) close(srv->reserve);
  pthread_mutex_destroy(&srv->mu);
  free(srv->body);
  free(srv);
}
