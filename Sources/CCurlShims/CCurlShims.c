#include "CCurlShims.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

static struct {
    CURLcode (*global_init)(long flags);
    CURL *(*easy_init)(void);
    void (*easy_cleanup)(CURL *);
    void (*easy_reset)(CURL *);
    CURLcode (*easy_perform)(CURL *);
    const char *(*easy_strerror)(CURLcode);
    CURLcode (*easy_setopt)(CURL *, CURLoption, ...);
    CURLcode (*easy_getinfo)(CURL *, CURLINFO, ...);
    struct curl_slist *(*slist_append)(struct curl_slist *, const char *);
    void (*slist_free_all)(struct curl_slist *);
} curl;

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static const char *load_failure = "not loaded";
static char load_failure_text[512];

static int resolve(void *handle, void **slot, const char *name, const char *library) {
    *slot = dlsym(handle, name);
    if (*slot == NULL) {
        snprintf(load_failure_text, sizeof load_failure_text, "%s lacks %s", library, name);
        load_failure = load_failure_text;
        return 0;
    }
    return 1;
}

static void load(void) {
    static const char *const names[] = {"libcurl.so.4", "libcurl-gnutls.so.4"};
    void *handle = NULL;
    const char *name = NULL;
    for (size_t i = 0; i < sizeof names / sizeof names[0] && handle == NULL; i++) {
        name = names[i];
        handle = dlopen(name, RTLD_NOW | RTLD_LOCAL);
        // The reason given is the first name's (the library Debian's libcurl4 installs), not the fallback's.
        const char *reason = handle == NULL ? dlerror() : NULL;
        if (i == 0 && reason != NULL) snprintf(load_failure_text, sizeof load_failure_text, "%s", reason);
    }
    if (handle == NULL) {
        if (load_failure_text[0] == 0) snprintf(load_failure_text, sizeof load_failure_text, "libcurl.so.4: not found");
        load_failure = load_failure_text;
        return;
    }
    if (!resolve(handle, (void **)&curl.global_init, "curl_global_init", name)
        || !resolve(handle, (void **)&curl.easy_init, "curl_easy_init", name)
        || !resolve(handle, (void **)&curl.easy_cleanup, "curl_easy_cleanup", name)
        || !resolve(handle, (void **)&curl.easy_reset, "curl_easy_reset", name)
        || !resolve(handle, (void **)&curl.easy_perform, "curl_easy_perform", name)
        || !resolve(handle, (void **)&curl.easy_strerror, "curl_easy_strerror", name)
        || !resolve(handle, (void **)&curl.easy_setopt, "curl_easy_setopt", name)
        || !resolve(handle, (void **)&curl.easy_getinfo, "curl_easy_getinfo", name)
        || !resolve(handle, (void **)&curl.slist_append, "curl_slist_append", name)
        || !resolve(handle, (void **)&curl.slist_free_all, "curl_slist_free_all", name)) {
        return;
    }
    // Thread-safe from libcurl 7.84 on (Debian 12 has 7.88); pthread_once makes it once per process anyway.
    CURLcode initialized = curl.global_init(CURL_GLOBAL_DEFAULT);
    if (initialized != CURLE_OK) {
        snprintf(load_failure_text, sizeof load_failure_text, "curl_global_init failed: %s", curl.easy_strerror(initialized));
        load_failure = load_failure_text;
        return;
    }
    load_failure = NULL;
}

const char *earshot_curl_load(void) {
    pthread_once(&load_once, load);
    return load_failure;
}

CURL *earshot_curl_easy_init(void) { return curl.easy_init(); }
void earshot_curl_easy_cleanup(CURL *handle) { curl.easy_cleanup(handle); }
void earshot_curl_easy_reset(CURL *handle) { curl.easy_reset(handle); }
CURLcode earshot_curl_easy_perform(CURL *handle) { return curl.easy_perform(handle); }
const char *earshot_curl_easy_strerror(CURLcode code) { return curl.easy_strerror(code); }
struct curl_slist *earshot_curl_slist_append(struct curl_slist *list, const char *text) {
    return curl.slist_append(list, text);
}
void earshot_curl_slist_free_all(struct curl_slist *list) { curl.slist_free_all(list); }

CURLcode earshot_curl_setopt_long(CURL *handle, CURLoption option, long value) {
    return curl.easy_setopt(handle, option, value);
}

CURLcode earshot_curl_setopt_pointer(CURL *handle, CURLoption option, const void *value) {
    return curl.easy_setopt(handle, option, value);
}

static size_t earshot_curl_discard(char *data, size_t size, size_t count, void *user) {
    (void)data;
    (void)user;
    return size * count;
}

CURLcode earshot_curl_discard_body(CURL *handle) {
    return curl.easy_setopt(handle, CURLOPT_WRITEFUNCTION, earshot_curl_discard);
}

CURLcode earshot_curl_getinfo_long(CURL *handle, CURLINFO info, long *value) {
    return curl.easy_getinfo(handle, info, value);
}

CURLcode earshot_curl_getinfo_off_t(CURL *handle, CURLINFO info, curl_off_t *value) {
    return curl.easy_getinfo(handle, info, value);
}
