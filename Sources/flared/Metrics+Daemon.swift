public import FlareSystem

/// The metric families only the daemon's wiring registers.
extension FlareMetrics {
    public static let storeFreeBytes = Metrics.Family("flare_store_free_bytes", .gauge, "Free space on the store's disk (-1: unknown).")
}
