internal import CMosquitto

extension MQTTClient {
    /// The C callbacks: capture-free closures (C function pointers) that find their `ClientCore` through the
    /// userdata pointer. The `_v5` variants are used for both protocol versions: libmosquitto calls them for
    /// v3.1.1 too (with no properties), and they carry the CONNACK flags and v5 reason codes.
    static func installCallbacks(on handle: OpaquePointer) {
        mosquitto_connect_v5_callback_set(handle) { mosq, userdata, code, flags, _ in
            ClientCore.from(userdata).didConnect(mosq!, code: code, flags: flags)
        }
        mosquitto_disconnect_v5_callback_set(handle) { _, userdata, code, _ in
            ClientCore.from(userdata).didDisconnect(code: code)
        }
        mosquitto_publish_v5_callback_set(handle) { _, userdata, mid, code, _ in
            ClientCore.from(userdata).didPublish(mid: mid, code: code)
        }
        mosquitto_subscribe_v5_callback_set(handle) { _, userdata, mid, count, granted, _ in
            ClientCore.from(userdata).didSubscribe(mid: mid, granted: UnsafeBufferPointer(start: granted, count: Int(count)))
        }
        mosquitto_message_v5_callback_set(handle) { _, userdata, message, _ in
            guard let message = message?.pointee else { return }
            // libmosquitto frees topic and payload when the callback returns: copy both now.
            let payload = message.payloadlen > 0 && message.payload != nil
                ? [UInt8](UnsafeRawBufferPointer(start: message.payload, count: Int(message.payloadlen)))
                : []
            ClientCore.from(userdata).didReceive(MQTTMessage(
                topic: String(cString: message.topic),
                payload: payload,
                qos: Int(message.qos),
                retain: message.retain
            ))
        }
    }
}
