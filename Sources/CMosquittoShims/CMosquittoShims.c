#include "CMosquittoShims.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

static struct {
    int (*lib_init)(void);
    struct mosquitto *(*new_)(const char *, bool, void *);
    void (*destroy)(struct mosquitto *);
    int (*int_option)(struct mosquitto *, enum mosq_opt_t, int);
    void (*connect_callback_set)(struct mosquitto *, void (*)(struct mosquitto *, void *, int));
    void (*disconnect_callback_set)(struct mosquitto *, void (*)(struct mosquitto *, void *, int));
    void (*publish_callback_set)(struct mosquitto *, void (*)(struct mosquitto *, void *, int));
    void (*message_callback_set)(struct mosquitto *, void (*)(struct mosquitto *, void *, const struct mosquitto_message *));
    void (*log_callback_set)(struct mosquitto *, void (*)(struct mosquitto *, void *, int, const char *));
    int (*will_set)(struct mosquitto *, const char *, int, const void *, int, bool);
    int (*username_pw_set)(struct mosquitto *, const char *, const char *);
    int (*tls_set)(struct mosquitto *, const char *, const char *, const char *, const char *, int (*)(char *, int, int, void *));
    int (*connect_async)(struct mosquitto *, const char *, int, int);
    int (*disconnect)(struct mosquitto *);
    int (*subscribe)(struct mosquitto *, int *, const char *, int);
    int (*publish)(struct mosquitto *, int *, const char *, int, const void *, int, bool);
    int (*loop_read)(struct mosquitto *, int);
    int (*loop_write)(struct mosquitto *, int);
    int (*loop_misc)(struct mosquitto *);
    int (*socket)(struct mosquitto *);
    bool (*want_write)(struct mosquitto *);
    const char *(*strerror)(int);
    const char *(*connack_string)(int);
} mosq;

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static const char *load_failure = "not loaded";
static char load_failure_text[512];

static int resolve(void *handle, void **slot, const char *name) {
    *slot = dlsym(handle, name);
    if (*slot == NULL) {
        snprintf(load_failure_text, sizeof load_failure_text, "libmosquitto.so.1 lacks %s", name);
        load_failure = load_failure_text;
        return 0;
    }
    return 1;
}

static void load(void) {
    void *handle = dlopen("libmosquitto.so.1", RTLD_NOW | RTLD_LOCAL);
    if (handle == NULL) {
        const char *reason = dlerror();
        snprintf(load_failure_text, sizeof load_failure_text, "%s", reason != NULL ? reason : "libmosquitto.so.1: not found");
        load_failure = load_failure_text;
        return;
    }
    if (!resolve(handle, (void **)&mosq.lib_init, "mosquitto_lib_init")
        || !resolve(handle, (void **)&mosq.new_, "mosquitto_new")
        || !resolve(handle, (void **)&mosq.destroy, "mosquitto_destroy")
        || !resolve(handle, (void **)&mosq.int_option, "mosquitto_int_option")
        || !resolve(handle, (void **)&mosq.connect_callback_set, "mosquitto_connect_callback_set")
        || !resolve(handle, (void **)&mosq.disconnect_callback_set, "mosquitto_disconnect_callback_set")
        || !resolve(handle, (void **)&mosq.publish_callback_set, "mosquitto_publish_callback_set")
        || !resolve(handle, (void **)&mosq.message_callback_set, "mosquitto_message_callback_set")
        || !resolve(handle, (void **)&mosq.log_callback_set, "mosquitto_log_callback_set")
        || !resolve(handle, (void **)&mosq.will_set, "mosquitto_will_set")
        || !resolve(handle, (void **)&mosq.username_pw_set, "mosquitto_username_pw_set")
        || !resolve(handle, (void **)&mosq.tls_set, "mosquitto_tls_set")
        || !resolve(handle, (void **)&mosq.connect_async, "mosquitto_connect_async")
        || !resolve(handle, (void **)&mosq.disconnect, "mosquitto_disconnect")
        || !resolve(handle, (void **)&mosq.subscribe, "mosquitto_subscribe")
        || !resolve(handle, (void **)&mosq.publish, "mosquitto_publish")
        || !resolve(handle, (void **)&mosq.loop_read, "mosquitto_loop_read")
        || !resolve(handle, (void **)&mosq.loop_write, "mosquitto_loop_write")
        || !resolve(handle, (void **)&mosq.loop_misc, "mosquitto_loop_misc")
        || !resolve(handle, (void **)&mosq.socket, "mosquitto_socket")
        || !resolve(handle, (void **)&mosq.want_write, "mosquitto_want_write")
        || !resolve(handle, (void **)&mosq.strerror, "mosquitto_strerror")
        || !resolve(handle, (void **)&mosq.connack_string, "mosquitto_connack_string")) {
        return;
    }
    // mosquitto_lib_init is not thread-safe; pthread_once makes it run once per process.
    int initialized = mosq.lib_init();
    if (initialized != MOSQ_ERR_SUCCESS) {
        snprintf(load_failure_text, sizeof load_failure_text, "mosquitto_lib_init failed: %s", mosq.strerror(initialized));
        load_failure = load_failure_text;
        return;
    }
    load_failure = NULL;
}

