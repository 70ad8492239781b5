// libcurl for the notification sink, loaded with dlopen the first time a sink needs it (earshot_curl_load), not
// linked: linked, libcurl and what it pulls in (GnuTLS, Kerberos, LDAP, SSH, ... 24 shared objects) cost every
// earshotd about 3 MB of resident memory, [notify] or not. The header gives the types and constants only; every
// call goes through the functions below. curl_easy_setopt and curl_easy_getinfo are variadic, which Swift cannot
// call: they get typed wrappers.
#ifndef EARSHOT_CURL_SHIMS_H
#define EARSHOT_CURL_SHIMS_H
#include <curl/curl.h>

/// Loads libcurl (libcurl.so.4, Debian's libcurl4; else libcurl-gnutls.so.4) and runs curl_global_init, once per
/// process (thread-safe). Returns NULL when it is ready, else why not (dlerror's text, a missing symbol or
/// curl_global_init's failure), a string that lives as long as the process. Call it, and see NULL, before any
/// function below.
const char *earshot_curl_load(void);

CURL *earshot_curl_easy_init(void);
void earshot_curl_easy_cleanup(CURL *handle);
void earshot_curl_easy_reset(CURL *handle);
CURLcode earshot_curl_easy_perform(CURL *handle);
const char *earshot_curl_easy_strerror(CURLcode code);
struct curl_slist *earshot_curl_slist_append(struct curl_slist *list, const char *text);
void earshot_curl_slist_free_all(struct curl_slist *list);

/// `curl_easy_setopt` with a `long` argument (CURLOPT_TIMEOUT_MS, CURLOPT_NOSIGNAL, CURLOPT_POSTFIELDSIZE, ...).
CURLcode earshot_curl_setopt_long(CURL *handle, CURLoption option, long value);
/// `curl_easy_setopt` with a pointer argument (CURLOPT_URL, CURLOPT_POSTFIELDS, CURLOPT_HTTPHEADER, ...).
CURLcode earshot_curl_setopt_pointer(CURL *handle, CURLoption option, const void *value);
/// `curl_easy_setopt(handle, CURLOPT_WRITEFUNCTION, ...)` with a callback that discards the response body.
CURLcode earshot_curl_discard_body(CURL *handle);
/// `curl_easy_getinfo` with a `long` result (CURLINFO_RESPONSE_CODE).
CURLcode earshot_curl_getinfo_long(CURL *handle, CURLINFO info, long *value);
/// `curl_easy_getinfo` with a `curl_off_t` result (CURLINFO_RETRY_AFTER: the answer's `Retry-After` in seconds, 0
/// when there was none; libcurl reads both the seconds and the HTTP-date forms).
CURLcode earshot_curl_getinfo_off_t(CURL *handle, CURLINFO info, curl_off_t *value);

#endif
