import FoundationEssentials
import EarshotSupport
import EarshotAnalysis
import EarshotDetection

/// What `/metrics` shows, as a value: kept by ``MetricsSink`` from the outputs it reads, rendered in Prometheus'
/// text exposition format (version 0.0.4) by ``exposition``.
///
/// Base units (seconds, dBFS), `_total` for counters, one label only: `group` (and `version` on
/// `earshot_build_info`, as that metric's convention has it).
package struct MetricsSnapshot: Sendable, Equatable {
    /// Upper bounds (seconds) of the inference-duration histogram's buckets: one inference (YAMNet over a 0.96 s
    /// window, float32) takes about 2 ms on a 2020s x86-64 core, 10-50 ms on a Raspberry Pi class CPU.
    package static let inferenceBuckets: [Double] = [0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1]

    /// The latest `.statistics` output (nil before the first).
    package var statistics: RuntimeStatistics?
    /// Windows analysed (gated ones too), and those the gate kept from the classifier.
    package var windows = 0
    package var gatedWindows = 0
    /// The latest window's RMS level (dBFS; the floor, -120, before the first) and whether its gate was open.
    package var levelDBFS = Double(ClassificationResult.levelFloorDBFS)
    package var gateOpen = false
    /// Inference durations: per bucket of ``inferenceBuckets`` (not cumulative), their sum (s) and count.
    package var inferenceBucketCounts = [Int](repeating: 0, count: MetricsSnapshot.inferenceBuckets.count)
    package var inferenceSum = 0.0
    package var inferenceCount = 0
    /// Onsets by group, and which groups have an event open (every published group, 0 until it fires).
    package var events: [String: Int] = [:]
    package var active: [String: Bool] = [:]

    package init() {}

    /// Counts one window: its level, gate and inference time.
    package mutating func observe(window result: ClassificationResult) {
        windows += 1
        if result.isGated { gatedWindows += 1 }
        levelDBFS = Double(result.levelDBFS)
        gateOpen = !result.isGated
        if let seconds = result.inferenceDuration {
            let bucket = Self.inferenceBuckets.firstIndex { seconds <= $0 }
            if let bucket { inferenceBucketCounts[bucket] += 1 }
            inferenceSum += seconds
            inferenceCount += 1
        }
    }

    /// An event of `group`: an onset is `counted`; `open` says whether the group has an event open after it.
    package mutating func observe(group: String, counted: Bool, open: Bool) {
        events[group, default: 0] += counted ? 1 : 0
        active[group] = open
    }

    /// Lists `groups` with 0 events (so that a rate over them is defined before the first event).
    package mutating func declare(groups: [String]) {
        for group in groups where events[group] == nil {
            events[group] = 0
            active[group] = false
        }
    }

    /// The text exposition format: `# HELP`, `# TYPE` and the samples of each metric, groups sorted by name.
    package func exposition(version: String) -> String {
        var text = ""
        func metric(_ name: String, _ type: String, _ help: String, _ samples: [(labels: String, value: String)]) {
            text += "# HELP \(name) \(help)\n# TYPE \(name) \(type)\n"
            for sample in samples { text += "\(name)\(sample.labels) \(sample.value)\n" }
        }
        func one(_ value: String) -> [(labels: String, value: String)] { [("", value)] }
        let stats = statistics ?? RuntimeStatistics()
        metric("earshot_build_info", "gauge", "Earshot's version, as a label; the value is 1.",
               [("{version=\"\(Self.escaped(version))\"}", "1")])
        metric("earshot_audio_processed_seconds_total", "counter", "Audio analysed since start, in seconds.",
               one(Self.format(stats.audioProcessedSeconds)))
        metric("earshot_capture_xruns_total", "counter", "Capture overruns (xruns) since start.",
               one(String(stats.captureXruns)))
        metric("earshot_audio_lost_seconds_total", "counter",
               "Audio lost in gaps of the stream (xruns, a device reopened), in seconds.",
               one(Self.format(stats.audioLostSeconds)))
        metric("earshot_capture_up", "gauge",
               "1 while audio arrives from the capture device or input, 0 while it is opening, unavailable or stalled.",
               one(stats.captureLive ? "1" : "0"))
        metric("earshot_level_dbfs", "gauge", "RMS level of the latest analysis window, in dBFS to 0.01 (-120 for digital silence).",
               one(Self.format((levelDBFS * 100).rounded() / 100)))
        metric("earshot_gate_open", "gauge", "1 when the latest window was loud enough to be classified, else 0.",
               one(gateOpen ? "1" : "0"))
        var buckets: [(labels: String, value: String)] = []
        var cumulative = 0
        for (bound, count) in zip(Self.inferenceBuckets, inferenceBucketCounts) {
            cumulative += count
            buckets.append(("{le=\"\(Self.format(bound))\"}", String(cumulative)))
        }
        buckets.append(("{le=\"+Inf\"}", String(inferenceCount)))
        text += "# HELP earshot_inference_duration_seconds Time to classify one window (the model and any custom heads), in seconds.\n"
        text += "# TYPE earshot_inference_duration_seconds histogram\n"
        for bucket in buckets { text += "earshot_inference_duration_seconds_bucket\(bucket.labels) \(bucket.value)\n" }
        text += "earshot_inference_duration_seconds_sum \(Self.format(inferenceSum))\n"
        text += "earshot_inference_duration_seconds_count \(inferenceCount)\n"
        metric("earshot_windows_total", "counter", "Analysis windows since start, gated ones included.", one(String(windows)))
        metric("earshot_windows_gated_total", "counter", "Windows below the gate level, not classified.",
               one(String(gatedWindows)))
        let groups = events.keys.sorted()
        metric("earshot_events_total", "counter", "Detection events (onsets) published, by group.",
               groups.map { ("{group=\"\(Self.escaped($0))\"}", String(events[$0] ?? 0)) })
        metric("earshot_event_active", "gauge", "1 while the group's event is open, else 0.",
               groups.map { ("{group=\"\(Self.escaped($0))\"}", active[$0] == true ? "1" : "0") })
        metric("earshot_socket_clients", "gauge", "Clients connected to the event socket.", one(String(stats.socketClients)))
        metric("earshot_socket_dropped_lines_total", "counter", "Event lines dropped for socket clients that fell behind.",
               one(String(stats.socketDroppedLines)))
        metric("earshot_history_write_errors_total", "counter", "Failed writes to the event history database.",
               one(String(stats.historyWriteErrors)))
        if let mqtt = stats.mqtt {
            metric("earshot_mqtt_connected", "gauge", "1 while connected to the MQTT broker, else 0.", one(mqtt.connected ? "1" : "0"))
            metric("earshot_mqtt_published_total", "counter", "Messages published to the MQTT broker.",
                   one(String(mqtt.published)))
            metric("earshot_mqtt_dropped_total", "counter", "MQTT messages dropped because the outbox was full.",
                   one(String(mqtt.dropped)))
            metric("earshot_mqtt_waiting", "gauge", "MQTT messages waiting for the broker.", one(String(mqtt.waiting)))
        }
        if let notify = stats.notify {
            metric("earshot_notify_sent_total", "counter", "Notifications a URL accepted (HTTP 2xx), counted per URL.",
                   one(String(notify.sent)))
            metric("earshot_notify_failed_total", "counter", "Notifications given up for a URL after their retries, counted per URL.",
                   one(String(notify.failed)))
            metric("earshot_notify_dropped_total", "counter", "Notifications dropped because a URL's queue was full.",
                   one(String(notify.dropped)))
        }
        return text
    }

    /// A sample value: whole numbers without a fraction, others as Swift prints a Double (Prometheus parses both).
    static func format(_ value: Double) -> String {
        if value.isNaN { return "NaN" }
        if value.isInfinite { return value > 0 ? "+Inf" : "-Inf" }
        if value == value.rounded(), abs(value) < 1e15 { return String(Int64(value)) }
        return "\(value)"
    }

    /// A label value with `\`, `"` and newlines escaped.
    static func escaped(_ value: String) -> String {
        var result = ""
        for character in value {
            switch character {
            case "\\": result += "\\\\"
            case "\"": result += "\\\""
            case "\n": result += "\\n"
            default: result.append(character)
            }
        }
        return result
    }
}
