internal import CMosquitto
import Glibc

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
        mosquitto_message_v5_callback_set(handle) { _, userdata, message, properties in
            guard let message = message?.pointee else { return }
            // libmosquitto frees topic and payload when the callback returns: copy both now.
            let payload = message.payloadlen > 0 && message.payload != nil
                ? [UInt8](UnsafeRawBufferPointer(start: message.payload, count: Int(message.payloadlen)))
                : []
            ClientCore.from(userdata).didReceive(MQTTMessage(
                topic: String(cString: message.topic),
                payload: payload,
                qos: Int(message.qos),
                retain: message.retain,
                userProperties: properties.map(MQTTClient.userProperties) ?? []
            ))
        }
    }

    /// Copies the user properties out of a received message's property list (libmosquitto frees it after the callback).
    private static func userProperties(_ list: OpaquePointer) -> [MQTTUserProperty] {
        var found: [MQTTUserProperty] = []
        var name: UnsafeMutablePointer<CChar>?
        var value: UnsafeMutablePointer<CChar>?
        var next = mosquitto_property_read_string_pair(list, Int32(MQTT_PROP_USER_PROPERTY.rawValue), &name, &value, false)
        while next != nil {
            if let name, let value { found.append(MQTTUserProperty(name: String(cString: name), value: String(cString: value))) }
            free(name)
            free(value)
            name = nil
            value = nil
            next = mosquitto_property_read_string_pair(next, Int32(MQTT_PROP_USER_PROPERTY.rawValue), &name, &value, true)
        }
        return found
    }
}
