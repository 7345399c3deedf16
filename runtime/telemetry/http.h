/* runtime/telemetry/http.h: a tiny HTTP/1.1 server for Prometheus scrapes: one thread, one
 * connection at a time, GET (or HEAD) of one path answered with the body last set, everything
 * else 404/405. The body is replaced by the training loop (vl_http_set_body) and served by the
 * thread; a scraper never sees half an update.
 *
 * It listens on a numeric address, 127.0.0.1 by default (loopback: reached from the node itself,
 * e.g. by a node-local Prometheus agent or kubectl port-forward); "0.0.0.0" or "::" listen on
 * every interface. Port 0 takes a free port (vl_http_port says which). A client gets 2 seconds
 * to send its request and to take the answer, so a stuck client cannot hold the thread. */
#ifndef VL_HTTP_H
#define VL_HTTP_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct vl_http_server vl_http_server;

/* path: the served path, e.g. "/metrics"; content_type: its Content-Type. */
vl_status vl_http_serve(const char *addr, int port, const char *path, const char *content_type, vl_http_server **out);
int vl_http_port(const vl_http_server *srv);
vl_status vl_http_set_body(vl_http_server *srv, const char *body, size_t len);
/* Requests answered (any status). */
uint64_t vl_http_requests(vl_http_server *srv);
/* Stops the thread and closes the socket; NULL is a no-op. */
void vl_http_close(vl_http_server *srv);

#ifdef __cplusplus
}
#endif
#endif
