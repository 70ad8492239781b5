import Glibc
import EarshotSupport
import EarshotOutputs

extension DaemonConfiguration {
    /// `[metrics]`: see ``MetricsSettings`` (the settings belong to the component that uses them).
    package typealias Metrics = MetricsSettings

    /// The metrics sink for `[metrics]`, its address bound (it answers after ``MetricsSink/serve()``), or nil when
    /// metrics are off.
    /// - Throws: `EarshotError(.config)` (78) naming where `listen` was set when the address cannot be bound, e.g.
    ///   `/etc/earshot/earshotd.conf:40: [metrics] listen = 127.0.0.1:9464: Address already in use (another
    ///   program, or another earshotd, listens there; choose another port)`; `.system` (71) when socket(2) fails.
    package func makeMetricsSink() throws(EarshotError) -> MetricsSink? {
        guard metrics.enabled else { return nil }
        do {
            return try MetricsSink(settings: metrics)
        } catch {
            throw located(error)
        }
    }

    /// For `--check-config`: binds `[metrics] listen` and releases it at once, so that an address in use is the
    /// same line and status (78) as at start. An address in use where a running earshotd serves its metrics (the
    /// daemon about to be reloaded, which keeps its listener) is no error: the note says so. Nothing when metrics
    /// are off.
    /// - Returns: nil, or the note, e.g. `[metrics] listen = 127.0.0.1:9464 is in use by a running earshotd (its
    ///   /metrics answers): a reload of that daemon keeps it; another earshotd could not start with it`.
    /// - Throws: as ``makeMetricsSink()``.
    package func checkMetricsListen() throws(EarshotError) -> String? {
        guard metrics.enabled else { return nil }
        do {
            try MetricsSink.checkListen(settings: metrics)
            return nil
        } catch {
            if error.cause == String(cString: strerror(EADDRINUSE)), MetricsSink.servesEarshotMetrics(at: metrics.listen) {
                return "[metrics] listen = \(metrics.listen) is in use by a running earshotd (its /metrics answers): a reload of that daemon keeps it; another earshotd could not start with it"
            }
            throw located(error)
        }
    }

    private func located(_ error: EarshotError) -> EarshotError {
        guard error.code == .config else { return error }
        let origin = locations["metrics.listen"].map { "\($0): " } ?? ""
        return EarshotError(.config, "\(origin)[metrics] \(error.message)", cause: error.cause)
    }
}