const char *earshot_mosquitto_load(void) {
    pthread_once(&load_once, load);
    return load_failure;
}

struct mosquitto *earshot_mosquitto_new(const char *id, bool clean_session, void *context) {
    return mosq.new_(id, clean_session, context);
}
void earshot_mosquitto_destroy(struct mosquitto *handle) { mosq.destroy(handle); }
int earshot_mosquitto_int_option(struct mosquitto *handle, enum mosq_opt_t option, int value) {
    return mosq.int_option(handle, option, value);
}
void earshot_mosquitto_connect_callback_set(struct mosquitto *handle, void (*callback)(struct mosquitto *, void *, int)) {
    mosq.connect_callback_set(handle, callback);
}
void earshot_mosquitto_disconnect_callback_set(struct mosquitto *handle, void (*callback)(struct mosquitto *, void *, int)) {
    mosq.disconnect_callback_set(handle, callback);
}
void earshot_mosquitto_publish_callback_set(struct mosquitto *handle, void (*callback)(struct mosquitto *, void *, int)) {
    mosq.publish_callback_set(handle, callback);
}
void earshot_mosquitto_message_callback_set(
    struct mosquitto *handle, void (*callback)(struct mosquitto *, void *, const struct mosquitto_message *)) {
    mosq.message_callback_set(handle, callback);
}
void earshot_mosquitto_log_callback_set(
    struct mosquitto *handle, void (*callback)(struct mosquitto *, void *, int, const char *)) {
    mosq.log_callback_set(handle, callback);
}
int earshot_mosquitto_will_set(
    struct mosquitto *handle, const char *topic, int payload_length, const void *payload, int qos, bool retain) {
    return mosq.will_set(handle, topic, payload_length, payload, qos, retain);
}
int earshot_mosquitto_username_pw_set(struct mosquitto *handle, const char *username, const char *password) {
    return mosq.username_pw_set(handle, username, password);
}
int earshot_mosquitto_tls_set(
    struct mosquitto *handle, const char *cafile, const char *capath, const char *certfile, const char *keyfile,
    int (*password_callback)(char *buffer, int size, int rwflag, void *userdata)) {
    return mosq.tls_set(handle, cafile, capath, certfile, keyfile, password_callback);
}
int earshot_mosquitto_connect_async(struct mosquitto *handle, const char *host, int port, int keepalive) {
    return mosq.connect_async(handle, host, port, keepalive);
}
int earshot_mosquitto_disconnect(struct mosquitto *handle) { return mosq.disconnect(handle); }
int earshot_mosquitto_subscribe(struct mosquitto *handle, int *mid, const char *filter, int qos) {
    return mosq.subscribe(handle, mid, filter, qos);
}
int earshot_mosquitto_publish(
    struct mosquitto *handle, int *mid, const char *topic, int payload_length, const void *payload, int qos,
    bool retain) {
    return mosq.publish(handle, mid, topic, payload_length, payload, qos, retain);
}
int earshot_mosquitto_loop_read(struct mosquitto *handle, int max_packets) { return mosq.loop_read(handle, max_packets); }
int earshot_mosquitto_loop_write(struct mosquitto *handle, int max_packets) { return mosq.loop_write(handle, max_packets); }
int earshot_mosquitto_loop_misc(struct mosquitto *handle) { return mosq.loop_misc(handle); }
int earshot_mosquitto_socket(struct mosquitto *handle) { return mosq.socket(handle); }
bool earshot_mosquitto_want_write(struct mosquitto *handle) { return mosq.want_write(handle); }
const char *earshot_mosquitto_strerror(int code) { return mosq.strerror(code); }
const char *earshot_mosquitto_connack_string(int code) { return mosq.connack_string(code); }
