import Earshot
import EarshotDetection
import EarshotOutputs
import EarshotService
import EarshotTools
import Foundation

/// `earshot eval-snore SNORING_DIR NON_SNORING_DIR [--threshold X] [--rhythm-threshold Y]`: measures the snore
/// detector on folders of labelled clips (e.g. ../shared/audio/snoring-khan/1 and /0) and prints detection and
/// false rates, alone and in breathing sequences (see `SnoreEvaluation`).
enum EvalSnoreCommand: EarshotCommand {
    static let usage = "usage: earshot eval-snore SNORING_DIR NON_SNORING_DIR [--model HEAD] [--threshold X] [--rhythm-threshold Y]"

    static let help = """
        \(usage)

        Measures the snore detector on two folders of labelled clips (e.g. ../shared/audio/snoring-khan/1 and /0):
        each clip analysed alone (flagged by the Snoring class, and by the snore evidence), and all of a folder's
        clips in one breathing sequence (clips in name order with 1-3 s of quiet room noise between them) as the
        detector hears a night: the share of clips it flags there and its events per hour. For SNORING_DIR the
        flagged share is the detection rate, for NON_SNORING_DIR the false rate.
          --model HEAD          a snore model made with earshot train (folders snoring and background): its
                                snoring probability adds to the evidence
          --threshold X         snore evidence that counts on its own, 0 to 1 (default \(format(SnoreDetector.Configuration().strongThreshold)))
          --rhythm-threshold Y  lower evidence that counts when snores recur every 2-6 s, 0 to 1 (default \(format(SnoreDetector.Configuration().weakThreshold)))
        """

    static let name = "eval-snore"
    static let flags = ["--model", "--threshold", "--rhythm-threshold"]

    struct Options {
        var directories: [String] = []
        var configuration = SnoreDetector.Configuration()
        var model: String?
    }

    static func parse(_ parser: inout ArgumentParser) throws(EarshotError) -> Options {
        var options = Options()
        while let item = try parser.next() {
            switch item {
            case .positional(let directory):
                options.directories.append(directory)
            case .flag("--threshold", let inline):
                options.configuration.strongThreshold = try parser.number(of: "--threshold", inline, in: 0...1, allowed: "0 to 1")
            case .flag("--rhythm-threshold", let inline):
                options.configuration.weakThreshold = try parser.number(of: "--rhythm-threshold", inline, in: 0...1, allowed: "0 to 1")
            case .flag("--model", let inline):
                options.model = try parser.value(of: "--model", inline, allowed: "a head model file made by earshot train")
            case .flag(let flag, _):
                throw parser.unknown(flag)
            }
        }
        guard options.configuration.weakThreshold <= options.configuration.strongThreshold else {
            throw EarshotError(.usage, "--rhythm-threshold must be at most --threshold (\(usage))")
        }
        switch options.directories.count {
        case 0, 1: throw parser.missing("SNORING_DIR and NON_SNORING_DIR")
        case 2: return options
        default:
            let named = options.directories.map { "\"\($0)\"" }
            throw EarshotError(.usage, "eval-snore takes two directories, got \(named.dropLast().joined(separator: ", ")) and \(named.last ?? "") (\(usage))")
        }
    }

    static func execute(_ options: Options) -> Int32 {
        let directories = options.directories, configuration = options.configuration
        var settings = DaemonConfiguration()
        settings.sleep.threshold = configuration.strongThreshold
        settings.sleep.rhythmThreshold = configuration.weakThreshold
        settings.sleep.modelPath = options.model
        settings.locations["sleep.model"] = "--model"
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
                    files: files, configuration: settings, sequencePath: scratch,
                    progress: { done, total in
                        if standardErrorIsTerminal {
                            FileHandle.standardError.write(Data("\r\(directory): \(done)/\(total) clips\u{1B}[K".utf8))
                        }
                    }))
                if standardErrorIsTerminal { FileHandle.standardError.write(Data("\n".utf8)) }
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
        reportError(message)
        return status
    }

    static func format(_ threshold: Float) -> String { JSONValue.format(Double(threshold), decimals: 2) }
}
