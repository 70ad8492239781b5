import Dispatch
import Foundation

/// Figures for `earshot bench`: measured on this machine, printed, never asserted by tests.
public enum Benchmark {
    /// Median and 95th percentile of a set of durations, in milliseconds.
    public struct Percentiles: Sendable {
        public var median: Double
        public var p95: Double
        public var runs: Int

        init(_ millis: [Double]) {
            let sorted = millis.sorted()
            runs = sorted.count
            median = sorted.isEmpty ? 0 : sorted[sorted.count / 2]
            p95 = sorted.isEmpty ? 0 : sorted[min(sorted.count - 1, Int(Double(sorted.count) * 0.95))]
        }
    }

    /// The CPU model name from `/proc/cpuinfo`, or "unknown".
    public static var cpuModel: String {
        guard let text = try? String(contentsOfFile: "/proc/cpuinfo", encoding: .utf8) else { return "unknown" }
        for line in text.split(separator: "\n") where line.hasPrefix("model name") {
            if let colon = line.firstIndex(of: ":") { return line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces) }
        }
        return "unknown"
    }

    /// Seconds on a monotonic clock.
    public static func now() -> Double { Double(DispatchTime.now().uptimeNanoseconds) / 1e9 }

    /// Latency of one 96 x 64 patch through YAMNet on one thread (OpenBLAS set to 1 thread), after 10 warm-up runs.
    public static func patchLatency(model: YAMNet, runs: Int) -> Percentiles {
        BLASThreads.set(1)
        let session = model.makeSession()
        // A log-mel patch with realistic values (natural log of mel energies lies in about -7...+3).
        let patch = (0..<(YAMNet.patchFrames * YAMNet.melBands)).map { Float(sin(Double($0) * 0.37)) * 3 - 3 }
        for _ in 0..<10 { _ = session.classify(patches: patch, count: 1) }
        var millis: [Double] = []
        millis.reserveCapacity(runs)
        for _ in 0..<runs {
            let start = now()
            _ = session.classify(patches: patch, count: 1)
            millis.append((now() - start) * 1000)
        }
        return Percentiles(millis)
    }

    /// Milliseconds the log-mel front end takes per second of 16 kHz audio (median of `runs` passes over `seconds`).
    public static func frontEndMillisPerSecond(seconds: Double, runs: Int) -> Double {
        let frontEnd = LogMelSpectrogram()
        let samples = (0..<Int(seconds * 16_000)).map { Float(sin(Double($0) * 0.05)) * 0.3 }
        var millis: [Double] = []
        for _ in 0..<runs {
            let start = now()
            _ = frontEnd.compute(samples)
            millis.append((now() - start) * 1000)
        }
        return Percentiles(millis).median / seconds
    }

    /// Milliseconds from nothing to the first result: map and fold the weights, read the class map, classify one patch.
    public static func modelLoadMillis(directory: URL) throws(EarshotError) -> Double {
        let start = now()
        let model = try YAMNet(directory: directory)
        _ = model.makeSession().classify(patches: [Float](repeating: -3, count: YAMNet.patchFrames * YAMNet.melBands), count: 1)
        return (now() - start) * 1000
    }

    /// Thread CPU time per stage of one patch (1 thread), averaged over `runs` runs after 10 warm-up runs:
    /// `(stage name, milliseconds)` in execution order.
    public static func stageProfile(model: YAMNet, runs: Int) -> [(stage: String, millis: Double)] {
        let session = model.makeSession()
        let patch = (0..<(YAMNet.patchFrames * YAMNet.melBands)).map { Float(sin(Double($0) * 0.37)) * 3 - 3 }
        for _ in 0..<10 { _ = session.classify(patches: patch, count: 1) }
        let profile = StageProfile()
        session.profile = profile
        for _ in 0..<runs { _ = session.classify(patches: patch, count: 1) }
        return profile.names.map { ($0, (profile.seconds[$0] ?? 0) * 1000 / Double(runs)) }
    }
}
