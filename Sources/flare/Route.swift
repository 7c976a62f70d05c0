/// A built-in walking route (a loop through central Munich) for `flare track`, so anyone can watch a share move
/// without a phone. Positions are interpolated along the loop at a given speed.
struct Route {
    static let waypoints: [(Double, Double)] = [
        (48.13743, 11.57549), (48.13910, 11.57765), (48.14230, 11.57970), (48.14520, 11.58310),
        (48.14790, 11.58740), (48.15140, 11.59190), (48.15380, 11.59420), (48.15200, 11.59830),
        (48.14820, 11.59640), (48.14420, 11.59280), (48.14020, 11.58810), (48.13690, 11.58380),
        (48.13520, 11.57990), (48.13743, 11.57549),
    ]

    /// Position, heading (degrees) after walking `metres` along the loop.
    static func position(afterMetres metres: Double) -> (lat: Double, lon: Double, course: Double) {
        let total = length
        var remaining = metres.truncatingRemainder(dividingBy: total)
        for index in 0..<(waypoints.count - 1) {
            let a = waypoints[index], b = waypoints[index + 1]
            let leg = distance(a, b)
            if remaining <= leg {
                let t = leg == 0 ? 0 : remaining / leg
                return (a.0 + (b.0 - a.0) * t, a.1 + (b.1 - a.1) * t, bearing(a, b))
            }
            remaining -= leg
        }
        let last = waypoints[waypoints.count - 1]
        return (last.0, last.1, 0)
    }

    static var length: Double {
        (0..<(waypoints.count - 1)).reduce(0) { $0 + distance(waypoints[$1], waypoints[$1 + 1]) }
    }

    static func distance(_ a: (Double, Double), _ b: (Double, Double)) -> Double {
        let radius = 6_371_000.0
        let dLat = (b.0 - a.0) * .pi / 180
        let dLon = (b.1 - a.1) * .pi / 180 * cos((a.0 + b.0) / 2 * .pi / 180)
        return radius * (dLat * dLat + dLon * dLon).squareRoot()
    }

    static func bearing(_ a: (Double, Double), _ b: (Double, Double)) -> Double {
        let dLat = b.0 - a.0
        let dLon = (b.1 - a.1) * cos((a.0 + b.0) / 2 * .pi / 180)
        var degrees = atan2(dLon, dLat) * 180 / .pi
        if degrees < 0 { degrees += 360 }
        return degrees.rounded()
    }
}

#if canImport(Glibc)
import Glibc
#endif
