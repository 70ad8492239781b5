import Earshot
import EarshotDetection
import EarshotOutputs
import EarshotService
import EarshotSupport
import EarshotTools
import Foundation

/// `earshot enroll --label NAME [--count 5] [--device PCM | --from FILE...] --output FILE`: teaches Earshot one sound
/// from a few takes recorded from the microphone (or read from files), prints how well the takes separate from the
/// background, and writes a head model.
/// Exit status: 0, 64 usage, 65 bad takes, 66 missing file, 69 capture device unavailable, 73 cannot write.
enum EnrollCommand: EarshotCommand {
    static let usage = "usage: earshot enroll --label NAME [--count 5] [--device PCM | --from FILE...] --output FILE"

    static let help = """
    \(usage)
                          [--background FILE...] [--seconds S] [--background-seconds S] [--countdown N] [--seed N]

    Teaches earshot one sound (your doorbell, the washing machine's tune) by recording it a few times, then
    trains a custom classifier that tells it from the room's usual sounds.
      --label NAME             the sound's name (the model's label), e.g. doorbell
      --count N                takes to record, 2 to 20 (default 5)
      --device PCM             ALSA capture device to record from (default: default); `earshot devices` lists them
      --seconds S              length of each take, 1 to 30 seconds (default 4)
      --background-seconds S   length of the room recording taken after the takes, 0 to 120 (default 10)
      --countdown N            seconds counted down before each recording, 0 to 10 (default 3)
      --from FILE...           use these recordings of the sound as the takes instead of the microphone
      --background FILE...     recordings of the room without the sound (with --from, or in addition to the
                               microphone's); without any, the model only learns to tell the sound from quiet
      --output FILE            the model file to write, e.g. doorbell.earshot
      --seed N                 seed for augmentation and training (default 1)
    Takes that are silent (loudest 100 ms below -45 dBFS) or clipped (over 0.1% of samples at full scale) are
    refused; from the microphone, the take is recorded again.
    """

    struct Options {
        var label = ""
        var count = 5
        var device: String?
        var seconds = 4.0
        var backgroundSeconds = 10.0
        var from: [String] = []
        var background: [String] = []
        var output = ""
        var seed: UInt64 = 1
        var countdown = 3
    }

    static let name = "enroll"
    static let flags = ["--label", "--count", "--device", "--seconds", "--background-seconds", "--from", "--background",
                        "--output", "--countdown", "--seed"]

    static func execute(_ options: Options) -> Int32 {
        let label = options.label, output = options.output
        do throws(EarshotError) {
            // Before any take is recorded (about 45 s with the defaults) or trained: the label and the output file.
            try Enrollment.checkLabel(label)
            try OutputFile.checkWritable(output, what: "head model", hint: "check that the directory exists and is writable")
            var takes: [[Float]] = []
            var takeNames: [String] = []
            var background: [[Float]] = []
            for file in options.background {
                background.append(try decodeMono16k(URL(fileURLWithPath: file)))
            }
            if options.from.isEmpty {
                let recorder = MicrophoneRecorder(configuration: CaptureConfiguration(device: options.device ?? "default"))
                takes = try recordTakes(recorder, label: label, options: options)
                takeNames = takes.indices.map { "take \($0 + 1)" }
                if options.backgroundSeconds > 0 {
                    writeError("now the room as it usually sounds, without the \(label): \(format(options.backgroundSeconds)) s")
                    countdown(options.countdown)
                    background.append(try recorder.record(seconds: options.backgroundSeconds, meter: meter))
                    endMeter()
                }
            } else {
                for file in EnrollmentReport.duplicateTakes(options.from) {
                    reportError("warning: --from names \(file) more than once: a take given twice counts twice and makes the separation check look better than it is (give each recording once)")
                }
                for file in options.from {
                    let take = try decodeMono16k(URL(fileURLWithPath: file))
                    let quality = Enrollment.check(take)
                    guard quality.isGood else {
                        throw EarshotError(.data, "take \(file) is \(quality.description)")
                    }
                    writeError("take \(file): \(quality.description)")
                    takes.append(take)
                    takeNames.append(file)
                }
            }
            if background.isEmpty {
                reportError("no background recording: the model only learns to tell \(label) from quiet (give --background FILE with the room's usual sounds)")
            }
            var configuration = EnrollmentConfiguration(label: label)
            configuration.seed = options.seed
            let report = try Enrollment.train(
                takes: takes, background: background, configuration: configuration, progress: { writeError($0) })
            try report.head.write(to: URL(fileURLWithPath: output))
            for line in report.formatted(takeNames: takeNames) { print(line) }
            let problems = report.readinessProblems
            print("wrote \(output)\(problems.isEmpty ? "" : " (kept to inspect it, not to use)")")
            let advice = "record more takes of the \(label), and the background with the room's usual sounds (--background), and enroll again"
            for line in problems.isEmpty
                ? UsageSnippet.lines(modelPath: output, head: report.head)
                : UsageSnippet.notReady(modelPath: output, problems: problems, advice: advice) { print(line) }
            fflush(nil)
            return 0
        } catch {
            endMeter()
            reportError(error.message)
            return error.exitStatus
        }
    }

