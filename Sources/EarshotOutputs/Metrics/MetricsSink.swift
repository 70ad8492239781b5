import FoundationEssentials
import Glibc
import Synchronization
import EarshotSupport
import EarshotAnalysis
import EarshotDetection

/// Prometheus metrics (`[metrics] enabled`): a sink of the router that keeps a ``MetricsSnapshot`` from the
/// outputs it reads, and serves it as `GET /metrics` (``MetricsHTTPServer``, libmicrohttpd).
///
/// It reads analysis windows (level, gate, inference time), detections and alarms (events by group and which are
/// open), the control state (the groups, listed at 0 before their first event) and the daemon's periodic
/// ``RuntimeStatistics`` (capture state, xruns, lost audio, socket, history, MQTT and notification counters). Each
/// delivery is a few additions under a lock, on the routing thread (``deliversWithoutWaiting``: no queue hop per
/// window); a scrape copies the snapshot under the same lock and renders it on libmicrohttpd's thread, so a scrape
/// never delays the analysis.
///
/// Order: ``init(settings:version:)`` binds the address (an address in use is an error at start, before the
/// daemon creates anything else); ``serve()`` starts answering, once the daemon's event socket exists, so that a
/// scrape that answers means the socket can be connected to (until the router starts, a scrape shows the metrics
/// at zero); ``stop()`` stops the server and closes the socket.
package final class MetricsSink: OutputSink {
    package let name = "metrics"
    package let deliversWithoutWaiting = true
    package let settings: MetricsSettings
    private let snapshot: SharedSnapshot
    private let server: MetricsHTTPServer

    /// The snapshot behind its lock, shared with the server's closure.
    private final class SharedSnapshot: Sendable {
        let value = Mutex(MetricsSnapshot())
        func withLock<T: Sendable>(_ body: (inout MetricsSnapshot) -> T) -> T { value.withLock { body(&$0) } }
    }

    /// - Parameters:
    ///   - settings: `[metrics]`; ``MetricsSettings/listen`` is bound here.
    ///   - version: `earshot_build_info`'s `version` label.
    /// - Throws: `EarshotError(.config)` when the address cannot be bound (in use, not an address of this machine, a
    ///   privileged port): see ``MetricsHTTPServer/init(endpoint:body:)``; `.system` when socket(2) fails.
    package init(settings: MetricsSettings, version: String = earshotVersion) throws(EarshotError) {
        self.settings = settings
        let snapshot = SharedSnapshot()
        self.snapshot = snapshot
        server = try MetricsHTTPServer(endpoint: settings.listen) {
            snapshot.withLock { $0 }.exposition(version: version)
        }
    }

    /// Starts answering scrapes (connections made since ``init(settings:version:)`` wait in the listen backlog
    /// until now). Idempotent.
    /// - Throws: `EarshotError(.system)` when libmicrohttpd cannot start its thread.
    package func serve() throws(EarshotError) {
        try server.start()
    }

    /// Binds `settings.listen` as ``init(settings:version:)`` does and releases it at once (`earshotd
    /// --check-config`: an address in use is found before the start fails on it).
    /// - Throws: as ``init(settings:version:)`` for the address.
    package static func checkListen(settings: MetricsSettings) throws(EarshotError) {
        let descriptor = try MetricsListener.listen(on: settings.listen)
        close(descriptor)
    }

    /// Whether an earshotd serves its metrics at `endpoint`: `GET /metrics` answers within a second with Earshot's
    /// own series (`earshot_windows_total`). For `--check-config`, to tell the daemon's own listener from another
    /// program's.
    package static func servesEarshotMetrics(at endpoint: MetricsEndpoint) -> Bool {
        guard let body = MetricsListener.get("/metrics", from: endpoint, timeoutMilliseconds: 1_000) else { return false }
        return body.contains("\nearshot_windows_total ") || body.contains("# TYPE earshot_windows_total ")
    }

    /// The snapshot as it is now (what the next scrape renders).
    package var current: MetricsSnapshot { snapshot.withLock { $0 } }

    package func accepts(_ output: DaemonOutput) -> Bool {
        switch output {
        case .window, .detection, .alarm, .controls, .statistics: true
        case .health, .clip, .sleepReport, .testAlert, .mute: false
        }
    }

    package func start(reportHealth: @escaping @Sendable (HealthEvent) -> Void) {}

    package func deliver(_ routed: RoutedOutput) {
        switch routed.output {
        case .window(let result):
            snapshot.withLock { $0.observe(window: result) }
        case .detection(.onset(let onset)):
            snapshot.withLock { $0.observe(group: onset.group, counted: true, open: true) }
        case .detection(.offset(let offset)):
            snapshot.withLock { $0.observe(group: offset.group, counted: false, open: false) }
        case .alarm(let alarm):
            // A chirp is a point event: counted, never open.
            let isPoint = alarm.group == AlarmEvent.alarmChirp
            snapshot.withLock { $0.observe(group: alarm.group, counted: alarm.kind == .onset, open: alarm.kind == .onset && !isPoint) }
        case .controls(let controls):
            snapshot.withLock { $0.declare(groups: controls.eventGroups) }
        case .statistics(let statistics):
            snapshot.withLock { $0.statistics = statistics }
        case .health, .clip, .sleepReport, .testAlert, .mute:
            break
        }
    }

    package func stop() { server.stop() }
}
