import Foundation

/// Devices, the owner's side (owner key): standing SOS triggers, one secret each. `DeviceClient` is the device's side.
extension FlareClient {
    /// A new device; the answer holds its `secret`, shown this once (the server keeps only its hash), and the setup of
    /// each app with the secret filled in. Not retried: a retry after a lost answer would leave a second device.
    public func createDevice(_ device: DeviceRequest) async throws(FlareClientError) -> CreatedDevice {
        guard let ownerKey else { throw .missingCredential("adding a device needs an owner key") }
        return try await call("POST", "api/v1/devices", bearer: ownerKey, encodable: device, expecting: 201, retry: RetryPolicy(maxAttempts: 1))
    }

    /// One page of the key's devices, newest first. Pass the page's `nextCursor` to get the next one.
    public func listDevices(limit: Int? = nil, cursor: String? = nil) async throws(FlareClientError) -> DeviceList {
        try await page("api/v1/devices", limit: limit, cursor: cursor, doing: "listing devices")
    }

    /// The device as its owner sees it: its settings (never its secret or PINs), when Flare last heard from it, its SOS.
    public func device(_ deviceID: String) async throws(FlareClientError) -> DeviceInfo {
        guard let ownerKey else { throw .missingCredential("reading a device needs an owner key") }
        return try await call("GET", "api/v1/devices/\(try Self.pathComponent(deviceID))", bearer: ownerKey, body: nil, expecting: 200)
    }

    /// Changes only the members `change` holds (`pin: ""` removes the PIN and the duress PIN).
    public func changeDevice(_ deviceID: String, _ change: DeviceRequest) async throws(FlareClientError) -> DeviceInfo {
        guard let ownerKey else { throw .missingCredential("changing a device needs an owner key") }
        return try await call("PATCH", "api/v1/devices/\(try Self.pathComponent(deviceID))", bearer: ownerKey, encodable: change,
                              expecting: 200, retry: retry)
    }

    /// Removes the device: its secret stops working. An SOS it started runs on until it ends (`stopShare`).
    public func removeDevice(_ deviceID: String) async throws(FlareClientError) {
        guard let ownerKey else { throw .missingCredential("removing a device needs an owner key") }
        _ = try await send("DELETE", "api/v1/devices/\(try Self.pathComponent(deviceID))", query: [], bearer: ownerKey, body: nil,
                           expecting: 204, retry: retry)
    }

    /// A new secret for the device, shown this once with the setup filled in; the old secret stops at once.
    public func newDeviceSecret(_ deviceID: String) async throws(FlareClientError) -> CreatedDevice {
        guard let ownerKey else { throw .missingCredential("a new device secret needs an owner key") }
        return try await call("POST", "api/v1/devices/\(try Self.pathComponent(deviceID))/secret", bearer: ownerKey, body: nil, expecting: 200)
    }

    /// What each app needs, with `<secret>` where the secret goes (the server no longer has it), and when Flare last
    /// heard from the device: the test of a setup.
    public func deviceSetup(_ deviceID: String) async throws(FlareClientError) -> DeviceSetup {
        guard let ownerKey else { throw .missingCredential("a device's setup needs an owner key") }
        return try await call("GET", "api/v1/devices/\(try Self.pathComponent(deviceID))/setup", bearer: ownerKey, body: nil, expecting: 200)
    }
}
