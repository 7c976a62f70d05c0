internal import COpenSSL

extension Crypto {
    /// AES-128-GCM under the caller's key and 12-byte nonce: ciphertext ‖ 16-byte tag. For protocols that fix the key
    /// size and derive the nonce themselves (RFC 8188's `aes128gcm`, which Web Push encrypts with); Flare's own sealed
    /// data uses `seal`, which draws a fresh nonce. A nonce must never repeat under one key: the protocol's job here.
    /// Nil for a key that is not 16 bytes, a nonce that is not 12, or an OpenSSL failure.
    public static func aes128GCMSeal(key: [UInt8], nonce: [UInt8], plaintext: [UInt8]) -> [UInt8]? {
        guard key.count == 16, nonce.count == 12, let cipher = EVP_CIPHER_CTX_new() else { return nil }
        defer { EVP_CIPHER_CTX_free(cipher) }
        var output = [UInt8](repeating: 0, count: plaintext.count + 16)
        var length: Int32 = 0, total = 0
        guard EVP_EncryptInit_ex(cipher, EVP_aes_128_gcm(), nil, key, nonce) == 1 else { return nil }
        if !plaintext.isEmpty {
            let updated = output.withUnsafeMutableBufferPointer { out in
                EVP_EncryptUpdate(cipher, out.baseAddress, &length, plaintext, Int32(plaintext.count))
            }
            guard updated == 1 else { return nil }
            total = Int(length)
        }
        let finished = output.withUnsafeMutableBufferPointer { out in EVP_EncryptFinal_ex(cipher, out.baseAddress! + total, &length) }
        guard finished == 1 else { return nil }
        total += Int(length)
        var tag = [UInt8](repeating: 0, count: 16)
        guard EVP_CIPHER_CTX_ctrl(cipher, EVP_CTRL_GCM_GET_TAG, 16, &tag) == 1 else { return nil }
        return output.prefix(total) + tag
    }

    /// Opens what `aes128GCMSeal` made under the same key and nonce; nil if any byte was changed, the key or nonce
    /// differs, or the input is shorter than a tag.
    public static func aes128GCMOpen(key: [UInt8], nonce: [UInt8], sealed: [UInt8]) -> [UInt8]? {
        guard key.count == 16, nonce.count == 12, sealed.count >= 16, let cipher = EVP_CIPHER_CTX_new() else { return nil }
        defer { EVP_CIPHER_CTX_free(cipher) }
        let body = Array(sealed.dropLast(16))
        var tag = Array(sealed.suffix(16))
        var output = [UInt8](repeating: 0, count: body.count + 16)
        var length: Int32 = 0, total = 0
        guard EVP_DecryptInit_ex(cipher, EVP_aes_128_gcm(), nil, key, nonce) == 1 else { return nil }
        if !body.isEmpty {
            let updated = output.withUnsafeMutableBufferPointer { out in
                EVP_DecryptUpdate(cipher, out.baseAddress, &length, body, Int32(body.count))
            }
            guard updated == 1 else { return nil }
            total = Int(length)
        }
        guard EVP_CIPHER_CTX_ctrl(cipher, EVP_CTRL_GCM_SET_TAG, 16, &tag) == 1 else { return nil }
        let finished = output.withUnsafeMutableBufferPointer { out in EVP_DecryptFinal_ex(cipher, out.baseAddress! + total, &length) }
        guard finished == 1 else { return nil }
        return Array(output.prefix(total + Int(length)))
    }
}
