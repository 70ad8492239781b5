// libmosquitto for the MQTT sink, loaded with dlopen the first time a connection is made
// (earshot_mosquitto_load), not linked: linked, libmosquitto and what it pulls in (libssl, libcrypto) cost every
// earshotd about 1.7 MB of resident memory, [mqtt] or not. The header gives the types and constants only; every
// call goes through the functions below, which have libmosquitto's signatures.
#ifndef EARSHOT_MOSQUITTO_SHIMS_H
#define EARSHOT_MOSQUITTO_SHIMS_H
#include <stdbool.h>
#include <mosquitto.h>

/// Loads libmosquitto (libmosquitto.so.1, Debian's libmosquitto1) and runs mosquitto_lib_init, once per process
/// (thread-safe). Returns NULL when it is ready, else why not (dlerror's text, a missing symbol or
/// mosquitto_lib_init's failure), a string that lives as long as the process. Call it, and see NULL, before any
/// function below.
const char *earshot_mosquitto_load(void);

struct mosquitto *earshot_mosquitto_new(const char *id, bool clean_session, void *context);
void earshot_mosquitto_destroy(struct mosquitto *handle);
int earshot_mosquitto_int_option(struct mosquitto *handle, enum mosq_opt_t option, int value);
void earshot_mosquitto_connect_callback_set(struct mosquitto *handle, void (*callback)(struct mosquitto *, void *, int));
void earshot_mosquitto_disconnect_callback_set(struct mosquitto *handle, void (*callback)(struct mosquitto *, void *, int));
void earshot_mosquitto_publish_callback_set(struct mosquitto *handle, void (*callback)(struct mosquitto *, void *, int));
void earshot_mosquitto_message_callback_set(
    struct mosquitto *handle, void (*callback)(struct mosquitto *, void *, const struct mosquitto_message *));
void earshot_mosquitto_log_callback_set(
    struct mosquitto *handle, void (*callback)(struct mosquitto *, void *, int, const char *));
int earshot_mosquitto_will_set(
    struct mosquitto *handle, const char *topic, int payload_length, const void *payload, int qos, bool retain);
int earshot_mosquitto_username_pw_set(struct mosquitto *handle, const char *username, const char *password);
int earshot_mosquitto_tls_set(
    struct mosquitto *handle, const char *cafile, const char *capath, const char *certfile, const char *keyfile,
    int (*password_callback)(char *buffer, int size, int rwflag, void *userdata));
int earshot_mosquitto_connect_async(struct mosquitto *handle, const char *host, int port, int keepalive);
int earshot_mosquitto_disconnect(struct mosquitto *handle);
int earshot_mosquitto_subscribe(struct mosquitto *handle, int *mid, const char *filter, int qos);
int earshot_mosquitto_publish(
    struct mosquitto *handle, int *mid, const char *topic, int payload_length, const void *payload, int qos,
    bool retain);
int earshot_mosquitto_loop_read(struct mosquitto *handle, int max_packets);
int earshot_mosquitto_loop_write(struct mosquitto *handle, int max_packets);
int earshot_mosquitto_loop_misc(struct mosquitto *handle);
int earshot_mosquitto_socket(struct mosquitto *handle);
bool earshot_mosquitto_want_write(struct mosquitto *handle);
const char *earshot_mosquitto_strerror(int code);
const char *earshot_mosquitto_connack_string(int code);

#endif
