#pragma once
#include <curl/curl.h>

// Swift cannot call C variadic functions: curl_easy_setopt and curl_easy_getinfo are reached through these
// fixed-signature wrappers, one per argument type libcurl reads with va_arg (long, curl_off_t, char *, a pointer).

static inline CURLcode flare_curl_setopt_long(CURL *handle, CURLoption option, long value) {
    return curl_easy_setopt(handle, option, value);
}

static inline CURLcode flare_curl_setopt_off_t(CURL *handle, CURLoption option, curl_off_t value) {
    return curl_easy_setopt(handle, option, value);
}

static inline CURLcode flare_curl_setopt_string(CURL *handle, CURLoption option, const char *value) {
    return curl_easy_setopt(handle, option, value);
}

static inline CURLcode flare_curl_setopt_list(CURL *handle, CURLoption option, struct curl_slist *value) {
    return curl_easy_setopt(handle, option, value);
}

// The answer's body is not read: only its status counts. Without a write function of its own libcurl writes the
// body to stdout.
static size_t flare_curl_discard(char *data, size_t size, size_t count, void *context) {
    (void)data;
    (void)context;
    return size * count;
}

static inline CURLcode flare_curl_discard_body(CURL *handle) {
    return curl_easy_setopt(handle, CURLOPT_WRITEFUNCTION, flare_curl_discard);
}

static inline CURLcode flare_curl_getinfo_long(CURL *handle, CURLINFO info, long *value) {
    return curl_easy_getinfo(handle, info, value);
}
