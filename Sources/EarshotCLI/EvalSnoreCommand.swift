import Earshot
import EarshotDetection
import EarshotOutputs
import EarshotService
import EarshotTools
import Foundation

/// `earshot eval-snore SNORING_DIR NON_SNORING_DIR [--threshold X] [--rhythm-threshold Y]`: measures the snore
/// detector on folders of labelled clips (e.g. ../shared/audio/snoring-khan/1 and /0) and prints detection and
/// false rates, alone and in breathing sequences (see `SnoreEvaluation`).
enum EvalSnoreCommand {
    static let usage = "usage: earshot eval-snore SNORING_DIR NON_SNORING_DIR [--model HEAD] [--threshold X] [--rhythm-threshold Y]"

    static func run(_ arguments: [String]) -> Int32 {
        var directories: [String] = []
        var configuration = SnoreDetector.Configuration()
        var head: SnoreDetector.HeadEvidence?
        var index = 0
        while index < arguments.count {
            let argument = arguments[index]
            switch argument {
            case "--help", "-h":
                print(usage)
                return 0
            case "--threshold", "--rhythm-threshold":
                index += 1
                guard index < arguments.count, let number = Float(arguments[index]), (0...1).contains(number) else {
                    return fail("\(argument) needs a number from 0 to 1 (\(usage))", 64)
                }
                if argument == "--threshold" { configuration.strongThreshold = number } else { configuration.weakThreshold = number }
            case "--model":
                index += 1
                guard index < arguments.count else { return fail("--model needs a head model file (\(usage))", 64) }
                do {
                    head = try SnoreDetector.HeadEvidence(head: try ClassifierHead(contentsOf: URL(fileURLWithPath: arguments[index])))
                } catch {
                    return fail(error.message, error.exitStatus)
                }
            default:
                guard !argument.hasPrefix("--") else { return fail("unknown option \"\(argument)\" (\(usage))", 64) }
                directories.append(argument)
            }
            index += 1
        }
        guard directories.count == 2 else { return fail("name two directories (\(usage))", 64) }
        var figures: [SnoreEvaluation.Figures] = []
        for directory in directories {
            guard let names = try? FileManager.default.contentsOfDirectory(atPath: directory) else {
                return fail("cannot list \(directory) (name a directory of sound files)", 66)
            }
            let files = names.filter { !$0.hasPrefix(".") }.sorted { $0.localizedStandardCompare($1) == .orderedAscending }
                .map { URL(fileURLWithPath: directory).appendingPathComponent($0) }
            let scratch = NSTemporaryDirectory() + "earshot-eval-snore-\(getpid()).wav"
            do {
                figures.append(try SnoreEvaluation.measure(
                    files: files, configuration: configuration, head: head, sequencePath: scratch,
                    progress: { done, total in
                        if isatty(STDERR_FILENO) == 1 {
                            FileHandle.standardError.write(Data("\r\(directory): \(done)/\(total) clips\u{1B}[K".utf8))
                        }
                    }))
                if isatty(STDERR_FILENO) == 1 { FileHandle.standardError.write(Data("\n".utf8)) }
            } catch {
                return fail(error.message, error.exitStatus)
            }
        }
        func percent(_ count: Int, _ total: Int) -> String {
            total == 0 ? "-" : JSONValue.format(100 * Double(count) / Double(total), decimals: 1) + " %"
        }
        let threshold = JSONValue.format(Double(configuration.strongThreshold), decimals: 2)
        print("set                      clips  Snoring>=\(threshold)  evidence>=\(threshold)  detector in sequence  events/h in sequence")
        for (name, value) in zip(["snoring: " + directories[0], "non-snoring: " + directories[1]], figures) {
            let perHour = value.sequenceSeconds > 0 ? Double(value.sequenceEvents) * 3600 / value.sequenceSeconds : 0
            print("\(name)\n                         \(value.clips)    \(percent(value.snoringClassFlagged, value.clips))       \(percent(value.evidenceFlagged, value.clips))        \(percent(value.sequenceFlagged, value.clips))               \(JSONValue.format(perHour, decimals: 1)) (\(value.sequenceEvents) events, \(JSONValue.format(value.sequenceSnoringSeconds / 60, decimals: 1)) of \(JSONValue.format(value.sequenceSeconds / 60, decimals: 1)) min snoring)")
        }
        return 0
    }

    static func fail(_ message: String, _ status: Int32) -> Int32 {
        FileHandle.standardError.write(Data("earshot: \(message)\n".utf8))
        return status
    }
}
