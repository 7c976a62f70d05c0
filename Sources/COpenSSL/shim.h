#pragma once
#include <openssl/hmac.h>
#include <openssl/evp.h>
#include <openssl/sha.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>

#include <openssl/core_names.h>
#include <openssl/params.h>

// HMAC-SHA256 without looking the algorithm up on every call: OpenSSL 3's one-shot HMAC() fetches "HMAC" and the
// digest by name each time (a property-query lookup under a lock). The caller keeps one context with the digest set,
// made once by `flare_hmac_sha256_template`, and each call works on a copy of it, so any number of threads may sign
// at once.
static inline EVP_MAC_CTX *flare_hmac_sha256_template(void) {
    EVP_MAC *mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
    if (mac == NULL) return NULL;
    EVP_MAC_CTX *context = EVP_MAC_CTX_new(mac);
    EVP_MAC_free(mac);  // the context keeps its own reference
    if (context == NULL) return NULL;
    char digest[] = "SHA256";
    OSSL_PARAM parameters[] = { OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0), OSSL_PARAM_construct_end() };
    if (EVP_MAC_CTX_set_params(context, parameters) != 1) {
        EVP_MAC_CTX_free(context);
        return NULL;
    }
    return context;
}

/// Writes the 32-byte HMAC-SHA256 of `message` under `key` into `out`, from a copy of `template`; 1 on success.
static inline int flare_hmac_sha256(const EVP_MAC_CTX *template, const unsigned char *key, size_t key_length,
                                    const unsigned char *message, size_t message_length, unsigned char *out) {
    if (template == NULL) return 0;
    EVP_MAC_CTX *context = EVP_MAC_CTX_dup(template);
    if (context == NULL) return 0;
    size_t written = 0;
    int ok = EVP_MAC_init(context, key, key_length, NULL) == 1 && EVP_MAC_update(context, message, message_length) == 1
        && EVP_MAC_final(context, out, &written, 32) == 1 && written == 32;
    EVP_MAC_CTX_free(context);
    return ok;
}
