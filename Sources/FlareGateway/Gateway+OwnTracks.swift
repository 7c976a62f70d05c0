import FlareAPI
import FlareBridge
import FlareCore
import FlareHTTP
import FlareQR

/// OwnTracks provisioning: the share's `_type: configuration` for the iOS and Android apps, so a phone that has
/// OwnTracks installed starts publishing into the share after one tap or one scan.
///
/// The configuration holds the device token, so nothing here is reachable without a bearer credential and no
/// token ever appears in a URL that Flare serves or logs:
/// - `GET /api/v1/shares/{id}/owntracks` — the JSON (owner key or the share's device token: an app that already
///   holds the token may fetch it and hand it to OwnTracks);
/// - `GET /api/v1/shares/{id}/owntracks.otrc` — the same as a download (`Content-Disposition: attachment`);
/// - `GET /api/v1/shares/{id}/owntracks/link` — `{"url":"owntracks:///config?inline=…"}`;
/// - `GET /api/v1/shares/{id}/owntracks/qr.png`, `…/qr.svg` — that link as a QR code, owner key only: it is
///   meant for the owner's screen, for the phone to scan.
extension Gateway {
    func ownTracksConfiguration(_ request: HTTPRequest, id text: String, download: Bool) -> HTTPResponse {
        switch ownTracksConfiguration(request, id: text, ownerOnly: false) {
        case .failure(let error):
            return error.response
        case .success(let configuration):
            var response = HTTPResponse.json(200, configuration.json)
            if download {
                response.headers = [("Content-Type", "application/octet-stream"), ("Cache-Control", "no-store"),
                                    ("Content-Disposition", "attachment; filename=\"flare-\(configuration.shareID.rawValue).otrc\"")]
            }
            return response
        }
    }

    func ownTracksResource(_ request: HTTPRequest, id text: String, name: String) -> HTTPResponse {
        guard ["link", "qr.png", "qr.svg"].contains(name) else { return APIError.notFound("no such endpoint").response }
        switch ownTracksConfiguration(request, id: text, ownerOnly: name != "link") {
        case .failure(let error):
            return error.response
        case .success(let configuration):
            let link = configuration.inlineURL
            if name == "link" { return .api(200, OwnTracksLink(url: link)) }
            let code: QRCode
            do { code = try QRCode(link) } catch {
                logger.error("OwnTracks QR code for share \(configuration.shareID): \(error)")
                return APIError(status: 500, code: "qr_failed", message: "the configuration does not fit in a QR code").response
            }
            let (type, body) = name == "qr.png" ? ("image/png", code.png()) : ("image/svg+xml", Array(code.svg().utf8))
            return HTTPResponse(status: 200, headers: [("Content-Type", type), ("Cache-Control", "no-store")], body: .bytes(body))
        }
    }

    private func ownTracksConfiguration(_ request: HTTPRequest, id text: String, ownerOnly: Bool) -> Result<OwnTracksConfiguration, APIError> {
        guard let id = ShareID(text) else { return .failure(.shareNotFound) }
        let found = shares.share(id)
        guard let caller = authenticate(request, share: id, allowDevice: !ownerOnly) else {
            if let found, !found.share.isActive { return .failure(.shareEnded) }
            return .failure(.unauthorized)
        }
        // The owner may learn that a share existed; a device caller only ever holds an active share's token.
        guard let found, case .live(let snapshot) = found else {
            return .failure(caller == .owner && found != nil ? .shareEnded : .shareNotFound)
        }
        guard snapshot.share.isActive else { return .failure(.shareEnded) }
        guard let broker = MQTTURL(configuration.mqttPublicURL) else {
            logger.error("FLARE_MQTT_PUBLIC_URL is not mqtt://host:port or mqtts://host:port; cannot provision OwnTracks")
            return .failure(APIError(status: 500, code: "misconfigured", message: "the server's public MQTT address is not set up"))
        }
        return .success(OwnTracksConfiguration(shareID: id, deviceToken: shares.deviceToken(for: snapshot.share),
                                               broker: broker, shareName: snapshot.share.name))
    }
}
