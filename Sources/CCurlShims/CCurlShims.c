#include "CCurlShims.h"

CURLcode earshot_curl_setopt_long(CURL *handle, CURLoption option, long value) {
    return curl_easy_setopt(handle, option, value);
}

CURLcode earshot_curl_setopt_pointer(CURL *handle, CURLoption option, const void *value) {
    return curl_easy_setopt(handle, option, value);
}

static size_t earshot_curl_discard(char *data, size_t size, size_t count, void *user) {
    (void)data;
    (void)user;
    return size * count;
}

CURLcode earshot_curl_discard_body(CURL *handle) {
    return curl_easy_setopt(handle, CURLOPT_WRITEFUNCTION, earshot_curl_discard);
}

CURLcode earshot_curl_getinfo_long(CURL *handle, CURLINFO info, long *value) {
    return curl_easy_getinfo(handle, info, value);
}