    /// Records `options.count` good takes (a refused take is recorded again, up to three times the count in all).
    static func recordTakes(_ recorder: MicrophoneRecorder, label: String, options: Options) throws(EarshotError) -> [[Float]] {
        try recorder.probe()
        writeError("recording \(label) \(options.count) times from \"\(recorder.configuration.device)\", \(format(options.seconds)) s each: make the sound once after each countdown")
        var takes: [[Float]] = []
        var attempts = 0
        while takes.count < options.count {
            attempts += 1
            guard attempts <= options.count * 3 else {
                throw EarshotError(.data, "too many refused takes (\(attempts - 1)); check the microphone and its level in alsamixer, then run enroll again")
            }
            writeError("take \(takes.count + 1)/\(options.count):")
            countdown(options.countdown)
            let take = try recorder.record(seconds: options.seconds, meter: meter)
            endMeter()
            let quality = Enrollment.check(take)
            writeError("take \(takes.count + 1)/\(options.count): \(quality.description)\(quality.isGood ? "" : "; again")")
            if quality.isGood { takes.append(take) }
        }
        return takes
    }

    static func countdown(_ seconds: Int) {
        for second in stride(from: seconds, to: 0, by: -1) {
            FileHandle.standardError.write(Data("  \(second)...".utf8))
            sleep(1)
        }
        FileHandle.standardError.write(Data("  now\n".utf8))
    }

    /// A live level meter on one line: 40 characters for -60...0 dBFS.
    static func meter(_ level: Float, _ elapsed: Double) {
        guard standardErrorIsTerminal else { return }
        let filled = max(0, min(40, Int(((level + 60) / 60 * 40).rounded())))
        let bar = String(repeating: "#", count: filled) + String(repeating: "-", count: 40 - filled)
        FileHandle.standardError.write(Data("\r  [\(bar)] \(String(format: "%6.1f", level)) dBFS  \(format(elapsed)) s ".utf8))
    }

    static func endMeter() {
        if standardErrorIsTerminal { FileHandle.standardError.write(Data("\n".utf8)) }
    }

    static func format(_ seconds: Double) -> String { String(format: "%.1f", seconds) }

    static func parse(_ parser: inout ArgumentParser) throws(EarshotError) -> Options {
        var options = Options()
        var label: String?
        var output: String?
        while let item = try parser.next() {
            switch item {
            case .positional(let text):
                throw EarshotError(.usage, "enroll takes no file \"\(text)\" here (recordings go after --from or --background)")
            case .flag(let flag, let inline):
                switch flag {
                case "--label": label = try parser.value(of: flag, inline, allowed: "the sound's name")
                case "--count": options.count = try parser.number(of: flag, inline, in: 2...20, allowed: "2 to 20")
                case "--device": options.device = try parser.value(of: flag, inline, allowed: "an ALSA PCM name")
                case "--seconds": options.seconds = try parser.number(of: flag, inline, in: 1.0...30, allowed: "1 to 30 seconds")
                case "--background-seconds":
                    options.backgroundSeconds = try parser.number(of: flag, inline, in: 0.0...120, allowed: "0 to 120 seconds")
                case "--from", "--background":
                    let files = parser.values(inline)
                    guard !files.isEmpty else { throw EarshotError(.usage, "\(flag) needs at least one FILE") }
                    if flag == "--from" { options.from += files } else { options.background += files }
                case "--output", "-o": output = try parser.value(of: flag, inline, allowed: "a file name")
                case "--countdown": options.countdown = try parser.number(of: flag, inline, in: 0...10, allowed: "0 to 10 seconds")
                case "--seed": options.seed = try parser.number(of: flag, inline, in: 0...UInt64.max, allowed: "an integer >= 0")
                default: throw parser.unknown(flag)
                }
            }
        }
        guard let label else { throw parser.missing("--label NAME") }
        guard let output else { throw parser.missing("--output FILE for the model") }
        options.label = label
        options.output = output
        if options.device != nil && !options.from.isEmpty {
            throw ArgumentParser.exclusive("--device", "--from", "record from the device, or read the takes from files")
        }
        if !options.from.isEmpty && options.from.count < Enrollment.minimumTakes {
            throw EarshotError(.usage, "--from needs at least \(Enrollment.minimumTakes) recordings of the sound, got \(options.from.count)")
        }
        return options
    }
}
