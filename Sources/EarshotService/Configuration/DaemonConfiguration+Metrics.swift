import EarshotSupport
import EarshotOutputs

extension DaemonConfiguration {
    /// `[metrics]`: see ``MetricsSettings`` (the settings belong to the component that uses them).
    package typealias Metrics = MetricsSettings

    /// The metrics sink for `[metrics]`, listening already, or nil when metrics are off.
    /// - Throws: `EarshotError(.config)` (78) naming where `listen` was set when the address cannot be bound, e.g.
    ///   `/etc/earshot/earshotd.conf:40: [metrics] listen = 127.0.0.1:9464: Address already in use (another
    ///   program, or another earshotd, listens there; choose another port)`; `.system` (71) when the server cannot
    ///   start.
    package func makeMetricsSink() throws(EarshotError) -> MetricsSink? {
        guard metrics.enabled else { return nil }
        do {
            return try MetricsSink(settings: metrics)
        } catch {
            throw located(error)
        }
    }

    /// For `--check-config`: binds `[metrics] listen` and releases it at once, so that an address in use is the
    /// same line and status (78) as at start. Nothing when metrics are off.
    /// - Throws: as ``makeMetricsSink()``.
    package func checkMetricsListen() throws(EarshotError) {
        guard metrics.enabled else { return }
        do {
            try MetricsSink.checkListen(settings: metrics)
        } catch {
            throw located(error)
        }
    }

    private func located(_ error: EarshotError) -> EarshotError {
        guard error.code == .config else { return error }
        let origin = locations["metrics.listen"].map { "\($0): " } ?? ""
        return EarshotError(.config, "\(origin)[metrics] \(error.message)", cause: error.cause)
    }
}
