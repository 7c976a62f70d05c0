#pragma once
#include <curl/curl.h>
#include <string.h>

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

static inline CURLcode flare_curl_getinfo_off_t(CURL *handle, CURLINFO info, curl_off_t *value) {
    return curl_easy_getinfo(handle, info, value);
}

// An upload (an SMTP message) read from one buffer the caller keeps alive until curl_easy_perform returns.
struct flare_curl_upload {
    const char *bytes;
    size_t length;
    size_t offset;
};

static size_t flare_curl_read(char *buffer, size_t size, size_t count, void *context) {
    struct flare_curl_upload *upload = (struct flare_curl_upload *)context;
    size_t room = size * count;
    size_t left = upload->length - upload->offset;
    size_t taken = left < room ? left : room;
    if (taken > 0) {
        memcpy(buffer, upload->bytes + upload->offset, taken);
        upload->offset += taken;
    }
    return taken;
}

static inline CURLcode flare_curl_upload_from(CURL *handle, struct flare_curl_upload *upload) {
    CURLcode code = curl_easy_setopt(handle, CURLOPT_READFUNCTION, flare_curl_read);
    if (code != CURLE_OK) return code;
    code = curl_easy_setopt(handle, CURLOPT_READDATA, (void *)upload);
    if (code != CURLE_OK) return code;
    return curl_easy_setopt(handle, CURLOPT_UPLOAD, 1L);
}
