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

#include <openssl/bn.h>
#include <openssl/ec.h>
#include <openssl/obj_mac.h>
#include <openssl/param_build.h>

// A P-256 key from its bytes: `public_key` the 65-byte uncompressed point, `private_key` the 32-byte big-endian scalar
// or NULL for a public key alone. In C rather than Swift because OSSL_PARAM_BLD keeps each name and value by reference
// until OSSL_PARAM_BLD_to_param: the C strings Swift makes for a call are gone by then. The caller checks the bytes
// (the scalar in range, the point on the curve) and frees the key with EVP_PKEY_free; NULL on any failure.
static inline EVP_PKEY *flare_p256_key(const unsigned char *private_key, const unsigned char *public_key) {
    EVP_PKEY *key = NULL;
    // A secure BIGNUM: OSSL_PARAM_BLD_to_param copies it into the parameters' secure block, which OSSL_PARAM_free clears.
    BIGNUM *scalar = private_key == NULL ? NULL : BN_secure_new();
    if (scalar != NULL && BN_bin2bn(private_key, 32, scalar) == NULL) {
        BN_clear_free(scalar);
        return NULL;
    }
    OSSL_PARAM_BLD *builder = OSSL_PARAM_BLD_new();
    OSSL_PARAM *parameters = NULL;
    EVP_PKEY_CTX *context = NULL;
    int built = builder != NULL && (private_key == NULL || scalar != NULL)
        && OSSL_PARAM_BLD_push_utf8_string(builder, OSSL_PKEY_PARAM_GROUP_NAME, "prime256v1", 0) == 1
        && OSSL_PARAM_BLD_push_octet_string(builder, OSSL_PKEY_PARAM_PUB_KEY, public_key, 65) == 1
        && (scalar == NULL || OSSL_PARAM_BLD_push_BN(builder, OSSL_PKEY_PARAM_PRIV_KEY, scalar) == 1)
        && (parameters = OSSL_PARAM_BLD_to_param(builder)) != NULL
        && (context = EVP_PKEY_CTX_new_from_name(NULL, "EC", NULL)) != NULL
        && EVP_PKEY_fromdata_init(context) == 1;
    if (built && EVP_PKEY_fromdata(context, &key, scalar == NULL ? EVP_PKEY_PUBLIC_KEY : EVP_PKEY_KEYPAIR, parameters) != 1) {
        key = NULL;
    }
    EVP_PKEY_CTX_free(context);
    OSSL_PARAM_free(parameters);
    OSSL_PARAM_BLD_free(builder);
    BN_clear_free(scalar);
    return key;
}
