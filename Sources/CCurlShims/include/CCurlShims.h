// Typed wrappers of libcurl's variadic `curl_easy_setopt` and `curl_easy_getinfo`, which Swift cannot call.
#ifndef EARSHOT_CURL_SHIMS_H
#define EARSHOT_CURL_SHIMS_H
#include <curl/curl.h>

/// `curl_easy_setopt` with a `long` argument (CURLOPT_TIMEOUT_MS, CURLOPT_NOSIGNAL, CURLOPT_POSTFIELDSIZE, ...).
CURLcode earshot_curl_setopt_long(CURL *handle, CURLoption option, long value);
/// `curl_easy_setopt` with a pointer argument (CURLOPT_URL, CURLOPT_POSTFIELDS, CURLOPT_HTTPHEADER, ...).
CURLcode earshot_curl_setopt_pointer(CURL *handle, CURLoption option, const void *value);
/// `curl_easy_setopt(handle, CURLOPT_WRITEFUNCTION, ...)` with a callback that discards the response body.
CURLcode earshot_curl_discard_body(CURL *handle);
/// `curl_easy_getinfo` with a `long` result (CURLINFO_RESPONSE_CODE).
CURLcode earshot_curl_getinfo_long(CURL *handle, CURLINFO info, long *value);

#endif
