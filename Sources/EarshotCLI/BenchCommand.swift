import Earshot
import Foundation

/// `earshot bench`: prints performance figures for this machine (see `Benchmark`).
enum BenchCommand {
    static let usage = "usage: earshot bench [--quick]"

    static func run(_ arguments: [String]) -> Int32 {
        let model: YAMNet
        do { model = try YAMNet.builtIn() } catch {
            FileHandle.standardError.write(Data("earshot: \(error.message)\n".utf8))
            return error.exitStatus
        }
        let runs = arguments.contains("--quick") ? 200 : 1000
        let latency = Benchmark.patchLatency(model: model, runs: runs)
        print(String(format: "patch latency (1 thread): median %.3f ms, p95 %.3f ms over %d runs", latency.median, latency.p95, latency.runs))
        if arguments.contains("--layers") {
            for (stage, millis) in Benchmark.stageProfile(model: model, runs: runs) {
                print(String(format: "  %-36@ %8.1f us", stage, millis * 1000))
            }
        }
        return 0
    }
}
