// libmicrohttpd for the metrics endpoint, loaded with dlopen the first time it is needed (earshot_mhd_load), not
// linked: linked, libmicrohttpd and GnuTLS cost every earshotd about 1.5 MB of resident memory, [metrics] on or
// off. The header gives the types and constants only; every call goes through the functions below.
#ifndef EARSHOT_MHD_SHIMS_H
#define EARSHOT_MHD_SHIMS_H
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <microhttpd.h>

/// Loads libmicrohttpd (libmicrohttpd.so.12, Debian's libmicrohttpd12), once per process (thread-safe). Returns
/// NULL when it is ready, else why not (dlerror's text or a missing symbol), a string that lives as long as the
/// process. Call it, and see NULL, before any function below.
const char *earshot_mhd_load(void);

/// `MHD_start_daemon` with an internal polling thread using poll(2) (and IPv6 where `ipv6`) on the listening
/// socket `listen_fd`, at most `connection_limit` connections, each closed after `timeout_seconds` idle;
/// `notify_connection` is told of each connection opened and closed (closed before its descriptor is), and
/// `notify_completed` of each request answered; `context` goes to all three callbacks. NULL on failure.
struct MHD_Daemon *earshot_mhd_start(int ipv6, int listen_fd, unsigned connection_limit, unsigned timeout_seconds,
                                     MHD_AccessHandlerCallback handler,
                                     MHD_NotifyConnectionCallback notify_connection,
                                     MHD_RequestCompletedCallback notify_completed, void *context);
/// The socket descriptor of `connection` (`MHD_get_connection_info`, `MHD_CONNECTION_INFO_CONNECTION_FD`), -1 when
/// libmicrohttpd does not say.
int earshot_mhd_connection_fd(struct MHD_Connection *connection);
void earshot_mhd_stop(struct MHD_Daemon *daemon);
/// A response holding a copy of `size` bytes at `data` (MHD_RESPMEM_MUST_COPY).
struct MHD_Response *earshot_mhd_copied_response(size_t size, const void *data);
void earshot_mhd_destroy_response(struct MHD_Response *response);
enum MHD_Result earshot_mhd_add_header(struct MHD_Response *response, const char *name, const char *value);
enum MHD_Result earshot_mhd_queue_response(struct MHD_Connection *connection, unsigned status,
                                           struct MHD_Response *response);

#endif
