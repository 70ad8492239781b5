#include "CMicroHTTPDShims.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

static struct {
    struct MHD_Daemon *(*start_daemon)(unsigned int, uint16_t, MHD_AcceptPolicyCallback, void *,
                                       MHD_AccessHandlerCallback, void *, ...);
    void (*stop_daemon)(struct MHD_Daemon *);
    struct MHD_Response *(*create_response_from_buffer)(size_t, void *, enum MHD_ResponseMemoryMode);
    void (*destroy_response)(struct MHD_Response *);
    enum MHD_Result (*add_response_header)(struct MHD_Response *, const char *, const char *);
    enum MHD_Result (*queue_response)(struct MHD_Connection *, unsigned int, struct MHD_Response *);
    const union MHD_ConnectionInfo *(*get_connection_info)(struct MHD_Connection *, enum MHD_ConnectionInfoType, ...);
} mhd;

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static const char *load_failure = "not loaded";
static char load_failure_text[512];

static int resolve(void *handle, void **slot, const char *name) {
    *slot = dlsym(handle, name);
    if (*slot == NULL) {
        snprintf(load_failure_text, sizeof load_failure_text, "libmicrohttpd.so.12 lacks %s", name);
        load_failure = load_failure_text;
        return 0;
    }
    return 1;
}

static void load(void) {
    void *handle = dlopen("libmicrohttpd.so.12", RTLD_NOW | RTLD_LOCAL);
    if (handle == NULL) {
        const char *reason = dlerror();
        snprintf(load_failure_text, sizeof load_failure_text, "%s", reason ? reason : "libmicrohttpd.so.12: not found");
        load_failure = load_failure_text;
        return;
    }
    if (!resolve(handle, (void **)&mhd.start_daemon, "MHD_start_daemon")
        || !resolve(handle, (void **)&mhd.stop_daemon, "MHD_stop_daemon")
        || !resolve(handle, (void **)&mhd.create_response_from_buffer, "MHD_create_response_from_buffer")
        || !resolve(handle, (void **)&mhd.destroy_response, "MHD_destroy_response")
        || !resolve(handle, (void **)&mhd.add_response_header, "MHD_add_response_header")
        || !resolve(handle, (void **)&mhd.queue_response, "MHD_queue_response")
        || !resolve(handle, (void **)&mhd.get_connection_info, "MHD_get_connection_info")) {
        return;
    }
    load_failure = NULL;
}

const char *earshot_mhd_load(void) {
    pthread_once(&load_once, load);
    return load_failure;
}

struct MHD_Daemon *earshot_mhd_start(int ipv6, int listen_fd, unsigned connection_limit, unsigned timeout_seconds,
                                     MHD_AccessHandlerCallback handler,
                                     MHD_NotifyConnectionCallback notify_connection,
                                     MHD_RequestCompletedCallback notify_completed, void *context) {
    // poll(2), not select(2): select cannot watch a descriptor of 1024 or more, and libmicrohttpd refuses such a
    // connection (a daemon with many socket clients and a raised LimitNOFILE).
    unsigned int flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL | (ipv6 ? MHD_USE_IPv6 : 0);
    return mhd.start_daemon(flags, 0, NULL, NULL, handler, context,
                            MHD_OPTION_LISTEN_SOCKET, (MHD_socket)listen_fd,
                            MHD_OPTION_CONNECTION_LIMIT, connection_limit,
                            MHD_OPTION_CONNECTION_TIMEOUT, timeout_seconds,
                            MHD_OPTION_NOTIFY_CONNECTION, notify_connection, context,
                            MHD_OPTION_NOTIFY_COMPLETED, notify_completed, context,
                            MHD_OPTION_END);
}

int earshot_mhd_connection_fd(struct MHD_Connection *connection) {
    const union MHD_ConnectionInfo *info = mhd.get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
    return info == NULL ? -1 : (int)info->connect_fd;
}

void earshot_mhd_stop(struct MHD_Daemon *daemon) { mhd.stop_daemon(daemon); }

struct MHD_Response *earshot_mhd_copied_response(size_t size, const void *data) {
    return mhd.create_response_from_buffer(size, (void *)data, MHD_RESPMEM_MUST_COPY);
}

void earshot_mhd_destroy_response(struct MHD_Response *response) { mhd.destroy_response(response); }

enum MHD_Result earshot_mhd_add_header(struct MHD_Response *response, const char *name, const char *value) {
    return mhd.add_response_header(response, name, value);
}

enum MHD_Result earshot_mhd_queue_response(struct MHD_Connection *connection, unsigned status,
                                           struct MHD_Response *response) {
    return mhd.queue_response(connection, status, response);
}
