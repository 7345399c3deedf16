/* ext/telemetry/http.h: a tiny HTTP/1.1 server for Prometheus scrapes: one thread polling
 * up to VL_HTTP_MAX_CONN non-blocking connections, GET (or HEAD) of one path answered with the
 * body last set, everything else 404/405, one request per connection. The body is replaced by the
 * training loop (vl_http_set_body) and served by the thread; a scraper never sees half an update.
 *
 * It listens on a numeric address, 127.0.0.1 by default (loopback: reached from the node itself,
 * e.g. by a node-local Prometheus agent or kubectl port-forward); "0.0.0.0" or "::" listen on
 * every interface. Port 0 takes a free port (vl_http_port says which, vl_http_addr the bound
 * address in numeric form, so "0" reads back as "0.0.0.0").
 *
 * Limits (per connection, from its accept, whatever the client sends): VL_HTTP_READ_MS to send the
 * request head, VL_HTTP_WRITE_MS more to take the answer. When every slot is taken, or accept runs
 * out of descriptors, the oldest connection still sending its request (and older than
 * VL_HTTP_GRACE_MS) is dropped; with nothing to
 * drop, accepting pauses VL_HTTP_BACKOFF_MS. vl_http_close never waits on a client. */
#ifndef VL_HTTP_H
#define VL_HTTP_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#include <stdbool.h>

#define VL_HTTP_MAX_CONN 32
#define VL_HTTP_READ_MS 2000
#define VL_HTTP_WRITE_MS 5000
#define VL_HTTP_BACKOFF_MS 100
/* A connection this young is not dropped to make room: a scraper accepted just before its request
 * arrived would be, once older ones are gone. Short, because a burst of idle connections queued
 * ahead of a scraper is taken (and dropped) at one per this much under EMFILE. */
#define VL_HTTP_GRACE_MS 10

typedef struct vl_http_server vl_http_server;

typedef struct vl_http_stats {
  uint64_t requests;      /* answered (any status) */
  uint64_t dropped;       /* closed before their request was complete: timed out or made room */
  uint64_t accept_errors; /* accept() failures other than "nothing pending" (EMFILE, ...) */
} vl_http_stats;

/* path: the served path, e.g. "/metrics"; content_type: its Content-Type. */
vl_status vl_http_serve(const char *addr, int port, const char *path, const char *content_type, vl_http_server **out);
int vl_http_port(const vl_http_server *srv);
/* The bound address, numeric ("127.0.0.1", "0.0.0.0", "::"), and whether it is loopback only. */
const char *vl_http_addr(const vl_http_server *srv);
bool vl_http_loopback(const vl_http_server *srv);
vl_status vl_http_set_body(vl_http_server *srv, const char *body, size_t len);
/* Requests answered (any status). */
uint64_t vl_http_requests(vl_http_server *srv);
void vl_http_get_stats(vl_http_server *srv, vl_http_stats *st);
/* Stops the thread and closes the socket; NULL is a no-op. */
void vl_http_close(vl_http_server *srv);

#ifdef __cplusplus
}
#endif
#endif
